//! `tickwire router status`: the router's status file, printed as text
//! (its clients, journal, high-availability group and cluster links) or
//! as JSON.

use crate::config::Settings;

/// The cluster's lines of `tickwire router status`.
fn cluster_status(c: &tickwire_router::cluster::ClusterStatus) {
    println!(
        "cluster {:?} on {}://{}: {} pattern(s) held, {} told to the other routers, {} link(s) refused",
        c.cluster,
        if c.tls { "tls" } else { "tcp" },
        c.listen,
        c.patterns_held,
        c.patterns_told,
        c.refused
    );
    if c.links.is_empty() {
        return;
    }
    println!(
        "  {:<20} {:<22} {:<5} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7} {:>8}",
        "ROUTER",
        "ADDRESS",
        "STATE",
        "FOR",
        "RTT",
        "MSGS OUT",
        "MSGS IN",
        "LOST OUT",
        "LOST IN",
        "INTEREST",
        "GROUPS",
        "CONNECTS"
    );
    for l in &c.links {
        println!(
            "  {:<20} {:<22} {:<5} {:>8.1}s {:>9} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7} {:>8}",
            l.router,
            l.addr,
            l.state,
            l.for_ms as f64 / 1e3,
            if l.round_trip_us == 0 { "-".to_owned() } else { format!("{} us", l.round_trip_us) },
            l.messages_out,
            l.messages_in,
            l.lost_out,
            l.lost_in,
            l.interest,
            l.groups,
            l.connects
        );
    }
}

/// The journal's lines of `tickwire router status`.
fn journal_status(j: &tickwire_router::status::JournalStatus) {
    let s = &j.stats;
    println!(
        "journal {} (sync {}): {} segment(s), {} bytes, sequences {} to {} ({} durable, ack lag {}); \
         append p50 {} ns p99 {} ns; fsync p50 {} ns p99 {} ns",
        j.dir,
        j.sync,
        j.segments,
        j.bytes,
        j.first,
        j.last,
        j.durable,
        j.ack_lag,
        j.append_p50_ns,
        j.append_p99_ns,
        j.fsync_p50_ns,
        j.fsync_p99_ns
    );
    println!(
        "guaranteed: {} stored, {} duplicates dropped, {} deliveries, {} redeliveries, {} dead letters, {} losses, \
         {} refused for a full queue, {} held ({} held now)",
        s.stored, s.duplicates, s.deliveries, s.redeliveries, s.dead_letters, s.losses, s.queue_full, s.held, j.held
    );
    for p in &j.publishers {
        println!(
            "guaranteed publisher {} ({}): stored up to {}, acknowledged up to {} (lag {})",
            p.publisher,
            p.name,
            p.stored,
            p.acked,
            p.stored.saturating_sub(p.acked)
        );
    }
    if !j.durables.is_empty() {
        println!(
            "{:<24} {:<20} {:>12} {:>10} {:>9} {:>7}",
            "DURABLE", "PATTERN", "ACKED", "BACKLOG", "IN FLIGHT", "CLIENT"
        );
        for d in &j.durables {
            let client = d.client.map_or_else(|| "-".into(), |c| c.to_string());
            let name = if d.detail.is_empty() { d.name.clone() } else { format!("{} ({})", d.name, d.detail) };
            println!(
                "{:<24} {:<20} {:>12} {:>10} {:>9} {:>7}",
                name, d.pattern, d.acked, d.backlog, d.in_flight, client
            );
        }
    }
}

/// The group's lines of `tickwire router status`.
fn ha_status(h: &tickwire_router::status::HaGroupStatus) {
    let g = &h.group;
    let r = &h.replication;
    println!(
        "ha group: member {} is {} (leader {}, term {}); commit {}, last {}, applied {}; log {} entries ({} bytes), \
         write-ahead file {} bytes, {} syncs",
        g.id,
        g.role,
        g.leader,
        g.term,
        g.commit,
        g.last,
        g.applied,
        g.log_entries,
        g.log_bytes,
        g.wal_bytes,
        g.wal_syncs
    );
    println!(
        "ha: {} leader changes ({} won here), {} entries proposed ({} publishes), {} applied ({} resends), \
         {} sessions sent to the leader, {} peer messages refused, {} links refused",
        g.stats.leader_changes,
        g.stats.elections_won,
        r.proposed,
        r.publishes_proposed,
        r.applied,
        r.duplicates,
        r.not_leader,
        g.stats.messages_refused,
        g.links.refused
    );
    let l = &g.links;
    if g.snapshot_index > 0 || g.stats.snapshots_installed > 0 || l.transfers_failed > 0 {
        println!(
            "ha: snapshot offered at index {} ({} bytes), {} sent ({} bytes), {} installed here ({} bytes \
             fetched), {} transfers failed",
            g.snapshot_index,
            g.snapshot_bytes,
            l.snapshots_sent,
            l.snapshot_bytes_out,
            g.stats.snapshots_installed,
            l.snapshot_bytes_in,
            l.transfers_failed
        );
    }
    let s = &g.stats;
    if s.failovers > 0 {
        let ms = |ns: u64| ns as f64 / 1e6;
        println!(
            "ha: {} fail-overs seen here: last {:.1} ms, worst {:.1} ms, mean {:.1} ms (the lost leader's last word \
             to the new one's first)",
            s.failovers,
            ms(s.failover_last_ns),
            ms(s.failover_max_ns),
            ms(s.failover_sum_ns / s.failovers)
        );
    }
    for m in &g.members {
        let lag = match (m.matched, m.lag) {
            (Some(matched), Some(lag)) => format!("holds up to {matched} (lag {lag})"),
            _ => "(known on the leader)".into(),
        };
        println!("ha member {}{}: {lag}", m.id, if m.id == g.id { " (this router)" } else { "" });
    }
}

/// `tickwire router status`.
pub(super) fn status(s: &Settings, json: bool) -> Result<(), String> {
    let st = tickwire_router::status::read(&s.dir).map_err(|e| e.to_string())?;
    if json {
        println!("{}", serde_json::to_string_pretty(&st).map_err(|e| e.to_string())?);
        return Ok(());
    }
    let t = &st.totals;
    println!(
        "router {:?} (pid {}, {} routing agent(s)): {}\n{} client(s); {} message(s) in, {} deliveries, {} discarded, {} refused",
        st.name,
        st.pid,
        st.agents,
        st.listening,
        st.clients.len(),
        t.messages_in,
        t.deliveries,
        t.discards,
        t.forbidden
    );
    if let Some(j) = &st.journal {
        journal_status(j);
        if let Some(h) = &j.ha {
            ha_status(h);
        }
    }
    if let Some(c) = &st.cluster {
        cluster_status(c);
    }
    if st.clients.is_empty() {
        return Ok(());
    }
    println!(
        "{:>6} {:<24} {:<20} {:<10} {:>5} {:>9} {:>10} {:<11} {:>10} {:>10} {:>8}  SUBSCRIPTIONS",
        "CLIENT", "NAME", "PEER", "USER", "AGENT", "QUEUED", "QBYTES", "POLICY", "IN", "OUT", "DISCARDS"
    );
    for c in &st.clients {
        println!(
            "{:>6} {:<24} {:<20} {:<10} {:>5} {:>9} {:>10} {:<11} {:>10} {:>10} {:>8}  {}",
            c.client,
            c.name,
            c.peer,
            c.user.as_deref().unwrap_or("-"),
            c.agent,
            c.queue_messages,
            c.queue_bytes,
            if c.held { format!("{} HELD", c.slow_consumer) } else { c.slow_consumer.clone() },
            c.messages_in,
            c.messages_out,
            c.discards,
            c.subscriptions.join(" ")
        );
    }
    Ok(())
}
