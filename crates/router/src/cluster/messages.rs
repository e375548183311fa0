//! The cluster agent's messages: those the routing agents forward, sent to
//! the peers that want them (and to one peer for each queue group not
//! served where it was published: [`super::groups`]), and those a peer
//! sends, handed to the routing agents that want them.

use super::agent::{ClusterAgent, Peer, MAX_PEER_PATTERNS, POLL_LIMIT};
use super::groups::RemoteGroups;
use super::link::PeerLink;
use tickwire_topic::{check_topic, Pattern};
use tickwire_wire::cluster::group_list;
use tickwire_wire::request::{self, Inbox};

impl ClusterAgent {
    /// Messages the routing agents forwarded: to every peer that wants
    /// them, numbered per peer (a peer whose link is down or full counts
    /// one lost, and the gap tells it).
    pub(super) fn take_forwarded(&mut self) -> usize {
        let mut work = 0;
        let (remote, groups, targets, picks, list) =
            (&self.remote, &mut self.groups, &mut self.targets, &mut self.picks, &mut self.list);
        let (peers, links, now) = (&mut self.peers, &mut self.links, self.now);
        let mut failed = Vec::new();
        // On the routing agent's thread, which fills the rings only between
        // this one's duty cycles, all they hold: a burst from its clients
        // must not build up there behind a limit.
        let limit = if self.shares_bell { usize::MAX } else { POLL_LIMIT };
        for ring in &mut self.from {
            work += ring.receive(limit, |m| {
                let (topic, payload, how) = (m.topic, m.payload, (m.discards, m.flags));
                // A reply to a request that came over a link: back over
                // that link alone, on the requester's plain inbox, to the
                // same run of that router (a session id and serial of an
                // earlier run name nobody now).
                if request::is_inbox(topic) {
                    let Some((k, run, plain)) = request::peer_of(topic) else { return };
                    if let Some(p) = peers.get_mut(k as usize) {
                        send_to(p, links, how, (&plain, payload, ""), (now, Some(run)), &mut failed);
                    }
                    return;
                }
                remote.matches_into(topic, targets);
                if groups.is_empty() {
                    picks.clear();
                } else {
                    let up = |k: u32| peers.get(k as usize).is_some_and(|p| p.link.is_some());
                    groups.pick_into(topic, m.groups, up, picks);
                }
                for &k in targets.iter() {
                    let left_out = names_for(groups, picks, k, list);
                    let p = &mut peers[k as usize];
                    p.status.lost_out += left_out;
                    send_to(p, links, how, (topic, payload, list), (now, None), &mut failed);
                }
                // The peers picked for a group that want nothing else of it.
                let mut last = None;
                for i in 0..picks.len() {
                    let k = picks[i].0;
                    if last == Some(k) || targets.binary_search(&k).is_ok() {
                        continue;
                    }
                    last = Some(k);
                    let left_out = names_for(groups, picks, k, list);
                    if let Some(p) = peers.get_mut(k as usize) {
                        p.status.lost_out += left_out;
                        send_to(p, links, how, (topic, payload, list), (now, None), &mut failed);
                    }
                }
            });
        }
        for (slot, why) in failed {
            self.close(slot, &why);
        }
        work
    }

    /// A MESSAGE (or GROUP_MESSAGE, serving `groups`) from peer `k` on the
    /// link in `slot`: its gap counted, to the routing agents that want it.
    ///
    /// # Errors
    /// Why the link must end.
    pub(super) fn take_message(
        &mut self,
        (slot, k): (usize, u32),
        (sequence, discards, flags): (u64, u32, u8),
        (topic, payload, groups): (&str, &[u8], &str),
    ) -> Result<(), String> {
        let frame = if groups.is_empty() { "MESSAGE" } else { "GROUP_MESSAGE" };
        check_topic(topic).map_err(|e| format!("{frame} on {topic:?}: {e}"))?;
        let p = &mut self.peers[k as usize];
        let inc = self.links[slot].as_ref().and_then(|l| l.them()).map_or(0, |t| t.incarnation);
        let gap = match p.heard {
            Some((i, last)) if i == inc => {
                if sequence <= last {
                    return Err(format!("{frame} sequence {sequence} after {last}"));
                }
                sequence - last - 1
            }
            _ => 0,
        };
        p.heard = Some((inc, sequence));
        p.status.messages_in += 1;
        p.status.bytes_in += payload.len() as u64;
        p.status.lost_in += gap;
        let lost = u32::try_from(gap).unwrap_or(u32::MAX).saturating_add(discards);
        if request::is_inbox(topic) {
            // A reply to one of this router's requesters, to the agent its
            // inbox names; one that names none goes to the first, which
            // drops and counts it (a responder elsewhere may write any
            // inbox: no reason to end the link). What was lost before it
            // is told with the next message for subscribers.
            p.lost_carry = p.lost_carry.saturating_add(lost);
            let n = self.to.len();
            let agent = Inbox::parse(topic).map(|i| i.agent as usize).filter(|a| *a < n).unwrap_or(0);
            if let Some(ring) = self.to.get_mut(agent) {
                ring.send_carrying((topic, payload, ""), flags, 0);
            }
            return Ok(());
        }
        let lost = lost.saturating_add(std::mem::take(&mut p.lost_carry));
        // A request is answered through this router: its inbox names the
        // link it came over (and that router's run).
        let named;
        let payload = if flags & tickwire_wire::client::flags::REQUEST == 0 {
            payload
        } else {
            let (inbox, rest) = request::split_body(payload)
                .ok_or_else(|| format!("MESSAGE on {topic}: a request without an inbox"))?;
            let via = request::via_peer(k, inc, inbox)
                .ok_or_else(|| format!("{frame} on {topic}: a request on {inbox:?}, no inbox of its router"))?;
            let mut b = Vec::with_capacity(1 + via.len() + rest.len());
            request::body(&via, rest, &mut b);
            named = b;
            &named[..]
        };
        self.agents.matches_into(topic, &mut self.targets);
        if !groups.is_empty() {
            self.local_groups.agents_into(groups, &mut self.targets);
        }
        for &a in &self.targets {
            if let Some(ring) = self.to.get_mut(a as usize) {
                ring.send_carrying((topic, payload, groups), flags, lost);
            }
        }
        Ok(())
    }

    /// Peer `k` now has `members` on `pattern` in queue group `group`.
    ///
    /// # Errors
    /// Why the link must end: a bad pattern or name, too many groups.
    pub(super) fn take_group(&mut self, k: u32, members: u32, group: &str, pattern: &str) -> Result<(), String> {
        let p = Pattern::parse(pattern).map_err(|e| format!("GROUP {pattern:?}: {e}"))?;
        crate::routing::queue_group(group.as_bytes()).map_err(|e| format!("GROUP on {pattern}: {e}"))?;
        if members > 0 && self.groups.len(k) >= MAX_PEER_PATTERNS && !self.groups.holds(k, pattern, group) {
            return Err(format!("more than {MAX_PEER_PATTERNS} queue groups"));
        }
        if let Some(c) = self.groups.set(k, &p, group, members).and_then(|w| self.remote.group(&w)) {
            self.tell_agents(&c);
        }
        Ok(())
    }
}

/// The groups `picks` holds for peer `k`, separated by a space, into
/// `list` (emptied first), as many as a GROUP_MESSAGE's list holds
/// (65,535 bytes: a thousand names of the longest); returns how many were
/// left out (the message is lost to them, counted in the link's
/// `lost_out`).
fn names_for(groups: &RemoteGroups, picks: &[(u32, u32)], k: u32, list: &mut String) -> u64 {
    list.clear();
    let mut left_out = 0;
    for &(_, g) in picks.iter().filter(|(p, _)| *p == k) {
        let name = groups.name(g);
        if list.len() + 1 + name.len() > usize::from(u16::MAX) {
            left_out += 1;
            continue;
        }
        group_list::push(list, name);
    }
    left_out
}

/// Sends a message (`discards`, `flags`; topic, payload, the queue groups
/// it is to serve there) to peer `p`, numbered next in its sequence, and
/// counts it sent or lost (a link down or full); a broken link goes into
/// `failed`. `run`: only to that run of the peer (a reply), else it is
/// lost, unnumbered.
fn send_to(
    p: &mut Peer,
    links: &mut [Option<PeerLink>],
    (discards, flags): (u32, u8),
    message: (&str, &[u8], &str),
    (now, run): (u64, Option<u64>),
    failed: &mut Vec<(usize, String)>,
) {
    let link = p.link.and_then(|s| links[s].as_mut().map(|l| (s, l)));
    let link = link.filter(|(_, l)| run.is_none_or(|r| l.them().is_some_and(|t| t.incarnation == r)));
    // A message for subscribers is numbered even when lost (the gap tells
    // them); a reply only when sent (a gap would tell subscribers of a
    // loss that was not theirs).
    p.sequence += 1;
    let sent = match link {
        Some((s, l)) => match l.send_message(p.sequence, discards, flags, message, now) {
            Ok(()) => true,
            Err(tickwire_transport::link::LinkError::Full) => false,
            Err(e) => {
                failed.push((s, e.to_string()));
                false
            }
        },
        None => false,
    };
    if sent {
        p.status.messages_out += 1;
        p.status.bytes_out += message.1.len() as u64;
    } else {
        if run.is_some() {
            p.sequence -= 1;
        }
        p.status.lost_out += 1;
    }
}
