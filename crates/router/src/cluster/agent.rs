//! The cluster agent: the routing agents' rings on one side, the links to
//! other routers on the other (their sockets in `net`).

use super::groups::{LocalGroups, RemoteGroups};
use super::interest::{LocalInterest, RemoteInterest, Told};
use super::link::{frame_name, Identity, PeerLink};
use super::{ClusterSettings, ClusterStatus, LinkStatus};
use crate::agent::{Control, Mailbox};
use crate::index::SubscriptionIndex;
use crate::peers::{Interest, Link, LinkReader};
use std::collections::BTreeMap;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};
use tickwire_topic::Pattern;
use tickwire_wire::cluster::ClusterFrame;

/// Messages taken from each routing agent's ring per duty cycle.
pub(super) const POLL_LIMIT: usize = 256;
/// Patterns one peer may tell (more ends its link).
pub(super) const MAX_PEER_PATTERNS: usize = 1 << 20;
/// Housekeeping (dials, deadlines, heartbeats, status) at most this often.
pub(super) const HOUSEKEEPING_NS: u64 = 20_000_000;

/// Another router of the cluster, by name: what it wants, the sequence of
/// what went to it and came from it, and its link if up.
#[derive(Debug, Default)]
pub(super) struct Peer {
    pub(super) name: String,
    pub(super) listen: String,
    /// Where its clients connect (URIs separated by commas), as its last
    /// HELLO said.
    pub(super) clients: String,
    /// The link slot serving it.
    pub(super) link: Option<usize>,
    /// Messages numbered for it (sent or lost).
    pub(super) sequence: u64,
    /// Its run, and the last sequence heard from it in that run.
    pub(super) heard: Option<(u64, u64)>,
    /// Messages from it lost before a reply (which has no subscribers to
    /// tell), told with its next message.
    pub(super) lost_carry: u32,
    pub(super) status: LinkStatus,
    /// When it last came up or went down.
    pub(super) changed: u64,
    /// Since its link came up, until the ROUTERS frame that ends its
    /// retelling: the patterns it told before and has not told again
    /// (withdrawn at that frame). Kept meanwhile, so that what it wanted
    /// while the link was down is numbered (its loss counted) and nothing
    /// is unwanted between a clear and its retelling.
    pub(super) stale: Option<std::collections::BTreeSet<Box<str>>>,
    /// Its link's counters in the router's counters file (`tickwire
    /// stat`), if a set was free.
    pub(super) counters: Option<tickwire_shm::counters::CounterSet>,
    /// Down for `forget_after`: what it wanted was withdrawn,
    /// a router only learned of is no longer dialed, and the status leaves
    /// it out unless it is still dialed (until it links again).
    pub(super) forgotten: bool,
}

/// The cluster's agent (see [`crate::cluster`]).
pub struct ClusterAgent {
    pub(super) me: Identity,
    pub(super) settings: ClusterSettings,
    pub(super) net: super::net::Net,
    /// Link slots (a slot is reused).
    pub(super) links: Vec<Option<PeerLink>>,
    pub(super) peers: Vec<Peer>,
    pub(super) by_name: BTreeMap<String, u32>,
    /// What the routing agents' clients hold, and what peers are told.
    pub(super) local: LocalInterest,
    /// Which routing agents want a topic.
    pub(super) agents: SubscriptionIndex<u32>,
    /// What the peers want.
    pub(super) remote: RemoteInterest,
    /// The routing agents' queue groups, and the peers'.
    pub(super) local_groups: LocalGroups,
    pub(super) groups: RemoteGroups,
    control: Receiver<Control>,
    /// The routing agents' control channels.
    tell: Vec<Mailbox>,
    /// Rung by the routing agents when they give it work.
    bell: Arc<tickwire_agent::Doorbell>,
    /// On the routing agent's thread, with its doorbell
    /// ([`ClusterAgent::share_thread`]).
    pub(super) shares_bell: bool,
    /// Messages from each routing agent, and to each.
    pub(super) from: Vec<LinkReader>,
    pub(super) to: Vec<Link>,
    pub(super) now: u64,
    last_housekeeping: u64,
    pub(super) refused: u64,
    /// The router's counters file: a set per other router.
    counters: Option<Arc<tickwire_shm::CountersFile>>,
    status: Arc<Mutex<ClusterStatus>>,
    /// Where the other routers with a link up take clients, for the
    /// routing agents' WELCOMEs.
    others: Arc<super::OtherRouters>,
    /// Scratch: the peers or agents one message goes to, the queue
    /// groups picked for it (peer, group), one peer's list of them.
    pub(super) targets: Vec<u32>,
    pub(super) picks: Vec<(u32, u32)>,
    pub(super) list: String,
    told: Vec<Told>,
}

impl std::fmt::Debug for ClusterAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterAgent").field("name", &self.me.name).field("peers", &self.peers.len()).finish()
    }
}

/// The routing agents' side of the cluster agent, made by the server.
pub(crate) struct AgentWiring {
    pub(crate) control: Receiver<Control>,
    pub(crate) tell: Vec<Mailbox>,
    pub(crate) from: Vec<LinkReader>,
    pub(crate) to: Vec<Link>,
    pub(crate) bell: Arc<tickwire_agent::Doorbell>,
}

impl ClusterAgent {
    /// Binds the cluster's listener; the agent is the routing agents'
    /// number `wiring.tell.len()`.
    pub(crate) fn new(
        settings: ClusterSettings,
        wiring: AgentWiring,
        counters: Option<Arc<tickwire_shm::CountersFile>>,
    ) -> std::io::Result<Self> {
        let mut inc = [0u8; 8];
        let _ = getrandom::fill(&mut inc);
        let now = tickwire_shm::os::monotonic_ns();
        let me = Identity {
            cluster: settings.cluster.clone(),
            name: settings.name.clone(),
            listen: settings.advertise.clone(),
            clients: settings.clients.clone(),
            incarnation: u64::from_le_bytes(inc) ^ now,
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &settings.secret),
            heartbeat: settings.heartbeat,
        };
        let net = super::net::Net::bind(&settings, now)?;
        let status = ClusterStatus {
            cluster: settings.cluster.clone(),
            listen: net.listening(),
            tls: settings.tls.is_some(),
            ..Default::default()
        };
        Ok(Self {
            me,
            net,
            links: Vec::new(),
            peers: Vec::new(),
            by_name: BTreeMap::new(),
            local: LocalInterest::default(),
            agents: SubscriptionIndex::new(),
            remote: RemoteInterest::new(wiring.tell.len() as u32),
            local_groups: LocalGroups::default(),
            groups: RemoteGroups::default(),
            control: wiring.control,
            tell: wiring.tell,
            bell: wiring.bell,
            shares_bell: false,
            from: wiring.from,
            to: wiring.to,
            now,
            last_housekeeping: 0,
            refused: 0,
            counters,
            status: Arc::new(Mutex::new(status)),
            others: Arc::default(),
            targets: Vec::new(),
            picks: Vec::new(),
            list: String::new(),
            told: Vec::new(),
            settings,
        })
    }

    /// Where it takes links (the port resolved).
    pub fn listening(&self) -> String {
        self.net.listening()
    }

    /// The cluster's name.
    pub fn cluster_name(&self) -> &str {
        &self.me.cluster
    }

    /// Its status, refreshed at every housekeeping.
    pub fn status(&self) -> Arc<Mutex<ClusterStatus>> {
        Arc::clone(&self.status)
    }

    /// Where the other routers with a link up take clients (kept current
    /// as links come up and go down).
    pub fn other_routers(&self) -> Arc<super::OtherRouters> {
        Arc::clone(&self.others)
    }

    /// Tells the routing agents' next WELCOMEs where the routers with a
    /// link up take clients (a link came up or went down).
    pub(super) fn retell_other_routers(&self) {
        // (A router told of as another's is not this one: a template
        // copied to every router would tell clients their own.)
        let own: std::collections::HashSet<&str> = self.me.clients.split(',').collect();
        let mut seen = std::collections::HashSet::new();
        let mut uris: Vec<&str> = Vec::new();
        for p in self.peers.iter().filter(|p| p.link.is_some()) {
            for u in p.clients.split(',').filter(|u| !u.is_empty() && !own.contains(u)) {
                if seen.insert(u) {
                    uris.push(u);
                }
            }
        }
        self.others.set(uris.join(","));
    }

    /// The peer named `name` (made if new).
    pub(super) fn peer(&mut self, name: &str, listen: &str) -> u32 {
        if let Some(&k) = self.by_name.get(name) {
            if !listen.is_empty() {
                listen.clone_into(&mut self.peers[k as usize].listen);
            }
            return k;
        }
        let k = self.peers.len() as u32;
        // Down (never up) since now: forgotten if it never links.
        let changed = self.now;
        self.peers.push(Peer { name: name.into(), listen: listen.into(), changed, ..Default::default() });
        self.by_name.insert(name.into(), k);
        k
    }

    /// The routing agents' interest changes: into the agents' index and
    /// the patterns told, each change sent to every link up.
    fn take_control(&mut self) -> usize {
        if !self.shares_bell {
            self.bell.take_posted();
        }
        let mut n = 0;
        while let Ok(c) = self.control.try_recv() {
            n += 1;
            let Control::Interest(change) = c else { continue };
            match &change {
                Interest::Add { agent, id, pattern } => {
                    self.agents.insert(pattern, *agent, *id);
                    self.local.hold(pattern, &mut self.told);
                }
                Interest::Remove { agent, id, pattern } => {
                    self.agents.remove(pattern, *agent, *id);
                    self.local.release(pattern, &mut self.told);
                }
                Interest::Group { agent, pattern, group, members } => {
                    if let Some(total) = self.local_groups.set(*agent, pattern.as_str(), group, *members) {
                        self.broadcast(&ClusterFrame::Group { members: total, group, pattern: pattern.as_str() });
                    }
                }
            }
        }
        if !self.told.is_empty() {
            let told = std::mem::take(&mut self.told);
            for t in &told {
                let f = match t {
                    Told::Interest(p) => ClusterFrame::Interest(p.as_str()),
                    Told::Withdraw(p) => ClusterFrame::Withdraw(p.as_str()),
                };
                self.broadcast(&f);
            }
            self.told = told;
            self.told.clear();
        }
        n
    }

    /// Sends `f` on every link up; a link that fails is closed.
    pub(super) fn broadcast(&mut self, f: &ClusterFrame<'_>) {
        for slot in 0..self.links.len() {
            let Some(l) = &mut self.links[slot] else { continue };
            // (A link retelling tells a change it has not reached when it
            // gets there.)
            if l.them().is_some() && l.retelling.as_ref().is_none_or(|r| r.passed(f)) {
                if let Err(e) = l.send(f, self.now) {
                    self.close(slot, &format!("sending {}: {e}", frame_name(f)));
                }
            }
        }
    }

    /// Acts on one frame from the link in `slot`, up and serving peer `k`.
    ///
    /// # Errors
    /// Why the link must end.
    pub(super) fn handle(&mut self, slot: usize, k: u32, f: ClusterFrame<'_>) -> Result<(), String> {
        match f {
            ClusterFrame::Message { sequence, discards, flags, topic, payload } => {
                self.take_message((slot, k), (sequence, discards, flags), (topic, payload, ""))?;
            }
            ClusterFrame::GroupMessage { sequence, discards, flags, topic, groups, payload } => {
                self.take_message((slot, k), (sequence, discards, flags), (topic, payload, groups))?;
            }
            ClusterFrame::Group { members, group, pattern } => self.take_group(k, members, group, pattern)?,
            ClusterFrame::Interest(text) | ClusterFrame::Withdraw(text) => {
                let add = matches!(f, ClusterFrame::Interest(_));
                let p = Pattern::parse(text).map_err(|e| format!("{} {text:?}: {e}", frame_name(&f)))?;
                if add && self.remote.len(k) >= MAX_PEER_PATTERNS {
                    return Err(format!("more than {MAX_PEER_PATTERNS} patterns"));
                }
                if let Some(stale) = &mut self.peers[k as usize].stale {
                    stale.remove(text);
                }
                let change = if add { self.remote.add(k, &p) } else { self.remote.remove(k, &p) };
                if let Some(c) = change {
                    self.tell_agents(&c);
                }
            }
            ClusterFrame::Routers(list) => {
                // The first after the link came up ends the peer's retelling.
                let stale = self.peers[k as usize].stale.take().unwrap_or_default();
                for c in self.remote.remove_all(k, stale) {
                    self.tell_agents(&c);
                }
                for w in self.groups.end_retelling(k) {
                    if let Some(c) = self.remote.group(&w) {
                        self.tell_agents(&c);
                    }
                }
                for (name, listen) in list {
                    self.learn(name, listen);
                }
            }
            ClusterFrame::Heartbeat => {}
            ClusterFrame::Ping(stamp) => {
                if let Some(l) = self.links.get_mut(slot).and_then(Option::as_mut) {
                    // A link full of messages skips the PONG (the round
                    // trip is not measured this time); a broken one ends.
                    if let Err(tickwire_transport::link::LinkError::Broken(e)) =
                        l.send(&ClusterFrame::Pong(stamp), self.now)
                    {
                        return Err(e);
                    }
                }
            }
            ClusterFrame::Pong(stamp) => {
                // Our own stamp back; one from the future or older than a
                // minute is not ours to trust, and is not shown.
                let rtt = self.now.checked_sub(stamp).filter(|&ns| ns < 60_000_000_000);
                if let Some(ns) = rtt {
                    self.peers[k as usize].status.round_trip_us = ns / 1000;
                }
            }
            ClusterFrame::Close(why) => return Err(format!("closed by the peer: {why}")),
            ClusterFrame::Hello(_) | ClusterFrame::Proof(_) => {
                return Err(format!("{} after the handshake", frame_name(&f)));
            }
        }
        Ok(())
    }

    /// Tells every routing agent of a change in the cluster's interest.
    pub(super) fn tell_agents(&self, c: &Interest) {
        for tx in &self.tell {
            let _ = tx.send(Control::Interest(c.clone()));
        }
    }

    /// A link came up, serving peer `k`: it tells again in full what it
    /// wants (what it does not is withdrawn at the ROUTERS frame that
    /// follows), and it is told ours, then the routers we link with.
    pub(super) fn link_up(&mut self, slot: usize, k: u32) {
        let stale = self.remote.patterns(k);
        let p = &mut self.peers[k as usize];
        if p.counters.is_none() {
            // A set for a router that linked (proved itself), not for
            // every name another router tells of.
            let kind = tickwire_shm::counters::Kind::RouterClusterLink;
            p.counters = self.counters.as_ref().and_then(|c| c.allocate(kind, k, 0, &p.name).ok());
        }
        p.stale = Some(stale);
        self.groups.begin_retelling(k);
        let p = &mut self.peers[k as usize];
        p.forgotten = false;
        p.link = Some(slot);
        p.status.connects += 1;
        p.changed = self.now;
        // What we hold, then the routers we link with, as the link drains.
        let Some(l) = self.links[slot].as_mut() else { return };
        l.retelling = Some(super::retell::Retelling::default());
        self.retell(slot);
        if self.links[slot].is_none() {
            return;
        }
        // The others hear of the newcomer, so that they link with it too.
        let newcomer = self.peers[k as usize].clone_identity();
        for (s, other) in self.links.iter_mut().enumerate() {
            if s == slot {
                continue;
            }
            if let Some(o) = other.as_mut().filter(|o| o.them().is_some()) {
                let _ = o.send(&ClusterFrame::Routers(vec![(&newcomer.0, &newcomer.1)]), self.now);
            }
        }
    }

    /// Refreshes the shared status.
    fn publish_status(&mut self) {
        let (held, told) = self.local.counts();
        let mut links = Vec::with_capacity(self.peers.len());
        for (k, p) in self.peers.iter().enumerate() {
            if p.forgotten && !self.net.dials_router(&p.name) {
                continue;
            }
            let mut s = p.status.clone();
            s.router.clone_from(&p.name);
            s.addr.clone_from(&p.listen);
            s.state = if p.link.is_some() { "up".into() } else { "down".into() };
            s.for_ms = self.now.saturating_sub(p.changed) / 1_000_000;
            s.interest = self.remote.len(k as u32);
            s.groups = self.groups.len(k as u32);
            if let Some(c) = &p.counters {
                let up = u64::from(p.link.is_some());
                c.set_all(&[
                    up,
                    s.messages_out,
                    s.bytes_out,
                    s.messages_in,
                    s.bytes_in,
                    s.lost_out,
                    s.lost_in,
                    s.interest as u64,
                    s.connects,
                    s.round_trip_us,
                ]);
            }
            links.push(s);
        }
        if let Ok(mut st) = self.status.lock() {
            st.patterns_held = held;
            st.patterns_told = told;
            st.links = links;
            st.refused = self.refused;
        }
    }
}

impl ClusterAgent {
    /// Whether a link holds frames for its batching window, or has more
    /// to retell: nothing wakes it when the window ends.
    pub(crate) fn holding(&self) -> bool {
        self.links.iter().flatten().any(|l| l.link.writer.held() > 0 || l.retelling.is_some())
    }

    /// Its links' and listener's epoll set, readable when one has work.
    pub(crate) fn poll_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.net.poll.registry().as_fd()
    }

    /// Whether a routing agent's ring to it holds messages.
    pub(crate) fn has_forwarded(&self) -> bool {
        self.from.iter().any(|l| !l.is_empty())
    }

    /// It runs on the routing agent's thread and shares its doorbell
    /// (one routing agent, [`ClusterSettings::own_thread`] off): the
    /// routing agent's duty cycle takes the doorbell's posts, before
    /// either reads its channel, so this one must not.
    ///
    /// [`ClusterSettings::own_thread`]: super::ClusterSettings::own_thread
    pub(crate) fn share_thread(&mut self) {
        self.shares_bell = true;
    }

    /// Whether it runs on the routing agent's thread.
    pub(crate) fn shares_thread(&self) -> bool {
        self.shares_bell
    }
}

impl Peer {
    fn clone_identity(&self) -> (String, String) {
        (self.name.clone(), self.listen.clone())
    }
}

impl tickwire_agent::Agent for ClusterAgent {
    fn do_work(&mut self) -> usize {
        self.now = tickwire_shm::os::monotonic_ns();
        let mut work = self.take_control();
        work += self.take_forwarded();
        work += self.poll_net();
        // The routing agents sent messages wake before the links' writes.
        for l in &mut self.to {
            l.ring();
        }
        self.retell_all();
        self.flush_links();
        if self.now.saturating_sub(self.last_housekeeping) >= HOUSEKEEPING_NS {
            self.last_housekeeping = self.now;
            self.housekeeping();
            self.publish_status();
        }
        work
    }

    fn role(&self) -> &str {
        "cluster"
    }

    /// On a thread of its own (on the routing agent's, `Server::park`
    /// waits for both), waits up to `timeout` for work: its links' and listener's sockets,
    /// and the routing agents' rings and control messages (they ring its
    /// doorbell), wake it; heartbeats and dials wait for the timeout,
    /// which is therefore at least [`crate::agent::RUNG_WAIT`] unless a
    /// link holds frames for its batching window (nothing wakes it when
    /// the window ends: it waits as `idle` says, 1 us at first).
    fn park(&mut self, timeout: std::time::Duration) {
        let timeout = crate::agent::least_wait(!self.holding(), timeout);
        self.bell.park(&[self.poll_fd()], timeout, || self.has_forwarded());
    }
}
