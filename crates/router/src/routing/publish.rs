//! A publish to everyone that wants it: this agent's sessions (the
//! delivery loop), the other routing agents, the last-value cache. Who
//! they are is the topic's entry's to say ([`crate::topics`]): one hash
//! lookup per message for all of it.

use super::slow::SlowConsumers;
use super::{Disconnect, Router};
use crate::cache::LastValues;
use crate::peers::{Interest, Peers, Record};
use crate::session::Session;
use crate::topics::{GroupTargets, Sources, TopicEntry};
use tickwire_topic::check_topic;
use tickwire_wire::client::RejectCode;
use tickwire_wire::client::{self, flags::HEADERS};
use tickwire_wire::cluster::group_list;

/// What deliveries did: how many were made, the discards they caused,
/// and the bytes the queues grew by.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Delivered {
    pub(super) n: u64,
    pub(super) discards: u64,
    pub(super) grown: usize,
}

impl std::ops::AddAssign for Delivered {
    fn add_assign(&mut self, o: Self) {
        (self.n, self.discards, self.grown) = (self.n + o.n, self.discards + o.discards, self.grown + o.grown);
    }
}

impl Delivered {
    /// Delivers a message (flagged `flags`: a request's is `REQUEST`) to
    /// session slot `c` if it is open, puts it in the backlog and tells
    /// `slow` what the delivery left.
    #[inline]
    pub(super) fn to(
        &mut self,
        sessions: &mut [Option<Session>],
        (backlog, slow): (&mut Vec<u32>, &mut SlowConsumers),
        c: u32,
        (topic, payload, flags): (&str, &[u8], u8),
        (discarded, local, conflate): (u32, bool, bool),
    ) {
        if let Some(Some(s)) = sessions.get_mut(c as usize) {
            self.n += 1;
            let before = s.queue.allocated();
            let dropped = s.deliver(topic, payload, flags, discarded, (local, conflate));
            self.grown += s.queue.allocated().saturating_sub(before);
            slow.after_delivery(c, s, dropped, local);
            self.discards += u64::from(dropped);
            s.mark(c, backlog);
        }
    }
}

/// Delivers a message to each of `targets` (session slots) but `skip`
/// (its publisher, when that asked not to get its own: `u32::MAX` else).
#[inline]
fn deliver_all(
    sessions: &mut [Option<Session>],
    (backlog, slow): (&mut Vec<u32>, &mut SlowConsumers),
    (targets, skip): (&[u32], u32),
    message: (&str, &[u8], u8),
    how: (u32, bool, bool),
) -> Delivered {
    let mut d = Delivered::default();
    for &c in targets {
        if c != skip {
            d.to(sessions, (&mut *backlog, &mut *slow), c, message, how);
        }
    }
    d
}

/// Delivers a message to one member of each of `groups` (those `only`
/// names, separated by a space, when it is given), round-robin, passing
/// over members whose queue is past half its bound while another has
/// room; flagged `QUEUE`, its body the member's subscription in the group
/// then the message (built in `body`), so that a client holding other
/// subscriptions on the topic knows which one it is for. The names of the
/// groups served are put in `served` (emptied first), for the router
/// cluster.
#[inline]
fn deliver_groups(
    sessions: &mut [Option<Session>],
    (backlog, slow, body): (&mut Vec<u32>, &mut SlowConsumers, &mut Vec<u8>),
    (groups, skip, only, served): (&mut [GroupTargets], u32, Option<&str>, &mut String),
    (topic, payload, flags): (&str, &[u8], u8),
    (discarded, local): (u32, bool),
) -> Delivered {
    let mut d = Delivered::default();
    served.clear();
    for g in groups {
        let len = g.members.len();
        if len == 0 || (len == 1 && g.members[0] == skip) {
            continue;
        }
        if only.is_some_and(|names| !group_list::contains(names, &g.name)) {
            continue;
        }
        let roomy = |c: u32| c != skip && matches!(sessions.get(c as usize), Some(Some(s)) if s.queue.is_below_half());
        let other = |i: &usize| g.members[*i] != skip;
        let mut order = (0..len).map(|i| (g.next + i) % len);
        let pick = order.clone().find(|&i| roomy(g.members[i])).or_else(|| order.find(other)).unwrap_or(g.next % len);
        g.next = (pick + 1) % len;
        let sid = g.subscriptions.get(pick).copied().unwrap_or(0);
        client::queue_body(sid, payload, body);
        let message = (topic, &body[..], flags | client::flags::QUEUE);
        let before = d.n;
        d.to(sessions, (&mut *backlog, &mut *slow), g.members[pick], message, (discarded, local, false));
        if d.n > before {
            group_list::push(served, &g.name);
        }
    }
    d
}

/// Delivers a message to the sessions of a topic's entry and to one member
/// of each of its queue groups (those `only` names, if given; their names
/// into `served`); returns what that did, and how many of the deliveries
/// were a group's.
#[inline]
fn deliver_entry(
    sessions: &mut [Option<Session>],
    (backlog, slow, body, served): (&mut Vec<u32>, &mut SlowConsumers, &mut Vec<u8>, &mut String),
    (e, skip, only): (&mut TopicEntry, u32, Option<&str>),
    message: (&str, &[u8], u8),
    (discarded, local, conflate): (u32, bool, bool),
) -> (Delivered, u64) {
    let queues = (&mut *backlog, &mut *slow);
    let mut d = deliver_all(sessions, queues, (&e.targets, skip), message, (discarded, local, conflate));
    if e.groups.is_empty() || only == Some("") {
        served.clear();
        return (d, 0);
    }
    let groups = (&mut e.groups[..], skip, only, served);
    let g = deliver_groups(sessions, (backlog, slow, body), groups, message, (discarded, local));
    d += g;
    (d, g.n)
}

impl Router {
    /// Keeps the last value of the topics `cache` is configured for. With
    /// several routing agents, each keeps its own copy: it asks the others
    /// for every message on those topics, as if a client of its own had
    /// subscribed to them.
    pub fn set_cache(&mut self, cache: LastValues) {
        if let Some(peers) = &mut self.peers {
            for p in cache.patterns() {
                peers.hold(p);
            }
        }
        self.cache = Some(cache);
        // Where each topic's value is kept is remembered per topic.
        self.topics.clear();
    }

    /// The last-value cache.
    pub fn cache(&self) -> Option<&LastValues> {
        self.cache.as_ref()
    }

    /// Delivers a publish to every session whose patterns match `topic`,
    /// once each: one lookup of the topic ([`crate::topics`]) for
    /// everything it needs.
    #[inline]
    pub(super) fn route(&mut self, from: u32, topic: &str, payload: &[u8], sequence: u64) -> Result<(), Disconnect> {
        self.route_flagged(from, topic, payload, sequence, 0).map(|_| ())
    }

    /// [`Router::route`] of a message flagged `flags` (0; `REQUEST`: a
    /// request's body, never cached or conflated; `HEADERS`: a header
    /// block starts the payload); returns how many
    /// sessions and other agents it went to, or `None` when it was
    /// refused (REJECT sent: a bad topic, an ACL).
    #[inline]
    pub(super) fn route_flagged(
        &mut self,
        from: u32,
        topic: &str,
        payload: &[u8],
        sequence: u64,
        flags: u8,
    ) -> Result<Option<u64>, Disconnect> {
        let src = Sources {
            sessions: &mut self.sessions,
            filtered: self.login.filtered(),
            peers: self.peers.as_ref(),
            conflate: &self.limits.conflate,
        };
        let e = match self.topics.entry(topic, check_topic, src) {
            Ok(e) => e,
            Err(e) => return self.reject(from, RejectCode::BadTopic, sequence, &e.to_string()).map(|()| None),
        };
        if self.login.enabled()
            && !self.sessions.get_mut(from as usize).and_then(Option::as_mut).is_some_and(|s| s.may(topic, true))
        {
            let user = self.session(from).and_then(Session::user).unwrap_or("").to_owned();
            self.totals.forbidden += 1;
            return self
                .reject(from, RejectCode::Forbidden, sequence, &format!("user {user:?} may not publish on {topic}"))
                .map(|()| None);
        }
        // Not to its own publisher, if that asked (NATS's echo: false).
        let skip = match self.sessions.get(from as usize) {
            Some(Some(s)) if s.no_echo => from,
            _ => u32::MAX,
        };
        let r = &mut self.requests;
        let queues = (&mut self.backlog, &mut self.slow, &mut r.group_body, &mut r.groups_served);
        // A request is never cached or conflated. A message with headers is
        // cached (its flags kept with it) but not conflated: a queued
        // frame's replacement keeps the frame's flags.
        let plain = flags & !HEADERS == 0;
        let how = (0, true, e.conflate && flags == 0);
        let (d, grouped) = deliver_entry(&mut self.sessions, queues, (e, skip, None), (topic, payload, flags), how);
        self.requests.counts[super::request::value::QUEUE_GROUP_DELIVERIES] += grouped;
        let Delivered { n, discards, grown } = d;
        if let (Some(c), true) = (&mut self.cache, plain) {
            c.update_at(&mut e.last_value, topic, payload, flags);
        }
        let remote = match &mut self.peers {
            Some(p) if !e.agents.is_empty() => {
                let before = (p.forwarded, p.link_discards);
                let agents = p.forward_to(&e.agents, (topic, payload, &self.requests.groups_served), flags);
                self.totals.forwarded += p.forwarded - before.0;
                self.totals.discards += p.link_discards - before.1;
                agents
            }
            _ => 0,
        };
        self.totals.messages_in += 1;
        self.totals.deliveries += n;
        self.totals.discards += discards;
        self.totals.unwanted += u64::from(n == 0 && remote == 0);
        self.topic_counts.add(&mut e.counted, topic, 1, n, payload.len() as u64);
        if self.slow.any_newly_held() {
            self.hold(from);
        }
        if grown > 0 {
            self.queues_grew(grown);
        }
        Ok(Some(n + remote as u64))
    }

    /// Delivers a message another routing agent's client published (see
    /// [`crate::peers`]) to this agent's matching clients, and to one
    /// member of each queue group the record names (the router cluster
    /// picked this router to serve them; a group's members elsewhere in
    /// the router serve the rest); `discards` is the discard indication it
    /// carries, `flags` what its frame carried (`REQUEST`). A reply on an
    /// inbox goes to its session alone.
    pub fn route_forwarded(&mut self, m: Record<'_>) {
        let Record { topic, payload, discards: discarded, flags, groups } = m;
        if tickwire_wire::request::is_inbox(topic) {
            return self.deliver_reply(topic, payload, flags & tickwire_wire::client::flags::HEADERS);
        }
        let src = Sources {
            sessions: &mut self.sessions,
            filtered: self.login.filtered(),
            peers: self.peers.as_ref(),
            conflate: &self.limits.conflate,
        };
        // The agent that read it from its client checked the topic.
        let Ok(e) = self.topics.entry(topic, |_| Ok::<(), std::convert::Infallible>(()), src);
        let r = &mut self.requests;
        let queues = (&mut self.backlog, &mut self.slow, &mut r.group_body, &mut r.groups_served);
        let plain = flags & !HEADERS == 0;
        let how = (discarded, false, e.conflate && flags == 0);
        let whom = (&mut *e, u32::MAX, Some(groups));
        let (d, grouped) = deliver_entry(&mut self.sessions, queues, whom, (topic, payload, flags), how);
        self.requests.counts[super::request::value::QUEUE_GROUP_DELIVERIES] += grouped;
        let Delivered { n, discards, grown } = d;
        if let (Some(c), true) = (&mut self.cache, plain) {
            c.update_at(&mut e.last_value, topic, payload, flags);
        }
        self.totals.deliveries += n;
        self.totals.discards += discards;
        self.topic_counts.add(&mut e.counted, topic, 0, n, payload.len() as u64);
        if grown > 0 {
            self.queues_grew(grown);
        }
    }

    /// Applies another routing agent's interest change.
    pub fn handle_interest(&mut self, change: &Interest) {
        if let Some(p) = &mut self.peers {
            p.handle_interest(change);
            self.topics.invalidate();
        }
    }

    /// This agent's interest changes since the last call, for the others.
    pub fn take_announcements(&mut self) -> Vec<Interest> {
        self.peers.as_mut().map(Peers::take_announcements).unwrap_or_default()
    }
}
