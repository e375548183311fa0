//! Requests and replies ([`tickwire_wire::request`]): a request is
//! routed like a publish, flagged `REQUEST`, with the requester's inbox in
//! front of its payload; a reply on an inbox goes to that one session,
//! here or at the routing agent serving it. A request nobody wants is
//! answered at once with REJECT `NoResponders`.

use super::publish::Delivered;
use super::{Disconnect, Router};
use tickwire_shm::counters::Kind;
use tickwire_shm::{CounterSet, CountersFile};
use tickwire_wire::client::{flags, RejectCode};
use tickwire_wire::request::{self, Inbox};

/// Value indices of the `Kind::RouterRequests` set (names:
/// `tickwire_shm::counters::ROUTER_REQUEST_NAMES`).
pub mod value {
    /// Requests published.
    pub const REQUESTS: usize = 0;
    /// Requests nobody wanted.
    pub const NO_RESPONDERS: usize = 1;
    /// Replies published on an inbox.
    pub const REPLIES: usize = 2;
    /// Replies whose requester was gone: dropped.
    pub const REPLIES_UNDELIVERABLE: usize = 3;
    /// Messages delivered to one member of a queue group.
    pub const QUEUE_GROUP_DELIVERIES: usize = 4;
}

/// What requests and replies this agent has seen, and its scratch.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    pub(super) counts: [u64; 5],
    set: Option<CounterSet>,
    /// A request's body being built (kept: no allocation per request).
    body: Vec<u8>,
    /// A queue-group delivery's body being built: the member's
    /// subscription, then the message (kept).
    pub(super) group_body: Vec<u8>,
    /// The queue groups a message was delivered to, for the router
    /// cluster (names separated by a space; kept).
    pub(super) groups_served: String,
}

impl Requests {
    pub(super) fn new(counters: Option<&std::sync::Arc<CountersFile>>, label: &str) -> Self {
        let set = counters.and_then(|c| c.allocate(Kind::RouterRequests, 0, 0, label).ok());
        Self { set, ..Self::default() }
    }

    /// Writes the counts into the counter set.
    pub(super) fn publish(&self) {
        if let Some(s) = &self.set {
            for (i, v) in self.counts.iter().enumerate() {
                s.set(i, *v);
            }
        }
    }
}

impl Router {
    /// Routes session `from`'s request on `topic`, its correlation id
    /// `correlation`: every subscriber gets it with the inbox to answer
    /// on; with none anywhere, the requester is told at once.
    pub(super) fn request(
        &mut self,
        from: u32,
        topic: &str,
        payload: &[u8],
        (correlation, headed): (u64, u8),
    ) -> Result<(), Disconnect> {
        let Some(serial) = self.session(from).map(|s| s.serial) else { return Ok(()) };
        let inbox = Inbox { agent: self.me, session: from, serial, correlation };
        let mut body = std::mem::take(&mut self.requests.body);
        request::body_of(&inbox, payload, &mut body);
        let reached = self.route_flagged(from, topic, &body, correlation, flags::REQUEST | headed);
        self.requests.body = body;
        self.requests.counts[value::REQUESTS] += 1;
        match reached? {
            Some(0) => {
                self.requests.counts[value::NO_RESPONDERS] += 1;
                self.reject(from, RejectCode::NoResponders, correlation, &format!("no subscription wants {topic}"))
            }
            _ => Ok(()),
        }
    }

    /// Routes a reply on `topic`, an inbox: to its session if it is this
    /// agent's, else to the agent serving it; an inbox naming another
    /// router's link ([`request::peer_of`]) to the cluster's agent, which
    /// sends it there. A topic in the inbox namespace that is no inbox
    /// this router made is refused. `headed`: [`flags::HEADERS`] if the
    /// payload starts with headers.
    pub(super) fn reply(
        &mut self,
        from: u32,
        topic: &str,
        payload: &[u8],
        (sequence, headed): (u64, u8),
    ) -> Result<(), Disconnect> {
        let Some(inbox) = Inbox::parse(topic) else {
            let cluster = self.peers.as_ref().and_then(|p| p.cluster());
            return match (request::peer_of(topic), cluster) {
                (Some(_), Some(c)) => {
                    self.requests.counts[value::REPLIES] += 1;
                    if let Some(p) = &mut self.peers {
                        p.forward_to(&[c], (topic, payload, ""), headed);
                    }
                    Ok(())
                }
                _ => {
                    let why = format!("{topic}: the _inbox namespace holds only the inboxes the router makes");
                    self.reject(from, RejectCode::BadTopic, sequence, &why)
                }
            };
        };
        self.requests.counts[value::REPLIES] += 1;
        if inbox.agent == self.me {
            self.deliver_reply(topic, payload, headed);
        } else {
            match &mut self.peers {
                Some(p) if inbox.agent < self.agents => {
                    p.forward_to(&[inbox.agent], (topic, payload, ""), headed);
                }
                _ => self.requests.counts[value::REPLIES_UNDELIVERABLE] += 1,
            }
        }
        Ok(())
    }

    /// Hands a reply to the session its inbox names, if it is still that
    /// session (not one that took its id since); drops and counts it if
    /// not. `flags`: the reply's ([`flags::HEADERS`]).
    pub(super) fn deliver_reply(&mut self, topic: &str, payload: &[u8], flags: u8) {
        let Some(inbox) = Inbox::parse(topic) else {
            self.requests.counts[value::REPLIES_UNDELIVERABLE] += 1;
            return;
        };
        match self.sessions.get(inbox.session as usize) {
            Some(Some(s)) if s.serial == inbox.serial && inbox.agent == self.me => {
                let mut d = Delivered::default();
                let queues = (&mut self.backlog, &mut self.slow);
                d.to(&mut self.sessions, queues, inbox.session, (topic, payload, flags), (0, true, false));
                self.totals.deliveries += d.n;
                self.totals.discards += d.discards;
                if d.grown > 0 {
                    self.queues_grew(d.grown);
                }
            }
            _ => self.requests.counts[value::REPLIES_UNDELIVERABLE] += 1,
        }
    }
}
