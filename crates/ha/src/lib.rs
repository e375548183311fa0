//! tickwire's high-availability group: members that keep one replicated
//! log over raft-rs (TiKV's Raft), so what a majority holds survives the
//! death of any minority, the leader included.
//!
//! Layers, bottom up:
//! - [`wal`]: the Raft log's write-ahead file (CRC-checked records,
//!   replayed at start, a torn tail cut, rewritten at compaction);
//! - [`store`]: the log in memory over it, as raft-rs's `Storage`;
//! - [`peer`]: the frames members exchange (HELLO, RAFT), checked once;
//! - [`files`]: files replaced whole (a crash leaves the old or the new);
//! - [`snapshot`]: what a member the log cannot catch up installs
//!   instead: the application's files, fetched from the leader;
//! - [`Node`] (`node`): one member's consensus, sans I/O: peer messages
//!   and time in, messages for peers and committed entries out;
//! - [`Ha`] (`agent`): the member's thread: peer links on TCP (mio), the
//!   ticks, and the queues to and from the application.
//!
//! An application proposes on the leader and applies what
//! [`Event::Committed`] hands over, in index order, on every member; it
//! acknowledges its clients only then. A leader cut off from a majority
//! commits nothing, and steps down after an election timeout
//! (check-quorum), so a minority never acknowledges.
//!
//! ```no_run
//! use tickwire_ha::{Event, Ha, HaConfig};
//! let members = [(1, "127.0.0.1:7401".parse()?), (2, "127.0.0.1:7402".parse()?), (3, "127.0.0.1:7403".parse()?)];
//! let ha = Ha::start(HaConfig::new("ldn", 1, members.into(), "/var/lib/tickwire/ha"))?;
//! ha.propose(7, b"one batch".to_vec());
//! while let Some(ev) = ha.wait_event(std::time::Duration::from_secs(1)) {
//!     if let Event::Committed { index, data, .. } = ev {
//!         println!("{index}: {} bytes", data.len());
//!         ha.applied(index);
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod agent;
mod config;
pub mod files;
mod node;
pub mod peer;
pub mod snapshot;
mod stats;
pub mod store;
pub mod wal;

pub use agent::{Ha, PeerStats};
pub use config::{parse_member, HaConfig};
pub use node::{Event, HaError, MemberChange, Node, Refused, SNAPSHOT_DEADLINE};
pub use stats::{NodeStats, FAILOVER_BUCKETS_MS};

/// A member as one member sees it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemberStatus {
    /// Its id.
    pub id: u64,
    /// The last index it holds (known on the leader only).
    pub matched: Option<u64>,
    /// Entries it lacks behind the leader's last (leader only).
    pub lag: Option<u64>,
}

/// One member's view of its group.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HaStatus {
    /// This member.
    pub id: u64,
    /// `leader`, `follower`, `candidate` or `precandidate`.
    pub role: String,
    /// The leader (0: unknown).
    pub leader: u64,
    /// The term.
    pub term: u64,
    /// The highest index committed.
    pub commit: u64,
    /// The log's last index.
    pub last: u64,
    /// What the application has applied durably (and the entries it is
    /// never handed, a new leader's empty one, past that).
    pub applied: u64,
    /// The last index compacted away.
    pub compacted: u64,
    /// Entries held in the log.
    pub log_entries: u64,
    /// Their payload bytes.
    pub log_bytes: u64,
    /// The write-ahead file's size.
    pub wal_bytes: u64,
    /// Its syncs.
    pub wal_syncs: u64,
    /// Times a member needed a snapshot and none was offered yet.
    pub snapshots_refused: u64,
    /// The snapshot offered: the index it reflects (0: none).
    #[serde(default)]
    pub snapshot_index: u64,
    /// Its files' bytes.
    #[serde(default)]
    pub snapshot_bytes: u64,
    /// Every voting member.
    pub members: Vec<MemberStatus>,
    /// Counts since start.
    pub stats: NodeStats,
    /// The peer links' counts since start.
    pub links: PeerStats,
}
