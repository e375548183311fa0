//! One NATS client's session in front of a tickwire router, sans I/O: what
//! the client sends becomes the router's client frames, and what the
//! router sends that client becomes NATS operations. The router core is
//! the one native clients use; only this translation is NATS's.
//!
//! ```text
//!  NATS bytes ─► parse ─► NatsSession::handle_op ─► client frames ─► Router::handle_frame
//!  NATS bytes ◄─ encode ◄─ NatsSession::handle_frame ◄─ frames the router sends the session
//! ```
//!
//! * `CONNECT` is HELLO (its `user` and `pass` the credentials); `PUB` is
//!   PUBLISH; a `PUB` with a reply subject is a request (flagged
//!   `REQUEST`, its correlation id remembered with the reply subject);
//!   `SUB` is SUBSCRIBE (with a queue group, flagged `QUEUE`); `UNSUB` is
//!   UNSUBSCRIBE, at once or after `max` messages.
//! * A DELIVER becomes one `MSG` per plain subscription of the client
//!   whose subject matches (as a NATS server sends one per subscription),
//!   or, flagged `QUEUE`, one to the queue-group subscription it names; a
//!   request's carries the requester's inbox as its reply subject; a reply
//!   on this session's inbox goes out on the reply subject the request
//!   named. REJECT `NoResponders` is the 503 status message NATS clients
//!   wait for; other refusals are `-ERR`, and CLOSE is `-ERR` and the end.
//! * `HPUB` is a PUBLISH flagged `HEADERS`, its header block carried
//!   before the payload ([`tickwire_wire::headers`]); a DELIVER flagged
//!   so is `HMSG` (`MSG` without the headers to a client that did not say
//!   `headers: true`, as a NATS server does). A malformed block is `-ERR`,
//!   the connection kept.
//! * `auth_token` without `user` logs in as the router's token user
//!   ([`NatsSession::with_token_user`], the router's `nats_token_user`),
//!   the token that user's password: the router's users, password checks
//!   and ACLs apply unchanged.
//! * JetStream (`$JS.…`) and the system account (`$SYS.…`) are refused by
//!   name.

use crate::encode;
use crate::parse::{ClientOp, Connect};
use crate::subject::{to_subject, to_topic};
use std::collections::{HashMap, VecDeque};
use tickwire_topic::Pattern;
use tickwire_wire::client::{
    credentials, flags, split_queue_body, ClientKind, ClientRepr, RejectCode, CLIENT_PROTOCOL_VERSION,
};
use tickwire_wire::ClientFrame;
use tickwire_wire::{headers, request};

/// Reply subjects remembered at most, and their bytes (the oldest
/// forgotten first): a requester's replies that come after are dropped,
/// as replies to a request long gone.
pub const REPLIES_MAX: usize = 65_536;
/// See [`REPLIES_MAX`].
pub const REPLIES_BYTES_MAX: usize = 4 << 20;

/// What the client may be answered before its login is checked (`PONG`s
/// and `+OK`s held until WELCOME), bytes.
pub const EARLY_MAX: usize = 64 << 10;

/// Request correlation ids start here, above every subscription id: a
/// REJECT's sequence says which of the two it refuses.
const FIRST_CORRELATION: u64 = 1 << 32;

/// Subscriptions a connection may hold here at most (the router's own
/// `max_subscriptions` applies as well).
pub const SUBSCRIPTIONS_MAX: usize = 65_536;

/// A subscription of the client's.
#[derive(Debug)]
struct Sub {
    /// The client's id for it.
    sid: String,
    /// Its subject as a topic pattern.
    pattern: Pattern,
    /// Messages it received.
    delivered: u64,
    /// Messages it may receive in all (`UNSUB sid max`).
    max: Option<u64>,
    /// Its queue group, if it joined one.
    queue: Option<String>,
}

/// What the caller does after [`NatsSession::handle_frame`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum After {
    /// Nothing more.
    Nothing,
    /// Hand these client frames to the router (an `UNSUB` whose count
    /// ran out).
    Frames(Vec<Vec<u8>>),
    /// The router ended the session: close the connection once the bytes
    /// written are sent.
    Close,
}

/// One NATS client's session.
#[derive(Debug, Default)]
pub struct NatsSession {
    connect: Option<Connect>,
    /// The router welcomed it (its login checked).
    welcomed: bool,
    /// What the client is answered directly (`PONG`, `+OK`) while its
    /// login is checked: sent on WELCOME, so that a client whose `PING`
    /// after `CONNECT` gets its `PONG` is a client logged in (a NATS
    /// server answers `-ERR` instead of `PONG` to a wrong password).
    early: Vec<u8>,
    /// By the router's subscription id.
    subs: HashMap<u32, Sub>,
    /// The client's sid to the router's id.
    sids: HashMap<String, u32>,
    next_id: u32,
    /// Reply subjects by request correlation id, and their order.
    replies: HashMap<u64, String>,
    reply_order: VecDeque<u64>,
    reply_bytes: usize,
    next_correlation: u64,
    topic: String,
    subject: String,
    matched: Vec<u32>,
    /// A headed payload being built (kept: no allocation per `HPUB`).
    headed: Vec<u8>,
    /// The user an `auth_token` logs in as.
    token_user: Option<String>,
    /// Messages the router dropped for this client before they reached it.
    pub discarded: u64,
}

/// A router client frame, encoded.
fn frame(r: &ClientRepr<'_>) -> Vec<u8> {
    let mut b = vec![0u8; r.buffer_len()];
    let _ = r.emit(&mut b);
    b
}

impl NatsSession {
    /// A session before its `CONNECT`.
    pub fn new() -> Self {
        Self { next_id: 1, next_correlation: FIRST_CORRELATION, ..Self::default() }
    }

    /// A session whose `auth_token` (given without `user`) logs in as
    /// `user`, the token its password; `None`: a token alone logs in as
    /// nobody (refused where users are required).
    #[must_use]
    pub fn with_token_user(mut self, user: Option<String>) -> Self {
        self.token_user = user;
        self
    }

    /// Whether its `CONNECT` came.
    pub fn is_connected(&self) -> bool {
        self.connect.is_some()
    }

    /// Subscriptions held.
    pub fn subscriptions(&self) -> usize {
        self.subs.len()
    }

    /// One operation from the client: the router's client frames it makes
    /// go into `frames`, and what the client is answered directly (`PONG`,
    /// `+OK`, `-ERR`) into `out`.
    ///
    /// # Errors
    /// Why the connection ends (its `-ERR` already in `out`).
    pub fn handle_op(&mut self, op: ClientOp<'_>, frames: &mut Vec<Vec<u8>>, out: &mut Vec<u8>) -> Result<(), String> {
        if self.connect.is_some() && !self.welcomed {
            let mut early = std::mem::take(&mut self.early);
            let mut r = self.op(op, frames, &mut early);
            self.early = early;
            if r.is_ok() && self.early.len() > EARLY_MAX {
                self.early.clear();
                r = fatal(&mut self.early, "Slow Consumer: answers waiting for the login past their bound");
            }
            if r.is_err() {
                out.append(&mut self.early);
            }
            return r;
        }
        self.op(op, frames, out)
    }

    fn op(&mut self, op: ClientOp<'_>, frames: &mut Vec<Vec<u8>>, out: &mut Vec<u8>) -> Result<(), String> {
        let verbose = self.connect.as_ref().is_some_and(|c| c.verbose);
        match op {
            ClientOp::Connect(json) => {
                if self.connect.is_some() {
                    return fatal(out, "a second CONNECT");
                }
                let c = match Connect::parse(json) {
                    Ok(c) => c,
                    Err(e) => return fatal(out, &e.to_string()),
                };
                let body = match (&c.user, &c.pass, &c.auth_token, &self.token_user) {
                    (Some(u), p, _, _) => credentials::password(u, p.as_deref().unwrap_or("").as_bytes()),
                    (None, _, Some(token), Some(u)) => credentials::password(u, token.as_bytes()),
                    _ => Vec::new(),
                };
                let name = c.name.clone().unwrap_or_else(|| "nats".into());
                let name: String = name.chars().filter(|ch| !ch.is_control()).take(200).collect();
                frames.push(frame(&ClientRepr {
                    value: CLIENT_PROTOCOL_VERSION,
                    flags: if c.echo { 0 } else { flags::NO_ECHO },
                    topic: &name,
                    body: &body,
                    ..ClientRepr::new(ClientKind::Hello)
                }));
                if c.verbose {
                    // Sent with the router's WELCOME, before what came after.
                    encode::ok(&mut self.early);
                }
                self.connect = Some(c);
                return Ok(());
            }
            ClientOp::Ping => {
                encode::pong(out);
                return Ok(());
            }
            ClientOp::Pong => return Ok(()),
            _ if self.connect.is_none() => return fatal(out, "Authorization Violation: CONNECT first"),
            ClientOp::Pub { subject, reply, headers: block, payload } => {
                let mut body = payload;
                if let Some(block) = block {
                    match headers::Headers::new_checked(block) {
                        Ok(h) => {
                            self.headed.clear();
                            headers::put_block(&mut self.headed, &h, payload);
                            body = &self.headed;
                        }
                        Err(e) => {
                            encode::err(out, &format!("Bad Headers: {e}"));
                            return Ok(());
                        }
                    }
                }
                if let Some(why) = unsupported(subject) {
                    encode::err(out, why);
                    return Ok(());
                }
                if let Err(e) = to_topic(subject, &mut self.topic) {
                    encode::err(out, &e.to_string());
                    return Ok(());
                }
                let mut repr = ClientRepr { topic: &self.topic, body, ..ClientRepr::new(ClientKind::Publish) };
                if block.is_some() {
                    repr.flags = flags::HEADERS;
                }
                if let Some(reply) = reply {
                    let k = self.next_correlation;
                    self.next_correlation += 1;
                    while self.reply_order.len() >= REPLIES_MAX || self.reply_bytes + reply.len() > REPLIES_BYTES_MAX {
                        let Some(old) = self.reply_order.pop_front() else { break };
                        if let Some(r) = self.replies.remove(&old) {
                            self.reply_bytes -= r.len();
                        }
                    }
                    self.replies.insert(k, reply.to_owned());
                    self.reply_bytes += reply.len();
                    self.reply_order.push_back(k);
                    repr.flags |= flags::REQUEST;
                    repr.sequence = k;
                }
                frames.push(frame(&repr));
            }
            ClientOp::Sub { subject, queue, sid } => {
                if let Some(why) = unsupported(subject) {
                    encode::err(out, why);
                    return Ok(());
                }
                if self.sids.contains_key(sid) {
                    encode::err(out, &format!("Invalid Subscription: sid {sid} is in use"));
                    return Ok(());
                }
                if self.subs.len() >= SUBSCRIPTIONS_MAX {
                    encode::err(out, "Maximum Subscriptions Exceeded");
                    return Ok(());
                }
                let pattern = match to_topic(subject, &mut self.topic).map(|()| Pattern::parse(&self.topic)) {
                    Ok(Ok(p)) => p,
                    Ok(Err(e)) => {
                        encode::err(out, &format!("Invalid Subject: {e}"));
                        return Ok(());
                    }
                    Err(e) => {
                        encode::err(out, &e.to_string());
                        return Ok(());
                    }
                };
                let id = self.next_id;
                self.next_id = self.next_id.wrapping_add(1).max(1);
                let mut repr = ClientRepr { value: id, topic: &self.topic, ..ClientRepr::new(ClientKind::Subscribe) };
                if let Some(q) = queue {
                    repr.flags = flags::QUEUE;
                    repr.body = q.as_bytes();
                }
                frames.push(frame(&repr));
                self.sids.insert(sid.to_owned(), id);
                let queue = queue.map(str::to_owned);
                self.subs.insert(id, Sub { sid: sid.to_owned(), pattern, delivered: 0, max: None, queue });
            }
            ClientOp::Unsub { sid, max } => {
                let Some(&id) = self.sids.get(sid) else {
                    // As a NATS server: an unknown sid is no error.
                    return ok(out, verbose);
                };
                // The count is of the messages since SUB (NATS's rule): one
                // that has had them all ends now.
                match (max, self.subs.get_mut(&id)) {
                    (Some(m), Some(s)) if m > s.delivered => s.max = Some(m),
                    _ => frames.push(self.unsubscribe(id)),
                }
            }
        }
        ok(out, verbose)
    }

    /// Forgets subscription `id`; the UNSUBSCRIBE to hand the router.
    fn unsubscribe(&mut self, id: u32) -> Vec<u8> {
        if let Some(s) = self.subs.remove(&id) {
            self.sids.remove(&s.sid);
        }
        frame(&ClientRepr { value: id, ..ClientRepr::new(ClientKind::Unsubscribe) })
    }

    /// One frame the router sent this session, as NATS operations into
    /// `out`.
    pub fn handle_frame(&mut self, f: &ClientFrame<'_>, out: &mut Vec<u8>) -> After {
        match f.kind() {
            ClientKind::Deliver => self.deliver(f, out),
            ClientKind::Welcome => {
                self.welcomed = true;
                out.append(&mut self.early);
                After::Nothing
            }
            ClientKind::Heartbeat => {
                encode::ping(out);
                After::Nothing
            }
            ClientKind::Reject => {
                let code = RejectCode::from_u32(f.value());
                let reason = String::from_utf8_lossy(f.body());
                // A refused SUBSCRIBE (its sequence a subscription id) is
                // forgotten here too, as the router forgot it.
                if f.sequence() < FIRST_CORRELATION {
                    if let Ok(id) = u32::try_from(f.sequence()) {
                        if let Some(s) = self.subs.remove(&id) {
                            self.sids.remove(&s.sid);
                        }
                    }
                }
                match code {
                    RejectCode::NoResponders => self.no_responders(f.sequence(), out),
                    RejectCode::Forbidden => encode::err(out, &format!("Permissions Violation: {reason}")),
                    _ => encode::err(out, &reason),
                }
                After::Nothing
            }
            ClientKind::Close => {
                let code = RejectCode::from_u32(f.value());
                let reason = String::from_utf8_lossy(f.body());
                self.early.clear();
                if code == RejectCode::Forbidden && !self.welcomed {
                    encode::err(out, &format!("Authorization Violation: {reason}"));
                } else if code != RejectCode::Normal {
                    encode::err(out, &reason);
                }
                After::Close
            }
            // ACK (guaranteed publishes: NATS has none), LOSS and the rest.
            _ => After::Nothing,
        }
    }

    fn deliver(&mut self, f: &ClientFrame<'_>, out: &mut Vec<u8>) -> After {
        if f.flags() & flags::GUARANTEED == 0 {
            // A direct delivery's value: messages dropped before it.
            self.discarded += u64::from(f.value());
        }
        let topic = f.topic();
        // To one of its queue-group subscriptions, or to its plain ones.
        let Some((target, body)) = split_queue_body(f.flags(), f.body()) else { return After::Nothing };
        let (reply, payload) = if f.flags() & flags::REQUEST != 0 {
            match request::split_body(body) {
                Some((inbox, p)) => (Some(inbox), p),
                None => return After::Nothing,
            }
        } else {
            (None, body)
        };
        // The router checked the block: a bad one is not from this router.
        let Ok((block, payload)) = headers::split_flagged(f.flags(), payload) else { return After::Nothing };
        let block = block.map(|h| h.block());
        // A reply on this session's inbox: out on the subject its request named.
        if let Some(k) = request::correlation_of(topic) {
            let Some(subject) = self.replies.get(&k).cloned() else { return After::Nothing };
            let mut reply_topic = String::new();
            if to_topic(&subject, &mut reply_topic).is_err() {
                return After::Nothing;
            }
            return self.send((&reply_topic, None), (&subject, None), (block, payload), out);
        }
        to_subject(topic, &mut self.subject);
        let subject = std::mem::take(&mut self.subject);
        let mut reply_subject = String::new();
        if let Some(inbox) = reply {
            to_subject(inbox, &mut reply_subject);
        }
        let after =
            self.send((topic, target), (&subject, reply.map(|_| reply_subject.as_str())), (block, payload), out);
        self.subject = subject;
        after
    }

    /// `MSG` on `subject` (whose topic is `topic`): to subscription
    /// `target` (the router chose it as its queue group's member), or
    /// without one to every plain subscription whose pattern matches the
    /// topic; an `UNSUB` whose count ran out goes back to the router. With
    /// a header block, `HMSG` to a client that takes headers, else `MSG`
    /// of the payload alone.
    fn send(
        &mut self,
        (topic, target): (&str, Option<u32>),
        (subject, reply): (&str, Option<&str>),
        (block, payload): (Option<&[u8]>, &[u8]),
        out: &mut Vec<u8>,
    ) -> After {
        let block = block.filter(|_| self.connect.as_ref().is_some_and(|c| c.headers));
        self.matched.clear();
        match target {
            Some(id) => self.matched.extend(self.subs.get(&id).map(|_| id)),
            None => self.matched.extend(
                self.subs.iter().filter(|(_, s)| s.queue.is_none() && s.pattern.matches(topic)).map(|(&id, _)| id),
            ),
        }
        self.matched.sort_unstable();
        let mut done = Vec::new();
        for i in 0..self.matched.len() {
            let id = self.matched[i];
            let Some(s) = self.subs.get_mut(&id) else { continue };
            match block {
                Some(h) => encode::hmsg(out, subject, &s.sid, reply, h, payload),
                None => encode::msg(out, subject, &s.sid, reply, payload),
            }
            s.delivered += 1;
            if s.max.is_some_and(|m| s.delivered >= m) {
                done.push(id);
            }
        }
        if done.is_empty() {
            return After::Nothing;
        }
        After::Frames(done.into_iter().map(|id| self.unsubscribe(id)).collect())
    }

    /// REJECT `NoResponders` of request `k`: the 503 status message on its
    /// reply subject, if the client asked for them (as a NATS server).
    fn no_responders(&mut self, k: u64, out: &mut Vec<u8>) {
        let Some(subject) = self.replies.remove(&k) else { return };
        self.reply_bytes -= subject.len();
        let wants = self.connect.as_ref().is_some_and(|c| c.headers && c.no_responders);
        if !wants || to_topic(&subject, &mut self.topic).is_err() {
            return;
        }
        let topic = &self.topic;
        for s in self.subs.values().filter(|s| s.pattern.matches(topic)) {
            encode::hmsg(out, &subject, &s.sid, None, encode::NO_RESPONDERS, b"");
        }
    }
}

fn ok(out: &mut Vec<u8>, verbose: bool) -> Result<(), String> {
    if verbose {
        encode::ok(out);
    }
    Ok(())
}

fn fatal(out: &mut Vec<u8>, why: &str) -> Result<(), String> {
    encode::err(out, why);
    Err(why.to_owned())
}

/// Why a subject names a NATS server feature tickwire does not have.
fn unsupported(subject: &str) -> Option<&'static str> {
    if subject.starts_with("$JS.") || subject.starts_with("$KV.") || subject.starts_with("$O.") {
        Some("JetStream is not supported by tickwire (use its durable queues and subscriptions)")
    } else if subject.starts_with("$SYS.") {
        Some("the NATS system account ($SYS) is not supported by tickwire")
    } else {
        None
    }
}
