//! Sessions: attached, acting on their frames, flushed, ended. Every
//! client frame comes through [`Router::handle_frame`], which checks it
//! (size, form, HELLO first) and acts on it: HELLO (to [`login`](super::login)
//! when users are configured), SUBSCRIBE and UNSUBSCRIBE (the topic
//! table's subscriptions, the other agents' interest), PUBLISH (to
//! [`publish`](super::publish), or [`guaranteed`](super::guaranteed)), ACK
//! (durable subscriptions) and CLOSE.

use super::{control, login, mark, queue_admin, Disconnect, Router};
use crate::access::Reach;
use crate::session::{Outbound, Session};
use tickwire_topic::Pattern;
use tickwire_wire::client::{
    flags, ClientKind, ClientRepr, RejectCode, SlowConsumer, CLIENT_PROTOCOL_OLDEST, CLIENT_PROTOCOL_VERSION,
};
use tickwire_wire::ClientFrame;
use tickwire_wire::{headers, request};

impl Router {
    /// Opens a session whose frames go to `out`; `peer` says where it is.
    /// The client's first frame must be HELLO. Its
    /// [`Limits::hello_timeout`](super::Limits::hello_timeout) runs from the next
    /// [`Router::take_expired`] ([`Router::attach_at`] says when it
    /// started).
    pub fn attach(&mut self, out: Outbound, peer: String) -> u32 {
        self.attach_at(out, peer, 0)
    }

    /// [`Router::attach`] at `now` (monotonic ns): the session must be
    /// welcomed within [`Limits::hello_timeout`](super::Limits::hello_timeout) of it.
    pub fn attach_at(&mut self, out: Outbound, peer: String, now: u64) -> u32 {
        let mut s = Session::new(out, peer, self.limits.queue_bytes, None);
        s.moved_at = now;
        s.policy = self.limits.slow_consumer;
        s.serial = self.next_serial;
        self.next_serial += 1;
        self.totals.connected += 1;
        self.trim_unwelcomed();
        self.login.expect_welcome(self.next_id(), s.serial, now);
        crate::slots::put(&mut self.sessions, &mut self.free, s)
    }

    /// Ends session `id`: its subscriptions go, a CLOSE with `why` is
    /// offered to it (unless the client closed), and the session is handed
    /// back for the caller to drop (closing its transport).
    pub fn disconnect(&mut self, id: u32, why: &Disconnect) -> Option<Session> {
        self.unbind_durables(id, None);
        let mut s = self.sessions.get_mut(id as usize)?.take()?;
        self.free.push(id);
        let holding = std::mem::take(&mut s.holding);
        self.release(&holding);
        if s.in_backlog {
            self.backlog.retain(|&b| b != id);
        }
        if s.parked {
            self.parked.retain(|&b| b != id);
        }
        self.memory.released(s.queue.allocated() + s.subscriptions.len() * super::memory::SUBSCRIPTION_BYTES);
        for (sid, text) in s.subscriptions.drain() {
            let Some(p) = super::parsed(&text) else { continue };
            self.drop_subscription(&p, id, sid);
        }
        // A closing session's CLOSE is already on its way.
        if why.code != RejectCode::Normal && !s.closing {
            let close = ClientRepr {
                value: why.code as u32,
                body: why.reason.as_bytes(),
                ..ClientRepr::new(ClientKind::Close)
            };
            s.send_control(&close);
        }
        self.totals.disconnected += 1;
        if matches!(why.code, RejectCode::Protocol | RejectCode::TooLarge) {
            self.totals.violations += 1;
        }
        s.publish_counters();
        Some(s)
    }

    /// Acts on one frame from session `id`.
    ///
    /// # Errors
    /// [`Disconnect`] when the session must end: the frame is malformed,
    /// out of order or not a client's to send, or the client said CLOSE.
    /// Refusals that leave the session open (a bad topic, an unsupported
    /// flag) go back to the client as REJECT frames instead.
    pub fn handle_frame(&mut self, id: u32, bytes: &[u8]) -> Result<(), Disconnect> {
        let r = self.act(id, bytes);
        // Its replies (WELCOME, REJECT) may wait for room.
        mark(&mut self.sessions, &mut self.backlog, id);
        r
    }

    #[inline]
    fn act(&mut self, id: u32, bytes: &[u8]) -> Result<(), Disconnect> {
        let Some(Some(s)) = self.sessions.get_mut(id as usize) else {
            return Err(Disconnect::protocol(format!("no session {id}")));
        };
        if s.ticket.is_some() {
            return login::keep_unchecked(s, bytes, self.limits.max_subscriptions);
        }
        s.stats.messages_in += 1;
        s.stats.bytes_in += bytes.len() as u64;
        if bytes.len() > self.limits.max_frame {
            return Err(Disconnect {
                code: RejectCode::TooLarge,
                reason: format!("frame of {} bytes, the limit is {}", bytes.len(), self.limits.max_frame),
            });
        }
        let f = ClientFrame::new_checked(bytes).map_err(|e| Disconnect::protocol(e.to_string()))?;
        if !s.hello && f.kind() != ClientKind::Hello {
            return Err(Disconnect::protocol(format!("first frame must be HELLO, got {:?}", f.kind())));
        }
        match f.kind() {
            ClientKind::Publish => {
                // Requests carry their correlation id, guaranteed publishes
                // their own numbers (acknowledged apart).
                if f.flags() & (flags::REQUEST | flags::GUARANTEED) == 0 {
                    s.published_to = s.published_to.max(f.sequence().saturating_add(1));
                }
                let topic = f.topic();
                let headed = f.flags() & flags::HEADERS;
                if headed != 0 {
                    // The client library never sends one: a protocol
                    // violation (counted as one).
                    if let Err(e) = headers::split(f.body()) {
                        return Err(Disconnect::protocol(format!("PUBLISH on {topic}: {e}")));
                    }
                }
                // One byte compared on the hot path: `_` starts no other
                // usual topic.
                if topic.as_bytes().first() == Some(&b'_') && request::is_inbox(topic) {
                    if f.flags() & (flags::GUARANTEED | flags::REQUEST) != 0 {
                        let why = format!("{topic}: a reply on an inbox is a plain PUBLISH");
                        return self.reject(id, RejectCode::Unsupported, f.sequence(), &why);
                    }
                    return self.reply(id, topic, f.body(), (f.sequence(), headed));
                }
                if topic.as_bytes().first() == Some(&b'_') && queue_admin::is_system(topic) {
                    if f.flags() & (flags::GUARANTEED | flags::REQUEST | flags::HEADERS) != flags::REQUEST {
                        let why = format!("{topic}: the router's own topics take plain requests only, without headers");
                        return self.reject(id, RejectCode::Unsupported, f.sequence(), &why);
                    }
                    return self.system_request(id, topic, f.body(), f.sequence());
                }
                match f.flags() & (flags::GUARANTEED | flags::REQUEST) {
                    0 => self.route_flagged(id, topic, f.body(), f.sequence(), headed).map(|_| ()),
                    flags::GUARANTEED if headed != 0 => {
                        let why = format!("{topic}: a guaranteed publish cannot carry headers (not supported)");
                        self.reject(id, RejectCode::Unsupported, f.sequence(), &why)
                    }
                    flags::GUARANTEED => self.publish_guaranteed(id, topic, f.body(), f.sequence()),
                    flags::REQUEST => self.request(id, topic, f.body(), (f.sequence(), headed)),
                    _ => self.reject(id, RejectCode::Unsupported, f.sequence(), "a request cannot be guaranteed"),
                }
            }
            ClientKind::Hello => {
                if s.hello {
                    return Err(Disconnect::protocol("a second HELLO"));
                }
                if !(CLIENT_PROTOCOL_OLDEST..=CLIENT_PROTOCOL_VERSION).contains(&f.value()) {
                    return Err(Disconnect {
                        code: RejectCode::Unsupported,
                        reason: format!(
                            "client protocol {} (this router speaks {CLIENT_PROTOCOL_OLDEST} to \
                             {CLIENT_PROTOCOL_VERSION})",
                            f.value()
                        ),
                    });
                }
                if f.topic().chars().any(char::is_control) {
                    return Err(Disconnect::protocol("client name holds control characters"));
                }
                s.hello = true;
                s.name = f.topic().to_owned();
                s.asked = SlowConsumer::from_hello_flags(f.flags());
                s.no_echo = f.flags() & flags::NO_ECHO != 0;
                s.protocol = f.value();
                s.publisher = f.sequence();
                s.choose_policy(self.limits.slow_consumer);
                if let Some(user) = s.certified.clone() {
                    return self.login_certified(id, user, f.body());
                }
                if self.login.enabled() {
                    return self.ask_password(id, f.body());
                }
                self.welcome(id)
            }
            ClientKind::Subscribe => {
                let sid = f.value();
                if f.flags() == flags::DURABLE {
                    return self.subscribe_durable(id, sid, f.topic(), f.body());
                }
                if f.flags() == flags::DURABLE | flags::QUEUE {
                    return self.subscribe_durable_queue(id, sid, f.topic(), f.body());
                }
                if f.flags() & !flags::CACHED != 0 && f.flags() != flags::QUEUE {
                    return self.reject(
                        id,
                        RejectCode::Unsupported,
                        sid.into(),
                        "SUBSCRIBE takes the CACHED flag, or DURABLE, QUEUE, or both (a durable queue)",
                    );
                }
                let group = match (f.flags() == flags::QUEUE).then(|| queue_group(f.body())) {
                    None => None,
                    Some(Ok(_)) if self.agents > 1 => {
                        let why = "queue groups need a router with one routing agent (agents = 1)";
                        return self.reject(id, RejectCode::Unsupported, sid.into(), why);
                    }
                    Some(Ok(g)) => Some(g),
                    Some(Err(why)) => return self.reject(id, RejectCode::BadTopic, sid.into(), &why),
                };
                let cached = f.flags() & flags::CACHED != 0;
                if cached && self.cache.is_none() {
                    return self.reject(id, RejectCode::Unsupported, sid.into(), "no last-value cache is configured");
                }
                let pattern = match Pattern::parse(f.topic()) {
                    Ok(p) => p,
                    Err(e) => return self.reject(id, RejectCode::BadTopic, sid.into(), &e.to_string()),
                };
                if request::is_inbox(f.topic()) {
                    // Replies reach their requester alone: no pattern
                    // matches an inbox, and none may name one.
                    let why = format!("{}: inboxes are the router's; a client's replies come to it unasked", f.topic());
                    self.totals.forbidden += 1;
                    return self.reject(id, RejectCode::Forbidden, sid.into(), &why);
                }
                match s.user.as_ref().map(|u| u.subscribe.reach(&pattern)) {
                    Some(Reach::None) => {
                        let why = format!("user {:?} may read no topic {} matches", s.user().unwrap_or(""), f.topic());
                        self.totals.forbidden += 1;
                        return self.reject(id, RejectCode::Forbidden, sid.into(), &why);
                    }
                    Some(Reach::Some) => {
                        s.filtered = true;
                        self.login.note_filtered();
                    }
                    _ => {}
                }
                if s.subscriptions.len() >= self.limits.max_subscriptions && !s.subscriptions.contains_key(&sid) {
                    let why = format!("{} subscriptions is the limit", self.limits.max_subscriptions);
                    return self.reject(id, RejectCode::Limit, sid.into(), &why);
                }
                let old = s.subscriptions.insert(sid, pattern.as_str().into()).and_then(|t| super::parsed(&t));
                // Held before the old one is let go: a subscription made
                // again on its pattern leaves no gap in what is told.
                if let Some(peers) = &mut self.peers {
                    match group {
                        Some(g) => peers.hold_group(&pattern, g),
                        None => peers.hold(&pattern),
                    }
                }
                if let Some(old) = old {
                    self.drop_subscription(&old, id, sid);
                }
                let Some(Some(s)) = self.sessions.get_mut(id as usize) else { return Ok(()) };
                match group {
                    Some(g) => self.topics.subscribe_queue(&pattern, id, sid, g),
                    None => self.topics.subscribe(&pattern, id, sid),
                }
                if let (true, Some(cache)) = (cached, &self.cache) {
                    // Before anything else reaches it: no gap, no duplicate.
                    let mut n = 0;
                    cache.each_match(&pattern, |topic, payload, headed| {
                        if !s.filtered || s.may(topic, false) {
                            s.deliver(topic, payload, flags::CACHED | headed, 0, (false, false));
                            n += 1;
                        }
                    });
                    self.totals.cache_deliveries += n;
                }
                Ok(())
            }
            ClientKind::Unsubscribe => {
                self.unbind_durables(id, Some(f.value()));
                let Some(Some(s)) = self.sessions.get_mut(id as usize) else { return Ok(()) };
                if let Some(p) = s.subscriptions.remove(&f.value()).and_then(|t| super::parsed(&t)) {
                    self.drop_subscription(&p, id, f.value());
                }
                Ok(())
            }
            ClientKind::Ack => {
                self.handle_ack(id, f.value(), f.sequence());
                Ok(())
            }
            // Its link's liveness is the agent's: the bytes came.
            ClientKind::Heartbeat => Ok(()),
            ClientKind::Close => Err(Disconnect {
                code: RejectCode::Normal,
                reason: format!("client closed: {}", String::from_utf8_lossy(f.body())),
            }),
            k @ (ClientKind::Welcome | ClientKind::Deliver | ClientKind::Reject | ClientKind::Loss) => {
                Err(Disconnect::protocol(format!("{k:?} is the router's to send, not a client's")))
            }
        }
    }

    pub(super) fn reject(&mut self, id: u32, code: RejectCode, sequence: u64, reason: &str) -> Result<(), Disconnect> {
        let Some(s) = self.session_mut(id) else { return Ok(()) };
        s.stats.rejects += 1;
        let r =
            ClientRepr { value: code as u32, sequence, body: reason.as_bytes(), ..ClientRepr::new(ClientKind::Reject) };
        control(s, &r)
    }

    /// Has [`Router::flush`] visit session `id` (its transport holds bytes
    /// the router did not queue, such as TLS handshake records).
    pub(crate) fn mark_pending(&mut self, id: u32) {
        mark(&mut self.sessions, &mut self.backlog, id);
    }

    /// Sessions whose sockets the last flushes found full, moved into
    /// `out`: the agent watches each for writability and then calls
    /// [`Router::unpark`].
    pub fn poll_parked(&mut self, out: &mut Vec<u32>) {
        out.append(&mut self.parked);
    }

    /// Session `id`'s socket is writable again: back in the backlog, to
    /// be flushed by the next [`Router::flush`]. A session not parked
    /// (ended, or its id reused since) is left alone.
    pub fn unpark(&mut self, id: u32) {
        if let Some(Some(s)) = self.sessions.get_mut(id as usize) {
            if s.parked {
                s.parked = false;
                self.parked.retain(|&b| b != id);
                self.backlog.push(id);
            }
        }
    }

    /// Moves queued frames to every session's transport at `now`
    /// (monotonic ns: when each session's output last moved is kept);
    /// returns the frames moved, and puts in `failed` the sessions whose
    /// transport broke.
    pub fn flush(&mut self, now: u64, failed: &mut Vec<(u32, String)>) -> usize {
        self.memory.now = now;
        if self.backlog.is_empty() {
            return 0;
        }
        let mut n = 0;
        let mut for_router: Vec<(u32, Vec<Vec<u8>>)> = Vec::new();
        std::mem::swap(&mut self.backlog, &mut self.flushing);
        for &id in &self.flushing {
            let Some(Some(s)) = self.sessions.get_mut(id as usize) else { continue };
            let moved = s.flush();
            // A NATS client's frames its translation made (an UNSUB whose
            // count ran out): acted on at once, below.
            if let Outbound::Nats(out) = &mut s.out {
                if !out.to_router.is_empty() {
                    for_router.push((id, std::mem::take(&mut out.to_router)));
                }
            }
            if moved > 0 {
                s.moved_at = now;
            }
            n += moved;
            if let Some(why) = s.transport_failure() {
                failed.push((id, why.to_owned()));
            }
            if !s.holding.is_empty() && s.queue.is_below_half() {
                self.releasing.append(&mut s.holding);
                s.holding_since = 0;
            }
            s.in_backlog = s.needs_flush();
            if s.in_backlog && s.write_blocked() {
                // Its socket is full: trying again each duty cycle would
                // cost a failed write each (40 stalled clients: 40 a
                // cycle). It waits for the agent to see it writable.
                s.parked = true;
                self.parked.push(id);
            } else if s.in_backlog {
                self.backlog.push(id);
            }
        }
        self.flushing.clear();
        for (id, frames) in for_router {
            for f in frames {
                if let Err(d) = self.handle_frame(id, &f) {
                    failed.push((id, d.reason));
                    break;
                }
            }
        }
        if !self.releasing.is_empty() {
            let list = std::mem::take(&mut self.releasing);
            self.release(&list);
            self.releasing = list;
            self.releasing.clear();
        }
        n
    }
}

impl Router {
    /// Removes subscription `sid` (on `p`) of session `id` from the index
    /// and from what the other agents are told (a queue group's member
    /// from its group's count).
    pub(super) fn drop_subscription(&mut self, p: &Pattern, id: u32, sid: u32) {
        let group: Option<Box<str>> = self.topics.queue_group_of(id, sid).map(Into::into);
        self.topics.unsubscribe(p, id, sid);
        if let Some(peers) = &mut self.peers {
            match group {
                Some(g) => peers.release_group(p, &g),
                None => peers.release(p),
            }
        }
    }
}

/// The name of a queue group, from a SUBSCRIBE's body: 1 to 64 bytes of
/// UTF-8, no whitespace or control characters.
pub(crate) fn queue_group(body: &[u8]) -> Result<&str, String> {
    let name = std::str::from_utf8(body).map_err(|_| "a queue group's name is not UTF-8".to_owned())?;
    if name.is_empty() || name.len() > 64 || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("queue group {name:?}: 1 to 64 bytes, no whitespace or control characters"));
    }
    Ok(name)
}
