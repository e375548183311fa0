//! The `[router]` table of a tickwire config file: everything a router can
//! be told, with safe defaults. The directory is the file's top-level `dir`
//! (or `--dir`; default `/dev/shm/tickwire-USER`): shared-memory clients'
//! logs, counters and the router's lock. It must be the router's user's own
//! (another user's, or one others may write to without the sticky bit, is
//! refused); the router creates it `0700`, or `02750` with `group`.
//!
//! ```toml
//! [router]
//! name = "tickwire-router"        # sent to clients in WELCOME
//! ipc = true                      # serve shared-memory clients
//! listen = ["tcp://127.0.0.1:7600"]  # TCP listeners; [] for none
//! nats_listen = ["127.0.0.1:4222"]   # NATS clients' listeners, HOST:PORT (TLS with [router.tls]; default: none)
//! nats_token_user = "feed"        # a NATS client's auth_token logs in as this [[users]] entry, the token its password (default: none)
//! cpu = 1                         # pin the routing agent (default: not pinned)
//! agents = 1                      # routing agents, each a thread serving its share of the clients
//! cpus = [1, 0]                   # with several: agent K pinned to cpus[K % len] (instead of cpu)
//! agent_link_bytes = 4194304      # the ring from each agent to each other one
//! idle = "backoff"                # spin | yield | backoff | park
//! ipc_log_bytes = 4194304         # each shared-memory client's log out of the router
//! group = "trading"               # the directory's group (name or gid): created 02750, files 0640 (default: none, 0700 and 0600)
//!
//! [router.tls]                    # every TCP listener speaks TLS (rustls); clients use tls://
//! cert = "router.pem"             # certificate chain, PEM (relative: to this file)
//! key = "router.key"              # its private key, PEM (its owner's alone: mode 600)
//! client_ca = "clients-ca.pem"    # mutual TLS: clients must show a certificate this CA signed; its CN (or first DNS/e-mail SAN) is their user
//!
//! [router.cache]                  # the last-value cache (none without this table)
//! patterns = ["md/>"]             # topics whose newest message is kept
//! max_topics = 100000
//! max_bytes = 268435456           # payload bytes, all topics together
//!
//! [router.journal]                # guaranteed delivery (none without this table)
//! dir = "journal"                 # its segments and durable positions (relative: to this file)
//! sync = "group"                  # os (page cache: survives a crash, not a power cut) | group | fsync
//! group_interval = "200us"        # group commit: an fsync at most this often …
//! group_messages = 1000           # … or once this many records wait
//! segment_bytes = 67108864        # a segment rolls at this size
//! retain_bytes = 1073741824       # whole segments removed, oldest first, past this (0: no limit)
//! retain_age = "forever"          # … or older than this ("7d")
//! skip_corrupt = false            # start despite damage before the tail (reported, skipped)
//! window = 1024                   # unacknowledged deliveries per durable subscription
//! ack_timeout = "30s"             # a delivery unacknowledged this long is sent again
//! max_deliveries = 10             # then it goes to the topic dead/NAME
//! sync_cpu = 1                    # the fsync thread's CPU (default: the first routing agent's, if pinned)
//!
//! [router.ha]                     # a high-availability group (needs [router.journal]; its Raft log in journal.dir/raft)
//! group = "ldn"                   # the group's name
//! node = 1                        # this router's member id
//! peers = ["1=10.0.0.1:7400", "2=10.0.0.2:7400", "3=10.0.0.3:7400"]  # every member's peer address, this one's included
//! tick = "10ms"                   # one Raft tick
//! election_ticks = 15             # a leader silent this long (randomised up to twice) is replaced; one without a majority steps down
//! heartbeat_ticks = 3             # a leader's heartbeat interval
//! log_bytes = 1073741824          # the most entry bytes a Raft log holds; a member further behind catches up from a snapshot
//! follower_log_bytes = 67108864   # entry bytes a follower keeps behind what it applied
//! join = false                    # joins a running group: waits to be added (`tickwire router ha add`)
//!
//! [router.cluster]                # a router cluster across hosts (not with [router.ha])
//! name = "prod"                   # links with routers of another cluster are refused
//! listen = "tcp://0.0.0.0:7700"   # where the other routers link to this one
//! advertise = "10.0.0.1:7700"     # what they dial (default: listen)
//! client_advertise = ["tcp://10.0.0.1:7600"]  # told to other routers' clients (default: listen and nats_listen, not 0.0.0.0)
//! peers = ["tcp://10.0.0.2:7700"] # routers to dial at start; the rest are learned
//! secret_file = "cluster.secret"  # the shared secret, mode 600
//! heartbeat = "1s"                # on an idle link; silent twice as long, it is dropped
//!
//! [router.cluster.tls]            # TLS on the links; each certificate names its router (CN)
//! cert = "ldn-1.pem"
//! key = "ldn-1.key"
//! ca = "cluster-ca.pem"           # every router's certificate chains to it
//!
//! [router.limits]
//! max_frame = 1049088             # largest client frame
//! queue_bytes = 8388608           # per client, before the oldest deliveries are dropped (the memory its queue may take)
//! max_queued_bytes = 1073741824   # all clients' queues together; past it the largest are cut first, by their policy (0: none)
//! max_subscriptions = 10000       # per client
//! topic_counters = 64             # topics with their own counters in `tickwire stat`
//! slow_consumer = "drop-oldest"   # a client whose queue is full: drop-oldest | disconnect | back-pressure
//! conflate = ["md/>"]             # a lagging client gets only the newest queued message of these topics
//! back_pressure_timeout = "5s"     # a back-pressure client holding publishers longer is disconnected ("never")
//! hello_timeout = "2s"            # a connection not logged in by then (HELLO, TLS handshake, password) is closed (at least 100ms)
//! heartbeat_interval = "5s"       # TCP/TLS: HEARTBEAT after this long unwritten; a client silent twice as long is closed ("0s": off; else at least 10ms)
//! max_connections = 1000          # TCP/TLS connections open at once (default: RLIMIT_NOFILE's soft limit less 64, never more); past it CLOSE Limit (TLS: a reset)
//! max_connections_per_address = 0 # TCP/TLS connections open at once from one IP address (0: no limit)
//! ```
//!
//! Unknown keys are refused, naming the key, so a typo is not silently a
//! default.

mod cluster;
mod ha;
mod journal;
mod limits;

pub use cluster::{ClusterTable, ClusterTlsFiles};
pub use ha::HaTable;
pub use journal::JournalTable;
pub use limits::{descriptor_share, LimitsConfig, MAX_CONNECTIONS_CEILING, MIN_HELLO_TIMEOUT, RESERVED_DESCRIPTORS};

use crate::access::{UserConfig, Users, UsersError};
use crate::cache::CacheConfig;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tickwire_topic::Pattern;

/// Routing agents a router may run.
pub const MAX_AGENTS: usize = 64;

/// A router's name unless it is given one.
pub const DEFAULT_NAME: &str = "tickwire-router";

/// The default TCP listener: loopback only.
pub const DEFAULT_LISTEN: &str = "tcp://127.0.0.1:7600";

/// A router's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouterConfig {
    /// Sent to clients in WELCOME; the label of its counters.
    pub name: String,
    /// Where shared-memory clients' logs, the counters file and the lock are
    /// (not a key of the table: the config file's `dir`).
    #[serde(skip)]
    pub dir: PathBuf,
    /// Serve shared-memory clients.
    pub ipc: bool,
    /// TCP listeners, `tcp://HOST:PORT`.
    pub listen: Vec<String>,
    /// Listeners for NATS clients (the NATS client protocol), `HOST:PORT`.
    pub nats_listen: Vec<String>,
    /// The user a NATS client's `auth_token` (given without `user`) logs in
    /// as, the token checked as that user's password (NATS's token auth).
    pub nats_token_user: Option<String>,
    /// CPU to pin the (first) routing agent to.
    pub cpu: Option<usize>,
    /// Routing agents (threads), each serving its share of the clients.
    pub agents: usize,
    /// CPUs to pin the agents to: agent K on `cpus[K % len]`.
    pub cpus: Vec<usize>,
    /// Bytes of the ring from each routing agent to each other one.
    pub agent_link_bytes: usize,
    /// Idle strategy: spin, yield, backoff, park, wait.
    pub idle: String,
    /// Ring bytes of each shared-memory client's log out of the router (a
    /// power of two).
    pub ipc_log_bytes: usize,
    /// The group (name or gid) whose members may read the directory: it is
    /// created `02750` and its files `0640`. None: `0700` and `0600`.
    pub group: Option<String>,
    /// Per-client limits.
    pub limits: LimitsConfig,
    /// TLS on every TCP listener.
    pub tls: Option<TlsFiles>,
    /// The last-value cache.
    pub cache: Option<CacheTable>,
    /// The journal: guaranteed delivery and durable subscriptions.
    pub journal: Option<JournalTable>,
    /// The high-availability group this router is a member of (needs the
    /// journal).
    pub ha: Option<HaTable>,
    /// The router cluster this router is a member of.
    pub cluster: Option<ClusterTable>,
    /// The users (the file's top-level `[[users]]`, not a key of the
    /// table): none, every client is anonymous.
    #[serde(skip)]
    pub users: Vec<UserConfig>,
    /// Where to serve Prometheus metrics, `HOST:PORT` (the file's
    /// top-level `[metrics] listen`, not a key of the table): none, off.
    #[serde(skip)]
    pub metrics: Option<String>,
}

/// `[tls]`: the certificate and key of a router whose TCP listeners speak
/// TLS, and the CA its clients' certificates must chain to (mutual TLS).
/// Read at start and again on every reload ([`crate::Server::set_tls`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM), its owner's alone.
    pub key: PathBuf,
    /// Mutual TLS: every client must show a certificate that chains to one
    /// in this file (PEM), and logs in as the user it names (subject CN,
    /// else its first DNS or e-mail SAN) without a password. None: clients
    /// show no certificate.
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles {
    /// A certificate and key, no client CA.
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        Self { cert: cert.into(), key: key.into(), client_ca: None }
    }

    /// The server's TLS configuration from these files (read now).
    ///
    /// # Errors
    /// [`tickwire_transport::tls::TlsError`] naming the file at fault.
    pub fn server_config(
        &self,
    ) -> Result<std::sync::Arc<tickwire_transport::tls::ServerConfig>, tickwire_transport::tls::TlsError> {
        tickwire_transport::tls::server_config(&self.cert, &self.key, self.client_ca.as_deref())
    }
}

/// `[cache]`: the last-value cache.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheTable {
    /// Topics whose newest message is kept.
    pub patterns: Vec<String>,
    /// Topics kept at most.
    #[serde(default = "default_cache_topics")]
    pub max_topics: usize,
    /// Payload bytes kept at most.
    #[serde(default = "default_cache_bytes")]
    pub max_bytes: usize,
}

fn default_cache_topics() -> usize {
    100_000
}
fn default_cache_bytes() -> usize {
    256 << 20
}

impl CacheTable {
    /// A cache of `patterns` with the default limits.
    pub fn of(patterns: Vec<String>) -> Self {
        Self { patterns, max_topics: default_cache_topics(), max_bytes: default_cache_bytes() }
    }

    /// The cache's configuration.
    ///
    /// # Errors
    /// [`ConfigError::Value`] for a pattern that breaks the topic rules.
    pub fn to_config(&self) -> Result<CacheConfig, ConfigError> {
        let patterns = self
            .patterns
            .iter()
            .map(|p| {
                Pattern::parse(p).map_err(|_| ConfigError::Value {
                    key: "cache.patterns",
                    value: p.clone(),
                    why: "a topic pattern (see docs/topics.md)",
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(CacheConfig { patterns, max_topics: self.max_topics, max_bytes: self.max_bytes })
    }
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            name: DEFAULT_NAME.into(),
            dir: tickwire_shm::default_dir(),
            ipc: true,
            listen: vec![DEFAULT_LISTEN.into()],
            nats_listen: Vec::new(),
            nats_token_user: None,
            cpu: None,
            agents: 1,
            cpus: Vec::new(),
            agent_link_bytes: 4 << 20,
            idle: "backoff".into(),
            ipc_log_bytes: 4 << 20,
            group: None,
            limits: LimitsConfig::default(),
            tls: None,
            cache: None,
            journal: None,
            ha: None,
            cluster: None,
            users: Vec::new(),
            metrics: None,
        }
    }
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not TOML, an unknown key, or a value of the wrong type.
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said, naming the key and line.
        message: String,
    },
    /// A `[[users]]` entry is invalid.
    #[error(transparent)]
    Users(#[from] UsersError),
    /// A value out of range.
    #[error("{key} = {value}: {why}")]
    Value {
        /// The key.
        key: &'static str,
        /// The value given.
        value: String,
        /// What is allowed.
        why: &'static str,
    },
}

impl RouterConfig {
    /// Reads and checks the `[router]` table of the file at `path`, for the
    /// directory `dir`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and key.
    pub fn from_table(table: toml::Table, path: &Path, dir: &Path) -> Result<Self, ConfigError> {
        let mut cfg: Self = table.try_into().map_err(|e: toml::de::Error| ConfigError::Parse {
            path: path.into(),
            message: format!("[router] {}", e.message()),
        })?;
        cfg.dir = dir.into();
        // Relative certificate and key paths are the config file's neighbours.
        if let (Some(t), Some(base)) = (&mut cfg.tls, path.parent()) {
            t.cert = base.join(&t.cert);
            t.key = base.join(&t.key);
            t.client_ca = t.client_ca.as_ref().map(|c| base.join(c));
        }
        if let (Some(t), Some(base)) = (cfg.cluster.as_mut().and_then(|c| c.tls.as_mut()), path.parent()) {
            t.cert = base.join(&t.cert);
            t.key = base.join(&t.key);
            t.ca = base.join(&t.ca);
        }
        if let (Some(j), Some(base)) = (&mut cfg.journal, path.parent()) {
            j.dir = base.join(&j.dir);
        }
        cfg.check()?;
        Ok(cfg)
    }

    /// Reads the file's top-level `[[users]]` array.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file, the user and the key.
    pub fn users_from(value: toml::Value, path: &Path) -> Result<Vec<UserConfig>, ConfigError> {
        let users: Vec<UserConfig> = value.try_into().map_err(|e: toml::de::Error| ConfigError::Parse {
            path: path.into(),
            message: format!("[[users]] {}", e.message()),
        })?;
        Users::new(&users).map_err(|e| ConfigError::Parse { path: path.into(), message: e.to_string() })?;
        Ok(users)
    }

    /// The metrics listener's address.
    ///
    /// # Errors
    /// [`ConfigError::Value`] for one that is not `HOST:PORT`.
    pub fn metrics_addr(&self) -> Result<Option<SocketAddr>, ConfigError> {
        let Some(m) = &self.metrics else { return Ok(None) };
        let bad = || ConfigError::Value { key: "metrics.listen", value: m.clone(), why: "expected HOST:PORT" };
        tickwire_transport::tcp::resolve(m).ok_or_else(bad).map(Some)
    }

    /// The CPU routing agent `k` is pinned to, if any.
    pub fn agent_cpu(&self, k: usize) -> Option<usize> {
        match self.cpus.len() {
            0 if k == 0 => self.cpu,
            0 => None,
            n => Some(self.cpus[k % n]),
        }
    }

    /// The TCP listeners as addresses.
    ///
    /// # Errors
    /// [`ConfigError::Value`] for one that is not `tcp://HOST:PORT`.
    pub fn listen_addrs(&self) -> Result<Vec<SocketAddr>, ConfigError> {
        self.listen.iter().map(|l| parse_tcp(l)).collect()
    }

    /// The NATS listeners as addresses.
    ///
    /// # Errors
    /// [`ConfigError::Value`] for one that is not `HOST:PORT`.
    pub fn nats_addrs(&self) -> Result<Vec<SocketAddr>, ConfigError> {
        self.nats_listen
            .iter()
            .map(|l| {
                let bad = || ConfigError::Value { key: "nats_listen", value: l.clone(), why: "expected HOST:PORT" };
                tickwire_transport::tcp::resolve(l.strip_prefix("nats://").unwrap_or(l)).ok_or_else(bad)
            })
            .collect()
    }

    /// Checks every value.
    ///
    /// # Errors
    /// [`ConfigError::Value`] naming the first bad key.
    pub fn check(&self) -> Result<(), ConfigError> {
        fn bad(key: &'static str, value: &dyn std::fmt::Display, why: &'static str) -> Result<(), ConfigError> {
            Err(ConfigError::Value { key, value: value.to_string(), why })
        }
        self.listen_addrs()?;
        self.nats_addrs()?;
        if tickwire_agent::Idle::parse(&self.idle).is_err() {
            return bad("idle", &self.idle, "one of spin, yield, backoff, park, wait");
        }
        if let Some(g) = &self.group {
            if tickwire_shm::group_id(g).is_err() {
                return bad("group", g, "a group of this system (name or gid)");
            }
        }
        if !self.ipc_log_bytes.is_power_of_two() || self.ipc_log_bytes < 64 << 10 {
            return bad("ipc_log_bytes", &self.ipc_log_bytes, "a power of two, at least 65536");
        }
        let l = &self.limits;
        if l.max_frame < 64 || l.max_frame > self.ipc_log_bytes / 2 {
            return bad("limits.max_frame", &l.max_frame, "at least 64 and at most ipc_log_bytes / 2");
        }
        if self.agents == 0 || self.agents > MAX_AGENTS {
            return bad("agents", &self.agents, "1 to 64");
        }
        if self.cpu.is_some() && !self.cpus.is_empty() {
            return bad("cpus", &format!("{:?}", self.cpus), "not with cpu (cpus = [N] pins every agent to N)");
        }
        if self.agent_link_bytes < l.max_frame || self.agent_link_bytes > 1 << 30 {
            return bad("agent_link_bytes", &self.agent_link_bytes, "at least limits.max_frame and at most 1 GiB");
        }
        Users::new(&self.users)?;
        // (The table alone is checked before the file's users are read.)
        if let Some(u) = self.nats_token_user.as_ref().filter(|_| !self.users.is_empty()) {
            if !self.users.iter().any(|x| x.name == *u && !x.password_hash.is_empty()) {
                return bad("nats_token_user", u, "a [[users]] entry with a password_hash (the token is its password)");
            }
        }
        l.check()?;
        self.metrics_addr()?;
        if let Some(j) = &self.journal {
            j.to_config()?;
            if self.agents > 1 {
                return bad("agents", &self.agents, "1 with a journal (guaranteed delivery runs on one routing agent)");
            }
        }
        if let Some(h) = &self.ha {
            let Some(j) = &self.journal else {
                return bad("ha", &h.group, "a [router.journal] too: the group replicates guaranteed delivery");
            };
            h.to_config(&j.dir, j.sync != "os")?;
            // A Raft entry (a batch, with one publish of up to max_frame)
            // must fit a peer frame.
            if l.max_frame + (1 << 20) > tickwire_ha::peer::MAX_FRAME {
                return bad(
                    "limits.max_frame",
                    &l.max_frame,
                    "at most 15 MiB with [router.ha] (a Raft entry must fit a peer frame)",
                );
            }
        }
        if let Some(c) = &self.cluster {
            c.to_settings(&self.name, l.max_frame)?;
            if self.ha.is_some() {
                return bad("cluster", &c.name, "not with [router.ha] yet (a cluster of high-availability groups)");
            }
        }
        if let Some(c) = &self.cache {
            c.to_config()?;
            if c.patterns.is_empty() {
                return bad("cache.patterns", &"[]", "at least one pattern");
            }
        }
        // (A WELCOME carries it, then a newline and the cluster's routers.)
        if self.name.is_empty() || self.name.len() > 100 || self.name.chars().any(char::is_control) {
            return bad("name", &self.name.escape_debug(), "1 to 100 bytes, no control characters");
        }
        Ok(())
    }
}

/// Parses `tcp://HOST:PORT` (HOST a name or address).
///
/// # Errors
/// [`ConfigError::Value`] for anything else.
pub fn parse_tcp(uri: &str) -> Result<SocketAddr, ConfigError> {
    let bad = || ConfigError::Value { key: "listen", value: uri.into(), why: "expected tcp://HOST:PORT" };
    let rest = uri.strip_prefix("tcp://").ok_or_else(bad)?;
    tickwire_transport::tcp::resolve(rest).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::Limits;
    use std::time::Duration;

    fn load(text: &str) -> Result<RouterConfig, ConfigError> {
        RouterConfig::from_table(toml::from_str(text).unwrap(), Path::new("router.toml"), Path::new("/tmp/x"))
    }

    #[test]
    fn errors_name_the_file_and_key() {
        let e = load("nmae = \"x\"\n").unwrap_err().to_string();
        assert!(e.contains("router.toml") && e.contains("nmae"), "{e}");
        let e = load("listen = [\"udp://1.2.3.4:5\"]\n").unwrap_err().to_string();
        assert!(e.contains("udp://1.2.3.4:5") && e.contains("tcp://HOST:PORT"), "{e}");
        assert!(load("[limits]\nqueue_bytes = 10\n").unwrap_err().to_string().contains("limits.queue_bytes"));
        let e = load("[tls]\ncert = \"a.pem\"\n").unwrap_err().to_string();
        assert!(e.contains("key"), "{e}");
        let t = load("[tls]\ncert = \"a.pem\"\nkey = \"/k.pem\"\n").unwrap().tls.unwrap();
        assert_eq!((t.cert.to_str(), t.key.to_str(), t.client_ca), (Some("a.pem"), Some("/k.pem"), None));
        let t = load("[tls]\ncert = \"a.pem\"\nkey = \"k.pem\"\nclient_ca = \"ca.pem\"\n").unwrap().tls.unwrap();
        assert_eq!(t.client_ca.as_deref().and_then(Path::to_str), Some("ca.pem"), "relative: to the file");
        let e = load("[tls]\ncert = \"a.pem\"\nkey = \"k.pem\"\nclient_cert = \"ca.pem\"\n").unwrap_err().to_string();
        assert!(e.contains("client_cert"), "{e}");
        let c = load("cpu = 1\nidle = \"spin\"\nlisten = []\n").unwrap();
        assert_eq!((c.cpu, c.listen.len(), c.ipc, c.dir.to_str()), (Some(1), 0, true, Some("/tmp/x")));
        assert_eq!((c.agent_cpu(0), c.agent_cpu(1)), (Some(1), None));
        let c = load("agents = 3\ncpus = [1, 0]\n").unwrap();
        assert_eq!((c.agent_cpu(0), c.agent_cpu(1), c.agent_cpu(2)), (Some(1), Some(0), Some(1)));
        assert!(load("agents = 0\n").unwrap_err().to_string().contains("agents = 0"));
        assert!(load("cpu = 1\ncpus = [0]\n").unwrap_err().to_string().contains("cpus"));
        assert!(load("agent_link_bytes = 1000\n").unwrap_err().to_string().contains("agent_link_bytes"));
        // A name goes in WELCOME before a newline and the cluster's routers.
        let e = load("name = \"a\\nb\"\n").unwrap_err().to_string();
        assert!(e.contains("name") && e.contains("control characters"), "{e}");
    }

    #[test]
    fn the_nats_token_user_must_be_a_user_with_a_password() {
        let mut c = load("nats_token_user = \"feed\"\n").unwrap();
        assert_eq!(c.nats_token_user.as_deref(), Some("feed"), "the table alone: users come after");
        let user = |name: &str, hash: &str| UserConfig {
            name: name.into(),
            password_hash: hash.into(),
            ..toml::from_str("name = \"x\"").unwrap()
        };
        let hash = crate::access::hash_password(b"pw").unwrap();
        c.users = vec![user("desk", &hash)];
        let e = c.check().unwrap_err().to_string();
        assert!(e.contains("nats_token_user") && e.contains("feed") && e.contains("password_hash"), "{e}");
        c.users.push(UserConfig { unix_user: Some("0".into()), ..user("feed", "") });
        let e = c.check().unwrap_err().to_string();
        assert!(e.contains("nats_token_user"), "a user without a password takes no token: {e}");
        c.users[1] = user("feed", &hash);
        c.check().unwrap();
    }

    #[test]
    fn max_queued_bytes_is_0_or_at_least_queue_bytes() {
        let m = |text: &str| load(text).map(|c| Limits::from(&c.limits).max_queued_bytes);
        assert_eq!(m("").unwrap(), 1 << 30);
        assert_eq!(m("[limits]\nmax_queued_bytes = 0\n").unwrap(), 0);
        assert_eq!(m("[limits]\nmax_queued_bytes = 67108864\n").unwrap(), 64 << 20);
        let e = m("[limits]\nmax_queued_bytes = 1000000\n").unwrap_err().to_string();
        assert!(e.contains("limits.max_queued_bytes") && e.contains("1000000") && e.contains("queue_bytes"), "{e}");
    }

    #[test]
    fn hello_timeout_is_a_duration_of_at_least_100ms() {
        let l = |c: &RouterConfig| Limits::from(&c.limits).hello_timeout;
        assert_eq!(l(&load("").unwrap()), Duration::from_secs(2));
        assert_eq!(load("").unwrap().limits.hello_timeout, "2s");
        assert_eq!(l(&load("[limits]\nhello_timeout = \"300ms\"\n").unwrap()), Duration::from_millis(300));
        for bad in ["never", "50ms", "0s", "soon"] {
            let e = load(&format!("[limits]\nhello_timeout = \"{bad}\"\n")).unwrap_err().to_string();
            assert!(e.contains("limits.hello_timeout") && e.contains(bad) && e.contains("100ms"), "{e}");
        }
    }

    #[test]
    fn max_connections_is_the_descriptor_share_at_most() {
        let c = load("").unwrap();
        assert_eq!((c.limits.max_connections, c.limits.max_connections_per_address), (None, 0));
        assert_eq!(c.limits.max_connections(1024), (960, None), "1024 less 64 reserved");
        assert_eq!(c.limits.max_connections(256).0, 192);
        assert_eq!(c.limits.max_connections(10).0, 1, "never 0");
        assert_eq!(c.limits.max_connections(u64::MAX).0, MAX_CONNECTIONS_CEILING, "RLIM_INFINITY");
        let c = load("[limits]\nmax_connections = 100\nmax_connections_per_address = 4\n").unwrap();
        assert_eq!((c.limits.max_connections(1024), c.limits.max_connections_per_address), ((100, None), 4));
        let (n, why) = c.limits.max_connections(128);
        let why = why.unwrap();
        assert_eq!(n, 64);
        assert!(why.contains("limits.max_connections = 100") && why.contains("RLIMIT_NOFILE 128"), "{why}");
        let e = load("[limits]\nmax_connections = 0\n").unwrap_err().to_string();
        assert!(e.contains("limits.max_connections = 0") && e.contains("at least 1"), "{e}");
        let e = load("[limits]\nmax_connections = -1\n").unwrap_err().to_string();
        assert!(e.contains("router.toml") && e.contains("-1"), "{e}");
    }

    /// docs/configuration.md's `[router.limits]` block is a valid table
    /// with every key of [`LimitsConfig`].
    #[test]
    fn the_documented_limits_block_is_read_whole() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md")).unwrap();
        let start = doc.find("\n[router.limits]\n").expect("a [router.limits] block") + 1;
        let end = start + doc[start..].find("```").expect("the block's end");
        let text = doc[start..end].replacen("[router.limits]", "[limits]", 1);
        let c = load(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!((c.limits.max_connections, c.limits.max_connections_per_address), (Some(1000), 0), "{text}");
        let module = include_str!("mod.rs");
        for key in ["max_connections", "max_connections_per_address", "hello_timeout", "heartbeat_interval"] {
            assert!(text.contains(&format!("\n{key} = ")), "{key} not in docs/configuration.md's block");
            assert!(module.contains(&format!("//! {key} = ")), "{key} not in this module's table");
        }
    }
}
