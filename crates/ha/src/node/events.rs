//! What a member says: its events for the application, its refusals and
//! its errors.

use crate::wal::WalError;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Why a member cannot go on, or refused a peer's message.
#[derive(Debug, thiserror::Error)]
pub enum HaError {
    /// The Raft log's file.
    #[error("Raft log: {0}")]
    Wal(#[from] WalError),
    /// raft-rs refused the configuration or its state.
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    /// The configuration.
    #[error("{0}")]
    Config(String),
    /// A peer's message, refused and counted.
    #[error("member {from}: {why}")]
    Message {
        /// The sending member.
        from: u64,
        /// What is wrong.
        why: String,
    },
    /// The peer listener or the poller.
    #[error("{what}: {source}")]
    Io {
        /// What failed.
        what: String,
        /// The failure.
        source: std::io::Error,
    },
}

/// What a member tells its application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An entry a majority holds, in index order; on every member.
    Committed {
        /// Its index in the log.
        index: u64,
        /// The term of the leader that proposed it.
        term: u64,
        /// What the application proposed.
        data: Vec<u8>,
    },
    /// Who leads now (0: nobody known).
    Leader {
        /// The leader's id.
        id: u64,
        /// The term.
        term: u64,
        /// Whether this member leads.
        me: bool,
        /// The log's last index when this member saw it: a new leader's
        /// log holds every entry any earlier leader committed, all at or
        /// below this.
        last: u64,
    },
    /// A proposal not taken ([`crate::Ha::propose`]'s token).
    Refused {
        /// The proposal's token.
        token: u64,
        /// The leader this member knows of (0: unknown).
        leader: u64,
    },
    /// A member needs a snapshot and none is offered that covers the
    /// log's start: the application checkpoints what it applied and calls
    /// [`crate::Ha::snapshot_ready`]. (Said again after
    /// [`SNAPSHOT_DEADLINE`] while none is offered, and when the one
    /// offered falls behind the log's start.)
    SnapshotWanted,
    /// The log now starts after `index`: the application puts the staged
    /// snapshot (`files` in `dir`) in place of its state, which then
    /// reflects every entry up to `index`, and goes on applying from
    /// there; it may remove `dir` once it reported `index` applied.
    Installed {
        /// The last index the snapshot reflects.
        index: u64,
        /// Where its files are staged.
        dir: PathBuf,
        /// Their names.
        files: Vec<String>,
    },
    /// The group's voting members changed: a change committed (on every
    /// member, in log order), or a snapshot installed its membership.
    Members {
        /// The voters now.
        voters: Vec<u64>,
        /// The change, if one committed (`None`: a snapshot's).
        change: Option<MemberChange>,
        /// A snapshot's: the members' peer addresses as the leader knew
        /// them (empty for a change).
        addresses: Vec<(u64, SocketAddr)>,
    },
    /// The member stopped: its log could not be written.
    Failed(String),
}

/// One change of a group's voters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberChange {
    /// A member added, with the peer address its change carried (`None`:
    /// none that parses; it is reached once its address is configured).
    Added(u64, Option<SocketAddr>),
    /// A member removed.
    Removed(u64),
}

/// Why a proposal was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Only the leader takes proposals.
    #[error("not the leader (leader: {leader}, 0 if unknown)")]
    NotLeader {
        /// The leader this member knows of.
        leader: u64,
    },
    /// A membership change refused by the leader: one is not yet applied,
    /// or it would remove the leader itself.
    #[error("a membership change is in progress, or the change would remove the leader")]
    Busy,
}
