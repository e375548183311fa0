//! A member's counts since start.

/// Counts since start.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeStats {
    /// Messages from peers stepped.
    pub messages_in: u64,
    /// Messages for peers produced.
    pub messages_out: u64,
    /// Peer messages refused (undecodable, misaddressed, not a member).
    pub messages_refused: u64,
    /// Proposals taken.
    pub proposals: u64,
    /// Proposals refused (not the leader).
    pub proposals_refused: u64,
    /// Entries committed and handed over.
    pub committed: u64,
    /// Times this member became leader.
    pub elections_won: u64,
    /// Leader changes seen.
    pub leader_changes: u64,
    /// Log compactions and file rewrites.
    pub compactions: u64,
    /// Fail-overs seen: a new leader, in a later term, after another
    /// member's leadership was lost (this member's start, and the end of
    /// its own leadership, not counted).
    #[serde(default)]
    pub failovers: u64,
    /// The last fail-over's time: from the lost leader's last message
    /// here to the new leader's first (ns).
    #[serde(default)]
    pub failover_last_ns: u64,
    /// The longest fail-over seen (ns).
    #[serde(default)]
    pub failover_max_ns: u64,
    /// All fail-overs' times added up (ns).
    #[serde(default)]
    pub failover_sum_ns: u64,
    /// Fail-overs by time: at most each of [`FAILOVER_BUCKETS_MS`], then
    /// longer.
    #[serde(default)]
    pub failover_buckets: [u64; FAILOVER_BUCKETS_MS.len() + 1],
    /// Snapshots this member installed (its leader's log no longer held
    /// what it lacked).
    #[serde(default)]
    pub snapshots_installed: u64,
    /// Snapshots its application offered (asked for when a member needed
    /// one).
    #[serde(default)]
    pub snapshots_offered: u64,
    /// Snapshot sends given up (no progress within
    /// [`crate::node::SNAPSHOT_DEADLINE`]): offered again.
    #[serde(default)]
    pub snapshots_abandoned: u64,
}

impl NodeStats {
    /// Counts a fail-over of `took` ns.
    pub fn failover(&mut self, took: u64) {
        self.failovers += 1;
        self.failover_last_ns = took;
        self.failover_max_ns = self.failover_max_ns.max(took);
        self.failover_sum_ns += took;
        let b = FAILOVER_BUCKETS_MS.iter().position(|&ms| took <= ms * 1_000_000);
        self.failover_buckets[b.unwrap_or(FAILOVER_BUCKETS_MS.len())] += 1;
    }
}

/// The upper bounds of the fail-over time buckets, in milliseconds.
pub const FAILOVER_BUCKETS_MS: [u64; 8] = [50, 100, 200, 300, 500, 1000, 2000, 5000];
