//! The client's session with its router: connecting and reconnecting
//! (with back-off after refusals), HELLO and the subscriptions sent again,
//! and the frames the router sends, read by [`Client::poll`] into
//! [`ClientEvent`]s.

use super::{Client, ClientEvent, Delivery, Request, RouterUri, State};
use crate::conn::{Conn, SendError};
use std::time::{Duration, Instant};
use tickwire_wire::client::{
    credentials, flags, split_guaranteed_value, split_queue_body, welcome, ClientKind, ClientRepr, RejectCode,
    SlowConsumer, CLIENT_PROTOCOL_VERSION,
};
use tickwire_wire::headers::split_flagged;
use tickwire_wire::{request, ClientFrame};

impl Client {
    /// The wait before connecting again: the reconnect interval, doubled
    /// for each refusal in a row (a session that ended before WELCOME, a
    /// router's limit), to at most 32 times the interval and at most 5 s
    /// (100 ms: 200, 400, ... 3.2 s). A router that is away is tried at
    /// the plain interval.
    fn retry_delay(&self) -> Duration {
        let base = self.opts.reconnect_interval;
        let most = base.max(Duration::from_secs(5)).min(base.saturating_mul(32));
        base.saturating_mul(1 << self.refusals.min(5)).min(most)
    }

    pub(crate) fn lose(&mut self, why: String) {
        let was = self.state;
        // Over TCP, what went after the router's last receipt may never
        // have been read (over shared memory, what the router had not read
        // of the log is not known).
        let tcp = matches!(self.conn, Some(Conn::Tcp(_)));
        if tcp && was == State::Connected && self.next_sequence > self.receipt {
            self.unconfirmed = Some((self.receipt, self.next_sequence - 1));
        }
        self.next_in_group();
        if let Some(gone) = self.forget.take() {
            self.group.retain(|u| *u != gone);
            self.learned.retain(|u| *u != gone);
        }
        self.outbox.restart();
        // Their inbox went with the session.
        self.requests.connection_lost();
        self.conn = None;
        self.state = State::Waiting;
        if was == State::Greeting {
            self.refusals = self.refusals.saturating_add(1);
        }
        self.next_attempt = Instant::now() + self.retry_delay();
        if matches!(was, State::Greeting | State::Connected) {
            self.pending = Some(why.clone());
        }
        self.last_error = why;
    }

    /// The router's end refused this client for good (TLS, a login): a
    /// router it was given stops it; one only told of (by a cluster's
    /// router) is forgotten and the next tried.
    fn refuse(&mut self, why: String) {
        if self.learned.contains(&self.uri) {
            self.forget = Some(self.uri.clone());
        } else {
            self.refused = Some(why);
        }
    }

    /// Of a group: the next router, tried after the one just lost (the
    /// leader may be any of them; a follower closes a guaranteed
    /// publisher's session with `NotLeader`).
    fn next_in_group(&mut self) {
        if let Some(at) = self.group.iter().position(|u| *u == self.uri) {
            self.uri = self.group[(at + 1) % self.group.len()].clone();
        }
    }

    /// Moves the connection along (connect, HELLO, subscriptions).
    pub(super) fn advance(&mut self) {
        if self.state == State::Waiting && self.refused.is_none() && Instant::now() >= self.next_attempt {
            self.next_attempt = Instant::now() + self.opts.reconnect_interval;
            let made = match (&self.uri, &self.ctx) {
                (RouterUri::Ipc, Some(ctx)) => {
                    Conn::open_ipc(ctx, &self.opts.dir, self.opts.log_bytes, &self.hello_frame())
                }
                (RouterUri::Tcp(a), _) => {
                    Conn::open_tcp(*a, None, self.opts.max_frame, (self.opts.tcp_write_limit, self.opts.batching))
                }
                (RouterUri::Tls { addr, host }, _) => match &self.tls {
                    Some(cfg) => Conn::open_tcp(
                        *addr,
                        Some((cfg, host)),
                        self.opts.max_frame,
                        (self.opts.tcp_write_limit, self.opts.batching),
                    ),
                    None => Err("no TLS configuration".into()),
                },
                (RouterUri::Ipc, None) => Err("no directory".into()),
            };
            match made {
                Ok(c) => {
                    self.conn = Some(c);
                    self.state = State::Opening;
                    // Shared memory: the router answers the login and
                    // attaches within this too, or the attempt is over.
                    self.greeted_at = Instant::now();
                }
                Err(e) => {
                    self.last_error = e;
                    self.next_in_group();
                }
            }
        }
        if matches!(self.state, State::Opening | State::Greeting)
            && self.greeted_at.elapsed() > self.opts.welcome_timeout
        {
            let why = format!("no WELCOME from the router within {:?} of HELLO", self.opts.welcome_timeout);
            self.lose(why);
            return;
        }
        if self.state == State::Opening {
            if let Some(why) = self.conn.as_mut().and_then(|c| c.refusal(self.ctx.as_ref())) {
                self.lose(why);
                return;
            }
        }
        if self.state == State::Opening && self.conn.as_mut().is_some_and(Conn::is_ready) {
            self.state = State::Greeting;
            self.greeted_at = Instant::now();
            // Nothing is published before WELCOME: all before is settled.
            self.receipt = self.next_sequence;
            // Over shared memory HELLO went on the login socket.
            if !matches!(self.uri, RouterUri::Ipc) {
                let hello = self.hello_frame();
                if let Ok(f) = ClientFrame::new_checked(&hello[..]) {
                    self.send_control(&ClientRepr::parse(&f));
                }
            }
            for id in self.subscriptions.keys().copied().collect::<Vec<_>>() {
                self.send_subscribe(id);
            }
        }
    }

    /// This client's HELLO: its name, publisher id, credentials and
    /// slow-consumer policy.
    fn hello_frame(&self) -> Vec<u8> {
        let credentials = match &self.opts.user {
            Some(u) => credentials::password(u, self.opts.password.as_deref().unwrap_or("").as_bytes()),
            None => Vec::new(),
        };
        let repr = ClientRepr {
            value: CLIENT_PROTOCOL_VERSION,
            sequence: self.outbox.publisher,
            topic: &self.opts.name,
            body: &credentials,
            flags: self.opts.slow_consumer.map_or(0, SlowConsumer::hello_flags)
                | if self.opts.echo { 0 } else { flags::NO_ECHO },
            ..ClientRepr::new(ClientKind::Hello)
        };
        let mut frame = vec![0u8; repr.buffer_len()];
        let _ = repr.emit(&mut frame);
        frame
    }

    /// Connects or reconnects as needed, then hands up to `limit` frames
    /// from the router to `handler`; returns how many events it handed.
    pub fn poll(&mut self, mut handler: impl FnMut(ClientEvent<'_>), limit: usize) -> usize {
        self.advance();
        let mut events = 0;
        if let Some(why) = self.pending.take() {
            handler(ClientEvent::Disconnected { reason: &why });
            events += 1;
        }
        if let Some((from, to)) = self.unconfirmed.take() {
            handler(ClientEvent::PublishGap { from, to });
            events += 1;
        }
        let Some(conn) = &mut self.conn else { return events };
        let mut broken: Option<String> = None;
        let mut forbidden: Option<String> = None;
        let mut acked = 0u64;
        let state = &mut self.state;
        let router_name = &mut self.router_name;
        let client_id = &mut self.client_id;
        let router_max_frame = &mut self.router_max_frame;
        let refusals = &mut self.refusals;
        let mut limited = false;
        let mut heard: Option<Duration> = None;
        let requests = &mut self.requests;
        let receipt = &mut self.receipt;
        let mut told_routers: Vec<String> = Vec::new();
        let r = conn.poll(
            |bytes| {
                if broken.is_some() {
                    return;
                }
                let f = match ClientFrame::new_checked(bytes) {
                    Ok(f) => f,
                    Err(e) => {
                        broken = Some(format!("the router sent a malformed frame: {e}"));
                        return;
                    }
                };
                events += 1;
                // To a queue-group member: the subscription it is for
                // leads (one client's subscriptions are not told apart).
                let Some((_, body)) = split_queue_body(f.flags(), f.body()) else {
                    broken = Some("the router sent a malformed queue-group delivery".into());
                    return;
                };
                match f.kind() {
                    ClientKind::Deliver if f.flags() & flags::REQUEST != 0 => {
                        match request::split_body(body).map(|(i, p)| (i, split_flagged(f.flags(), p))) {
                            Some((inbox, Ok((headers, payload)))) => handler(ClientEvent::Request(Request {
                                topic: f.topic(),
                                payload,
                                headers,
                                inbox,
                                discarded: f.value(),
                            })),
                            _ => broken = Some("the router sent a malformed request".into()),
                        }
                    }
                    ClientKind::Deliver if f.topic().starts_with(request::INBOX_PREFIX) => {
                        match request::correlation_of(f.topic()).filter(|&c| requests.is_waiting(c)) {
                            Some(c) => match split_flagged(f.flags(), body) {
                                Ok((headers, payload)) => {
                                    requests.replied(c);
                                    handler(ClientEvent::Reply { request: c, payload, headers });
                                }
                                Err(e) => broken = Some(format!("the router sent a reply with {e}")),
                            },
                            // Late (its request timed out) or not ours.
                            None => {
                                requests.stray += 1;
                                events -= 1;
                            }
                        }
                    }
                    ClientKind::Deliver => {
                        let guaranteed = f.flags() & flags::GUARANTEED != 0;
                        let (subscription, deliveries) = split_guaranteed_value(f.value());
                        let (headers, payload) = match split_flagged(f.flags(), body) {
                            Ok(x) => x,
                            Err(e) => {
                                broken = Some(format!("the router sent a message with {e}"));
                                return;
                            }
                        };
                        handler(ClientEvent::Message(Delivery {
                            topic: f.topic(),
                            payload,
                            headers,
                            flags: f.flags(),
                            discarded: if guaranteed { 0 } else { f.value() },
                            sequence: f.sequence(),
                            subscription: guaranteed.then_some(subscription),
                            deliveries: if guaranteed { deliveries } else { 1 },
                        }));
                    }
                    ClientKind::Ack => acked = acked.max(f.sequence()),
                    ClientKind::Heartbeat => {
                        // Not an event: the router's interval, in ms.
                        events -= 1;
                        heard = Some(Duration::from_millis(u64::from(f.value())));
                        // One past the highest publish number it read.
                        *receipt = (*receipt).max(f.sequence());
                    }
                    ClientKind::Loss => {
                        let to = f
                            .body()
                            .get(..8)
                            .map_or(f.sequence(), |b| u64::from_le_bytes(b.try_into().unwrap_or_default()));
                        handler(ClientEvent::Lost { subscription: f.value(), from: f.sequence(), to });
                    }
                    ClientKind::Welcome => {
                        *state = State::Connected;
                        // Its name, and the cluster's other routers.
                        (*router_name, told_routers) = welcome::split(f.body());
                        *client_id = f.value();
                        *refusals = 0;
                        // 0 from a router that does not say.
                        *router_max_frame = (f.sequence() & u64::from(u32::MAX)) as usize;
                        // Its heartbeat interval (0: none).
                        heard = Some(Duration::from_millis(f.sequence() >> 32));
                        handler(ClientEvent::Connected { router: router_name, client_id: f.value() });
                    }
                    ClientKind::Reject if requests.is_waiting(f.sequence()) => {
                        requests.end(f.sequence());
                        let why = super::request::refusal(RejectCode::from_u32(f.value()));
                        handler(ClientEvent::RequestFailed { request: f.sequence(), why });
                    }
                    ClientKind::Reject => handler(ClientEvent::Rejected {
                        code: RejectCode::from_u32(f.value()),
                        request: f.sequence(),
                        reason: std::str::from_utf8(f.body()).unwrap_or("(not UTF-8)"),
                    }),
                    ClientKind::Close => {
                        let code = RejectCode::from_u32(f.value());
                        let why =
                            format!("the router closed the session ({code:?}): {}", String::from_utf8_lossy(f.body()));
                        // Not allowed (no user, a wrong password, a user
                        // removed): connecting again would not change that.
                        if code == RejectCode::Forbidden {
                            forbidden = Some(why.clone());
                        }
                        // Over a limit of the router's: connecting again at
                        // once would be refused again.
                        limited |= code == RejectCode::Limit;
                        broken = Some(why);
                    }
                    _ => events -= 1,
                }
            },
            limit,
        );
        let mut refusal = forbidden;
        if !told_routers.is_empty() && self.opts.discover_routers {
            super::group::learn(&mut self.group, &self.uri, &told_routers, &mut self.learned);
        }
        if limited && self.state == State::Connected {
            self.refusals = self.refusals.saturating_add(1);
        }
        self.outbox.ack(acked);
        let r = r.and_then(|n| conn.keep_alive(heard).map(|()| n));
        match r {
            Err(SendError::Broken(why)) => {
                broken.get_or_insert(why);
            }
            Err(SendError::Refused(why)) => {
                refusal = Some(why.clone());
                broken.get_or_insert(why);
            }
            _ => {}
        }
        if let Some(why) = refusal {
            self.refuse(why);
        }
        if let Some(why) = broken {
            self.lose(why);
            if let Some(why) = self.pending.take() {
                handler(ClientEvent::Disconnected { reason: &why });
                events += 1;
            }
            if let Some((from, to)) = self.unconfirmed.take() {
                handler(ClientEvent::PublishGap { from, to });
                events += 1;
            }
        }
        if !self.outbox.is_empty() {
            self.pump();
        }
        if !self.requests.is_idle() {
            let mut ended = Vec::new();
            self.requests.take_ended(&mut ended);
            for (request, why) in ended {
                handler(ClientEvent::RequestFailed { request, why });
                events += 1;
            }
        }
        events
    }
}
