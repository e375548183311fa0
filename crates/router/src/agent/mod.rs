//! A routing agent: the duty cycle that reads its clients' frames into its
//! [`Router`] and moves their deliveries out.
//!
//! One duty cycle ([`RoutingAgent::do_work`]):
//! 1. poll every shared-memory client's log in place (no system call);
//! 2. with TCP sessions open, one `epoll_wait(0)` for readable sockets;
//! 3. take what the other routing agents forwarded (their links);
//! 4. flush the sessions that have frames waiting;
//! 5. once in `CLOCK_EVERY` (16) cycles: read the clock, take new clients and
//!    interest changes from its control channel, tell the other agents
//!    about its own, and every 20 ms close the sessions past a deadline
//!    (not logged in within `limits.hello_timeout`, a back-pressure hold
//!    past `back_pressure_timeout`) and publish counters.
//!
//! The [`Server`](crate::Server) finds clients and hands each to an agent
//! (through its control channel); a router with one agent runs it on
//! the server's own thread.

mod control;
mod nats;
mod tcp;

pub(crate) use control::{AgentShared, Control, Mailbox};

pub use tcp::IoCounts;
use tcp::TcpInput;

use crate::access::AuthWorker;
use crate::metrics::SAMPLE_EVERY;
use crate::peers::LinkReader;
use crate::routing::{Disconnect, Router};
use crate::session::Outbound;
use mio::{Events, Poll, Token};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;
use tickwire_agent::Doorbell;
use tickwire_latency::SharedLatencies;
use tickwire_shm::counters::Kind;
use tickwire_shm::{CounterSet, Event, LogReader};
use tickwire_wire::client::RejectCode;

/// Frames read from one client per duty cycle: fairness between clients,
/// and a bound on what is delivered between two flushes (a publisher's
/// backlog after a pause, fanned out to every queue before any socket
/// took a byte, crossed `limits.max_queued_bytes` with every queue alike,
/// the reader's too).
const POLL_LIMIT: usize = 256;
/// The shortest wait of an agent that everything it serves wakes (its
/// sockets and its doorbell): its timers' resolution while idle.
pub(crate) const RUNG_WAIT: Duration = Duration::from_millis(1);

/// How long a thread waits, `timeout` as its idle strategy says: at least
/// [`RUNG_WAIT`] when everything it serves wakes it (`rung`).
pub(crate) fn least_wait(rung: bool, timeout: Duration) -> Duration {
    if rung {
        timeout.max(RUNG_WAIT)
    } else {
        timeout
    }
}
/// How often to publish counters.
const HOUSEKEEPING_NS: u64 = 20_000_000;
/// The duty cycle reads the clock once in this many cycles: on a VM a
/// clock read costs as much as polling several clients.
pub(crate) const CLOCK_EVERY: u32 = 16;
/// Sessions are described for `tickwire router status` once a second (by
/// the clock: an idle agent's housekeeping runs less often than every
/// 20 ms, its duty cycles sleeping).
const STATUS_NS: u64 = 1_000_000_000;
/// How long a slow consumer's CLOSE may wait for it to read, ns.
const CLOSE_WAIT_NS: u64 = 5_000_000_000;
/// An idle shared-memory client's log is checked for its end once in this
/// many cycles.
const END_CHECK_EVERY: u32 = 64;
/// Sessions closed at their hello timeout are logged together, at most
/// once in this long, ns (a flood of silent connections is one line a
/// second, not one per connection).
const TIMEOUT_LOG_NS: u64 = 1_000_000_000;

/// A shared-memory client's log into the router.
struct IpcInput {
    /// Its session.
    id: u32,
    /// Its stream id (its log into the router is `tw-router-in-STREAM`).
    stream: u32,
    reader: LogReader,
}

/// One routing agent.
pub struct RoutingAgent {
    pub(crate) router: Router,
    role: String,
    /// Shared-memory clients, dense: the duty cycle polls each in turn.
    ipc: Vec<IpcInput>,
    /// TCP clients by session id (their epoll token).
    tcp: Vec<Option<TcpInput>>,
    tcp_sessions: usize,
    poll: Poll,
    events: Events,
    /// The tokens of one poll's events (kept: no allocation per poll).
    tokens: Vec<Token>,
    /// Connections with frames left to read that the edge-triggered poll
    /// will not signal again: those readable while their publisher was
    /// held (read as soon as they are let go), and those whose last read
    /// stopped at [`POLL_LIMIT`] frames (read again next cycle).
    unread: Vec<Token>,
    /// Sessions whose sockets were full at a flush, just handed over by the
    /// router to be watched for writability (kept: no allocation).
    parked: Vec<u32>,
    failed: Vec<(u32, String)>,
    /// System calls on TCP links: reads and polls live, and the writes of
    /// sessions that have ended.
    io: IoCounts,
    /// Clients closed after two heartbeat intervals with nothing read.
    heartbeat_timeouts: u64,
    /// Its counter set (`Kind::RouterAgent`): the above, and on the first
    /// agent the password checks and the topic table.
    agent_set: Option<CounterSet>,
    /// Whether it is the first agent (the one that reports the password
    /// checks, which all agents share).
    first: bool,
    control: Receiver<Control>,
    /// The other agents' control channels (`None` at this agent's place).
    others: Vec<Option<Mailbox>>,
    /// What the other agents forward to this one.
    inbound: Vec<LinkReader>,
    /// Rung by the other agents and the server when they give it work.
    bell: Arc<Doorbell>,
    /// Shared-memory streams whose sessions ended, and why, for the server.
    gone: Sender<(u32, String)>,
    /// Where passwords are checked.
    auth: Arc<AuthWorker>,
    pub(crate) shared: Arc<AgentShared>,
    /// Forwarding times, sampled, when metrics are on.
    times: Option<Arc<SharedLatencies>>,
    /// Frames until the next one timed.
    countdown: u32,
    /// Sessions being closed whose CLOSE waits for room: (session,
    /// deadline, why).
    closing: Vec<(u32, u64, Disconnect)>,
    /// Duty cycles so far.
    cycle: u32,
    /// Messages taken from each other agent's ring per duty cycle
    /// ([`POLL_LIMIT`]; all there are when the cluster's agent shares
    /// this thread and fills its ring only between this one's cycles).
    ring_limit: usize,
    /// The clock at the last read (every [`CLOCK_EVERY`] cycles).
    now: u64,
    last_housekeeping: u64,
    /// When sessions were last described for `router status`.
    last_status: u64,
    /// Sessions closed at their hello timeout since the last line saying
    /// so, and when that line was written.
    timeouts_unlogged: u64,
    last_timeout_log: u64,
    /// The user a NATS client's `auth_token` logs in as
    /// (`nats_token_user`).
    pub(crate) nats_token_user: Option<String>,
}

impl std::fmt::Debug for RoutingAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoutingAgent").field("role", &self.role).field("clients", &self.router.clients()).finish()
    }
}

/// An agent's channels, made by the server.
pub(crate) struct Wiring {
    pub(crate) control: Receiver<Control>,
    pub(crate) others: Vec<Option<Mailbox>>,
    pub(crate) inbound: Vec<LinkReader>,
    pub(crate) bell: Arc<Doorbell>,
    pub(crate) gone: Sender<(u32, String)>,
    pub(crate) auth: Arc<AuthWorker>,
}

impl RoutingAgent {
    pub(crate) fn new(router: Router, role: String, wiring: Wiring) -> std::io::Result<Self> {
        let agent_set = router.counters_file().and_then(|c| c.allocate(Kind::RouterAgent, 0, 0, &role).ok());
        let first = wiring.others.first().is_none_or(Option::is_none);
        Ok(Self {
            router,
            role,
            ipc: Vec::new(),
            tcp: Vec::new(),
            tcp_sessions: 0,
            poll: Poll::new()?,
            events: Events::with_capacity(256),
            tokens: Vec::with_capacity(256),
            unread: Vec::new(),
            parked: Vec::new(),
            failed: Vec::new(),
            io: IoCounts::default(),
            heartbeat_timeouts: 0,
            agent_set,
            first,
            control: wiring.control,
            others: wiring.others,
            inbound: wiring.inbound,
            bell: wiring.bell,
            gone: wiring.gone,
            auth: wiring.auth,
            shared: Arc::new(AgentShared::default()),
            times: None,
            countdown: SAMPLE_EVERY,
            closing: Vec::new(),
            cycle: 0,
            ring_limit: POLL_LIMIT,
            now: tickwire_shm::os::monotonic_ns(),
            last_housekeeping: 0,
            last_status: 0,
            timeouts_unlogged: 0,
            last_timeout_log: 0,
            nats_token_user: None,
        })
    }

    /// Times one frame in [`SAMPLE_EVERY`] into a histogram for the
    /// metrics; returns it.
    pub(crate) fn time_forwarding(&mut self) -> Arc<SharedLatencies> {
        Arc::clone(self.times.get_or_insert_with(Arc::default))
    }

    /// Where its passwords are checked (shared by every agent).
    pub(crate) fn auth(&self) -> &AuthWorker {
        &self.auth
    }

    /// The clock as read at the last cycle that read it, and whether this
    /// cycle did.
    pub(crate) fn clock(&self) -> (u64, bool) {
        (self.now, self.cycle.is_multiple_of(CLOCK_EVERY))
    }

    /// One duty cycle; returns the work done (0: idle).
    pub fn do_work(&mut self) -> usize {
        self.cycle = self.cycle.wrapping_add(1);
        let mut work = self.poll_ipc();
        if self.tcp_sessions > 0 {
            work += self.poll_tcp();
        }
        let router = &mut self.router;
        for link in &mut self.inbound {
            work += link.receive(self.ring_limit, |m| router.route_forwarded(m));
        }
        work += self.router.poll_guaranteed(self.now);
        // The agents sent messages wake before this one's writes.
        self.router.ring_peers();
        work += self.router.flush(self.now, &mut self.failed);
        self.watch_parked();
        for (id, why) in self.router.take_slow() {
            self.begin_close(id, why);
        }
        for (id, why) in self.router.take_not_leader() {
            self.close(id, &why);
        }
        while let Some((id, why)) = self.failed.pop() {
            self.close(id, &Disconnect { code: RejectCode::Normal, reason: format!("connection failed: {why}") });
        }
        if self.cycle.is_multiple_of(CLOCK_EVERY) {
            self.now = tickwire_shm::os::monotonic_ns();
            work += self.take_control();
            for r in self.router.take_auth_requests() {
                self.auth.check(r);
            }
            for change in self.router.take_announcements() {
                for tx in self.others.iter().flatten() {
                    let _ = tx.send(Control::Interest(change.clone()));
                }
            }
            if !self.closing.is_empty() {
                self.finish_closing();
            }
            if self.now.saturating_sub(self.last_housekeeping) >= HOUSEKEEPING_NS {
                self.last_housekeeping = self.now;
                for (id, why) in self.router.take_stuck(self.now) {
                    self.begin_close(id, why);
                }
                self.expire();
                self.router.guaranteed_housekeeping(self.now);
                self.trim_links();
                self.router.housekeep_memory(self.now);
                self.keep_links_alive();
                self.publish_counters();
                if self.now.saturating_sub(self.last_status) >= STATUS_NS {
                    self.last_status = self.now;
                    let status = self.router.client_status();
                    if let Ok(mut s) = self.shared.status.lock() {
                        *s = status;
                    }
                    let journal = self.router.journal_status();
                    if let Ok(mut j) = self.shared.journal.lock() {
                        *j = journal;
                    }
                }
            }
        }
        work
    }

    /// Waits up to `timeout` for work: its TCP sockets, the other agents'
    /// rings and its control channel wake it (they ring its doorbell);
    /// shared-memory clients' logs, the journal's syncs and timers do
    /// not, and are looked at when the timeout ends. An agent with neither
    /// shared-memory clients nor a journal waits at least [`RUNG_WAIT`]
    /// (so do its heartbeats and, on the server's thread, new
    /// connections, which are taken once in [`CLOCK_EVERY`] duty cycles).
    pub fn park(&mut self, timeout: Duration) {
        let timeout = least_wait(self.rung(), timeout);
        self.bell.park(&[self.poll_fd()], timeout, || self.has_inbound());
    }

    /// Takes all a ring holds each duty cycle: its only ring is the
    /// cluster's agent's, on this thread (one duty cycle each in turn, so
    /// a limit on both sides would let a burst from several links build
    /// up in the ring until it overflowed).
    pub(crate) fn drain_rings(&mut self) {
        self.ring_limit = usize::MAX;
    }

    /// Whether everything that brings it work rings its doorbell or its
    /// sockets: no shared-memory client and no journal. A short wait
    /// would then only wake it to find nothing (on a VM, a context switch
    /// and a few system calls each).
    pub(crate) fn rung(&self) -> bool {
        self.ipc.is_empty() && self.router.guaranteed().is_none()
    }

    /// Its sockets' epoll set, readable when one has work.
    pub(crate) fn poll_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.poll.registry().as_fd()
    }

    /// Whether another agent's ring to it holds messages.
    pub(crate) fn has_inbound(&self) -> bool {
        self.inbound.iter().any(|l| !l.is_empty())
    }

    /// What wakes it.
    pub(crate) fn bell(&self) -> &Doorbell {
        &self.bell
    }

    /// Copies its totals to the counters file and the server.
    pub(crate) fn publish_counters(&self) {
        self.router.publish_counters();
        if let Ok(mut t) = self.shared.totals.lock() {
            *t = self.router.totals();
        }
        let io = self.io_counts();
        if let Ok(mut shared) = self.shared.io.lock() {
            *shared = io;
        }
        if let Some(set) = &self.agent_set {
            use std::sync::atomic::Ordering::Relaxed;
            let mut v = [0u64; 12];
            v[..4].copy_from_slice(&[io.reads, io.writes, io.polls, self.heartbeat_timeouts]);
            if self.first {
                let a = self.auth.stats();
                v[4..9].copy_from_slice(&[
                    a.checked.load(Relaxed),
                    a.remembered.load(Relaxed),
                    a.failed.load(Relaxed),
                    a.abandoned.load(Relaxed),
                    a.throttled.load(Relaxed),
                ]);
            }
            v[9] = self.router.topic_table().evictions;
            v[10] = self.router.queue_trims();
            v[11] = self.router.queued_allocated() as u64;
            set.set_all(&v);
        }
    }

    /// Starts ending slow consumer `id` ([`Router::begin_close`]); it is
    /// let go once its CLOSE is sent, or after [`CLOSE_WAIT_NS`].
    fn begin_close(&mut self, id: u32, why: Disconnect) {
        if self.router.begin_close(id, &why) {
            tracing::warn!(client = self.router.client_id(id), reason = %why.reason, "closing a slow consumer");
            self.closing.push((id, self.now + CLOSE_WAIT_NS, why));
        }
    }

    /// Closes the sessions not welcomed within `limits.hello_timeout`
    /// ([`Router::take_expired`]), quietly, and says how many at most once
    /// a second.
    fn expire(&mut self) {
        for (id, why) in self.router.take_expired(self.now) {
            self.end(id, &why, false);
            self.timeouts_unlogged += 1;
        }
        if self.timeouts_unlogged > 0 && self.now.saturating_sub(self.last_timeout_log) >= TIMEOUT_LOG_NS {
            let timeout = humantime::format_duration(self.router.limits().hello_timeout);
            tracing::warn!(
                count = self.timeouts_unlogged,
                agent = %self.role,
                "closed {} connection(s) not logged in within {timeout} (limits.hello_timeout: no HELLO, a stalled frame or TLS handshake, or a password check not done)",
                self.timeouts_unlogged
            );
            self.timeouts_unlogged = 0;
            self.last_timeout_log = self.now;
        }
    }

    /// Ends the closing sessions whose CLOSE has gone or whose time is up.
    fn finish_closing(&mut self) {
        let mut list = std::mem::take(&mut self.closing);
        list.retain(|(id, deadline, why)| {
            // Gone meanwhile (and perhaps its slot taken by a new client).
            if !self.router.is_closing(*id) {
                return false;
            }
            if self.router.close_sent(*id) || self.now >= *deadline {
                self.close(*id, why);
                return false;
            }
            true
        });
        self.closing.extend(list);
    }

    fn take_control(&mut self) -> usize {
        self.bell.take_posted();
        let mut n = 0;
        while let Ok(c) = self.control.try_recv() {
            n += 1;
            match c {
                Control::Interest(change) => self.router.handle_interest(&change),
                Control::Ipc { stream, reader, out, peer, hello, uid } => {
                    let id = self.router.attach_at(Outbound::Ipc(*out), peer, self.now);
                    self.ipc.push(IpcInput { id, stream, reader: *reader });
                    tracing::info!(client = self.router.client_id(id), stream, uid, agent = %self.role, "ipc client connected");
                    // A Unix user a `[[users]]` entry names logs in as it.
                    if let Some(user) = self.router.user_of_uid(uid) {
                        self.router.set_certified(id, user);
                    }
                    if let Err(d) = handle(&mut self.router, &self.times, &mut self.countdown, id, &hello) {
                        self.close(id, &d);
                    }
                }
                Control::Tcp { wire, peer, slot, nats } => self.adopt_tcp(wire, peer, slot, nats),
                Control::Authenticated(r) => {
                    let id = r.session;
                    if let Err(d) = self.router.handle_auth(r) {
                        self.close(id, &d);
                    }
                }
                Control::Users(users) => {
                    for (id, d) in self.router.set_users(users) {
                        self.close(id, &d);
                    }
                }
            }
        }
        n
    }

    fn poll_ipc(&mut self) -> usize {
        let mut work = 0;
        let check_end = self.cycle.is_multiple_of(END_CHECK_EVERY);
        let any_held = self.router.any_held();
        let mut i = 0;
        while let Some(input) = self.ipc.get_mut(i) {
            let id = input.id;
            // Held by a back-pressure client: its log waits (and fills).
            if any_held && self.router.is_held(id) {
                i += 1;
                continue;
            }
            let (router, times, countdown) = (&mut self.router, &self.times, &mut self.countdown);
            let mut why: Option<Disconnect> = None;
            let r = input.reader.poll(
                |ev| match ev {
                    Event::Message(m) if why.is_none() => {
                        if let Err(d) = handle(router, times, countdown, id, m.payload) {
                            why = Some(d);
                        }
                    }
                    Event::PublisherGone { reason, .. } => {
                        why = Some(Disconnect { code: RejectCode::Normal, reason: format!("client gone: {reason}") });
                    }
                    Event::Lost { from, to, .. } => {
                        why = Some(Disconnect::protocol(format!("client log lost bytes [{from}, {to})")));
                    }
                    _ => {}
                },
                POLL_LIMIT,
            );
            match r {
                Ok(0) if check_end && why.is_none() && input.reader.is_end_of_stream() => {
                    why = Some(Disconnect { code: RejectCode::Normal, reason: "client closed its log".into() });
                }
                Ok(n) => work += n,
                Err(e) => why = Some(Disconnect::protocol(format!("client log: {e}"))),
            }
            // A log shrunk under us reads zeros from then on: whatever the
            // poll made of them, the session ends for that.
            if (why.is_some() || check_end)
                && (input.reader.is_broken() || self.router.session(id).is_some_and(crate::Session::is_output_broken))
            {
                why = Some(Disconnect::protocol(format!(
                    "the client's log {} was truncated or replaced while the router had it mapped",
                    if input.reader.is_broken() { "into the router" } else { "out of the router" }
                )));
            }
            match why {
                // Closing takes it out of `ipc` (the last one moves to `i`).
                Some(d) => self.close(id, &d),
                None => i += 1,
            }
        }
        work
    }

    /// Ends a session: CLOSE offered, transport dropped (an IPC client's
    /// log out of the router is removed: the router made it).
    fn close(&mut self, id: u32, why: &Disconnect) {
        self.end(id, why, true);
    }

    /// [`RoutingAgent::close`]; `loud`: a line of its own (else at debug
    /// level: the caller says how many).
    fn end(&mut self, id: u32, why: &Disconnect, loud: bool) {
        // The input goes first, whatever the session's state: the duty
        // cycle must never meet it again.
        if let Some(i) = self.ipc.iter().position(|input| input.id == id) {
            let input = self.ipc.swap_remove(i);
            // Its log stays until the client goes: the server must not
            // take it again.
            let _ = self.gone.send((input.stream, why.to_string()));
        }
        // Dropped last (after the session, the socket's other holder): its
        // slot goes back when the socket is closed.
        let tcp = self.tcp.get_mut(id as usize).and_then(Option::take);
        if let Some(input) = &tcp {
            let _ = self.poll.registry().deregister(&mut mio::unix::SourceFd(&input.stream.stream().as_raw_fd()));
            self.tcp_sessions -= 1;
        }
        let client = self.router.client_id(id);
        let Some(mut s) = self.router.disconnect(id, why) else { return };
        self.shared.closed.fetch_add(1, Ordering::Relaxed);
        s.flush_best_effort();
        if let Outbound::Tcp(t) = s.outbound() {
            self.io.writes += t.stats().writes;
        }
        if !loud {
            tracing::debug!(client, name = %s.name, peer = %s.peer, "disconnected: {why}");
        } else if why.code == RejectCode::Normal {
            tracing::info!(client, name = %s.name, peer = %s.peer, "disconnected: {}", why.reason);
        } else {
            tracing::warn!(client, name = %s.name, peer = %s.peer, "disconnected: {why}");
        }
    }

    /// Stops: each session's queue is flushed until `deadline` (the
    /// monotonic clock), then every client gets CLOSE (shutdown) and is let
    /// go. Returns (sessions closed, deliveries dropped).
    pub(crate) fn shutdown(&mut self, deadline: u64) -> (usize, usize) {
        // Clients handed over but not yet taken are served, then closed.
        self.take_control();
        let clients = self.router.clients();
        let queued = |r: &Router| -> usize {
            r.session_ids().iter().filter_map(|&id| r.session(id)).map(crate::Session::queued).sum()
        };
        while tickwire_shm::os::monotonic_ns() < deadline && queued(&self.router) > 0 {
            self.router.flush(self.now, &mut self.failed);
            std::thread::sleep(Duration::from_micros(100));
        }
        let dropped = queued(&self.router);
        for id in self.router.session_ids() {
            self.close(id, &Disconnect { code: RejectCode::Shutdown, reason: "the router is shutting down".into() });
        }
        self.publish_counters();
        (clients, dropped)
    }
}

/// [`Router::handle_frame`], timed once in [`SAMPLE_EVERY`] frames when
/// metrics are on.
#[inline]
fn handle(
    router: &mut Router,
    times: &Option<Arc<SharedLatencies>>,
    countdown: &mut u32,
    id: u32,
    frame: &[u8],
) -> Result<(), Disconnect> {
    let Some(t) = times else { return router.handle_frame(id, frame) };
    *countdown -= 1;
    if *countdown > 0 {
        return router.handle_frame(id, frame);
    }
    *countdown = SAMPLE_EVERY;
    let start = tickwire_shm::os::monotonic_ns();
    let r = router.handle_frame(id, frame);
    t.record(tickwire_shm::os::monotonic_ns().saturating_sub(start));
    r
}

impl tickwire_agent::Agent for RoutingAgent {
    fn do_work(&mut self) -> usize {
        RoutingAgent::do_work(self)
    }
    fn park(&mut self, timeout: Duration) {
        RoutingAgent::park(self, timeout);
    }
    fn role(&self) -> &str {
        &self.role
    }
}
