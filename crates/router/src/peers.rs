//! Several routing agents: each serves its own clients, and the agents pass
//! each other what their clients want.
//!
//! ```text
//!  agent A: publish ─► local index ─► A's subscribers
//!                   └► interest index (the other agents' patterns) ─► link A→B ─► agent B: local index ─► B's subscribers
//! ```
//!
//! Every agent's [`Router`](crate::Router) keeps, beside the index of its
//! own clients' subscriptions, an index of the patterns the *other* agents'
//! clients hold, keyed by agent: their **interest**. A publish is matched
//! against both. Local subscribers get it directly; every other agent with
//! interest gets one copy through a [`Link`] (a single-producer,
//! single-consumer byte ring, `rtrb`) and delivers it to its own matching
//! clients only, so a message crosses between agents at most once per agent
//! whatever its fan-out.
//!
//! Interest travels as messages, as nats-server's routes send `RS+`/`RS-`:
//! an agent announces a pattern the first time one of its clients holds it
//! and withdraws it when the last lets go ([`Peers::hold`],
//! [`Peers::release`]). An announcement reaches the other agents within
//! their next few duty cycles, so a subscription made on one agent sees
//! messages published on another a few microseconds after it is made (the
//! same window nats-server has between servers).
//!
//! A link that is full (its agent is not keeping up) drops the new message
//! for that agent and counts it; the count rides on the next message that
//! crosses the link, and the receiving agent adds it to the discard
//! indication of the clients it delivers that message to.

use crate::index::SubscriptionIndex;
use rtrb::{Consumer, Producer, RingBuffer};
use rustc_hash::FxHashMap;
use std::sync::Arc;
use tickwire_agent::Doorbell;
use tickwire_topic::Pattern;

/// Bytes before each message on a link: payload length (u32), discards
/// carried (u32), topic length (u16), flags (u8), a byte unused, the
/// length of its list of queue groups (u32); all little-endian. The
/// topic, the list, then the payload follow.
const RECORD_HEADER: usize = 16;

/// A change in the patterns an agent's clients hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interest {
    /// Agent `agent` now wants `pattern` (its id `id` there).
    Add {
        /// The agent.
        agent: u32,
        /// The pattern's id in that agent.
        id: u32,
        /// The pattern.
        pattern: Pattern,
    },
    /// Agent `agent` no longer wants pattern `id`.
    Remove {
        /// The agent.
        agent: u32,
        /// The pattern's id in that agent.
        id: u32,
        /// The pattern.
        pattern: Pattern,
    },
    /// Agent `agent`'s clients now hold `members` subscriptions on
    /// `pattern` in queue group `group` (0: none any more). For the
    /// router cluster's agent: queue groups need one routing agent, so no
    /// other routing agent serves another's groups.
    Group {
        /// The agent.
        agent: u32,
        /// The pattern.
        pattern: Pattern,
        /// The group's name.
        group: Box<str>,
        /// Member subscriptions.
        members: u32,
    },
}

/// One message taken from a link.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Its topic.
    pub topic: &'a str,
    /// Its payload.
    pub payload: &'a [u8],
    /// Messages lost before it on the way, for its subscribers'
    /// discard indication.
    pub discards: u32,
    /// What its client frame carried (`REQUEST`, `HEADERS`).
    pub flags: u8,
    /// Queue groups (names separated by a space): to the cluster's agent,
    /// those its routing agent served; from it, those the receiving agent
    /// serves (one member of each). Empty: none.
    pub groups: &'a str,
}

/// Makes the link from one agent to another: `capacity` bytes; `bell`,
/// the reading agent's doorbell, is rung by [`Link::ring`] after messages
/// were put on it.
pub fn link(capacity: usize, bell: Option<Arc<Doorbell>>) -> (Link, LinkReader) {
    let (tx, rx) = RingBuffer::new(capacity);
    (Link { tx, carried: 0, scratch: Vec::new(), bell, unrung: false }, LinkReader { rx, scratch: Vec::new() })
}

/// The sending end of a link between two agents.
#[derive(Debug)]
pub struct Link {
    tx: Producer<u8>,
    /// Messages dropped (the link full) since the last one that crossed.
    carried: u32,
    scratch: Vec<u8>,
    /// The reading agent's doorbell, and whether messages were put on
    /// the link since it was last rung.
    bell: Option<Arc<Doorbell>>,
    unrung: bool,
}

impl Link {
    /// Wakes the reading agent if it is parked and messages were put on
    /// the link since the last call: once per duty cycle, after the sends.
    #[inline]
    pub fn ring(&mut self) {
        if self.unrung {
            self.unrung = false;
            if let Some(b) = &self.bell {
                b.ring();
            }
        }
    }

    /// Puts one message on the link (serving queue groups `groups`, names
    /// separated by a space; see [`Record::groups`]); false (and counted
    /// for the next one) when it is full.
    fn send(&mut self, (topic, payload, groups): (&str, &[u8], &str), flags: u8) -> bool {
        self.send_carrying((topic, payload, groups), flags, 0)
    }

    /// [`Link::send`] of a message before which `lost` more were lost on
    /// the way here (a cluster link's gap): the receiving agent tells its
    /// clients of them as discards.
    pub(crate) fn send_carrying(
        &mut self,
        (topic, payload, groups): (&str, &[u8], &str),
        flags: u8,
        lost: u32,
    ) -> bool {
        self.carried = self.carried.saturating_add(lost);
        let need = RECORD_HEADER + topic.len() + groups.len() + payload.len();
        if self.tx.slots() < need {
            self.carried = self.carried.saturating_add(1);
            return false;
        }
        let s = &mut self.scratch;
        s.clear();
        s.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        s.extend_from_slice(&self.carried.to_le_bytes());
        s.extend_from_slice(&(topic.len() as u16).to_le_bytes());
        s.extend_from_slice(&[flags, 0]);
        s.extend_from_slice(&(groups.len() as u32).to_le_bytes());
        s.extend_from_slice(topic.as_bytes());
        s.extend_from_slice(groups.as_bytes());
        s.extend_from_slice(payload);
        match self.tx.push_entire_slice(s) {
            Ok(()) => {
                self.carried = 0;
                self.unrung = true;
                true
            }
            Err(_) => {
                self.carried = self.carried.saturating_add(1);
                false
            }
        }
    }
}

/// The receiving end of a link.
#[derive(Debug)]
pub struct LinkReader {
    rx: Consumer<u8>,
    scratch: Vec<u8>,
}

impl LinkReader {
    /// Nothing is waiting on the link.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// Hands up to `limit` messages to `f`; returns how many.
    pub fn receive(&mut self, limit: usize, mut f: impl FnMut(Record<'_>)) -> usize {
        let mut n = 0;
        while n < limit {
            let mut header = [0u8; RECORD_HEADER];
            match self.rx.read_chunk(RECORD_HEADER) {
                Ok(c) => {
                    let (a, b) = c.as_slices();
                    header[..a.len()].copy_from_slice(a);
                    header[a.len()..].copy_from_slice(b);
                    // Not committed: the whole record is taken below.
                }
                Err(_) => return n,
            }
            let word = |at: usize| u32::from_le_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]]);
            let (payload_len, discards) = (word(0) as usize, word(4));
            let topic_len = usize::from(u16::from_le_bytes([header[8], header[9]]));
            let flags = header[10];
            let groups_len = word(12) as usize;
            let total = RECORD_HEADER + topic_len + groups_len + payload_len;
            // The writer pushes a record whole, so it is all there.
            let Ok(chunk) = self.rx.read_chunk(total) else { return n };
            let (a, b) = chunk.as_slices();
            let record: &[u8] = if b.is_empty() {
                a
            } else {
                self.scratch.clear();
                self.scratch.extend_from_slice(a);
                self.scratch.extend_from_slice(b);
                &self.scratch
            };
            let body = &record[RECORD_HEADER..];
            // The topic was checked by the agent that read it from its
            // client, and the bytes come from this process only.
            let (topic, rest) = body.split_at(topic_len);
            let (groups, payload) = rest.split_at(groups_len);
            if let (Ok(topic), Ok(groups)) = (std::str::from_utf8(topic), std::str::from_utf8(groups)) {
                f(Record { topic, payload, discards, flags, groups });
            }
            chunk.commit_all();
            n += 1;
        }
        n
    }
}

/// One agent's view of the others: their interest, its links to them, and
/// the patterns its own clients hold.
#[derive(Debug)]
pub struct Peers {
    me: u32,
    interest: SubscriptionIndex<u32>,
    links: Vec<Option<Link>>,
    /// Patterns this agent's clients hold: text to (id, holders).
    held: FxHashMap<Box<str>, (u32, u32)>,
    /// Queue-group subscriptions its clients hold: (pattern, group) to
    /// members.
    held_groups: FxHashMap<(Box<str>, Box<str>), u32>,
    next_id: u32,
    /// Interest changes to tell the other agents ([`Peers::take_announcements`]).
    announce: Vec<Interest>,
    /// Messages sent to other agents.
    pub forwarded: u64,
    /// Messages dropped because a link was full.
    pub link_discards: u64,
    /// The agent that is the router cluster's ([`crate::cluster`]), if
    /// any: replies on an inbox of another router go to it.
    cluster: Option<u32>,
}

impl Peers {
    /// Agent `me`'s view; `links[k]` goes to agent `k` (`None` for itself).
    pub fn new(me: u32, links: Vec<Option<Link>>) -> Self {
        Self {
            me,
            interest: SubscriptionIndex::new(),
            links,
            held: FxHashMap::default(),
            held_groups: FxHashMap::default(),
            next_id: 0,
            announce: Vec::new(),
            forwarded: 0,
            link_discards: 0,
            cluster: None,
        }
    }

    /// Agent `k` is the router cluster's.
    pub fn set_cluster(&mut self, k: u32) {
        self.cluster = Some(k);
    }

    /// The agent that is the router cluster's, if any.
    pub fn cluster(&self) -> Option<u32> {
        self.cluster
    }

    /// This agent's number.
    pub fn me(&self) -> u32 {
        self.me
    }

    /// One of this agent's clients now holds `pattern`.
    pub fn hold(&mut self, pattern: &Pattern) {
        if let Some((_, holders)) = self.held.get_mut(pattern.as_str()) {
            *holders += 1;
            return;
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.held.insert(pattern.as_str().into(), (id, 1));
        self.announce.push(Interest::Add { agent: self.me, id, pattern: pattern.clone() });
    }

    /// One of this agent's clients let go of `pattern`.
    pub fn release(&mut self, pattern: &Pattern) {
        let Some((id, holders)) = self.held.get_mut(pattern.as_str()) else { return };
        *holders -= 1;
        if *holders == 0 {
            let id = *id;
            self.held.remove(pattern.as_str());
            self.announce.push(Interest::Remove { agent: self.me, id, pattern: pattern.clone() });
        }
    }

    /// One of this agent's clients now holds `pattern` in queue group
    /// `group`: the group's new count of members is told.
    pub fn hold_group(&mut self, pattern: &Pattern, group: &str) {
        let n = self.held_groups.entry((pattern.as_str().into(), group.into())).or_insert(0);
        *n += 1;
        let members = *n;
        self.announce.push(Interest::Group { agent: self.me, pattern: pattern.clone(), group: group.into(), members });
    }

    /// One of this agent's clients let go of `pattern` in queue group
    /// `group`.
    pub fn release_group(&mut self, pattern: &Pattern, group: &str) {
        let key = (Box::<str>::from(pattern.as_str()), Box::<str>::from(group));
        let Some(n) = self.held_groups.get_mut(&key) else { return };
        *n -= 1;
        let members = *n;
        if members == 0 {
            self.held_groups.remove(&key);
        }
        self.announce.push(Interest::Group { agent: self.me, pattern: pattern.clone(), group: group.into(), members });
    }

    /// Interest changes made since the last call, for every other agent.
    pub fn take_announcements(&mut self) -> Vec<Interest> {
        std::mem::take(&mut self.announce)
    }

    /// Applies another agent's interest change.
    pub fn handle_interest(&mut self, change: &Interest) {
        match change {
            Interest::Add { agent, id, pattern } if *agent != self.me => self.interest.insert(pattern, *agent, *id),
            Interest::Remove { agent, id, pattern } if *agent != self.me => {
                self.interest.remove(pattern, *agent, *id);
            }
            // Its own changes; and `Group`, the cluster's agent's alone (its
            // own interest in a group's pattern comes as an `Add`).
            _ => {}
        }
    }

    /// The other agents whose clients want `topic` (a checked topic), into
    /// `out` (emptied first), each once.
    pub fn interested(&self, topic: &str, out: &mut Vec<u32>) {
        if self.interest.is_empty() {
            out.clear();
            return;
        }
        self.interest.matches_into(topic, out);
    }

    /// Sends a published message (its topic checked; `flags`, what its
    /// frame carried that the other agent must know: `REQUEST`) to every
    /// other agent whose clients want it; returns how many agents it went
    /// to.
    pub fn forward(&mut self, topic: &str, payload: &[u8], flags: u8) -> usize {
        let mut agents = Vec::new();
        self.interested(topic, &mut agents);
        self.forward_to(&agents, (topic, payload, ""), flags)
    }

    /// Rings the doorbells of the agents sent messages since the last
    /// call ([`Link::ring`]).
    pub fn ring(&mut self) {
        for l in self.links.iter_mut().flatten() {
            l.ring();
        }
    }

    /// [`Peers::forward`] to `agents`, found by [`Peers::interested`]
    /// (the router remembers them per topic), telling the cluster's agent
    /// the queue groups this agent `served` (names separated by a space:
    /// the cluster serves the others); returns how many of them it was for.
    #[inline]
    pub fn forward_to(&mut self, agents: &[u32], (topic, payload, served): (&str, &[u8], &str), flags: u8) -> usize {
        let mut sent = 0;
        for &k in agents {
            if let Some(Some(link)) = self.links.get_mut(k as usize) {
                let groups = if Some(k) == self.cluster { served } else { "" };
                if link.send((topic, payload, groups), flags) {
                    sent += 1;
                } else {
                    self.link_discards += 1;
                }
            }
        }
        self.forwarded += sent as u64;
        agents.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Pattern {
        Pattern::parse(s).unwrap()
    }

    #[test]
    fn interest_is_announced_once_per_pattern_and_withdrawn_with_the_last_holder() {
        let mut a = Peers::new(0, vec![None, None]);
        a.hold(&p("md/>"));
        a.hold(&p("md/>"));
        a.hold(&p("fx/*"));
        let ann = a.take_announcements();
        assert_eq!(ann.len(), 2, "{ann:?}");
        a.release(&p("md/>"));
        assert!(a.take_announcements().is_empty());
        a.release(&p("md/>"));
        assert!(matches!(&a.take_announcements()[..], [Interest::Remove { agent: 0, id: 0, .. }]));
        a.release(&p("nothing/held"));
        assert!(a.take_announcements().is_empty());
    }

    #[test]
    fn a_message_crosses_to_each_interested_agent_once_and_wraps_the_ring() {
        let (l1, mut r1) = link(256, None);
        let (l2, mut r2) = link(256, None);
        let mut a = Peers::new(0, vec![None, Some(l1), Some(l2)]);
        let mut b = Peers::new(1, vec![None, None, None]);
        b.hold(&p("md/>"));
        b.hold(&p("md/eu"));
        for ann in b.take_announcements() {
            a.handle_interest(&ann);
        }
        // Many records of odd sizes: some straddle the ring's end.
        for i in 0..200u32 {
            let payload = vec![i as u8; (i % 37) as usize];
            let flags = (i % 2) as u8 * tickwire_wire::client::flags::REQUEST;
            assert_eq!(a.forward("md/eu", &payload, flags), 1, "one agent wants it, through two patterns");
            let mut got = Vec::new();
            assert_eq!(r1.receive(8, |r| got.push((r.topic.to_owned(), r.payload.to_vec(), r.discards, r.flags))), 1);
            assert_eq!(got, vec![("md/eu".to_owned(), payload, 0, flags)]);
            assert_eq!(r2.receive(8, |_| panic!("agent 2 wants nothing")), 0);
        }
        assert_eq!(a.forward("fx/usd", b"x", 0), 0);
    }

    #[test]
    fn a_request_goes_to_the_cluster_as_to_any_agent_that_wants_it() {
        let (l1, mut r1) = link(256, None);
        let (l2, mut r2) = link(256, None);
        let mut a = Peers::new(0, vec![None, Some(l1), Some(l2)]);
        a.set_cluster(2);
        a.handle_interest(&Interest::Add { agent: 1, id: 0, pattern: p("svc/>") });
        a.handle_interest(&Interest::Add { agent: 2, id: 0, pattern: p("svc/>") });
        let request = tickwire_wire::client::flags::REQUEST;
        assert_eq!(a.forward("svc/price", b"q", request), 2, "agent 1 and the cluster (another router's responders)");
        assert_eq!(r1.receive(8, |r| assert_eq!(r.flags, request)), 1);
        assert_eq!(r2.receive(8, |r| assert_eq!(r.flags, request)), 1);
        assert_eq!(a.cluster(), Some(2));
        // The queue groups served go to the cluster's agent alone.
        assert_eq!(a.forward_to(&[1, 2], ("svc/price", b"q2", "pricers audit"), 0), 2);
        assert_eq!(r1.receive(8, |r| assert_eq!((r.groups, r.payload), ("", &b"q2"[..]))), 1);
        assert_eq!(r2.receive(8, |r| assert_eq!((r.groups, r.payload), ("pricers audit", &b"q2"[..]))), 1);
    }

    #[test]
    fn a_full_link_counts_its_drops_and_carries_them_on_the_next_message() {
        let (l1, mut r1) = link(64, None);
        let mut a = Peers::new(0, vec![None, Some(l1)]);
        a.handle_interest(&Interest::Add { agent: 1, id: 0, pattern: p("t") });
        let body = [7u8; 20];
        // 16 + 1 + 20 = 37 bytes: one fits in 64, the next two do not.
        a.forward("t", &body, 0);
        a.forward("t", &body, 0);
        a.forward("t", &body, 0);
        assert_eq!((a.forwarded, a.link_discards), (1, 2));
        assert_eq!(r1.receive(8, |r| assert_eq!(r.discards, 0)), 1);
        a.forward("t", &body, 0);
        let mut carried = Vec::new();
        assert_eq!(r1.receive(8, |r| carried.push(r.discards)), 1);
        assert_eq!(carried, vec![2], "the two drops ride on the next message");
        a.handle_interest(&Interest::Remove { agent: 1, id: 0, pattern: p("t") });
        assert_eq!(a.forward("t", &body, 0), 0);
    }

    #[test]
    fn a_queue_groups_count_of_members_is_told_at_each_change() {
        let mut a = Peers::new(0, vec![None]);
        a.hold_group(&p("rfq/>"), "pricers");
        a.hold_group(&p("rfq/>"), "pricers");
        a.release_group(&p("rfq/>"), "pricers");
        a.release_group(&p("rfq/>"), "pricers");
        a.release_group(&p("rfq/>"), "pricers");
        let counts: Vec<u32> = a
            .take_announcements()
            .into_iter()
            .map(|c| match c {
                Interest::Group { members, .. } => members,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(counts, vec![1, 2, 1, 0], "a release of nothing held tells nothing");
    }
}
