//! A member's configuration: who it is, who the others are, and the
//! timing of elections.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How a member joins its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HaConfig {
    /// The group's name: a member refuses peers of another group.
    pub group: String,
    /// This member's id (non-zero, unique in the group).
    pub id: u64,
    /// Every member's peer address, this one's included (it listens on
    /// its own).
    pub members: BTreeMap<u64, SocketAddr>,
    /// Where the Raft log lives.
    pub dir: PathBuf,
    /// Sync every write of the log (`fdatasync`) before answering a peer:
    /// an acknowledged entry then survives every member's power loss, not
    /// only process deaths.
    pub sync: bool,
    /// One Raft tick.
    pub tick: Duration,
    /// Ticks without a leader's word before a follower stands (raft-rs
    /// randomises between this and twice it); a leader that has not heard
    /// from a majority for this long steps down.
    pub election_ticks: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_ticks: usize,
    /// The most entry bytes in one append to a member.
    pub max_append: u64,
    /// Appends in flight to one member.
    pub max_inflight: usize,
    /// The highest index the application had applied, durably, when it
    /// started: entries committed after it are handed over again. `None`:
    /// from the log's compaction point (an application that applies
    /// idempotently, and has durably applied everything compacted: the
    /// log compacts only what [`crate::Ha::applied`] reported).
    pub applied: Option<u64>,
    /// Entry bytes a follower keeps behind what it applied, for the
    /// members it may lead one day (a leader keeps what any member still
    /// lacks, up to `max_log_bytes`).
    pub keep_bytes: u64,
    /// The most entry bytes a member's log holds: past it, what the
    /// application applied is dropped even if a member still lacks it
    /// (that member then catches up from a snapshot, [`crate::snapshot`]).
    pub max_log_bytes: u64,
    /// This member joins a running group (a member added with
    /// [`crate::Ha::add_member`] on its leader): a new log starts with no
    /// voters, so the member never stands for election until the leader's
    /// snapshot names the group, itself included. (Ignored once its log
    /// names its members.)
    pub join: bool,
}

impl HaConfig {
    /// A member `id` of `group` with LAN timings: a tick of 10 ms,
    /// elections after 150 to 300 ms of silence, heartbeats every 30 ms.
    pub fn new(group: impl Into<String>, id: u64, members: BTreeMap<u64, SocketAddr>, dir: impl Into<PathBuf>) -> Self {
        Self {
            group: group.into(),
            id,
            members,
            dir: dir.into(),
            sync: true,
            tick: Duration::from_millis(10),
            election_ticks: 15,
            heartbeat_ticks: 3,
            max_append: 1 << 20,
            max_inflight: 256,
            applied: None,
            keep_bytes: 64 << 20,
            max_log_bytes: 1 << 30,
            join: false,
        }
    }

    /// Where snapshots fetched from a leader are staged (`snapshots/`
    /// beside the log, so on its file system).
    pub fn snapshot_dir(&self) -> PathBuf {
        self.dir.join("snapshots")
    }

    /// The file beside the log that keeps every member's peer address as
    /// the last membership change left it (see [`crate::Ha::add_member`]).
    pub fn addresses_path(&self) -> PathBuf {
        self.dir.join(crate::agent::MEMBERS_FILE)
    }

    /// Checks what raft-rs and the peer protocol need.
    ///
    /// # Errors
    /// What is wrong, naming the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.group.is_empty() || self.group.len() > crate::peer::MAX_GROUP {
            return Err(format!("ha group {:?}: 1 to 64 bytes", self.group));
        }
        if self.id == 0 {
            return Err("ha node: 0 is not a member id".into());
        }
        if !self.members.contains_key(&self.id) {
            return Err(format!(
                "ha node {}: not among the members {:?}",
                self.id,
                self.members.keys().collect::<Vec<_>>()
            ));
        }
        if self.members.contains_key(&0) {
            return Err("ha peer: 0 is not a member id".into());
        }
        if self.tick.is_zero() || self.heartbeat_ticks == 0 || self.election_ticks <= self.heartbeat_ticks {
            return Err(format!(
                "ha timing: the tick must be positive and the election ({} ticks) longer than the heartbeat ({} ticks)",
                self.election_ticks, self.heartbeat_ticks
            ));
        }
        Ok(())
    }
}

/// Parses `ID=HOST:PORT`, as `--ha-peer` takes it.
///
/// # Errors
/// What is wrong with it.
pub fn parse_member(s: &str) -> Result<(u64, SocketAddr), String> {
    let (id, addr) = s.split_once('=').ok_or_else(|| format!("ha peer {s:?}: ID=HOST:PORT"))?;
    let id: u64 = id.trim().parse().map_err(|_| format!("ha peer {s:?}: {id:?} is not a member id"))?;
    let addr = addr.trim().trim_start_matches("tcp://");
    let addr = std::net::ToSocketAddrs::to_socket_addrs(addr)
        .map_err(|e| format!("ha peer {s:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("ha peer {s:?}: {addr:?} resolves to nothing"))?;
    Ok((id, addr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_parse_and_bad_ones_are_named() {
        assert_eq!(parse_member("2=127.0.0.1:7001"), Ok((2, "127.0.0.1:7001".parse().unwrap())));
        assert_eq!(parse_member("3=tcp://127.0.0.1:7002").map(|m| m.0), Ok(3));
        assert!(parse_member("x=127.0.0.1:1").unwrap_err().contains("\"x\" is not a member id"));
        assert!(parse_member("127.0.0.1:1").unwrap_err().contains("ID=HOST:PORT"));
        let mut cfg = HaConfig::new("g", 4, [(1, "127.0.0.1:1".parse().unwrap())].into(), "/tmp/x");
        assert!(cfg.validate().unwrap_err().contains("ha node 4: not among the members"));
        cfg.id = 1;
        assert_eq!(cfg.validate(), Ok(()));
    }
}
