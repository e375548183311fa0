//! One client's session in the router: where its deliveries go (an
//! [`Outbound`]), what waits for room (the bounded [`OutQueue`] and a few
//! control frames), its subscriptions and its counters.

use crate::access::User;
use crate::counters::client as cc;
use crate::nats::NatsOut;
use crate::queue::OutQueue;
use crate::tcp::TcpOut;
use rustc_hash::FxHashMap;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tickwire_shm::{CounterSet, LogAppender, OfferError};
use tickwire_wire::client::{ClientKind, ClientRepr, SlowConsumer};

/// Control frames (WELCOME, REJECT, CLOSE) a session may have waiting; a
/// client that lets more pile up is disconnected as stuck.
pub const MAX_CONTROL_QUEUED: usize = 256;

/// What happened to a frame handed to a transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// It went.
    Yes,
    /// No room yet: queue it.
    Full,
    /// It can never go (larger than the client's log takes): dropped.
    Never,
}

/// Frames sent to a test harness (sans-IO use): each frame whole, with a
/// room limit to play a full transport.
#[derive(Debug, Default)]
pub struct MemoryOut {
    /// Frames sent, oldest first.
    pub frames: Vec<Vec<u8>>,
    /// Frames it takes before it is full (`usize::MAX`: never full).
    pub room: usize,
}

/// Where a session's frames go.
#[derive(Debug)]
// The shared-memory side stays inline: no pointer to chase on its hot path.
#[allow(clippy::large_enum_variant)]
pub enum Outbound {
    /// The client's shared-memory log out of the router (written in place).
    Ipc(LogAppender),
    /// A TCP connection (frames behind a 4-byte length).
    Tcp(TcpOut),
    /// A NATS client's connection (frames turned into NATS operations).
    Nats(Box<NatsOut>),
    /// Frames kept in memory (tests and sans-IO use).
    Memory(MemoryOut),
}

impl Outbound {
    fn try_send(&mut self, repr: &ClientRepr<'_>) -> Sent {
        match self {
            Outbound::Ipc(log) => {
                let len = repr.buffer_len();
                if len > log.max_payload() {
                    let mut buf = vec![0u8; len];
                    let _ = repr.emit(&mut buf);
                    return offer_result(log.offer(&buf));
                }
                match log.try_claim(len) {
                    Ok(mut claim) => {
                        let _ = repr.emit(claim.buffer());
                        claim.commit();
                        Sent::Yes
                    }
                    Err(e) => offer_result(Err(e)),
                }
            }
            // Always queued: `flush` writes everything queued at once.
            Outbound::Tcp(_) | Outbound::Nats(_) => Sent::Full,
            Outbound::Memory(m) => {
                if m.frames.len() >= m.room {
                    return Sent::Full;
                }
                let mut buf = vec![0u8; repr.buffer_len()];
                let _ = repr.emit(&mut buf);
                m.frames.push(buf);
                Sent::Yes
            }
        }
    }

    fn try_send_encoded(&mut self, frame: &[u8]) -> Sent {
        match self {
            Outbound::Ipc(log) => offer_result(log.offer(frame)),
            Outbound::Tcp(t) => t.send_frame(frame),
            Outbound::Nats(n) => n.send_frame(frame),
            Outbound::Memory(m) => {
                if m.frames.len() >= m.room {
                    return Sent::Full;
                }
                m.frames.push(frame.to_vec());
                Sent::Yes
            }
        }
    }
}

fn offer_result(r: Result<u64, OfferError>) -> Sent {
    match r {
        Ok(_) => Sent::Yes,
        Err(OfferError::BackPressured | OfferError::NotConnected) => Sent::Full,
        Err(_) => Sent::Never,
    }
}

/// Running totals of a session (mirrored into its counter set).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SessionStats {
    /// Frames read from the client.
    pub messages_in: u64,
    /// Bytes read from the client.
    pub bytes_in: u64,
    /// Messages handed to the client's transport.
    pub messages_out: u64,
    /// Frame bytes handed to it (headers and topics included).
    pub bytes_out: u64,
    /// Messages dropped for this client (queue full).
    pub discards: u64,
    /// Requests refused (REJECT).
    pub rejects: u64,
    /// Queued messages replaced by a newer one of their topic
    /// (conflation).
    pub conflated: u64,
}

/// A session that ends takes back its password check, if one waits.
impl Drop for Session {
    fn drop(&mut self) {
        if let Some(w) = &self.auth_wanted {
            w.store(false, std::sync::atomic::Ordering::Release);
        }
    }
}

/// A client session.
#[derive(Debug)]
pub struct Session {
    /// The client's name (from HELLO; empty before it).
    pub name: String,
    /// Where it is: `ipc pid N` or `tcp ADDR`.
    pub peer: String,
    pub(crate) out: Outbound,
    pub(crate) queue: OutQueue,
    pub(crate) control: VecDeque<Vec<u8>>,
    /// The highest publisher sequence stored and not yet acknowledged to
    /// the client (0: none). ACKs are cumulative, so one waiting ACK
    /// stands for every one before it: it needs no room in `control` and
    /// is never dropped.
    ack_due: u64,
    /// Its subscriptions by id, each pattern as its text (checked when
    /// it came): a parsed [`Pattern`](tickwire_topic::Pattern) costs about 250 bytes more (a vector
    /// and a string per level), and a subscription is parsed again only
    /// when it goes ([`crate::routing`]'s `parsed`).
    pub(crate) subscriptions: HashMap<u32, Box<str>>,
    pub(crate) next_sequence: u64,
    /// One past the highest direct publish number (a PUBLISH's sequence,
    /// not a request's or a guaranteed one's) read from it: told back in heartbeats, so a client
    /// whose connection is lost knows which publishes went unconfirmed.
    pub(crate) published_to: u64,
    pub(crate) hello: bool,
    /// Its user (when users are configured), once authenticated.
    pub(crate) user: Option<Arc<User>>,
    /// The user its TLS client certificate names (mutual TLS): it logs in
    /// as that user, without a password.
    pub(crate) certified: Option<String>,
    /// Its password is being checked: the check's ticket.
    pub(crate) ticket: Option<u64>,
    /// Set while its password check is wanted; cleared when the session
    /// ends, so the check is not made for nobody.
    pub(crate) auth_wanted: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Frames read while its password was being checked, in order.
    pub(crate) unchecked: Vec<Vec<u8>>,
    /// Of `unchecked`: (frames, bytes) other than SUBSCRIBE at 0, of
    /// SUBSCRIBE at 1 (each kind has its bound).
    pub(crate) unchecked_kept: [(usize, usize); 2],
    /// Some subscription reaches topics its user may not read: each
    /// delivery is checked.
    pub(crate) filtered: bool,
    /// Topics checked against its user's ACLs: (may publish, may read).
    pub(crate) access: FxHashMap<Box<str>, (bool, bool)>,
    /// What happens when its queue is full (its user's, its client's or the router's policy).
    pub policy: SlowConsumer,
    /// Its publisher id from HELLO (0: none): the key, with the publish
    /// sequence, that a guaranteed resend is recognised by.
    pub(crate) publisher: u64,
    /// The policy its client asked for in HELLO.
    pub(crate) asked: Option<SlowConsumer>,
    /// Its own publishes are not delivered to it (HELLO `NO_ECHO`).
    pub(crate) no_echo: bool,
    /// The client protocol version its HELLO said (0: before HELLO).
    pub(crate) protocol: u32,
    /// When the housekeeping first saw it holding publishers (monotonic
    /// ns; 0: not holding).
    pub(crate) holding_since: u64,
    /// Being closed ([`crate::Router::begin_close`]): nothing more is
    /// delivered; its CLOSE waits for room.
    pub(crate) closing: bool,
    /// Unique among this router's sessions (a slot's sessions differ).
    pub(crate) serial: u64,
    /// Back-pressure clients holding this one (its frames are not read
    /// while any does).
    pub(crate) paused_by: u32,
    /// Publishers this back-pressure client holds: (session, serial).
    pub(crate) holding: Vec<(u32, u64)>,
    /// In the router's list of sessions with frames waiting.
    pub(crate) in_backlog: bool,
    /// Waiting, out of the backlog, for its socket to be writable (still
    /// `in_backlog`, so nothing puts it back before then).
    pub(crate) parked: bool,
    /// `stats.messages_out` at the last housekeeping.
    pub(crate) out_seen: u64,
    /// When its output last moved (monotonic ns, as of the router's last
    /// clock; its attach time before): a client whose output moved lately
    /// reads, and the router-wide `max_queued_bytes` cuts the queues of
    /// the clients whose output has been still longest first.
    pub(crate) moved_at: u64,
    /// Totals.
    pub stats: SessionStats,
    pub(crate) counters: Option<CounterSet>,
}

/// Topics a session remembers its ACL answers for (then it starts again).
const ACCESS_CACHE: usize = 4096;

impl Session {
    pub(crate) fn new(out: Outbound, peer: String, queue_bytes: usize, counters: Option<CounterSet>) -> Self {
        Self {
            name: String::new(),
            peer,
            out,
            queue: OutQueue::new(queue_bytes),
            control: VecDeque::new(),
            ack_due: 0,
            subscriptions: HashMap::new(),
            next_sequence: 0,
            published_to: 0,
            hello: false,
            user: None,
            certified: None,
            ticket: None,
            auth_wanted: None,
            unchecked: Vec::new(),
            unchecked_kept: [(0, 0); 2],
            filtered: false,
            access: FxHashMap::default(),
            policy: SlowConsumer::DropOldest,
            publisher: 0,
            asked: None,
            no_echo: false,
            protocol: 0,
            holding_since: 0,
            closing: false,
            serial: 0,
            paused_by: 0,
            holding: Vec::new(),
            in_backlog: false,
            parked: false,
            out_seen: 0,
            moved_at: 0,
            stats: SessionStats::default(),
            counters,
        }
    }

    /// Sets its slow-consumer policy: its user's, if the config gives the
    /// user one, else what its client asked for, else `default` (the
    /// router's).
    pub(crate) fn choose_policy(&mut self, default: SlowConsumer) {
        self.policy = self.user.as_ref().and_then(|u| u.slow_consumer).or(self.asked).unwrap_or(default);
    }

    /// Subscriptions held.
    pub fn subscriptions(&self) -> usize {
        self.subscriptions.len()
    }
    /// Frames waiting in its queue.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }
    /// The transport it sends on.
    pub fn outbound(&self) -> &Outbound {
        &self.out
    }
    /// The transport it sends on, mutably (tests drain a [`MemoryOut`]).
    pub fn outbound_mut(&mut self) -> &mut Outbound {
        &mut self.out
    }

    /// Whether it was welcomed: its HELLO accepted and, with users, its
    /// password checked (until then [`Limits::hello_timeout`](crate::Limits::hello_timeout)
    /// runs).
    pub fn is_welcomed(&self) -> bool {
        self.hello && self.ticket.is_none()
    }

    /// Its user's name, if it has one.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref().map(|u| u.name.as_str())
    }

    /// Whether its user may publish on (`publish`) or read `topic`, a
    /// checked topic; true without a user. One hash lookup once a topic
    /// has been seen.
    #[inline]
    pub(crate) fn may(&mut self, topic: &str, publish: bool) -> bool {
        let Some(user) = &self.user else { return true };
        if let Some(&(p, r)) = self.access.get(topic) {
            return if publish { p } else { r };
        }
        if self.access.len() >= ACCESS_CACHE {
            self.access.clear();
        }
        let (p, r) = (user.publish.allows(topic), user.subscribe.allows(topic));
        self.access.insert(topic.into(), (p, r));
        if publish {
            p
        } else {
            r
        }
    }

    /// Puts it (session `id`) in the router's `backlog` if frames wait
    /// for its transport and it is not there yet.
    #[inline]
    pub(crate) fn mark(&mut self, id: u32, backlog: &mut Vec<u32>) {
        if !self.in_backlog && self.needs_flush() {
            self.in_backlog = true;
            backlog.push(id);
        }
    }

    /// Whether frames wait for its transport (queued deliveries, control
    /// frames, a TCP write's remainder), or its connection failed: the
    /// router's flush has something to do for it.
    #[inline]
    pub(crate) fn needs_flush(&self) -> bool {
        !self.queue.is_empty()
            || !self.control.is_empty()
            || self.ack_due > 0
            || match &self.out {
                Outbound::Tcp(t) => t.has_pending() || t.failure().is_some(),
                Outbound::Nats(n) => n.has_pending() || n.failure().is_some(),
                _ => false,
            }
    }

    /// Whether its transport (a TCP connection) found its socket full at
    /// the last flush: flushing again before it is writable is wasted.
    pub(crate) fn write_blocked(&self) -> bool {
        match &self.out {
            Outbound::Tcp(t) => t.is_blocked(),
            Outbound::Nats(n) => n.is_blocked(),
            _ => false,
        }
    }

    /// Whether its shared-memory log out of the router was truncated or
    /// replaced under the router (it now holds zero pages).
    pub(crate) fn is_output_broken(&self) -> bool {
        matches!(&self.out, Outbound::Ipc(a) if a.is_broken())
    }

    /// Why its transport failed (a TCP connection's write), once it has.
    pub(crate) fn transport_failure(&self) -> Option<&str> {
        match &self.out {
            Outbound::Tcp(t) => t.failure(),
            Outbound::Nats(n) => n.failure(),
            _ => None,
        }
    }

    /// Whether control frames may be queued freely (guaranteed deliveries
    /// go as control frames, while this holds).
    #[inline]
    pub(crate) fn has_control_room(&self) -> bool {
        self.control.len() < MAX_CONTROL_QUEUED / 2
    }

    /// Acknowledges every guaranteed publish up to publisher sequence
    /// `seq`: at once if the transport takes it, else with the next flush
    /// (coalesced with any later one). Never refused.
    pub(crate) fn acknowledge(&mut self, seq: u64) {
        self.ack_due = self.ack_due.max(seq);
        self.send_ack();
    }

    /// Sends the ACK due, if any, behind the control frames queued before
    /// it. Returns whether one went.
    fn send_ack(&mut self) -> bool {
        if self.ack_due == 0 || !self.control.is_empty() {
            return false;
        }
        let ack = ClientRepr { sequence: self.ack_due, ..ClientRepr::new(ClientKind::Ack) };
        let mut frame = [0u8; tickwire_wire::client::HEADER_LEN];
        let _ = ack.emit(&mut frame);
        match self.out.try_send_encoded(&frame) {
            Sent::Yes | Sent::Never => {
                self.ack_due = 0;
                true
            }
            Sent::Full => false,
        }
    }

    /// Queues a control frame (sent before any queued delivery).
    /// Returns false when too many are waiting.
    pub(crate) fn send_control(&mut self, repr: &ClientRepr<'_>) -> bool {
        // Straight into the transport when nothing waits before it (no
        // allocation: guaranteed deliveries come this way).
        if self.control.is_empty() {
            match self.out.try_send(repr) {
                Sent::Yes | Sent::Never => return true,
                Sent::Full => {}
            }
        }
        if self.control.len() >= MAX_CONTROL_QUEUED {
            return false;
        }
        let mut buf = vec![0u8; repr.buffer_len()];
        let _ = repr.emit(&mut buf);
        self.control.push_back(buf);
        self.flush();
        true
    }

    /// Delivers one message: straight to the transport when nothing waits,
    /// else behind the queue (dropping its oldest if full). `discarded` is
    /// the discard indication it carries (messages dropped before it on
    /// the way here); `holdable`, whether its publisher can be held (it is
    /// on this routing agent): then a back-pressure client's queue keeps
    /// it past the bound; `conflate`, whether its topic is conflated: then
    /// it replaces the topic's newest queued message if there is one (of
    /// the same size). Returns the messages dropped.
    #[inline]
    pub(crate) fn deliver(
        &mut self,
        topic: &str,
        payload: &[u8],
        flags: u8,
        discarded: u32,
        (holdable, conflate): (bool, bool),
    ) -> u32 {
        if conflate && !self.queue.is_empty() && discarded == 0 && self.queue.replace(topic, payload) {
            self.stats.conflated += 1;
            return 0;
        }
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        let repr = ClientRepr { kind: ClientKind::Deliver, flags, value: discarded, sequence, topic, body: payload };
        if self.queue.is_empty() && self.control.is_empty() {
            match self.out.try_send(&repr) {
                Sent::Yes => {
                    self.stats.messages_out += 1;
                    self.stats.bytes_out += repr.buffer_len() as u64;
                    return 0;
                }
                Sent::Never => {
                    self.stats.discards += 1;
                    return 1;
                }
                Sent::Full => {}
            }
        }
        if self.policy == SlowConsumer::BackPressure && holdable {
            self.queue.push_keep(&repr);
            return 0;
        }
        let dropped = if conflate { self.queue.push_conflated(&repr) } else { self.queue.push(&repr) };
        self.stats.discards += u64::from(dropped);
        dropped
    }

    /// Moves queued frames to the transport while it takes them; returns
    /// how many went.
    pub(crate) fn flush(&mut self) -> usize {
        let mut n = 0;
        while let Some(f) = self.control.front() {
            match self.out.try_send_encoded(f) {
                Sent::Yes | Sent::Never => {
                    self.control.pop_front();
                    n += 1;
                }
                Sent::Full => return n,
            }
        }
        if self.send_ack() {
            n += 1;
        } else if self.ack_due > 0 {
            return n;
        }
        let written = match &mut self.out {
            Outbound::Tcp(t) => Some(t.write_queue(&mut self.queue)),
            Outbound::Nats(t) => Some(t.write_queue(&mut self.queue)),
            _ => None,
        };
        if let Some((frames, bytes)) = written {
            self.stats.messages_out += frames as u64;
            self.stats.bytes_out += bytes as u64;
            return n + frames;
        }
        while let Some(f) = self.queue.front() {
            let len = f.len() as u64;
            match self.out.try_send_encoded(f) {
                Sent::Yes => {
                    self.stats.messages_out += 1;
                    self.stats.bytes_out += len;
                }
                Sent::Never => self.stats.discards += 1,
                Sent::Full => break,
            }
            self.queue.pop();
            n += 1;
        }
        n
    }

    /// Flushes for a few milliseconds at most (a closing session's CLOSE).
    pub(crate) fn flush_best_effort(&mut self) {
        for _ in 0..100 {
            self.flush();
            let tcp_pending = match &self.out {
                Outbound::Tcp(t) => t.has_pending(),
                Outbound::Nats(n) => n.has_pending(),
                _ => false,
            };
            if self.control.is_empty() && self.ack_due == 0 && !tcp_pending {
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }

    /// Copies the totals into the session's counter set.
    pub(crate) fn publish_counters(&self) {
        if let Some(c) = &self.counters {
            let s = &self.stats;
            c.set(cc::MESSAGES_IN, s.messages_in);
            c.set(cc::BYTES_IN, s.bytes_in);
            c.set(cc::MESSAGES_OUT, s.messages_out);
            c.set(cc::BYTES_OUT, s.bytes_out);
            c.set(cc::QUEUE_DEPTH, self.queue.len() as u64);
            c.set(cc::QUEUE_BYTES, self.queue.bytes() as u64);
            c.set(cc::DISCARDS, s.discards);
            c.set(cc::REJECTS, s.rejects);
            c.set(cc::SUBSCRIPTIONS, self.subscriptions.len() as u64);
        }
    }
}
