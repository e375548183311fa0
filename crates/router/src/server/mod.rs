//! The router process: finds shared-memory clients, accepts TCP ones, and
//! hands each to a routing agent ([`RoutingAgent`]).
//!
//! The first routing agent runs on the caller's thread inside
//! [`Server::do_work`]; with `agents = N` in the config, the other N - 1
//! run on threads of their own (pinned by `cpus`), linked as
//! [`crate::peers`] describes. Each new client goes to the agent serving
//! the fewest. On top of the first agent's duty cycle, the server:
//! 1. once a millisecond, accepts TCP connections (non-blocking `accept`),
//!    refusing those past a limit ([`crate::accept`]);
//! 2. on the same beat, takes shared-memory clients' logins from its Unix
//!    socket, `DIR/router.sock` ([`crate::ipc_login`]).
//!
//! A shared-memory client creates its log `tw-router-in-ID` in a sealed
//! memfd and sends it, its ID and HELLO on the socket; the router, having
//! checked that the file cannot shrink and that the log is the connecting
//! process's, attaches a tethered reader, creates `tw-router-out-ID` the
//! same way and hands it to the client beside the answer, and hands the
//! session its HELLO. One router serves a
//! directory: it holds an exclusive `flock` on `DIR/router.lock`, which the
//! kernel releases when the process dies, so a router killed with kill -9
//! never blocks the next start.
//!
//! Beside this file: `wiring` (the agents, their rings and channels, the
//! cluster's agent among them) and `ipc` (shared-memory logins).

mod ipc;
mod wiring;

use crate::accept::Acceptor;
use crate::access::{AuthWorker, UserConfig, Users, UsersError};
use crate::agent::{AgentShared, Control, Mailbox, RoutingAgent};
use crate::cluster::ClusterAgent;
use crate::config::RouterConfig;
use crate::counters::Totals;
use crate::guaranteed::Guaranteed;
use crate::ipc_login::{IpcLogin, SOCKET_FILE};
use crate::lock::LOCK_FILE;
use crate::metrics::MetricsServer;
use crate::routing::replicated::Replication;
use crate::routing::Router;
use crate::status::{RouterStatus, StatusWriter, STATUS_FILE};
use std::collections::HashSet;
use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;
use tickwire_agent::{AgentRunner, Idle};
use tickwire_shm::{Context, Dir};
use tickwire_transport::tls::TlsError;

/// How often to look for new shared-memory clients.
const HOUSEKEEPING_NS: u64 = 20_000_000;
/// How often to accept TCP connections.
const ACCEPT_NS: u64 = 1_000_000;

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
    /// The journal cannot be opened (damage, a lock, I/O).
    #[error(transparent)]
    Journal(#[from] tickwire_journal::JournalError),
    /// The high-availability group cannot be joined (its log, its
    /// listener).
    #[error("high-availability group: {0}")]
    Ha(#[from] tickwire_ha::HaError),
    /// The TLS certificate or key is unusable.
    #[error("[router.tls] {0}")]
    Tls(#[from] TlsError),
    /// A routing agent's thread could not start (or be pinned).
    #[error("routing agent {agent}: {source}")]
    Agent {
        /// Which agent.
        agent: usize,
        /// Why.
        source: tickwire_agent::AgentError,
    },
}

/// What a shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ShutdownReport {
    /// Sessions open at shutdown.
    pub clients: usize,
    /// Deliveries still queued when the drain time ran out (dropped).
    pub dropped: usize,
    /// Every agent's totals, final.
    pub totals: Totals,
}

/// Where the cluster's agent runs.
enum ClusterThread {
    /// On a thread of its own.
    Own(AgentRunner<ClusterAgent>),
    /// On the first routing agent's (the server's), sharing its doorbell:
    /// one routing agent and `[router.cluster] thread = "shared"`.
    Shared(Box<ClusterAgent>),
}

/// The router: the first routing agent, the others' threads, and the
/// finding of clients.
pub struct Server {
    /// The first routing agent (run by [`Server::do_work`]).
    agent: RoutingAgent,
    /// The others, on their own threads.
    runners: Vec<AgentRunner<RoutingAgent>>,
    /// The cluster's agent ([`crate::cluster`]).
    cluster: Option<ClusterThread>,
    /// Every agent's control channel, and what it shares.
    controls: Vec<Mailbox>,
    shared: Vec<Arc<AgentShared>>,
    /// Clients handed to each agent so far.
    assigned: Vec<usize>,
    ctx: Context,
    cfg: RouterConfig,
    _lock: File,
    /// The TCP listeners (TLS on each with `[router.tls]`), their
    /// connections' count and limits.
    acceptor: Acceptor,
    /// Shared-memory clients' logins (`DIR/router.sock`), unless `ipc = false`.
    ipc_login: Option<IpcLogin>,
    /// The streams of the shared-memory clients served.
    ipc_serving: HashSet<u32>,
    /// Shared-memory streams whose sessions ended (from the agents).
    gone: Receiver<(u32, String)>,
    last_housekeeping: u64,
    last_accept: u64,
    /// The Prometheus endpoint, if configured.
    metrics: Option<MetricsServer>,
    /// Writes `router-status.json`.
    status: Option<StatusWriter>,
    /// What its cluster listens on, for [`Server::describe`] (empty: none).
    cluster_line: String,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("dir", &self.cfg.dir).field("agents", &self.controls.len()).finish()
    }
}

fn now_ns() -> u64 {
    tickwire_shm::os::monotonic_ns()
}

impl Server {
    /// Takes the directory's lock, opens the counters and the TCP
    /// listeners, and starts the routing agents after the first.
    ///
    /// # Errors
    /// [`StartError`]: another router holds the directory, a listener's
    /// address is taken, the configuration is invalid, or an agent's
    /// thread cannot be pinned.
    pub fn start(cfg: RouterConfig) -> Result<Self, StartError> {
        cfg.check()?;
        if let (Some(u), true) = (&cfg.nats_token_user, cfg.users.is_empty()) {
            let why = "a [[users]] entry with a password_hash (the token is its password): there are no users";
            return Err(crate::config::ConfigError::Value { key: "nats_token_user", value: u.clone(), why }.into());
        }
        let lock = crate::lock::take(&cfg)?;
        let io = |what: &Path, source| StartError::Io { what: what.display().to_string(), source };
        let ctx = Context::new(&cfg.dir)?;
        let mut listeners = Vec::new();
        let native = cfg.listen_addrs()?.into_iter().map(|a| (a, false));
        for (addr, nats) in native.chain(cfg.nats_addrs()?.into_iter().map(|a| (a, true))) {
            let what = if nats { format!("NATS listener on {addr}") } else { format!("listen on tcp://{addr}") };
            let l = TcpListener::bind(addr).map_err(|source| StartError::Io { what, source })?;
            l.set_nonblocking(true).map_err(|e| io(Path::new("listener"), e))?;
            let local = l.local_addr().map_err(|e| io(Path::new("listener"), e))?;
            listeners.push((l, local, nats));
        }
        let tls = match &cfg.tls {
            Some(t) => Some(t.server_config()?),
            None => None,
        };
        let users = Arc::new(Users::new(&cfg.users).map_err(crate::config::ConfigError::from)?);
        let guaranteed = match &cfg.journal {
            Some(t) => {
                let (mut j, g) = t.to_config()?;
                // No spare core named: the routing agent's, which yields to
                // it while an fsync is awaited.
                j.sync_cpu = j.sync_cpu.or(cfg.agent_cpu(0));
                let (g, recovery) = Guaranteed::open(j, g)?;
                match &recovery.cut {
                    Some(_) => tracing::warn!("journal {}: {recovery}", t.dir.display()),
                    None => tracing::info!("journal {}: {recovery}", t.dir.display()),
                }
                let ha = match &cfg.ha {
                    Some(h) => {
                        let hc = h.to_config(&t.dir, t.sync != "os")?;
                        tracing::info!(group = %hc.group, member = hc.id, members = hc.members.len(), "joining the high-availability group");
                        Some(Replication::start(hc)?)
                    }
                    None => None,
                };
                Some((g, ha))
            }
            None => None,
        };
        let cluster = match &cfg.cluster {
            Some(c) => {
                let mut s = c.to_settings(&cfg.name, cfg.limits.max_frame)?;
                if s.clients.is_empty() {
                    let loopback = s.advertise.parse::<SocketAddr>().is_ok_and(|a| a.ip().is_loopback());
                    s.clients = client_uris(&listeners, tls.is_some(), loopback);
                }
                Some(s)
            }
            None => None,
        };
        let (mut agents, controls, gone, cluster) =
            Self::agents(&cfg, &ctx, Arc::clone(&users), cluster).map_err(|e| io(Path::new("router threads"), e))?;
        let cluster_status = cluster.as_ref().map(ClusterAgent::status);
        let scheme = if cfg.cluster.as_ref().is_some_and(|c| c.tls.is_some()) { "tls" } else { "tcp" };
        let cluster_line =
            cluster.as_ref().map(|c| format!("cluster {} on {scheme}://{}", c.cluster_name(), c.listening()));
        if let (Some((g, ha)), Some(a)) = (guaranteed, agents.first_mut()) {
            a.router.set_guaranteed(g);
            if let Some(r) = ha {
                a.router.set_replication(r);
            }
        }
        let shared: Vec<_> = agents.iter().map(|a| Arc::clone(&a.shared)).collect();
        let metrics = match cfg.metrics_addr()? {
            Some(addr) => {
                let times = agents.iter_mut().map(RoutingAgent::time_forwarding).collect();
                let journal = agents.first().and_then(|a| {
                    let j = a.router.guaranteed()?.journal();
                    Some(crate::metrics::JournalMetrics {
                        status: Arc::clone(&a.shared),
                        append: j.append_latencies(),
                        fsync: j.fsync_latencies(),
                    })
                });
                let cluster = cluster_status.clone().map(crate::metrics::ClusterMetrics);
                let m = MetricsServer::start(addr, Arc::clone(ctx.counters()), times, journal, cluster)
                    .map_err(|source| StartError::Io { what: format!("metrics on {addr}"), source })?;
                Some(m)
            }
            None => None,
        };
        let agent = agents.remove(0);
        let idle = Idle::parse(&cfg.idle).map_err(|_| crate::config::ConfigError::Value {
            key: "idle",
            value: cfg.idle.clone(),
            why: "one of spin, yield, backoff, park, wait",
        })?;
        let mut runners = Vec::new();
        let n_agents = agents.len() + 1;
        for (k, a) in agents.into_iter().enumerate() {
            match AgentRunner::start(a, idle, cfg.agent_cpu(k + 1)) {
                Ok(runner) => runners.push(runner),
                Err(source) => {
                    // The agents already running stop with the start.
                    for r in runners.drain(..) {
                        drop(r.stop());
                    }
                    return Err(StartError::Agent { agent: k + 1, source });
                }
            }
        }
        let cluster = match cluster {
            Some(c) if c.shares_thread() => Some(ClusterThread::Shared(Box::new(c))),
            // It idles as the routing agents do (`idle`): a link's reader
            // sleeping in a back-off adds that sleep to every hop.
            Some(c) => match AgentRunner::start(c, idle, None) {
                Ok(r) => Some(ClusterThread::Own(r)),
                Err(source) => {
                    for r in runners.drain(..) {
                        drop(r.stop());
                    }
                    return Err(StartError::Agent { agent: n_agents, source });
                }
            },
            None => None,
        };
        let ipc_login = if cfg.ipc {
            let limits = crate::Limits::from(&cfg.limits);
            let mode = if Dir::existing(&cfg.dir)?.file_mode() & 0o040 != 0 { 0o660 } else { 0o600 };
            let timeout = limits.hello_timeout.as_nanos() as u64;
            let l = IpcLogin::bind(&cfg.dir, mode, limits.max_frame, timeout)
                .map_err(|source| StartError::Io { what: format!("{}/{SOCKET_FILE}", cfg.dir.display()), source })?;
            Some(l)
        } else {
            None
        };
        let n = controls.len();
        let acceptor = Acceptor::new(listeners, tls, &cfg.limits, Some(ctx.counters()), &cfg.name);
        let mut server = Self {
            agent,
            runners,
            cluster,
            controls,
            shared,
            assigned: vec![0; n],
            ctx,
            cfg,
            _lock: lock,
            acceptor,
            ipc_login,
            ipc_serving: HashSet::new(),
            gone,
            last_housekeeping: 0,
            last_accept: 0,
            metrics,
            status: None,
            cluster_line: cluster_line.unwrap_or_default(),
        };
        let base = RouterStatus {
            name: server.cfg.name.clone(),
            pid: std::process::id(),
            as_of_ms: 0,
            agents: server.controls.len(),
            listening: server.describe(),
            totals: Default::default(),
            clients: Vec::new(),
            journal: None,
            cluster: None,
        };
        let writer = StatusWriter::start(server.cfg.dir.clone(), base, server.shared.clone(), cluster_status)
            .map_err(|e| io(Path::new("router-status thread"), e))?;
        server.status = Some(writer);
        Ok(server)
    }

    /// What it listens on, for the line a router prints at start.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if self.cfg.ipc {
            parts.push(format!("ipc in {}", self.cfg.dir.display()));
        }
        let scheme = if self.acceptor.is_tls() { "tls" } else { "tcp" };
        let mutual =
            if self.cfg.tls.as_ref().is_some_and(|t| t.client_ca.is_some()) { " (client certificates)" } else { "" };
        parts.extend(self.acceptor.addrs().iter().map(|a| format!("{scheme}://{a}{mutual}")));
        parts.extend(self.acceptor.nats_addrs().iter().map(|a| format!("nats://{a}")));
        if let Some(m) = &self.metrics {
            parts.push(format!("metrics on http://{}/metrics", m.addr()));
        }
        let mut line = parts.join(", ");
        if !self.cluster_line.is_empty() {
            line.push_str(&format!(", {}", self.cluster_line));
        }
        if self.controls.len() > 1 {
            line.push_str(&format!(" ({} routing agents)", self.controls.len()));
        }
        line
    }

    /// Replaces the users (a reload): sessions of users removed, or whose
    /// password changed, end; the others carry on under their new ACLs.
    /// Returns how many users there are now.
    ///
    /// # Errors
    /// [`UsersError`] naming the bad entry; the old users stay.
    pub fn set_users(&mut self, users: &[UserConfig]) -> Result<usize, UsersError> {
        let users = Arc::new(Users::new(users)?);
        let n = users.len();
        self.agent_auth().set_users(Arc::clone(&users));
        let users = (!users.is_empty()).then_some(users);
        for tx in &self.controls {
            let _ = tx.send(Control::Users(users.clone()));
        }
        Ok(n)
    }

    /// Reads the TLS certificate, key and client CA again (a reload):
    /// connections accepted from now on use them; those open keep the
    /// handshake they made. `files` must be `Some` exactly when the router
    /// started with `[router.tls]` (listeners cannot change scheme).
    ///
    /// # Errors
    /// [`TlsError`] naming the file at fault, or a `files` that would turn
    /// TLS on or off; the old configuration stays.
    pub fn set_tls(&mut self, files: Option<&crate::config::TlsFiles>) -> Result<(), TlsError> {
        match (files, self.acceptor.is_tls()) {
            (Some(f), true) => {
                self.acceptor.set_tls(f.server_config()?);
                self.cfg.tls = Some(f.clone());
                Ok(())
            }
            (None, false) => Ok(()),
            (Some(_), false) => Err(TlsError::Config("TLS cannot be turned on by a reload: restart the router".into())),
            (None, true) => Err(TlsError::Config("TLS cannot be turned off by a reload: restart the router".into())),
        }
    }

    fn agent_auth(&self) -> &AuthWorker {
        self.agent.auth()
    }

    /// The metrics endpoint's address, if on (port 0 resolved).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().map(MetricsServer::addr)
    }

    /// The TCP listeners' bound addresses (port 0 resolved).
    pub fn tcp_addrs(&self) -> Vec<SocketAddr> {
        self.acceptor.addrs()
    }

    /// The NATS listeners' bound addresses.
    pub fn nats_addrs(&self) -> Vec<SocketAddr> {
        self.acceptor.nats_addrs()
    }

    /// What takes TCP connections: those open and their limits, the
    /// refusals.
    pub fn acceptor(&self) -> &Acceptor {
        &self.acceptor
    }

    /// The first routing agent's core (its sessions, counts).
    pub fn router(&self) -> &Router {
        &self.agent.router
    }

    /// Every agent's totals: the first's now, the others' as of their last
    /// housekeeping (at most 20 ms old).
    pub fn totals(&self) -> Totals {
        let mut t = self.agent.router.totals();
        for s in &self.shared[1..] {
            if let Ok(o) = s.totals.lock() {
                t += *o;
            }
        }
        t
    }

    /// System calls made on TCP clients' links across every agent (the
    /// others' as of their last housekeeping).
    pub fn io_counts(&self) -> crate::agent::IoCounts {
        let mut io = self.agent.io_counts();
        for s in &self.shared[1..] {
            if let Ok(o) = s.io.lock() {
                io += *o;
            }
        }
        io
    }

    /// Sessions open across every agent (counting clients handed over and
    /// not yet taken).
    pub fn clients(&self) -> usize {
        self.assigned.iter().zip(&self.shared).map(|(a, s)| a - s.closed.load(Ordering::Relaxed).min(*a)).sum()
    }

    /// One duty cycle of the first agent, then the server's own work;
    /// returns the work done (0: idle).
    pub fn do_work(&mut self) -> usize {
        let mut work = self.agent.do_work();
        if let Some(ClusterThread::Shared(c)) = &mut self.cluster {
            work += tickwire_agent::Agent::do_work(c.as_mut());
        }
        let (now, ticked) = self.agent.clock();
        if ticked {
            if now.saturating_sub(self.last_accept) >= ACCEPT_NS {
                self.last_accept = now;
                let mut taken = Vec::new();
                work += self.acceptor.accept(now, |wire, peer, slot, nats| taken.push((wire, peer, slot, nats)));
                for (wire, peer, slot, nats) in taken {
                    self.hand(Control::Tcp { wire: Arc::new(wire), peer, slot, nats });
                }
                work += self.take_logins(now);
            }
            if now.saturating_sub(self.last_housekeeping) >= HOUSEKEEPING_NS {
                self.last_housekeeping = now;
                if let Some(l) = &self.ipc_login {
                    self.acceptor.set_ipc_refused(l.refused);
                }
                self.acceptor.housekeeping(now);
                while let Ok((stream, _)) = self.gone.try_recv() {
                    self.ipc_serving.remove(&stream);
                }
            }
        }
        work
    }

    /// Each routing agent's doorbell: times another thread woke it, and
    /// times it waited (the first's counts the cluster's agent's too when
    /// it shares that thread).
    pub fn doorbells(&self) -> Vec<(u64, u64)> {
        self.controls.iter().map(Mailbox::wakes).collect()
    }

    /// Waits up to `timeout` for work for the first agent (run on the
    /// server's thread): see [`RoutingAgent::park`]; with the cluster's
    /// agent on this thread, for its links and rings too. New connections
    /// are looked for once in 16 duty cycles, so they may wait up to 16
    /// of these waits.
    pub fn park(&mut self, timeout: Duration) {
        let Some(ClusterThread::Shared(c)) = &self.cluster else {
            self.agent.park(timeout);
            return;
        };
        // Both are rung on one doorbell; the least wait holds only if
        // nothing waits for a timer in either.
        let rung = self.agent.rung() && !c.holding();
        let timeout = crate::agent::least_wait(rung, timeout);
        let a = &self.agent;
        a.bell().park(&[a.poll_fd(), c.poll_fd()], timeout, || a.has_inbound() || c.has_forwarded());
    }

    /// The agent to give a new client: the one serving the fewest.
    fn pick(&mut self) -> usize {
        let load = |k: usize| self.assigned[k].saturating_sub(self.shared[k].closed.load(Ordering::Relaxed));
        let k = (0..self.controls.len()).min_by_key(|&k| load(k)).unwrap_or(0);
        self.assigned[k] += 1;
        k
    }

    fn hand(&mut self, c: Control) {
        let k = self.pick();
        // An agent's receiver lives as long as the server.
        let _ = self.controls[k].send(c);
    }

    /// Stops: no new clients; each agent flushes its sessions' queues for
    /// up to `drain`, then every client gets CLOSE (shutdown) and is let go.
    pub fn shutdown(mut self, drain: Duration) -> ShutdownReport {
        let deadline = now_ns() + drain.as_nanos() as u64;
        let mut agents = vec![];
        match self.cluster.take() {
            Some(ClusterThread::Own(c)) => drop(c.stop()),
            Some(ClusterThread::Shared(c)) => drop(c),
            None => {}
        }
        for r in self.runners.drain(..) {
            agents.push(r.stop());
        }
        let mut report = ShutdownReport::default();
        for a in std::iter::once(&mut self.agent).chain(agents.iter_mut()) {
            let (clients, dropped) = a.shutdown(deadline);
            report.clients += clients;
            report.dropped += dropped;
            report.totals += a.router.totals();
        }
        // The writer first: it must not write the file again.
        self.status = None;
        if let Ok(d) = Dir::existing(&self.cfg.dir) {
            let _ = d.remove(STATUS_FILE);
        }
        if let Ok(d) = Dir::existing(&self.cfg.dir) {
            let _ = d.remove(LOCK_FILE);
        }
        report
    }
}

impl Drop for Server {
    /// A server dropped without [`Server::shutdown`] still stops the
    /// routing agents on threads of their own.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            if let Some(ClusterThread::Own(c)) = self.cluster.take() {
                drop(c.stop());
            }
            for r in self.runners.drain(..) {
                drop(r.stop());
            }
        }
    }
}

/// The server's thread idling as its [`Idle`] strategy says, waking on
/// work ([`Server::park`]).
impl tickwire_agent::Parker for Server {
    fn park(&mut self, timeout: Duration) {
        Server::park(self, timeout);
    }
}

impl tickwire_agent::Agent for Server {
    fn do_work(&mut self) -> usize {
        Server::do_work(self)
    }
    fn park(&mut self, timeout: Duration) {
        Server::park(self, timeout);
    }
    fn role(&self) -> &str {
        "router"
    }
}

/// Where this router's clients connect, told to the other routers of its
/// cluster for their clients: its plain TCP listeners (`tcp://`) and NATS
/// listeners (`nats://`) bound to an address others can dial: not
/// `0.0.0.0`, and loopback only in a cluster on one host (`advertise` on
/// loopback). TLS listeners are not told by default: a client checks the
/// router's certificate against the name it dials, which an address
/// rarely is (`[router.cluster] client_advertise` names them).
fn client_uris(listeners: &[(TcpListener, SocketAddr, bool)], tls: bool, loopback: bool) -> String {
    let mut uris = Vec::new();
    for (_, addr, nats) in listeners {
        let scheme = match (nats, tls) {
            (true, _) => "nats",
            (false, true) => "tls",
            (false, false) => "tcp",
        };
        let why = if addr.ip().is_unspecified() {
            "it listens on every address"
        } else if addr.ip().is_loopback() && !loopback {
            "loopback, and the cluster spans hosts"
        } else if scheme == "tls" {
            "a certificate names a host, not an address"
        } else {
            uris.push(format!("{scheme}://{addr}"));
            continue;
        };
        tracing::info!(
            "cluster: clients of the other routers are not told of {scheme}://{addr} ({why}): set [router.cluster] \
             client_advertise to where they reach this router"
        );
    }
    uris.join(",")
}
