//! Durable queues managed by request: the router itself answers requests
//! on `_sys/queue/create`, `_sys/queue/delete`, `_sys/queue/list` and
//! `_sys/queue/browse` (as NATS JetStream answers `$JS.API.*`), so a
//! queue is managed from anywhere a client can reach the router, under
//! the ACLs that govern publishing on those topics. Requests and replies
//! are JSON: [`QueueRequest`] in, [`AdminReply`] back.
//!
//! A queue made by `create` carries its [`QueueOptions`]; one made by a
//! consumer binding to a name nobody created has the defaults.

use super::durable_queue::DurableQueue;
use super::request::value;
use super::{Disconnect, Router};
use serde::{Deserialize, Serialize};
use tickwire_journal::{Read, Reader};
use tickwire_topic::Pattern;
use tickwire_wire::client::RejectCode;
use tickwire_wire::request::{self, Inbox};

/// The namespace of the router's own services: a request on a topic in it
/// is answered by the router, never routed.
pub const SYSTEM_PREFIX: &str = "_sys/";

/// The topic prefix of queue management: `_sys/queue/` + an operation.
pub const QUEUE_ADMIN_PREFIX: &str = "_sys/queue/";

/// Whether `topic` is in the router's own namespace.
pub fn is_system(topic: &str) -> bool {
    topic.starts_with(SYSTEM_PREFIX)
}

/// What a guaranteed publish to a queue at its `max_depth` gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FullPolicy {
    /// A REJECT (`Limit`) naming the queue: the publisher decides.
    #[default]
    Reject,
    /// Held in the router, unacknowledged, until the queue has room (the
    /// publisher's own window of unacknowledged publishes then holds it
    /// back); held publishes are bounded, past the bound they are refused.
    Block,
}

/// How a durable queue is set up, saved with it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueOptions {
    /// One consumer at a time: the first bound gets every message; when it
    /// leaves or dies the next takes over, from its oldest unacknowledged
    /// message, in order.
    pub exclusive: bool,
    /// At most this many messages waiting (0: bounded only by the
    /// journal's retention).
    pub max_depth: u64,
    /// What a publish to a full queue gets.
    pub full: FullPolicy,
}

impl QueueOptions {
    /// All defaults (not written to the saved state).
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// A request to `_sys/queue/OPERATION`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueueRequest {
    /// The queue (every operation but `list`).
    pub name: String,
    /// `create`: the topic pattern feeding it.
    pub topic: String,
    /// `create`: its options.
    pub options: QueueOptions,
    /// `browse`: the most messages to show (at most [`BROWSE_MAX`]).
    pub count: usize,
}

/// Messages one `browse` shows at most.
pub const BROWSE_MAX: usize = 1000;

/// Journal records one `browse` reads at most (a queue whose messages are
/// few among many others shows fewer than asked).
pub const BROWSE_SCAN_MAX: usize = 100_000;

/// A browsed payload's text is cut to this many bytes (`size` says the
/// whole).
pub const BROWSE_PAYLOAD_MAX: usize = 1024;

/// Durable queues a router holds at most.
pub const QUEUES_MAX: usize = 1024;

/// A queue as `list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueInfo {
    /// Its name.
    pub name: String,
    /// The topic pattern feeding it.
    pub topic: String,
    /// Its options.
    pub options: QueueOptions,
    /// Messages waiting (delivered and unacknowledged included).
    pub depth: u64,
    /// Deliveries awaiting acknowledgement.
    pub in_flight: usize,
    /// Consumers bound.
    pub consumers: usize,
    /// Everything up to this journal sequence is done.
    pub acked: u64,
}

/// A message as `browse` shows it (not consumed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrowsedMessage {
    /// Its journal sequence.
    pub sequence: u64,
    /// Its topic.
    pub topic: String,
    /// Its payload, as text (invalid UTF-8 replaced), cut to
    /// [`BROWSE_PAYLOAD_MAX`] bytes.
    pub payload: String,
    /// Its payload's size, bytes.
    pub size: usize,
    /// Deliveries made so far (0: never delivered).
    pub deliveries: u32,
}

/// The router's answer to a queue request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AdminReply {
    /// What went wrong, if something did (nothing else is set then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `list`: every queue; `create`, `delete`: the one acted on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<QueueInfo>,
    /// `browse`: the oldest messages waiting.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<BrowsedMessage>,
}

impl AdminReply {
    fn error(why: impl Into<String>) -> Self {
        Self { error: Some(why.into()), ..Self::default() }
    }
}

impl Router {
    /// A request from session `from` on `topic`, in the router's own
    /// namespace: answered here, on the requester's inbox.
    pub(super) fn system_request(
        &mut self,
        from: u32,
        topic: &str,
        payload: &[u8],
        correlation: u64,
    ) -> Result<(), Disconnect> {
        let checked = self.login.enabled();
        let Some(s) = self.session_mut(from) else { return Ok(()) };
        let serial = s.serial;
        if checked && !s.may(topic, true) {
            let user = s.user().unwrap_or("").to_owned();
            self.totals.forbidden += 1;
            let why = format!("user {user:?} may not request {topic}");
            return self.reject(from, RejectCode::Forbidden, correlation, &why);
        }
        self.requests.counts[value::REQUESTS] += 1;
        let user = self.session(from).and_then(|s| s.user.clone());
        let follower = self.guaranteed.as_deref().and_then(|g| g.ha.as_deref()).is_some_and(|r| !r.is_leader());
        // On the requester's inbox, as any reply.
        let inbox = Inbox { agent: self.me, session: from, serial, correlation }.topic();
        if let Some(op) = topic.strip_prefix(super::ha_admin::HA_ADMIN_PREFIX) {
            self.ha_request(op, payload, inbox);
            return Ok(());
        }
        let reply = match topic.strip_prefix(QUEUE_ADMIN_PREFIX) {
            // Queues are the leader's to change (and to browse: a
            // follower's view lags).
            Some(_) if follower => AdminReply::error(format!(
                "{topic}: this router does not lead its high-availability group: ask the leader"
            )),
            Some(op) => {
                match serde_json::from_slice::<QueueRequest>(if payload.is_empty() { b"{}" } else { payload }) {
                    Ok(req) => self.queue_request(op, &req, user.as_deref()),
                    Err(e) => AdminReply::error(format!("{topic}: not a queue request: {e}")),
                }
            }
            None => {
                self.requests.counts[value::NO_RESPONDERS] += 1;
                let why = format!("{topic}: the router serves no such request");
                return self.reject(from, RejectCode::NoResponders, correlation, &why);
            }
        };
        if reply.error.is_some() {
            tracing::info!(client = from, topic, error = ?reply.error, "queue request refused");
        }
        let body = serde_json::to_vec(&reply).unwrap_or_default();
        self.deliver_reply(&inbox, &body, 0);
        Ok(())
    }

    /// `user`: the requester's, when users are configured: creating a
    /// queue, or browsing one, needs leave to read every topic it takes
    /// (as binding to one does).
    fn queue_request(&mut self, op: &str, req: &QueueRequest, user: Option<&crate::access::User>) -> AdminReply {
        // A browse's reply stays well inside a frame.
        let budget = self.limits.max_frame / 2;
        let Some(g) = self.guaranteed.as_deref_mut() else {
            return AdminReply::error("durable queues need the journal (guaranteed delivery is not enabled here)");
        };
        if op != "list" && !super::durable::valid_name(&req.name) {
            return AdminReply::error(format!("queue name {:?}: 1 to 64 of A-Z a-z 0-9 _ . -", req.name));
        }
        let may_read = |p: &Pattern| user.is_none_or(|u| u.subscribe.reach(p) == crate::access::Reach::All);
        let refused = |p: &Pattern| {
            let name = user.map_or("", |u| u.name.as_str());
            AdminReply::error(format!("user {name:?} may not read every topic {p} matches"))
        };
        let durable = g.journal.durable();
        let info = |q: &DurableQueue| q.info(durable);
        match op {
            "list" => AdminReply { queues: g.queues.values().map(info).collect(), ..AdminReply::default() },
            "create" => {
                let p = match Pattern::parse(&req.topic) {
                    Ok(p) if !request::is_inbox(&req.topic) && !is_system(&req.topic) => p,
                    Ok(_) => {
                        return AdminReply::error(format!("{}: a queue cannot take the router's topics", req.topic))
                    }
                    Err(e) => return AdminReply::error(format!("topic {:?}: {e}", req.topic)),
                };
                if g.durables.contains_key(&req.name) {
                    return AdminReply::error(format!("{} is a durable subscription", req.name));
                }
                if !may_read(&p) {
                    return refused(&p);
                }
                if let Some(q) = g.queues.get(&req.name) {
                    if *q.pattern() != p || q.options != req.options {
                        let why = format!("queue {} exists, fed by {} with {:?}", req.name, q.pattern(), q.options);
                        return AdminReply::error(why);
                    }
                } else if g.queues.len() >= QUEUES_MAX {
                    return AdminReply::error(format!("{QUEUES_MAX} queues already: delete one first"));
                } else {
                    let from = g.journal.last_appended();
                    let mut q = DurableQueue::new(req.name.clone(), p, from, from);
                    q.options = req.options;
                    g.queues.insert(req.name.clone(), q);
                    g.dirty = true;
                    g.save();
                    tracing::info!(queue = %req.name, topic = %req.topic, options = ?req.options, "durable queue created");
                }
                AdminReply { queues: g.queues.get(&req.name).map(info).into_iter().collect(), ..AdminReply::default() }
            }
            "delete" => match g.queues.get(&req.name) {
                None => AdminReply::error(format!("no queue {}", req.name)),
                Some(q) if !q.consumers.is_empty() => {
                    AdminReply::error(format!("queue {} has {} consumers bound", req.name, q.consumers.len()))
                }
                Some(q) => {
                    let gone = info(q);
                    g.queues.remove(&req.name);
                    g.held.room = true;
                    g.dirty = true;
                    g.save();
                    tracing::info!(queue = %req.name, depth = gone.depth, "durable queue deleted");
                    AdminReply { queues: vec![gone], ..AdminReply::default() }
                }
            },
            "browse" => match g.queues.get(&req.name) {
                None => AdminReply::error(format!("no queue {}", req.name)),
                Some(q) if !may_read(q.pattern()) => refused(q.pattern()),
                Some(q) => {
                    let want = if req.count == 0 { 10 } else { req.count.min(BROWSE_MAX) };
                    let (mut messages, mut bytes) = (Vec::new(), 0);
                    let mut reader = Reader::new(q.acked + 1);
                    let mut scanned = 0;
                    while messages.len() < want && scanned < BROWSE_SCAN_MAX {
                        scanned += 1;
                        match reader.next(&g.journal, durable) {
                            Ok(Read::Record(r)) => {
                                if let Some(deliveries) = q.waiting(r.sequence(), r.topic()) {
                                    let shown = &r.payload()[..r.payload().len().min(BROWSE_PAYLOAD_MAX)];
                                    // JSON escapes a byte in 6 at most.
                                    bytes += r.topic().len() + 6 * shown.len() + 64;
                                    if bytes > budget {
                                        break;
                                    }
                                    messages.push(BrowsedMessage {
                                        sequence: r.sequence(),
                                        topic: r.topic().to_owned(),
                                        payload: String::from_utf8_lossy(shown).into_owned(),
                                        size: r.payload().len(),
                                        deliveries,
                                    });
                                }
                            }
                            Ok(Read::Lost { .. }) => continue,
                            Ok(Read::End) => break,
                            Err(e) => return AdminReply::error(format!("journal unreadable: {e}")),
                        }
                    }
                    AdminReply { messages, ..AdminReply::default() }
                }
            },
            _ => AdminReply::error(format!("{op}: queue operations are create, delete, list and browse")),
        }
    }
}
