//! `tickwire router status`: what the router serves, as of at most a second
//! ago, in `DIR/router-status.json`.
//!
//! Every routing agent describes its sessions about once a second
//! ([`ClientStatus`]); a thread of the router's own (`StatusWriter`, off
//! the routing agents' threads: file I/O takes tens of microseconds) writes
//! them, with the router's totals, to the file (a new file renamed over the
//! old one, so a reader never sees half of one). The router made the file
//! and removes it when it stops. `tickwire router status` reads it (a
//! table, or `--json`).

use crate::agent::AgentShared;
use crate::counters::Totals;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The file's name in the router's directory.
pub const STATUS_FILE: &str = "router-status.json";

/// Subscriptions [`ClientStatus`] lists by pattern, per client.
pub const STATUS_SUBSCRIPTIONS: usize = 100;

/// One client session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientStatus {
    /// Its id (as in WELCOME, the logs and `tickwire stat`).
    pub client: u32,
    /// The name it gave in HELLO.
    pub name: String,
    /// Where it is: `ipc pid N` or `tcp ADDR`.
    pub peer: String,
    /// Its user, when users are configured.
    pub user: Option<String>,
    /// The routing agent serving it.
    pub agent: u32,
    /// Its subscriptions' patterns, sorted: the first
    /// [`STATUS_SUBSCRIPTIONS`] of them, then, if it has more, one entry
    /// `(and N more)` (the status is written every second: 10,000
    /// patterns for each of many clients would cost the router memory
    /// each time).
    pub subscriptions: Vec<String>,
    /// Deliveries waiting in its queue.
    pub queue_messages: usize,
    /// Their bytes.
    pub queue_bytes: usize,
    /// What happens when its queue is full.
    pub slow_consumer: String,
    /// Its frames are not being read: a back-pressure client it publishes
    /// to is behind.
    pub held: bool,
    /// Frames read from it.
    pub messages_in: u64,
    /// Messages handed to its transport.
    pub messages_out: u64,
    /// Deliveries dropped for it.
    pub discards: u64,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterStatus {
    /// The router's name.
    pub name: String,
    /// Its process.
    pub pid: u32,
    /// When this was written, milliseconds since the Unix epoch.
    pub as_of_ms: u64,
    /// Routing agents.
    pub agents: usize,
    /// What it listens on.
    pub listening: String,
    /// Every agent's totals, added up.
    pub totals: StatusTotals,
    /// Its clients, by id.
    pub clients: Vec<ClientStatus>,
    /// Its journal, if it keeps one.
    #[serde(default)]
    pub journal: Option<JournalStatus>,
    /// Its router cluster, if it is in one.
    #[serde(default)]
    pub cluster: Option<crate::cluster::ClusterStatus>,
}

/// A high-availability group as one member sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct HaGroupStatus {
    /// The member's consensus: role, leader, term, commit, each member's lag.
    pub group: tickwire_ha::HaStatus,
    /// The router's replication counts.
    pub replication: crate::routing::replicated::ReplicationStats,
}

/// The journal and its durable subscriptions, in the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct JournalStatus {
    /// Its directory.
    pub dir: String,
    /// Its sync policy.
    pub sync: String,
    /// Segments and bytes held.
    pub segments: usize,
    /// See `segments`.
    pub bytes: u64,
    /// The first and last sequence held, and the last durable.
    pub first: u64,
    /// See `first`.
    pub last: u64,
    /// See `first`.
    pub durable: u64,
    /// Batch writes: median and p99, ns (HdrHistogram quantiles, 3 significant figures).
    pub append_p50_ns: u64,
    /// See `append_p50_ns`.
    pub append_p99_ns: u64,
    /// fsyncs: median and p99, ns (HdrHistogram quantiles; 0 under `os`).
    pub fsync_p50_ns: u64,
    /// See `fsync_p50_ns`.
    pub fsync_p99_ns: u64,
    /// Counts since start.
    pub stats: crate::guaranteed::GuaranteedStats,
    /// Publishers awaiting acknowledgement: records not yet durable.
    pub ack_lag: u64,
    /// Guaranteed publishes held for a full durable queue now.
    #[serde(default)]
    pub held: usize,
    /// The guaranteed publishers connected now.
    #[serde(default)]
    pub publishers: Vec<PublisherStatus>,
    /// Each durable subscription.
    pub durables: Vec<DurableStatus>,
    /// The high-availability group, if this router is a member.
    #[serde(default)]
    pub ha: Option<HaGroupStatus>,
}

/// One guaranteed publisher, in the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublisherStatus {
    /// Its publisher id (hex) and client name.
    pub publisher: String,
    /// See `publisher`.
    pub name: String,
    /// Its highest sequence stored, and acknowledged: the difference is
    /// its acknowledgement lag.
    pub stored: u64,
    /// See `stored`.
    pub acked: u64,
}

/// One durable subscription, in the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DurableStatus {
    /// Its name and pattern.
    pub name: String,
    /// See `name`.
    pub pattern: String,
    /// Everything up to this journal sequence is acknowledged.
    pub acked: u64,
    /// Journal records after `acked` (its backlog, bounded by retention).
    pub backlog: u64,
    /// Delivered, not yet acknowledged.
    pub in_flight: usize,
    /// The client it is bound to, if any (a queue: its first consumer).
    pub client: Option<u32>,
    /// A durable queue's kind, consumers and options ("queue, 3
    /// consumers, exclusive"); empty for a durable subscription.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// [`Totals`] in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct StatusTotals {
    /// Messages published.
    pub messages_in: u64,
    /// Deliveries.
    pub deliveries: u64,
    /// Deliveries dropped by full queues.
    pub discards: u64,
    /// Messages nobody wanted.
    pub unwanted: u64,
    /// Sessions opened and closed.
    pub connected: u64,
    /// See [`Totals::disconnected`].
    pub disconnected: u64,
    /// Refusals by authentication and ACLs.
    pub forbidden: u64,
}

impl From<Totals> for StatusTotals {
    fn from(t: Totals) -> Self {
        Self {
            messages_in: t.messages_in,
            deliveries: t.deliveries,
            discards: t.discards,
            unwanted: t.unwanted,
            connected: t.connected,
            disconnected: t.disconnected,
            forbidden: t.forbidden,
        }
    }
}

/// Writes `status` to `DIR/router-status.json` (a temporary file renamed
/// over it).
///
/// # Errors
/// The file cannot be written.
pub fn write(dir: &Path, status: &RouterStatus) -> std::io::Result<()> {
    use std::io::Write;
    let d = tickwire_shm::Dir::existing(dir).map_err(std::io::Error::other)?;
    // An unpredictable name, created new (O_EXCL: a link planted there is
    // not followed), with the directory's file mode whatever the umask.
    let text = serde_json::to_vec_pretty(status).map_err(std::io::Error::other)?;
    let (mut f, tmp) = d.create_temp(STATUS_FILE)?;
    match f.write_all(&text).and_then(|()| d.rename(&tmp, STATUS_FILE)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = d.remove(&tmp);
            Err(e)
        }
    }
}

/// The thread that writes `router-status.json` once a second.
#[derive(Debug)]
pub(crate) struct StatusWriter {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StatusWriter {
    /// Writes `base` (its clients and totals filled in from the agents'
    /// `shared` descriptions) into `dir` every second, from now until
    /// dropped.
    pub(crate) fn start(
        dir: PathBuf,
        base: RouterStatus,
        shared: Vec<Arc<AgentShared>>,
        cluster: Option<Arc<Mutex<crate::cluster::ClusterStatus>>>,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("router-status".into()).spawn(move || loop {
            std::thread::park_timeout(Duration::from_secs(1));
            if flag.load(Ordering::Relaxed) {
                return;
            }
            let mut status = base.clone();
            let mut totals = Totals::default();
            for s in &shared {
                if let Ok(t) = s.totals.lock() {
                    totals += *t;
                }
                if let Ok(c) = s.status.lock() {
                    status.clients.extend(c.iter().cloned());
                }
                if let Ok(j) = s.journal.lock() {
                    status.journal = status.journal.take().or_else(|| j.clone());
                }
            }
            status.clients.sort_by_key(|c| c.client);
            if let Some(c) = cluster.as_ref().and_then(|c| c.lock().ok()) {
                status.cluster = Some(c.clone());
            }
            status.totals = totals.into();
            status.as_of_ms = now_ms();
            if let Err(e) = write(&dir, &status) {
                tracing::warn!("{}: {e}", dir.join(STATUS_FILE).display());
            }
        })?;
        Ok(Self { stop, thread: Some(thread) })
    }
}

impl Drop for StatusWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Why a status could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// No router serves the directory.
    #[error("no router serves {0} (no {STATUS_FILE} there; is the router running with this --dir?)")]
    NoRouter(PathBuf),
    /// The router that wrote the file stopped without removing it (killed).
    #[error("no router serves {dir}: its {STATUS_FILE} is {age_s} s old (pid {pid}, killed?)")]
    Stale {
        /// The directory.
        dir: PathBuf,
        /// Its writer.
        pid: u32,
        /// Seconds since it was written.
        age_s: u64,
    },
    /// The file is not a status.
    #[error("{path}: {why}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

/// Reads the status of the router serving `dir`.
///
/// # Errors
/// [`StatusError`]: no router, or a file that is not a status.
pub fn read(dir: &Path) -> Result<RouterStatus, StatusError> {
    let path = dir.join(STATUS_FILE);
    let text = match std::fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(StatusError::NoRouter(dir.into())),
        Err(e) => return Err(StatusError::Unreadable { path, why: e.to_string() }),
    };
    let status: RouterStatus =
        serde_json::from_slice(&text).map_err(|e| StatusError::Unreadable { path, why: e.to_string() })?;
    let age_s = now_ms().saturating_sub(status.as_of_ms) / 1000;
    if age_s > STALE_S {
        return Err(StatusError::Stale { dir: dir.into(), pid: status.pid, age_s });
    }
    Ok(status)
}

/// A status older than this (seconds) is a dead router's: it is rewritten
/// every second.
const STALE_S: u64 = 5;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status of router `pid`, written now, with no client.
    fn status(pid: u32) -> RouterStatus {
        RouterStatus {
            name: "r".into(),
            pid,
            as_of_ms: now_ms(),
            agents: 1,
            listening: "ipc".into(),
            totals: StatusTotals::default(),
            clients: Vec::new(),
            journal: None,
            cluster: None,
        }
    }

    #[test]
    fn a_status_round_trips_and_a_dead_routers_is_refused() {
        let dir = std::env::temp_dir().join(format!("tw-status-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(matches!(read(&dir), Err(StatusError::NoRouter(_))));
        let mut st = status(42);
        write(&dir, &st).unwrap();
        assert_eq!(read(&dir).unwrap(), st);
        st.as_of_ms -= 60_000;
        write(&dir, &st).unwrap();
        let e = read(&dir).unwrap_err().to_string();
        assert!(e.contains("60 s old") && e.contains("pid 42"), "{e}");
        std::fs::write(dir.join(STATUS_FILE), "{").unwrap();
        assert!(read(&dir).unwrap_err().to_string().contains(STATUS_FILE));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Issue 44: the status file is written through a new file with an
    /// unpredictable name and the directory's file mode, renamed over
    /// the old one: a link planted at the status file's name is replaced,
    /// its target untouched, and no temporary file is left.
    #[test]
    fn the_status_file_follows_no_planted_link_and_leaves_no_temporary_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("tw-status-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("roots-file");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.join(STATUS_FILE)).unwrap();
        let st = status(std::process::id());
        write(&dir, &st).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        let meta = std::fs::symlink_metadata(dir.join(STATUS_FILE)).unwrap();
        assert!(meta.is_file(), "the link was replaced by the status file");
        // The directory's file mode (0600; 0640 in a group's directory).
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(Result::ok).map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 2, "{left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
