//! The router process's agent: finds shared-memory clients, accepts TCP
//! ones, reads their frames into the [`Router`], and flushes its queues.
//!
//! One duty cycle ([`Server::do_work`]):
//! 1. poll every shared-memory client's log in place (no system call);
//! 2. with TCP sessions open, one `epoll_wait(0)` for readable sockets and
//!    new connections (without, once a millisecond, for the listeners);
//! 3. flush every session's queue to its transport;
//! 4. every 20 ms: look for new shared-memory clients (`readdir`), publish
//!    counters.
//!
//! A shared-memory client creates `tw-router-in-ID.log` and the router,
//! finding it, attaches a tethered reader and creates
//! `tw-router-out-ID.log` for the client to read. One router serves a
//! directory: it holds an exclusive `flock` on `DIR/router.lock`, which the
//! kernel releases when the process dies, so a router killed with kill -9
//! never blocks the next start.

use crate::config::RouterConfig;
use crate::routing::{Disconnect, Router};
use crate::session::Outbound;
use crate::tcp::TcpOut;
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tickwire_shm::{Context, Event, LogAppender, LogConfig, LogReader, ReaderOptions};
use tickwire_transport::framing::{FrameError, FrameReader};
use tickwire_transport::tls::{ServerConfig, TlsError, Wire};
use tickwire_wire::client::{RejectCode, HEADER_LEN, IPC_IN_CHANNEL, IPC_OUT_CHANNEL};

/// Frames read from one client per duty cycle (fairness between clients).
const POLL_LIMIT: usize = 256;
/// How often to look for new shared-memory clients and publish counters.
const HOUSEKEEPING_NS: u64 = 20_000_000;
/// How often to accept TCP connections when no TCP session is open.
const ACCEPT_NS: u64 = 1_000_000;
/// The duty cycle reads the clock (for the timers above) once in this many
/// cycles: on a VM a clock read costs as much as polling several clients.
const CLOCK_EVERY: u32 = 16;
/// An idle shared-memory client's log is checked for its end once in this
/// many cycles.
const END_CHECK_EVERY: u32 = 64;

/// Why a router could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Another live router holds the directory.
    #[error("another router serves {dir} (its lock {lock} is held{holder})")]
    Locked {
        /// The directory.
        dir: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// `, by pid N` when known.
        holder: String,
    },
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A file or socket could not be made.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The shared-memory directory could not be opened.
    #[error(transparent)]
    Shm(#[from] tickwire_shm::ShmError),
    /// The TLS certificate or key is unusable.
    #[error("[router.tls] {0}")]
    Tls(#[from] TlsError),
}

/// A shared-memory client's log into the router.
struct IpcInput {
    /// Its session.
    id: u32,
    /// Its stream id (`tw-router-in-STREAM.log`).
    stream: u32,
    reader: LogReader,
}

/// A TCP client's connection.
struct TcpInput {
    stream: Arc<Wire>,
    reader: FrameReader,
}

/// What a shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    /// Sessions open at shutdown.
    pub clients: usize,
    /// Deliveries still queued when the drain time ran out (dropped).
    pub dropped: usize,
}

/// The router agent.
pub struct Server {
    router: Router,
    ctx: Context,
    cfg: RouterConfig,
    _lock: File,
    /// Shared-memory clients, dense: the duty cycle polls each in turn.
    ipc: Vec<IpcInput>,
    /// TCP clients by session id (their epoll token).
    tcp: Vec<Option<TcpInput>>,
    ipc_serving: HashSet<u32>,
    ipc_refused: HashMap<u32, String>,
    poll: Poll,
    events: Events,
    /// The tokens of one poll's events (kept: no allocation per poll).
    tokens: Vec<Token>,
    listeners: Vec<(TcpListener, SocketAddr)>,
    /// TLS on every TCP listener (`[router.tls]`).
    tls: Option<Arc<ServerConfig>>,
    tcp_sessions: usize,
    failed: Vec<(u32, String)>,
    last_housekeeping: u64,
    last_accept: u64,
    /// Duty cycles so far (the clock is read once in [`CLOCK_EVERY`]).
    cycle: u32,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("dir", &self.cfg.dir).field("clients", &self.router.clients()).finish()
    }
}

fn now_ns() -> u64 {
    tickwire_shm::os::monotonic_ns()
}

impl Server {
    /// Takes the directory's lock, opens the counters and the TCP
    /// listeners.
    ///
    /// # Errors
    /// [`StartError`]: another router holds the directory, a listener's
    /// address is taken, or the configuration is invalid.
    pub fn start(cfg: RouterConfig) -> Result<Self, StartError> {
        cfg.check()?;
        std::fs::create_dir_all(&cfg.dir)
            .map_err(|source| StartError::Io { what: cfg.dir.display().to_string(), source })?;
        let lock_path = cfg.dir.join("router.lock");
        let io = |what: &Path, source| StartError::Io { what: what.display().to_string(), source };
        let mut lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock_path)
            .map_err(|e| io(&lock_path, e))?;
        if let Err(e) = lock.try_lock() {
            let holder =
                std::fs::read_to_string(&lock_path).ok().map(|p| format!(", by pid {}", p.trim())).unwrap_or_default();
            return match e {
                std::fs::TryLockError::WouldBlock => {
                    Err(StartError::Locked { dir: cfg.dir.clone(), lock: lock_path, holder })
                }
                std::fs::TryLockError::Error(e) => Err(io(&lock_path, e)),
            };
        }
        lock.set_len(0).and_then(|()| write!(lock, "{}", std::process::id())).map_err(|e| io(&lock_path, e))?;
        let ctx = Context::new(&cfg.dir)?;
        let poll = Poll::new().map_err(|e| io(Path::new("epoll"), e))?;
        let mut listeners = Vec::new();
        for (i, addr) in cfg.listen_addrs()?.into_iter().enumerate() {
            let mut l = TcpListener::bind(addr)
                .map_err(|source| StartError::Io { what: format!("listen on tcp://{addr}"), source })?;
            let local = l.local_addr().map_err(|e| io(Path::new("listener"), e))?;
            poll.registry()
                .register(&mut l, Token(usize::MAX - i), Interest::READABLE)
                .map_err(|e| io(Path::new("epoll"), e))?;
            listeners.push((l, local));
        }
        let tls = match &cfg.tls {
            Some(t) => Some(tickwire_transport::tls::server_config(&t.cert, &t.key)?),
            None => None,
        };
        let router = Router::new(&cfg.name, (&cfg.limits).into(), Some(Arc::clone(ctx.counters())));
        Ok(Self {
            router,
            ctx,
            cfg,
            _lock: lock,
            ipc: Vec::new(),
            tcp: Vec::new(),
            ipc_serving: HashSet::new(),
            ipc_refused: HashMap::new(),
            poll,
            events: Events::with_capacity(256),
            tokens: Vec::with_capacity(256),
            listeners,
            tls,
            tcp_sessions: 0,
            failed: Vec::new(),
            last_housekeeping: 0,
            last_accept: 0,
            cycle: 0,
        })
    }

    /// What it listens on, for the line a router prints at start.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.cfg.ipc {
            parts.push(format!("ipc in {}", self.cfg.dir.display()));
        }
        let scheme = if self.tls.is_some() { "tls" } else { "tcp" };
        parts.extend(self.listeners.iter().map(|(_, a)| format!("{scheme}://{a}")));
        parts.join(", ")
    }

    /// The TCP listeners' bound addresses (port 0 resolved).
    pub fn tcp_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().map(|(_, a)| *a).collect()
    }

    /// The routing core (counts, sessions).
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// One duty cycle; returns the work done (0: idle).
    pub fn do_work(&mut self) -> usize {
        self.cycle = self.cycle.wrapping_add(1);
        let mut work = self.poll_ipc();
        if self.tcp_sessions > 0 {
            work += self.poll_tcp();
        }
        work += self.router.flush(&mut self.failed);
        while let Some((id, why)) = self.failed.pop() {
            self.close(id, &Disconnect { code: RejectCode::Normal, reason: format!("connection failed: {why}") });
        }
        if self.cycle.is_multiple_of(CLOCK_EVERY) {
            let now = now_ns();
            if self.tcp_sessions == 0 && now.saturating_sub(self.last_accept) >= ACCEPT_NS {
                self.last_accept = now;
                work += self.poll_tcp();
            }
            if now.saturating_sub(self.last_housekeeping) >= HOUSEKEEPING_NS {
                self.last_housekeeping = now;
                if self.cfg.ipc {
                    work += self.scan_ipc();
                }
                self.router.publish_counters();
            }
        }
        work
    }

    fn poll_ipc(&mut self) -> usize {
        let mut work = 0;
        let check_end = self.cycle.is_multiple_of(END_CHECK_EVERY);
        let mut i = 0;
        while let Some(input) = self.ipc.get_mut(i) {
            let id = input.id;
            let router = &mut self.router;
            let mut why: Option<Disconnect> = None;
            let r = input.reader.poll(
                |ev| match ev {
                    Event::Message(m) if why.is_none() => {
                        if let Err(d) = router.handle_frame(id, m.payload) {
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
            match why {
                // Closing takes it out of `ipc` (the last one moves to `i`).
                Some(d) => self.close(id, &d),
                None => i += 1,
            }
        }
        work
    }

    fn poll_tcp(&mut self) -> usize {
        if self.poll.poll(&mut self.events, Some(Duration::ZERO)).is_err() {
            return 0;
        }
        let mut tokens = std::mem::take(&mut self.tokens);
        tokens.clear();
        tokens.extend(self.events.iter().map(|e| e.token()));
        let mut work = 0;
        for &t in &tokens {
            if t.0 > usize::MAX - 64 {
                work += self.accept(usize::MAX - t.0);
                continue;
            }
            let id = t.0;
            let Some(Some(TcpInput { stream, reader })) = self.tcp.get_mut(id) else { continue };
            let router = &mut self.router;
            let mut why: Option<Disconnect> = None;
            let r = reader.read_from(&**stream, |f| match router.handle_frame(id as u32, f) {
                Ok(()) => true,
                Err(d) => {
                    why = Some(d);
                    false
                }
            });
            match r {
                Ok(n) => work += n,
                Err(FrameError::Closed(e)) => {
                    why.get_or_insert(Disconnect { code: RejectCode::Normal, reason: e });
                }
                Err(e @ FrameError::TooLarge { .. }) => {
                    why.get_or_insert(Disconnect { code: RejectCode::TooLarge, reason: e.to_string() });
                }
                Err(e) => {
                    why.get_or_insert(Disconnect::protocol(e.to_string()));
                }
            }
            // TLS records the read left unsent (the handshake's replies
            // when the socket was full) go with the session's next flush.
            if why.is_none() && stream.wants_write() {
                self.router.mark_pending(id as u32);
            }
            if let Some(d) = why {
                self.close(id as u32, &d);
            }
        }
        self.tokens = tokens;
        work
    }

    fn accept(&mut self, listener: usize) -> usize {
        let mut n = 0;
        loop {
            let Some((l, _)) = self.listeners.get(listener) else { return n };
            let (mut stream, peer) = match l.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return n,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    return n;
                }
            };
            let _ = stream.set_nodelay(true);
            // Registered under the id its session will get.
            let next = self.router.next_id();
            if let Err(e) = self.poll.registry().register(&mut stream, Token(next as usize), Interest::READABLE) {
                tracing::warn!("tcp://{peer}: {e}");
                continue;
            }
            let stream = std::net::TcpStream::from(stream);
            let wire = match &self.tls {
                Some(cfg) => Wire::tls_server(stream, cfg),
                None => Ok(Wire::plain(stream)),
            };
            let stream = match wire {
                Ok(w) => Arc::new(w),
                Err(e) => {
                    tracing::warn!("tcp://{peer}: {e}");
                    continue;
                }
            };
            let id = self.router.attach(Outbound::Tcp(TcpOut::new(Arc::clone(&stream))), format!("tcp {peer}"));
            debug_assert_eq!(id, next);
            let i = id as usize;
            if self.tcp.len() <= i {
                self.tcp.resize_with(i + 1, || None);
            }
            self.tcp[i] =
                Some(TcpInput { stream, reader: FrameReader::new(HEADER_LEN, self.router.limits().max_frame) });
            self.tcp_sessions += 1;
            tracing::info!(client = id, %peer, "tcp client connected");
            n += 1;
        }
    }

    /// Ends a session: CLOSE offered, transport dropped (an IPC client's
    /// log out of the router is removed: the router made it).
    fn close(&mut self, id: u32, why: &Disconnect) {
        // The input goes first, whatever the session's state: the duty
        // cycle must never meet it again.
        if let Some(i) = self.ipc.iter().position(|input| input.id == id) {
            let input = self.ipc.swap_remove(i);
            self.ipc_serving.remove(&input.stream);
            // Its log stays until the client goes; do not take it again.
            self.ipc_refused.insert(input.stream, why.to_string());
        } else if let Some(TcpInput { stream, .. }) = self.tcp.get_mut(id as usize).and_then(Option::take) {
            use std::os::fd::AsRawFd;
            let _ = self.poll.registry().deregister(&mut mio::unix::SourceFd(&stream.stream().as_raw_fd()));
            self.tcp_sessions -= 1;
        }
        let Some(mut s) = self.router.disconnect(id, why) else { return };
        s.flush_best_effort();
        if why.code == RejectCode::Normal {
            tracing::info!(client = id, name = %s.name, peer = %s.peer, "disconnected: {}", why.reason);
        } else {
            tracing::warn!(client = id, name = %s.name, peer = %s.peer, "disconnected: {why}");
        }
    }

    /// Looks for shared-memory clients' logs not yet served.
    fn scan_ipc(&mut self) -> usize {
        let Ok(dir) = std::fs::read_dir(&self.cfg.dir) else { return 0 };
        let prefix = format!("{IPC_IN_CHANNEL}-");
        let mut seen = HashSet::new();
        let mut found = Vec::new();
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(id) =
                name.to_str().and_then(|n| n.strip_prefix(&prefix)?.strip_suffix(".log")?.parse::<u32>().ok())
            else {
                continue;
            };
            seen.insert(id);
            if !self.ipc_serving.contains(&id) && !self.ipc_refused.contains_key(&id) {
                found.push(id);
            }
        }
        // A refused log that is gone may come back as a new client.
        self.ipc_refused.retain(|id, _| seen.contains(id));
        let n = found.len();
        for stream in found {
            match self.attach_ipc(stream) {
                Ok(id) => {
                    self.ipc_serving.insert(stream);
                    tracing::info!(client = id, stream, "ipc client connected");
                }
                // Busy for a moment (its join lock, all reader slots taken):
                // try again at the next scan.
                Err(e @ (tickwire_shm::ShmError::LockTimeout { .. } | tickwire_shm::ShmError::NoFreeSlot { .. })) => {
                    tracing::debug!(stream, "ipc client log busy: {e}");
                }
                Err(e) => {
                    tracing::warn!(stream, "ipc client log not served: {e}");
                    self.ipc_refused.insert(stream, e.to_string());
                }
            }
        }
        n
    }

    fn attach_ipc(&mut self, stream: u32) -> Result<u32, tickwire_shm::ShmError> {
        let opts = ReaderOptions::default();
        let reader = self.ctx.reader(IPC_IN_CHANNEL, stream, opts)?;
        if reader.position() > 0 {
            // A client waits for the router to attach before its HELLO, so
            // a log that has carried frames belongs to an ended session (a
            // previous router's); its client starts a new one when it notices.
            return Err(tickwire_shm::ShmError::Config(format!(
                "{IPC_IN_CHANNEL}-{stream}: carried an earlier session (position {})",
                reader.position()
            )));
        }
        let pid = reader.descriptor().publisher.pid;
        let cfg = LogConfig::with_capacity(self.cfg.ipc_log_bytes);
        let out = LogAppender::create(self.ctx.dir(), IPC_OUT_CHANNEL, stream, &cfg, self.ctx.counters())?;
        let id = self.router.attach(Outbound::Ipc(out), format!("ipc pid {pid}"));
        self.ipc.push(IpcInput { id, stream, reader });
        Ok(id)
    }

    /// Stops: no new clients; each session's queue is flushed for up to
    /// `drain`, then every client gets CLOSE (shutdown) and is let go.
    pub fn shutdown(mut self, drain: Duration) -> ShutdownReport {
        let deadline = now_ns() + drain.as_nanos() as u64;
        let clients = self.router.clients();
        while now_ns() < deadline
            && self.router.session_ids().iter().any(|&id| self.router.session(id).is_some_and(|s| s.queued() > 0))
        {
            self.router.flush(&mut self.failed);
            std::thread::sleep(Duration::from_micros(100));
        }
        let dropped =
            self.router.session_ids().iter().filter_map(|&id| self.router.session(id)).map(|s| s.queued()).sum();
        for id in self.router.session_ids() {
            self.close(id, &Disconnect { code: RejectCode::Shutdown, reason: "the router is shutting down".into() });
        }
        self.router.publish_counters();
        let _ = std::fs::remove_file(self.cfg.dir.join("router.lock"));
        ShutdownReport { clients, dropped }
    }
}

impl tickwire_agent::Agent for Server {
    fn do_work(&mut self) -> usize {
        Server::do_work(self)
    }
    fn role(&self) -> &str {
        "router"
    }
}
