//! The high-availability group's metrics, from the member's status (the
//! same one `router status` shows, refreshed about once a second):
//!
//! * `tickwire_router_ha_leader` (1 on the leader), `..._ha_leader_id`,
//!   `..._ha_term`, `..._ha_commit_index`, `..._ha_last_index`,
//!   `..._ha_applied_index`, `..._ha_compacted_index`;
//! * elections: `..._ha_leader_changes_total`, `..._ha_elections_won_total`,
//!   `..._ha_demotions_total`;
//! * fail-over time: the histogram `..._ha_failover_seconds` (from the
//!   lost leader's last word to the new leader's first; 50 ms to 5 s),
//!   `..._ha_failover_last_seconds`, `..._ha_failover_max_seconds`;
//! * replication lag, on the leader: `..._ha_member_lag_entries` and
//!   `..._ha_member_matched_index` per member (label `member`);
//! * the log: `..._ha_log_entries`, `..._ha_log_bytes`, `..._ha_wal_bytes`,
//!   `..._ha_wal_syncs_total`, `..._ha_compactions_total`;
//! * snapshots: `..._ha_snapshot_bytes` and `..._ha_snapshot_index` (the
//!   one offered), `..._ha_snapshots_{refused,offered,abandoned,sent,
//!   installed}_total`, `..._ha_snapshot_bytes_{in,out}_total`,
//!   `..._ha_snapshot_transfers_failed_total`;
//! * the peer links: `..._ha_link_connects_total`, `..._disconnects_total`,
//!   `..._refused_total`, `..._dropped_total`, `..._bytes_in_total`,
//!   `..._bytes_out_total`;
//! * replication: `..._ha_publishes_proposed_total`,
//!   `..._ha_entries_applied_total`, `..._ha_duplicates_total`,
//!   `..._ha_not_leader_total` (sessions sent on to the leader).

use crate::status::HaGroupStatus;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

/// Writes the group's metrics as this member sees them.
pub(super) fn encode(h: &HaGroupStatus, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let (g, s, l, r) = (&h.group, &h.group.stats, &h.group.links, &h.replication);
    let gauges: [(&str, &str, i64); 12] = [
        ("leader", "1 while this router leads its group.", (g.role == "leader") as i64),
        ("leader_id", "The member this router knows as leader (0: none known).", g.leader as i64),
        ("term", "The Raft term.", g.term as i64),
        ("commit_index", "The highest log index a majority holds.", g.commit as i64),
        ("last_index", "The member's last log index.", g.last as i64),
        ("applied_index", "The last index the router applied durably to its journal.", g.applied as i64),
        ("compacted_index", "The last index compacted out of the member's log.", g.compacted as i64),
        ("log_entries", "Entries held in the member's log.", g.log_entries as i64),
        ("log_bytes", "Payload bytes of the entries held.", g.log_bytes as i64),
        ("wal_bytes", "The Raft log file's size.", g.wal_bytes as i64),
        ("snapshot_index", "The last index the snapshot offered reflects (0: none).", g.snapshot_index as i64),
        ("snapshot_bytes", "The snapshot offered: its files' bytes.", g.snapshot_bytes as i64),
    ];
    for (name, help, v) in gauges {
        let full = format!("tickwire_router_ha_{name}");
        let f = encoder.encode_descriptor(&full, help, None, MetricType::Gauge)?;
        ConstGauge::new(v).encode(f)?;
    }
    let seconds = |ns: u64| ns as f64 * 1e-9;
    for (name, help, v) in [
        (
            "failover_last_seconds",
            "The last fail-over: from the lost leader's last word to the new leader's first.",
            seconds(s.failover_last_ns),
        ),
        ("failover_max_seconds", "The longest fail-over seen.", seconds(s.failover_max_ns)),
    ] {
        let full = format!("tickwire_router_ha_{name}");
        let f = encoder.encode_descriptor(&full, help, None, MetricType::Gauge)?;
        ConstGauge::new(v).encode(f)?;
    }
    let mut bounds: Vec<(f64, u64)> = tickwire_ha::FAILOVER_BUCKETS_MS
        .iter()
        .zip(&s.failover_buckets)
        .map(|(&ms, &n)| (ms as f64 * 1e-3, n))
        .collect();
    bounds.push((f64::MAX, s.failover_buckets[tickwire_ha::FAILOVER_BUCKETS_MS.len()]));
    let mut h = encoder.encode_descriptor(
        "tickwire_router_ha_failover_seconds",
        "Fail-overs seen: from the lost leader's last word to the new leader's first.",
        None,
        MetricType::Histogram,
    )?;
    h.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
        seconds(s.failover_sum_ns),
        s.failovers,
        &bounds,
        None,
    )?;
    let counters: [(&str, &str, u64); 23] = [
        ("leader_changes", "Leader changes seen (a new leader, or none known).", s.leader_changes),
        ("elections_won", "Times this member became leader.", s.elections_won),
        ("demotions", "Times this router lost the leadership.", r.demotions),
        ("wal_syncs", "fdatasync calls on the Raft log file.", g.wal_syncs),
        ("snapshots_refused", "Times a member needed a snapshot and none was offered yet.", g.snapshots_refused),
        ("snapshots_offered", "Snapshots the router checkpointed and offered (leader).", s.snapshots_offered),
        ("snapshots_abandoned", "Snapshot sends given up for no progress (offered again).", s.snapshots_abandoned),
        ("snapshots_sent", "Snapshots sent whole to a member (leader).", l.snapshots_sent),
        ("snapshots_installed", "Snapshots this member installed (follower).", s.snapshots_installed),
        ("snapshot_bytes_out", "Snapshot bytes sent to members.", l.snapshot_bytes_out),
        ("snapshot_bytes_in", "Snapshot bytes fetched from the leader.", l.snapshot_bytes_in),
        ("snapshot_transfers_failed", "Snapshot transfers that failed (either side).", l.transfers_failed),
        ("compactions", "Log compactions.", s.compactions),
        ("link_connects", "Peer links dialed and connected.", l.connects),
        ("link_disconnects", "Peer links lost.", l.disconnects),
        ("link_refused", "Peer connections refused (bad or late HELLO, too many, a bad frame).", l.refused),
        ("link_dropped", "Raft messages dropped for a link down or too far behind.", l.dropped),
        ("link_bytes_in", "Bytes read from peers.", l.bytes_in),
        ("link_bytes_out", "Bytes written to peers.", l.bytes_out),
        ("publishes_proposed", "Guaranteed publishes proposed to the group (leader).", r.publishes_proposed),
        ("entries_applied", "Committed entries applied to the journal.", r.applied),
        ("duplicates", "Publishes applied that were stored already (resends).", r.duplicates),
        ("not_leader", "Sessions sent on to the leader (NotLeader).", r.not_leader),
    ];
    for (name, help, v) in counters {
        let full = format!("tickwire_router_ha_{name}");
        let f = encoder.encode_descriptor(&full, help, None, MetricType::Counter)?;
        ConstCounter::new(v).encode(f)?;
    }
    for (name, help, pick) in [
        ("member_lag_entries", "Entries a member lacks behind the leader's last (on the leader).", 0),
        ("member_matched_index", "The last index a member holds (on the leader).", 1),
    ] {
        let full = format!("tickwire_router_ha_{name}");
        let mut f = encoder.encode_descriptor(&full, help, None, MetricType::Gauge)?;
        for m in &g.members {
            let v = if pick == 0 { m.lag } else { m.matched };
            if let Some(v) = v {
                ConstGauge::new(v as i64).encode(f.encode_family(&[("member", m.id.to_string())])?)?;
            }
        }
    }
    Ok(())
}
