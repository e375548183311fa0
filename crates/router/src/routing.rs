//! The routing core: sessions in slots, the subscription index, and what a
//! client frame does. No I/O of its own: the server hands it frames read
//! from clients (`handle_frame`) and asks it to move queued frames to their
//! transports (`flush`); what a session's transport is does not matter here.

use crate::access::{AuthRequest, Reach, Users};
use crate::cache::LastValues;
use crate::counters::{TopicCounts, Totals};
use crate::fanout::deliver_all;
use crate::login::keep_unchecked;
use crate::peers::{Interest, Peers};
use crate::session::{Outbound, Session};
use crate::topics::{Sources, TopicTableStats, Topics, TOPIC_LIMIT};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tickwire_shm::counters::Kind;
use tickwire_shm::{CounterSet, CountersFile};
use tickwire_topic::{check_topic, Pattern};
use tickwire_wire::client::{flags, ClientKind, ClientRepr, RejectCode, SlowConsumer, CLIENT_PROTOCOL_VERSION};
use tickwire_wire::ClientFrame;

/// Per-client limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest client frame accepted, bytes (a larger one closes the session).
    pub max_frame: usize,
    /// Bytes of deliveries a client may have queued before the oldest are
    /// dropped.
    pub queue_bytes: usize,
    /// Subscriptions per client.
    pub max_subscriptions: usize,
    /// Topics given their own counter set (the rest are counted together).
    pub topic_counters: usize,
    /// What happens to a client whose queue is full (unless its user says
    /// otherwise).
    pub slow_consumer: SlowConsumer,
    /// Topics conflated for a lagging client: a message replaces the
    /// newest one of its topic still queued for it.
    pub conflate: Vec<Pattern>,
    /// How long a back-pressure client may hold publishers before it is
    /// disconnected as a slow consumer (`None`: for ever).
    pub back_pressure_timeout: Option<Duration>,
    /// How long a session may take to be welcomed: its HELLO read (on TLS,
    /// after the handshake) and, with users, its password checked. Past
    /// it the session is closed ([`Router::take_expired`]).
    pub hello_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_frame: (1 << 20) + 512,
            queue_bytes: 8 << 20,
            max_subscriptions: 10_000,
            topic_counters: 64,
            slow_consumer: SlowConsumer::DropOldest,
            conflate: Vec::new(),
            back_pressure_timeout: Some(Duration::from_secs(5)),
            hello_timeout: Duration::from_secs(2),
        }
    }
}

/// Why a session ends: a code for the CLOSE frame and a reason for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disconnect {
    /// The code sent in CLOSE (`Normal` when the client said goodbye).
    pub code: RejectCode,
    /// What happened, naming the frame or value.
    pub reason: String,
}

impl Disconnect {
    /// A protocol violation.
    pub fn protocol(reason: impl Into<String>) -> Self {
        Self { code: RejectCode::Protocol, reason: reason.into() }
    }
}

impl std::fmt::Display for Disconnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.code, self.reason)
    }
}

/// Puts session `id` in the backlog if frames wait for its transport.
#[inline]
pub(crate) fn mark(sessions: &mut [Option<Session>], backlog: &mut Vec<u32>, id: u32) {
    if let Some(Some(s)) = sessions.get_mut(id as usize) {
        s.mark(id, backlog);
    }
}

/// Queues a control frame for `s`.
pub(crate) fn control(s: &mut Session, repr: &ClientRepr<'_>) -> Result<(), Disconnect> {
    if s.send_control(repr) {
        Ok(())
    } else {
        Err(Disconnect { code: RejectCode::Limit, reason: "the client does not read its replies".into() })
    }
}

/// Sessions, subscriptions and routing.
#[derive(Debug)]
pub struct Router {
    pub(crate) name: String,
    pub(crate) limits: Limits,
    /// The subscriptions, and what each topic seen needs.
    pub(crate) topics: Topics,
    pub(crate) sessions: Vec<Option<Session>>,
    free: Vec<u32>,
    /// Sessions with frames waiting for their transport: the only ones
    /// [`Router::flush`] visits.
    pub(crate) backlog: Vec<u32>,
    /// The backlog being flushed (kept: no allocation per flush).
    flushing: Vec<u32>,
    /// Publishers to let go after a flush (kept).
    releasing: Vec<(u32, u64)>,
    pub(crate) topic_counts: TopicCounts,
    pub(crate) totals: Totals,
    pub(crate) counters: Option<Arc<CountersFile>>,
    pub(crate) totals_set: Option<CounterSet>,
    /// The other routing agents (none when this is the only one).
    pub(crate) peers: Option<Peers>,
    /// Routing agents, and which one this is: session `id` here is client
    /// `id * agents + me` to the world.
    pub(crate) agents: u32,
    pub(crate) me: u32,
    /// The configured users (`None`: every client is anonymous).
    pub(crate) users: Option<Arc<Users>>,
    /// Password checks to make ([`Router::take_auth_requests`]).
    pub(crate) auth_out: Vec<AuthRequest>,
    pub(crate) next_ticket: u64,
    /// The last-value cache, if configured.
    cache: Option<LastValues>,
    /// Some session's subscription reaches topics its user may not read:
    /// a topic's targets are checked against their users' ACLs.
    pub(crate) any_filtered: bool,
    /// Sessions whose queue overflowed under [`SlowConsumer::Disconnect`]
    /// ([`Router::take_slow`]).
    pub(crate) slow: Vec<u32>,
    /// Back-pressure sessions over their bound after one delivery (kept:
    /// no allocation per message).
    pub(crate) held: Vec<u32>,
    /// Publishers held by back-pressure sessions, counted with
    /// repetition; 0: nothing held, nothing to check.
    pub(crate) holds: usize,
    next_serial: u64,
    /// Sessions not yet welcomed when attached, oldest first: (session,
    /// serial, attached at, monotonic ns; 0: not yet known). Welcomed and
    /// ended ones are dropped when they reach the front
    /// ([`Router::take_expired`]).
    pub(crate) unwelcomed: VecDeque<(u32, u64, u64)>,
    /// Some of `unwelcomed` were attached without a time.
    pub(crate) unstamped: bool,
    /// The journal and durable subscriptions, if configured.
    pub(crate) guaranteed: Option<Box<crate::guaranteed::Guaranteed>>,
}

impl Router {
    /// A router named `name` (sent in WELCOME), counting into `counters`.
    pub fn new(name: &str, limits: Limits, counters: Option<Arc<CountersFile>>) -> Self {
        let totals_set = counters.as_ref().and_then(|c| c.allocate(Kind::Router, 0, 0, name).ok());
        let topic_counts = TopicCounts::new(limits.topic_counters, counters.clone());
        Self {
            name: name.into(),
            limits,
            topics: Topics::new(TOPIC_LIMIT),
            sessions: Vec::new(),
            free: Vec::new(),
            backlog: Vec::new(),
            flushing: Vec::new(),
            releasing: Vec::new(),
            topic_counts,
            totals: Totals::default(),
            counters,
            totals_set,
            peers: None,
            agents: 1,
            me: 0,
            users: None,
            auth_out: Vec::new(),
            next_ticket: 0,
            cache: None,
            any_filtered: false,
            slow: Vec::new(),
            held: Vec::new(),
            holds: 0,
            next_serial: 0,
            unwelcomed: VecDeque::new(),
            unstamped: false,
            guaranteed: None,
        }
    }

    /// One of `agents` routing agents, reaching the others through
    /// `peers`; its counter sets are labelled `LABEL [agent K]`.
    pub fn with_peers(
        name: &str,
        limits: Limits,
        counters: Option<Arc<CountersFile>>,
        peers: Peers,
        agents: u32,
    ) -> Self {
        let label = format!("{name} [agent {}]", peers.me());
        let mut r = Self::new(&label, limits, counters);
        name.clone_into(&mut r.name);
        r.me = peers.me();
        r.peers = Some(peers);
        r.agents = agents.max(1);
        r
    }

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

    /// The client id the world knows session `id` by (its number across
    /// every routing agent).
    pub fn client_id(&self, id: u32) -> u32 {
        id.wrapping_mul(self.agents).wrapping_add(self.me)
    }

    /// The topic table: topics remembered, and how many were dropped to
    /// make room for others ([`crate::topics`]).
    pub fn topic_table(&self) -> TopicTableStats {
        self.topics.table_stats()
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
    /// The totals.
    pub fn totals(&self) -> Totals {
        self.totals
    }
    /// Open sessions.
    pub fn clients(&self) -> usize {
        self.sessions.iter().flatten().count()
    }
    /// A session by id.
    pub fn session(&self, id: u32) -> Option<&Session> {
        self.sessions.get(id as usize)?.as_ref()
    }
    /// A session by id, mutably.
    pub fn session_mut(&mut self, id: u32) -> Option<&mut Session> {
        self.sessions.get_mut(id as usize)?.as_mut()
    }
    /// Ids of open sessions.
    pub fn session_ids(&self) -> Vec<u32> {
        (0..self.sessions.len() as u32).filter(|&i| self.sessions[i as usize].is_some()).collect()
    }

    /// The id the next [`Router::attach`] will return.
    pub fn next_id(&self) -> u32 {
        self.free.last().copied().unwrap_or(self.sessions.len() as u32)
    }

    /// Opens a session whose frames go to `out`; `peer` says where it is.
    /// The client's first frame must be HELLO. Its
    /// [`Limits::hello_timeout`] runs from the next
    /// [`Router::take_expired`] ([`Router::attach_at`] says when it
    /// started).
    pub fn attach(&mut self, out: Outbound, peer: String) -> u32 {
        self.attach_at(out, peer, 0)
    }

    /// [`Router::attach`] at `now` (monotonic ns): the session must be
    /// welcomed within [`Limits::hello_timeout`] of it.
    pub fn attach_at(&mut self, out: Outbound, peer: String, now: u64) -> u32 {
        let mut s = Session::new(out, peer, self.limits.queue_bytes, None);
        s.policy = self.limits.slow_consumer;
        s.serial = self.next_serial;
        self.next_serial += 1;
        self.totals.connected += 1;
        self.trim_unwelcomed();
        self.unwelcomed.push_back((self.next_id(), s.serial, now));
        self.unstamped |= now == 0;
        match self.free.pop() {
            Some(id) => {
                self.sessions[id as usize] = Some(s);
                id
            }
            None => {
                self.sessions.push(Some(s));
                self.sessions.len() as u32 - 1
            }
        }
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
        for (sid, p) in s.subscriptions.drain() {
            self.topics.unsubscribe(&p, id, sid);
            if let Some(peers) = &mut self.peers {
                peers.release(&p);
            }
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
            return keep_unchecked(s, bytes, self.limits.max_subscriptions);
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
                if f.flags() & flags::GUARANTEED != 0 {
                    return self.publish_guaranteed(id, f.topic(), f.body(), f.sequence());
                }
                self.route(id, f.topic(), f.body(), f.sequence())
            }
            ClientKind::Hello => {
                if s.hello {
                    return Err(Disconnect::protocol("a second HELLO"));
                }
                if f.value() != CLIENT_PROTOCOL_VERSION {
                    return Err(Disconnect {
                        code: RejectCode::Unsupported,
                        reason: format!("client protocol {} (this router speaks {CLIENT_PROTOCOL_VERSION})", f.value()),
                    });
                }
                if f.topic().chars().any(char::is_control) {
                    return Err(Disconnect::protocol("client name holds control characters"));
                }
                s.hello = true;
                s.name = f.topic().to_owned();
                s.asked = SlowConsumer::from_hello_flags(f.flags());
                s.publisher = f.sequence();
                s.choose_policy(self.limits.slow_consumer);
                if self.users.is_some() {
                    return self.ask_password(id, f.body());
                }
                self.welcome(id)
            }
            ClientKind::Subscribe => {
                let sid = f.value();
                if f.flags() == flags::DURABLE {
                    return self.subscribe_durable(id, sid, f.topic(), f.body());
                }
                if f.flags() & !flags::CACHED != 0 {
                    return self.reject(
                        id,
                        RejectCode::Unsupported,
                        sid.into(),
                        "SUBSCRIBE takes the CACHED flag or the DURABLE flag alone",
                    );
                }
                let cached = f.flags() & flags::CACHED != 0;
                if cached && self.cache.is_none() {
                    return self.reject(id, RejectCode::Unsupported, sid.into(), "no last-value cache is configured");
                }
                let pattern = match Pattern::parse(f.topic()) {
                    Ok(p) => p,
                    Err(e) => return self.reject(id, RejectCode::BadTopic, sid.into(), &e.to_string()),
                };
                match s.user.as_ref().map(|u| u.subscribe.reach(&pattern)) {
                    Some(Reach::None) => {
                        let why = format!("user {:?} may read no topic {} matches", s.user().unwrap_or(""), f.topic());
                        self.totals.forbidden += 1;
                        return self.reject(id, RejectCode::Forbidden, sid.into(), &why);
                    }
                    Some(Reach::Some) => {
                        s.filtered = true;
                        self.any_filtered = true;
                    }
                    _ => {}
                }
                if s.subscriptions.len() >= self.limits.max_subscriptions && !s.subscriptions.contains_key(&sid) {
                    let why = format!("{} subscriptions is the limit", self.limits.max_subscriptions);
                    return self.reject(id, RejectCode::Limit, sid.into(), &why);
                }
                if let Some(peers) = &mut self.peers {
                    peers.hold(&pattern);
                }
                if let Some(old) = s.subscriptions.insert(sid, pattern.clone()) {
                    self.topics.unsubscribe(&old, id, sid);
                    if let Some(peers) = &mut self.peers {
                        peers.release(&old);
                    }
                }
                self.topics.subscribe(&pattern, id, sid);
                if let (true, Some(cache)) = (cached, &self.cache) {
                    // Before anything else reaches it: no gap, no duplicate.
                    let mut n = 0;
                    cache.each_match(&pattern, |topic, payload| {
                        if !s.filtered || s.may(topic, false) {
                            s.deliver(topic, payload, flags::CACHED, 0, (false, false));
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
                if let Some(p) = s.subscriptions.remove(&f.value()) {
                    self.topics.unsubscribe(&p, id, f.value());
                    if let Some(peers) = &mut self.peers {
                        peers.release(&p);
                    }
                }
                Ok(())
            }
            ClientKind::Ack => {
                self.handle_ack(id, f.value(), f.sequence());
                Ok(())
            }
            ClientKind::Close => Err(Disconnect {
                code: RejectCode::Normal,
                reason: format!("client closed: {}", String::from_utf8_lossy(f.body())),
            }),
            k @ (ClientKind::Welcome | ClientKind::Deliver | ClientKind::Reject | ClientKind::Loss) => {
                Err(Disconnect::protocol(format!("{k:?} is the router's to send, not a client's")))
            }
        }
    }

    pub(crate) fn reject(&mut self, id: u32, code: RejectCode, sequence: u64, reason: &str) -> Result<(), Disconnect> {
        let Some(s) = self.session_mut(id) else { return Ok(()) };
        s.stats.rejects += 1;
        let r =
            ClientRepr { value: code as u32, sequence, body: reason.as_bytes(), ..ClientRepr::new(ClientKind::Reject) };
        control(s, &r)
    }

    /// Delivers a publish to every session whose patterns match `topic`,
    /// once each: one lookup of the topic ([`crate::topics`]) for
    /// everything it needs.
    #[inline]
    pub(crate) fn route(&mut self, from: u32, topic: &str, payload: &[u8], sequence: u64) -> Result<(), Disconnect> {
        let src = Sources {
            sessions: &mut self.sessions,
            filtered: self.any_filtered,
            peers: self.peers.as_ref(),
            conflate: &self.limits.conflate,
        };
        let e = match self.topics.entry(topic, check_topic, src) {
            Ok(e) => e,
            Err(e) => return self.reject(from, RejectCode::BadTopic, sequence, &e.to_string()),
        };
        if self.users.is_some()
            && !self.sessions.get_mut(from as usize).and_then(Option::as_mut).is_some_and(|s| s.may(topic, true))
        {
            let user = self.session(from).and_then(Session::user).unwrap_or("").to_owned();
            self.totals.forbidden += 1;
            return self.reject(
                from,
                RejectCode::Forbidden,
                sequence,
                &format!("user {user:?} may not publish on {topic}"),
            );
        }
        let queues = (&mut self.backlog, &mut self.slow, &mut self.held);
        let (n, discards) =
            deliver_all(&mut self.sessions, queues, &e.targets, (topic, payload), (0, true, e.conflate));
        if let Some(c) = &mut self.cache {
            c.update_at(&mut e.last_value, topic, payload);
        }
        let remote = match &mut self.peers {
            Some(p) if !e.agents.is_empty() => {
                let before = (p.forwarded, p.link_discards);
                let agents = p.forward_to(&e.agents, topic, payload);
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
        if !self.held.is_empty() {
            self.hold(from);
        }
        Ok(())
    }

    /// Delivers a message another routing agent's client published (see
    /// [`crate::peers`]) to this agent's matching clients; `discarded` is
    /// the discard indication it carries.
    pub fn route_forwarded(&mut self, topic: &str, payload: &[u8], discarded: u32) {
        let src = Sources {
            sessions: &mut self.sessions,
            filtered: self.any_filtered,
            peers: self.peers.as_ref(),
            conflate: &self.limits.conflate,
        };
        // The agent that read it from its client checked the topic.
        let Ok(e) = self.topics.entry(topic, |_| Ok::<(), std::convert::Infallible>(()), src);
        let queues = (&mut self.backlog, &mut self.slow, &mut self.held);
        let (n, discards) =
            deliver_all(&mut self.sessions, queues, &e.targets, (topic, payload), (discarded, false, e.conflate));
        if let Some(c) = &mut self.cache {
            c.update_at(&mut e.last_value, topic, payload);
        }
        self.totals.deliveries += n;
        self.totals.discards += discards;
        self.topic_counts.add(&mut e.counted, topic, 0, n, payload.len() as u64);
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

    /// Has [`Router::flush`] visit session `id` (its transport holds bytes
    /// the router did not queue, such as TLS handshake records).
    pub(crate) fn mark_pending(&mut self, id: u32) {
        mark(&mut self.sessions, &mut self.backlog, id);
    }

    /// Moves queued frames to every session's transport; returns the frames
    /// moved, and puts in `failed` the sessions whose transport broke.
    pub fn flush(&mut self, failed: &mut Vec<(u32, String)>) -> usize {
        if self.backlog.is_empty() {
            return 0;
        }
        let mut n = 0;
        std::mem::swap(&mut self.backlog, &mut self.flushing);
        for &id in &self.flushing {
            let Some(Some(s)) = self.sessions.get_mut(id as usize) else { continue };
            n += s.flush();
            if let Outbound::Tcp(t) = &s.out {
                if let Some(why) = &t.failed {
                    failed.push((id, why.clone()));
                }
            }
            if !s.holding.is_empty() && s.queue.is_below_half() {
                self.releasing.append(&mut s.holding);
                s.holding_since = 0;
            }
            s.in_backlog = s.needs_flush();
            if s.in_backlog {
                self.backlog.push(id);
            }
        }
        self.flushing.clear();
        if !self.releasing.is_empty() {
            let list = std::mem::take(&mut self.releasing);
            self.release(&list);
            self.releasing = list;
            self.releasing.clear();
        }
        n
    }
}
