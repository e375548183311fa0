//! `tickwire router`: the message router as a long-running process.

use crate::config::Settings;
use clap::Args;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tickwire_agent::stop::{self, StopSignals};
use tickwire_agent::Idle;
use tickwire_router::config::TlsFiles;
use tickwire_router::{RouterConfig, Server};

mod status;

/// Options of `tickwire router` (each overrides the config file's `[router]`).
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct RouterArgs {
    #[command(subcommand)]
    action: Option<RouterAction>,
    /// TCP listener, tcp://HOST:PORT (repeat for several) [default: tcp://127.0.0.1:7600]; with --tls-cert, TLS.
    #[arg(long)]
    listen: Vec<String>,
    /// Serve no TCP clients.
    #[arg(long, conflicts_with = "listen")]
    no_tcp: bool,
    /// Also serve NATS clients (the NATS client protocol) on HOST:PORT, plain TCP (repeat for several).
    #[arg(long)]
    nats_listen: Vec<String>,
    /// Keep the last message of each topic this pattern matches, for subscribers that ask (repeat for several).
    #[arg(long)]
    cache: Vec<String>,
    /// Serve Prometheus metrics on HOST:PORT at /metrics (loopback unless you say otherwise); off by default.
    #[arg(long)]
    metrics: Option<String>,
    /// What to do with a client whose queue is full: drop-oldest, disconnect or back-pressure [default: drop-oldest].
    #[arg(long, value_parser = str::parse::<tickwire_router::SlowConsumer>)]
    slow_consumer: Option<tickwire_router::SlowConsumer>,
    /// Serve no shared-memory clients.
    #[arg(long)]
    no_ipc: bool,
    /// Pin the (first) routing agent to this CPU.
    #[arg(long, conflicts_with = "cpus")]
    cpu: Option<usize>,
    /// Routing agents: threads, each serving its share of the clients [default: 1].
    #[arg(long)]
    agents: Option<usize>,
    /// Pin routing agent K to the K-th CPU of this list (cycling), e.g. 1,0.
    #[arg(long, value_delimiter = ',')]
    cpus: Vec<usize>,
    /// Idle strategy: spin (lowest latency, one core), yield, backoff, park, wait (routers sharing a CPU).
    #[arg(long)]
    idle: Option<String>,
    /// Speak TLS on every TCP listener with this certificate chain (PEM); needs --tls-key.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Mutual TLS: clients must show a certificate this CA (PEM) signed, and log in as the user it names
    /// (subject CN, else its first DNS or e-mail SAN) without a password ([router.tls] client_ca).
    #[arg(long)]
    tls_client_ca: Option<std::path::PathBuf>,
    /// Keep a journal in DIR: guaranteed publishes and durable subscriptions ([router.journal] in the config).
    #[arg(long)]
    journal: Option<std::path::PathBuf>,
    /// With --journal: when a message is durable: os (page cache: survives a crash, not a power cut), group, fsync [default: group].
    #[arg(long, requires = "journal", value_parser = ["os", "group", "fsync"])]
    sync: Option<String>,
    /// With --journal: start despite damage before the journal's tail (the damaged records are skipped and reported).
    #[arg(long)]
    journal_skip_corrupt: bool,
    /// Join the high-availability group NAME ([router.ha] group): guaranteed delivery replicated over Raft; needs --journal, --ha-node and --ha-peer.
    #[arg(long, value_name = "NAME", requires_all = ["journal", "ha_node"])]
    ha_group: Option<String>,
    /// With --ha-group: this router's member id.
    #[arg(long, value_name = "ID", requires = "ha_group")]
    ha_node: Option<u64>,
    /// With --ha-group: a member's peer address, ID=HOST:PORT, once per member (this one included).
    #[arg(long, value_name = "ID=HOST:PORT", requires = "ha_group")]
    ha_peer: Vec<String>,
    /// With --ha-group: this router joins a running group; it waits until the leader adds it (`tickwire router ha add`), then catches up from a snapshot.
    #[arg(long, requires = "ha_group")]
    ha_join: bool,
    /// This router's name: sent to clients in WELCOME, the label of its counters, its name in a cluster [default: tickwire-router, or `name` in the config].
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Join the router cluster NAME ([router.cluster] name): subscribers on any router receive from publishers on any other; needs --cluster-listen and --cluster-secret-file.
    #[arg(long, value_name = "NAME", requires_all = ["cluster_listen", "cluster_secret_file"])]
    cluster_name: Option<String>,
    /// With --cluster-name: where this router takes links from the others, tcp://IP:PORT.
    #[arg(long, value_name = "URI", requires = "cluster_name")]
    cluster_listen: Option<String>,
    /// With --cluster-name: a router to dial, tcp://HOST:PORT (repeat; one is enough, the others are learned from it).
    #[arg(long, value_name = "URI", requires = "cluster_name")]
    cluster_peer: Vec<String>,
    /// With --cluster-name: where this router's clients connect, tcp://HOST:PORT, tls://HOST:PORT or nats://HOST:PORT, told to the other routers' clients for them to fail over to (repeat; [router.cluster] client_advertise) [default: --listen and --nats-listen, unless 0.0.0.0].
    #[arg(long, value_name = "URI", requires = "cluster_name")]
    cluster_client_advertise: Vec<String>,
    /// With --cluster-name: a file (mode 600) holding the cluster's shared secret, the same on every router.
    #[arg(long, value_name = "FILE", requires = "cluster_name")]
    cluster_secret_file: Option<std::path::PathBuf>,
    /// With --cluster-name: links between routers speak TLS; this router's certificate (PEM), naming it (subject CN = its --name), for both ends of a link ([router.cluster.tls] cert).
    #[arg(long, value_name = "FILE", requires_all = ["cluster_name", "cluster_tls_key", "cluster_tls_ca"])]
    cluster_tls_cert: Option<std::path::PathBuf>,
    /// With --cluster-tls-cert: its private key (PEM, mode 600).
    #[arg(long, value_name = "FILE", requires = "cluster_tls_cert")]
    cluster_tls_key: Option<std::path::PathBuf>,
    /// With --cluster-tls-cert: the CA (PEM) every router's certificate must chain to.
    #[arg(long, value_name = "FILE", requires = "cluster_tls_cert")]
    cluster_tls_ca: Option<std::path::PathBuf>,
    /// With --cluster-name: where the cluster's agent runs ([router.cluster] thread): shared (on the routing agent's thread when there is one), own, or auto (shared when idle sleeps and the links are plain TCP) [default: auto].
    #[arg(long, value_name = "WHERE", requires = "cluster_name", value_parser = ["auto", "shared", "own"])]
    cluster_thread: Option<String>,
    /// With --cluster-name: a router down this long is forgotten ([router.cluster] forget_after): what it wanted is withdrawn, and one only learned of is no longer dialed [default: 60s].
    #[arg(long, value_name = "DURATION", requires = "cluster_name")]
    cluster_forget_after: Option<String>,
    /// Check the config file (FILE, or the one `tickwire router` would read) and exit: 0 if a router
    /// would start with it, else the file, line and key at fault.
    #[arg(long, value_name = "FILE", num_args = 0..=1)]
    #[allow(clippy::option_option)] // absent, without FILE, with FILE
    check_config: Option<Option<std::path::PathBuf>>,
    /// How long a shutdown may spend delivering what is queued.
    #[arg(long, default_value = "1s", value_parser = crate::units::parse_duration)]
    drain: Duration,
}

impl RouterArgs {
    /// Whether it runs a router (not one of its tools).
    pub fn serves(&self) -> bool {
        self.action.is_none() && self.check_config.is_none()
    }
}

/// `tickwire router` tools.
#[derive(Debug, clap::Subcommand)]
enum RouterAction {
    /// Read a password on standard input (its first line) and print its argon2id hash for a [[users]] entry.
    HashPassword,
    /// List the router's clients (in --dir): subscriptions, queue depths, policies; as of at most a second ago.
    Status {
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Change the high-availability group's members, on its leader.
    Ha {
        #[command(subcommand)]
        op: Box<crate::ha::HaOp>,
    },
}

/// `tickwire router hash-password`.
fn hash_password() -> Result<(), String> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).map_err(|e| format!("standard input: {e}"))?;
    let password = line.strip_suffix('\n').map_or(line.as_str(), |l| l.strip_suffix('\r').unwrap_or(l));
    if password.is_empty() {
        return Err("no password on standard input".into());
    }
    println!("{}", tickwire_router::access::hash_password(password.as_bytes())?);
    Ok(())
}

/// The `[[users]]` of the config file (none without one).
fn users(s: &Settings) -> Result<Vec<tickwire_router::access::UserConfig>, String> {
    match &s.users {
        Some((path, value)) => RouterConfig::users_from(value.clone(), path).map_err(|e| e.to_string()),
        None => Ok(Vec::new()),
    }
}

/// SIGHUP: reads the config file again for its `[[users]]`, and the TLS
/// certificate, key and client CA (the files `[router.tls]` and the flags
/// name now) for the connections accepted from now on. Either stays as it
/// was if its new version is refused, with the reason logged.
fn reload(s: &Settings, a: &RouterArgs, server: &mut Server) {
    let Some(path) = &s.path else {
        // No file: the same TLS files, read again.
        tls_reload(server, config(s, a).map(|c| c.tls));
        tracing::warn!("SIGHUP: no config file to reload users from (--config)");
        return;
    };
    let fresh = crate::config::load(Some(path));
    let users = fresh.as_ref().map_err(Clone::clone).and_then(users);
    match users.and_then(|u| server.set_users(&u).map_err(|e| e.to_string())) {
        Ok(n) => tracing::info!(users = n, "SIGHUP: users reloaded from {}", path.display()),
        Err(e) => tracing::error!("SIGHUP: {e}; the users stay as they were"),
    }
    tls_reload(server, fresh.and_then(|f| config(&f, a)).map(|c| c.tls));
}

/// The TLS half of [`reload`].
fn tls_reload(server: &mut Server, files: Result<Option<TlsFiles>, String>) {
    let r = files.and_then(|f| server.set_tls(f.as_ref()).map(|()| f).map_err(|e| format!("[router.tls] {e}")));
    match r {
        Ok(Some(t)) => tracing::info!(
            "SIGHUP: TLS certificate {}, key {}{} read again; new connections use them",
            t.cert.display(),
            t.key.display(),
            t.client_ca.as_ref().map_or_else(String::new, |c| format!(", client CA {}", c.display()))
        ),
        Ok(None) => {}
        Err(e) => tracing::error!("SIGHUP: {e}; TLS stays as it was"),
    }
}

pub fn run(s: &Settings, a: &RouterArgs) -> Result<(), String> {
    match a.action {
        Some(RouterAction::HashPassword) => return hash_password(),
        Some(RouterAction::Status { json }) => return status::status(s, json),
        Some(RouterAction::Ha { ref op }) => return crate::ha::run(s, op),
        None => {}
    }
    if let Some(file) = &a.check_config {
        return check_config(s, file.as_deref(), a);
    }
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("TICKWIRE_LOG").unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    let cfg = config(s, a)?;
    if cfg.users.is_empty() {
        tracing::warn!("no [[users]] configured: every client is anonymous and may publish and subscribe to anything");
    }
    match &s.path {
        Some(p) => tracing::info!("config: {}", p.display()),
        None => tracing::info!("config: none ({} absent): defaults and flags", crate::config::SYSTEM_CONFIG),
    }
    serve(s, a, cfg)
}

/// The configuration a router would run with: the file's `[router]`,
/// `[[users]]` and `[metrics]`, then the flags; checked.
fn config(s: &Settings, a: &RouterArgs) -> Result<RouterConfig, String> {
    let located = |e: tickwire_router::config::ConfigError| match &s.path {
        Some(p) => crate::config::locate(p, &e),
        None => e.to_string(),
    };
    let mut cfg = match &s.router {
        Some((path, table)) => RouterConfig::from_table(table.clone(), path, &s.dir).map_err(located)?,
        None => RouterConfig { dir: s.dir.clone(), ..RouterConfig::default() },
    };
    if !a.listen.is_empty() {
        cfg.listen.clone_from(&a.listen);
    }
    if a.no_tcp {
        cfg.listen.clear();
    }
    if !a.nats_listen.is_empty() {
        cfg.nats_listen.clone_from(&a.nats_listen);
    }
    if a.no_ipc {
        cfg.ipc = false;
    }
    if let Some(p) = a.slow_consumer {
        cfg.limits.slow_consumer = p;
    }
    if !a.cache.is_empty() {
        let table = cfg.cache.get_or_insert_with(|| tickwire_router::config::CacheTable::of(Vec::new()));
        table.patterns.clone_from(&a.cache);
    }
    if a.cpu.is_some() {
        cfg.cpu = a.cpu;
        cfg.cpus.clear();
    }
    if !a.cpus.is_empty() {
        cfg.cpus.clone_from(&a.cpus);
        cfg.cpu = None;
    }
    if let Some(n) = a.agents {
        cfg.agents = n;
    }
    if let Some(i) = &a.idle {
        cfg.idle.clone_from(i);
    }
    if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
        // The file's client CA stays unless the flag replaces it.
        let client_ca = cfg.tls.take().and_then(|t| t.client_ca);
        cfg.tls = Some(tickwire_router::config::TlsFiles { client_ca, ..TlsFiles::new(cert.clone(), key.clone()) });
    }
    if let Some(ca) = &a.tls_client_ca {
        let t = cfg.tls.as_mut().ok_or("--tls-client-ca needs --tls-cert and --tls-key (or [router.tls])")?;
        t.client_ca = Some(ca.clone());
    }
    if let Some(dir) = &a.journal {
        let t = cfg.journal.get_or_insert_with(|| tickwire_router::config::JournalTable::at(dir));
        t.dir.clone_from(dir);
    }
    if let Some(t) = &mut cfg.journal {
        if let Some(sync) = &a.sync {
            t.sync.clone_from(sync);
        }
        t.skip_corrupt |= a.journal_skip_corrupt;
    }
    if let Some(group) = &a.ha_group {
        let t = cfg.ha.get_or_insert_with(tickwire_router::config::HaTable::default);
        t.group.clone_from(group);
    }
    if let Some(t) = &mut cfg.ha {
        if let Some(node) = a.ha_node {
            t.node = node;
        }
        if !a.ha_peer.is_empty() {
            t.peers.clone_from(&a.ha_peer);
        }
        t.join |= a.ha_join;
    }
    if let Some(name) = &a.name {
        cfg.name.clone_from(name);
    }
    if let Some(name) = &a.cluster_name {
        let t = cfg.cluster.get_or_insert_with(tickwire_router::config::ClusterTable::default);
        t.name.clone_from(name);
    }
    if let Some(t) = &mut cfg.cluster {
        if let Some(l) = &a.cluster_listen {
            t.listen.clone_from(l);
        }
        if !a.cluster_peer.is_empty() {
            t.peers.clone_from(&a.cluster_peer);
        }
        if !a.cluster_client_advertise.is_empty() {
            t.client_advertise.clone_from(&a.cluster_client_advertise);
        }
        if let Some(f) = &a.cluster_secret_file {
            t.secret_file.clone_from(f);
        }
        if let Some(w) = &a.cluster_thread {
            t.thread.clone_from(w);
        }
        if let Some(d) = &a.cluster_forget_after {
            t.forget_after.clone_from(d);
        }
        if let (Some(cert), Some(key), Some(ca)) = (&a.cluster_tls_cert, &a.cluster_tls_key, &a.cluster_tls_ca) {
            t.tls =
                Some(tickwire_router::config::ClusterTlsFiles { cert: cert.clone(), key: key.clone(), ca: ca.clone() });
        }
    }
    cfg.users = match &s.users {
        Some((path, value)) => RouterConfig::users_from(value.clone(), path).map_err(located)?,
        None => Vec::new(),
    };
    cfg.metrics = a.metrics.clone().or_else(|| s.metrics.clone());
    cfg.check().map_err(located)?;
    Ok(cfg)
}

/// `tickwire router --check-config [FILE]`: everything a start would read,
/// read, without binding, locking or creating anything.
fn check_config(s: &Settings, file: Option<&std::path::Path>, a: &RouterArgs) -> Result<(), String> {
    let path = match file {
        Some(f) => f.to_owned(),
        None => s
            .path
            .clone()
            .ok_or_else(|| format!("no config file to check: name one, or create {}", crate::config::SYSTEM_CONFIG))?,
    };
    let s = crate::config::load(Some(&path))?;
    let cfg = config(&s, a)?;
    if let Some(t) = &cfg.tls {
        t.server_config().map_err(|e| format!("{}: [router.tls] {e}", path.display()))?;
        // What the router logs at start: a certificate expired or expiring soon.
        for file in std::iter::once(&t.cert).chain(&t.client_ca) {
            let warnings = tickwire_transport::tls::expiry_warnings(file).map_err(|e| e.to_string())?;
            warnings.iter().for_each(|w| eprintln!("warning: {w}"));
        }
    }
    println!(
        "{}: ok: router {:?}, {}{}, {} user(s), journal {}, metrics {}",
        path.display(),
        cfg.name,
        if cfg.ipc { format!("shared memory in {}, ", cfg.dir.display()) } else { String::new() },
        if cfg.listen.is_empty() {
            "no TCP".to_owned()
        } else {
            cfg.listen.join(" ").replace("tcp://", if cfg.tls.is_some() { "tls://" } else { "tcp://" })
        },
        cfg.users.len(),
        cfg.journal.as_ref().map_or_else(|| "off".into(), |j| j.dir.display().to_string()),
        cfg.metrics.as_deref().unwrap_or("off"),
    );
    Ok(())
}

use sd_notify::NotifyState;

/// The service manager, when the router runs under systemd (`Type=notify`,
/// `NOTIFY_SOCKET` set): readiness once every listener is bound, reloads,
/// stopping, and the watchdog's keep-alive if the unit asks for one.
struct Systemd {
    /// Whether `NOTIFY_SOCKET` was set.
    on: bool,
    /// Half the unit's `WatchdogSec`, and when the last keep-alive went.
    watchdog: Option<(Duration, std::time::Instant)>,
}

impl Systemd {
    fn new() -> Self {
        let on = std::env::var_os("NOTIFY_SOCKET").is_some();
        let mut usec = 0;
        let watchdog = (on && sd_notify::watchdog_enabled(false, &mut usec))
            .then(|| (Duration::from_micros(usec / 2), std::time::Instant::now()));
        Self { on, watchdog }
    }

    fn notify(&self, state: &[NotifyState<'_>]) {
        if self.on {
            if let Err(e) = sd_notify::notify(false, state) {
                tracing::warn!("sd_notify to $NOTIFY_SOCKET failed: {e}");
            }
        }
    }

    /// A keep-alive every half `WatchdogSec`: the main loop runs at least
    /// every park timeout (100 ms), so a router whose loop stops is
    /// restarted by systemd.
    fn watchdog(&mut self) {
        if let Some((every, last)) = &mut self.watchdog {
            if last.elapsed() >= *every {
                *last = std::time::Instant::now();
                self.notify(&[NotifyState::Watchdog]);
            }
        }
    }
}

/// Runs the router until SIGINT or SIGTERM, then drains.
fn serve(s: &Settings, a: &RouterArgs, cfg: RouterConfig) -> Result<(), String> {
    let drain = a.drain;
    let mut idle = Idle::parse(&cfg.idle)?;
    if let Some(cpu) = cfg.agent_cpu(0) {
        tickwire_agent::pin_current_thread(cpu).map_err(|e| e.to_string())?;
    }
    let mut server = Server::start(cfg).map_err(|e| e.to_string())?;
    // SIGINT or SIGTERM: drain and stop (a second one: exit at once).
    // SIGHUP: reload the users and TLS files (not a stop for a service).
    StopSignals::service().install().map_err(|e| e.to_string())?;
    let hup = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&hup)).map_err(|e| e.to_string())?;
    eprintln!(
        "router listening: {} (Ctrl-C or SIGTERM to stop, SIGHUP to reload users and TLS files)",
        server.describe()
    );
    let mut systemd = Systemd::new();
    systemd.notify(&[NotifyState::Ready, NotifyState::Status(&format!("listening: {}", server.describe()))]);
    while !stop::requested() {
        let work = server.do_work();
        if hup.load(Ordering::Relaxed) {
            hup.store(false, Ordering::Relaxed);
            systemd.notify(&[NotifyState::Reloading]);
            reload(s, a, &mut server);
            systemd.notify(&[NotifyState::Ready]);
        }
        systemd.watchdog();
        // Sleeps (`backoff`, `wait`) and parks (`park`) wake on the first
        // agent's sockets and rings; a stop is seen when the wait ends.
        idle.idle_with(work, &mut server);
    }
    systemd.notify(&[NotifyState::Stopping, NotifyState::Status(&format!("draining for up to {drain:?}"))]);
    let report = server.shutdown(drain);
    let t = report.totals;
    eprintln!(
        "router stopped: {} client(s) closed, {} message(s) in, {} deliveries, {} discarded by full queues, {} dropped at shutdown",
        report.clients, t.messages_in, t.deliveries, t.discards, report.dropped
    );
    Ok(())
}
