//! Prometheus metrics: `GET /metrics` on a listener of its own.
//!
//! Off unless configured (`[metrics] listen = "127.0.0.1:9464"` beside
//! `[router]`, or `tickwire router --metrics ADDR`). The routing agents
//! pay nothing for it beyond what they already do: every value is read,
//! at scrape time, from the counter sets the agents publish every 20 ms
//! into the router's counters file (the ones `tickwire stat` shows), so a
//! scrape sees values at most 20 ms old. The one thing measured for it is
//! the forwarding latency, sampled, into a [`SharedLatencies`] per
//! routing agent (the workspace's one latency histogram, HdrHistogram).
//!
//! Names follow Prometheus' conventions: `tickwire_router_` first, base
//! units (bytes, seconds), `_total` on counters:
//! * `tickwire_router_clients`, `..._messages_in_total`, `..._deliveries_total`,
//!   `..._discards_total`, `..._forbidden_total`, ...,
//!   `..._hello_timeouts_total` (connections closed for not logging in
//!   within `limits.hello_timeout`) and the queue bound
//!   `tickwire_router_queue_limit_bytes` per routing agent (label `router`);
//! * `tickwire_router_client_messages_in_total`, `..._bytes_out_total`,
//!   `..._queue_messages`, `..._queue_bytes`, `..._discards_total`,
//!   `..._conflated_total`, `..._rejections_total`, `..._subscriptions`,
//!   `..._held`, `..._holding_publishers` per client (labels `client` and
//!   `name`);
//! * `tickwire_router_topic_messages_in_total`, `..._deliveries_total`,
//!   ... per topic (label `topic`; topics past `limits.topic_counters`
//!   together as `(other topics)`);
//! * `tickwire_router_accept_connections` (open TCP and TLS connections),
//!   `..._max_connections` (the limit in force), and the connections
//!   refused: `..._refused_max_connections_total`,
//!   `..._refused_per_address_total`, `..._refused_no_descriptors_total`,
//!   `..._accept_failures_total`, router-wide (label `router`);
//! * `tickwire_router_forwarding_seconds`: a histogram of the time from
//!   reading a client's frame to handing the message to every
//!   subscriber's transport, one frame in 256;
//! * with a journal: `tickwire_router_journal_bytes`, `..._retain_bytes`
//!   (when it has a limit), `..._first_sequence`, `..._last_sequence`,
//!   `..._ack_lag_records`, ..., per guaranteed publisher
//!   `tickwire_router_publisher_ack_lag_records`, per durable subscription
//!   `tickwire_router_durable_backlog_records` and `..._in_flight`;
//! * with a high-availability group, `tickwire_router_ha_...`: role, term,
//!   indexes, elections, fail-over times, each member's lag, the Raft
//!   log's size, the peer links ([`ha`] lists them);
//! * in a router cluster, `tickwire_router_cluster_...`: the patterns held
//!   and told, links refused, and per other router (label `peer`) its
//!   link's state, interest, messages, bytes and losses each way
//!   ([`cluster`] lists them).
//!
//! `deploy/prometheus` has alert and recording rules over these, and
//! `deploy/grafana` a dashboard.
//!
//! The text is the OpenMetrics format that `prometheus-client` writes.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::sync::Arc;
use tickwire_latency::{Buckets, SharedLatencies};
use tickwire_shm::counters::{Kind, SetSnapshot};
use tickwire_shm::CountersFile;

mod cluster;
mod ha;
mod http;

pub use cluster::ClusterMetrics;
pub use http::{MetricsServer, MAX_REQUESTS};

/// One frame in this many is timed.
pub const SAMPLE_EVERY: u32 = 256;

/// Upper bounds of the forwarding-time histogram's buckets, as exported:
/// 64 ns doubling to ~34 ms (then `+Inf`).
const FORWARDING_BOUNDS_NS: [u64; 20] = doubling(64);
/// Upper bounds of the journal's histograms' buckets, as exported: 1 ns
/// doubling to 2^46 ns (then `+Inf`).
const JOURNAL_BOUNDS_NS: [u64; 47] = doubling(1);

/// `N` bounds from `first`, doubling.
const fn doubling<const N: usize>(first: u64) -> [u64; N] {
    let mut b = [0; N];
    let mut i = 0;
    while i < N {
        b[i] = first << i;
        i += 1;
    }
    b
}

/// A latency histogram exported as Prometheus', its counts read from the
/// HdrHistogram at or below each bound of `b`, in seconds.
fn encode_latencies(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    b: &Buckets,
) -> Result<(), std::fmt::Error> {
    let buckets: Vec<(f64, u64)> =
        b.per_bucket().into_iter().map(|(le, n)| (le.map_or(f64::MAX, |ns| ns as f64 * 1e-9), n)).collect();
    let mut h = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    h.encode_histogram::<prometheus_client::encoding::NoLabelSet>(b.sum_ns as f64 * 1e-9, b.count, &buckets, None)
}

/// Reads the router's counter sets and histograms at each scrape.
#[derive(Debug)]
struct RouterCollector {
    counters: Arc<CountersFile>,
    /// Forwarding times, one per routing agent.
    times: Vec<Arc<SharedLatencies>>,
}

/// (metric suffix, help, counter or gauge) for each value of a kind's set.
fn described(kind: Kind) -> &'static [(&'static str, &'static str, bool)] {
    match kind {
        Kind::Router => &[
            ("clients", "Client sessions open.", false),
            ("clients_connected", "Client sessions opened.", true),
            ("clients_disconnected", "Client sessions closed, for any reason.", true),
            ("protocol_violations", "Sessions closed for breaking the client protocol.", true),
            ("messages_in", "Messages published into the router.", true),
            ("messages_unwanted", "Messages no subscription wanted.", true),
            ("deliveries", "Messages delivered, one per subscriber.", true),
            ("discards", "Deliveries dropped by full queues.", true),
            ("forwarded_to_agents", "Messages handed to other routing agents.", true),
            ("forbidden", "Refusals by authentication and ACLs.", true),
            ("cache_deliveries", "Messages delivered from the last-value cache.", true),
            ("publishers_held", "Times a publisher was held by a back-pressure client.", true),
            ("slow_consumers_disconnected", "Sessions ended as slow consumers.", true),
            ("queue_limit_bytes", "Bound of each client's queue (limits.queue_bytes).", false),
            ("hello_timeouts", "Connections closed for not logging in within limits.hello_timeout.", true),
        ],
        Kind::RouterClient => &[
            ("messages_in", "Frames read from the client.", true),
            ("bytes_in", "Frame bytes read from the client.", true),
            ("messages_out", "Messages handed to the client's transport.", true),
            ("bytes_out", "Frame bytes handed to the client's transport.", true),
            ("queue_messages", "Deliveries waiting in the client's queue.", false),
            ("queue_bytes", "Bytes waiting in the client's queue.", false),
            ("discards", "Deliveries dropped for the client (queue full).", true),
            ("rejections", "Requests of the client refused.", true),
            ("subscriptions", "Subscriptions the client holds.", false),
            ("conflated", "Queued deliveries replaced by a newer message of their topic (conflation).", true),
            (
                "held",
                "1 while the client's frames are not read: a back-pressure client it publishes to is behind.",
                false,
            ),
            ("holding_publishers", "Publishers this back-pressure client holds (its queue is past its bound).", false),
        ],
        Kind::RouterAgent => &[
            ("socket_reads", "read calls on TCP clients' sockets (the links' own count).", true),
            ("socket_writes", "write and writev calls on TCP clients' sockets.", true),
            ("readiness_polls", "epoll_wait calls over TCP clients.", true),
            ("heartbeat_timeouts", "Clients closed after two heartbeat intervals with nothing read.", true),
            ("logins_checked", "Passwords checked with argon2.", true),
            ("logins_remembered", "Passwords answered from a remembered success, without argon2.", true),
            ("logins_failed", "Password checks failed (no such user, a wrong password).", true),
            ("logins_abandoned", "Password checks dropped unmade: the session had ended.", true),
            ("logins_throttled", "Password checks made to wait after a failure of the same user and address.", true),
            ("topic_evictions", "Topics dropped from the topic table to make room for others.", true),
            ("queue_trims", "Client queues cut (or their clients ended) past limits.max_queued_bytes.", true),
            ("queued_bytes", "Bytes the agent's client queues have allocated (the allocator's view).", false),
        ],
        Kind::RouterAccept => &[
            ("connections", "TCP and TLS connections open (counted from accept to close).", false),
            ("max_connections", "The limit of open connections in force (limits.max_connections).", false),
            ("refused_max_connections", "Connections refused at limits.max_connections.", true),
            ("refused_per_address", "Connections refused at limits.max_connections_per_address.", true),
            ("refused_no_descriptors", "Connections refused for lack of file descriptors (EMFILE, ENFILE).", true),
            ("accept_failures", "accept calls that failed otherwise (ENOBUFS, ENOMEM, ...).", true),
            (
                "refused_ipc_logins",
                "Shared-memory logins refused on the login socket (late, malformed, another process's log).",
                true,
            ),
        ],
        Kind::RouterRequests => &[
            ("requests", "Requests published (PUBLISH flagged REQUEST).", true),
            ("no_responders", "Requests no subscription wanted, answered at once with NoResponders.", true),
            ("replies", "Replies published on an inbox.", true),
            (
                "replies_undeliverable",
                "Replies whose requester is gone (or an inbox this router never made): dropped.",
                true,
            ),
            ("queue_group_deliveries", "Messages delivered to one member of a queue group.", true),
        ],
        Kind::RouterTopic => &[
            ("messages_in", "Messages published on the topic.", true),
            ("bytes_in", "Payload bytes published on the topic.", true),
            ("deliveries", "Deliveries of the topic's messages.", true),
            ("bytes_out", "Payload bytes delivered.", true),
        ],
        _ => &[],
    }
}

/// A label value as the exposition format writes it: backslash, double
/// quote and line feed escaped. `prometheus-client` writes label values
/// as they are, so a topic holding `"` would end the value early (an
/// invalid page, or a label of the topic's own making).
pub fn escaped(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

impl Collector for RouterCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let sets = self.counters.sets();
        for (kind, prefix) in [
            (Kind::Router, "tickwire_router"),
            (Kind::RouterClient, "tickwire_router_client"),
            (Kind::RouterTopic, "tickwire_router_topic"),
            (Kind::RouterAgent, "tickwire_router_agent"),
            (Kind::RouterAccept, "tickwire_router_accept"),
            (Kind::RouterRequests, "tickwire_router"),
        ] {
            let of_kind: Vec<&SetSnapshot> = sets.iter().filter(|s| s.kind == kind).collect();
            for (i, (name, help, counter)) in described(kind).iter().enumerate() {
                let full = format!("{prefix}_{name}");
                let ty = if *counter { MetricType::Counter } else { MetricType::Gauge };
                let mut family = encoder.encode_descriptor(&full, help, None, ty)?;
                for s in &of_kind {
                    let labels: Vec<(&str, String)> = match kind {
                        Kind::Router => vec![("router", escaped(&s.label))],
                        Kind::RouterClient => {
                            vec![("client", s.stream_id.to_string()), ("name", escaped(&s.label))]
                        }
                        Kind::RouterAgent | Kind::RouterRequests => vec![("agent", escaped(&s.label))],
                        Kind::RouterAccept => vec![("router", escaped(&s.label))],
                        _ => vec![("topic", escaped(&s.label))],
                    };
                    let v = s.values[i];
                    let metric = family.encode_family(&labels)?;
                    if *counter {
                        ConstCounter::new(v).encode(metric)?;
                    } else {
                        ConstGauge::new(v as i64).encode(metric)?;
                    }
                }
            }
        }
        // The journal's limit, from the routing agent that keeps it (none
        // without a journal, or without a limit).
        let retain = sets
            .iter()
            .filter(|s| s.kind == Kind::Router)
            .map(|s| s.values[crate::counters::router::JOURNAL_RETAIN_BYTES])
            .max()
            .unwrap_or(0);
        if retain > 0 {
            let help = "The journal's retain_bytes: past it, whole segments are removed, oldest first.";
            let f = encoder.encode_descriptor("tickwire_router_journal_retain_bytes", help, None, MetricType::Gauge)?;
            ConstGauge::new(retain as i64).encode(f)?;
        }
        // Every agent's, as one histogram (all its buckets even with none).
        let at_or_below = FORWARDING_BOUNDS_NS.iter().map(|&b| (b, 0)).collect();
        let mut forwarding = Buckets { at_or_below, ..Buckets::default() };
        for t in &self.times {
            forwarding.add(&t.buckets(&FORWARDING_BOUNDS_NS));
        }
        let help = "Time from reading a client's frame to handing the message to every subscriber's transport (1 frame in 256).";
        encode_latencies(&mut encoder, "tickwire_router_forwarding_seconds", help, &forwarding)?;
        let dropped = self.times.iter().map(|t| t.dropped()).sum::<u64>();
        let help =
            "Forwarding-time samples not recorded: a scrape held the histogram, and the routing thread never waits.";
        let f =
            encoder.encode_descriptor("tickwire_router_forwarding_samples_dropped", help, None, MetricType::Counter)?;
        ConstCounter::new(dropped).encode(f)
    }
}

/// What the metrics read of the journal: its status (refreshed with
/// `router status`'s, about once a second) and its latency histograms.
#[derive(Debug, Clone)]
pub struct JournalMetrics {
    pub(crate) status: Arc<crate::agent::AgentShared>,
    pub(crate) append: Arc<SharedLatencies>,
    pub(crate) fsync: Option<Arc<SharedLatencies>>,
}

impl Collector for JournalMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(j) = self.status.journal.lock().ok().and_then(|j| j.clone()) else { return Ok(()) };
        if let Some(h) = &j.ha {
            ha::encode(h, &mut encoder)?;
        }
        let s = j.stats;
        let gauges = [
            ("tickwire_router_journal_bytes", "Bytes in the journal's segments.", j.bytes),
            ("tickwire_router_journal_segments", "Segments held.", j.segments as u64),
            (
                "tickwire_router_journal_durable_sequence",
                "The last journal sequence durable by the sync policy.",
                j.durable,
            ),
            (
                "tickwire_router_journal_first_sequence",
                "The first journal sequence still held (retention removes whole segments, oldest first).",
                j.first,
            ),
            ("tickwire_router_journal_last_sequence", "The last journal sequence written.", j.last),
            (
                "tickwire_router_journal_ack_lag_records",
                "Records appended and not yet durable (publishers awaiting acknowledgement).",
                j.ack_lag,
            ),
            (
                "tickwire_router_guaranteed_held_publishes",
                "Guaranteed publishes held now for a full durable queue.",
                j.held as u64,
            ),
        ];
        for (name, help, v) in gauges {
            let f = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(v as i64).encode(f)?;
        }
        let counters = [
            ("tickwire_router_journal_stored", "Guaranteed publishes stored.", s.stored),
            (
                "tickwire_router_journal_duplicates",
                "Resent guaranteed publishes recognised and not stored again.",
                s.duplicates,
            ),
            ("tickwire_router_guaranteed_deliveries", "Guaranteed deliveries to durable subscriptions.", s.deliveries),
            (
                "tickwire_router_guaranteed_redeliveries",
                "Guaranteed deliveries flagged as redelivered.",
                s.redeliveries,
            ),
            ("tickwire_router_guaranteed_dead_letters", "Messages moved to a dead-letter topic.", s.dead_letters),
            ("tickwire_router_guaranteed_losses", "Loss events sent to durable subscriptions.", s.losses),
            (
                "tickwire_router_guaranteed_queue_full",
                "Guaranteed publishes refused because a durable queue they feed was full.",
                s.queue_full,
            ),
            (
                "tickwire_router_guaranteed_held",
                "Guaranteed publishes held (unacknowledged) until a full durable queue had room.",
                s.held,
            ),
        ];
        for (name, help, v) in counters {
            let f = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            ConstCounter::new(v).encode(f)?;
        }
        let mut f = encoder.encode_descriptor(
            "tickwire_router_publisher_ack_lag_records",
            "Guaranteed publishes of a connected publisher stored and not yet acknowledged.",
            None,
            MetricType::Gauge,
        )?;
        for p in &j.publishers {
            let lag = p.stored.saturating_sub(p.acked) as i64;
            ConstGauge::new(lag)
                .encode(f.encode_family(&[("publisher", escaped(&p.publisher)), ("name", escaped(&p.name))])?)?;
        }
        for (name, help, pick) in [
            (
                "tickwire_router_durable_backlog_records",
                "Journal records after a durable subscription's acknowledged position.",
                0,
            ),
            ("tickwire_router_durable_in_flight", "Deliveries of a durable subscription awaiting acknowledgement.", 1),
        ] {
            let mut f = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for d in &j.durables {
                let v = if pick == 0 { d.backlog } else { d.in_flight as u64 };
                ConstGauge::new(v as i64).encode(f.encode_family(&[("durable", escaped(&d.name))])?)?;
            }
        }
        let histograms = [
            (
                "tickwire_router_journal_append_seconds",
                "Time of one batch write (pwrite) of the journal.",
                Some(&self.append),
            ),
            ("tickwire_router_journal_fsync_seconds", "Time of one fdatasync of the journal.", self.fsync.as_ref()),
        ];
        for (name, help, l) in histograms {
            let Some(l) = l else { continue };
            encode_latencies(&mut encoder, name, help, &l.buckets(&JOURNAL_BOUNDS_NS))?;
        }
        let dropped = self.append.dropped() + self.fsync.as_ref().map_or(0, |f| f.dropped());
        let help = "Journal write and fdatasync time samples not recorded: a scrape held the histogram.";
        let f =
            encoder.encode_descriptor("tickwire_router_journal_samples_dropped", help, None, MetricType::Counter)?;
        ConstCounter::new(dropped).encode(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of a registry holding `collector` alone.
    fn scrape(collector: impl Collector + 'static) -> String {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(collector));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    /// The `_bucket` lines of `metric`: (`le`, cumulative count).
    fn buckets(text: &str, metric: &str) -> Vec<(String, u64)> {
        let prefix = format!("{metric}_bucket{{le=\"");
        text.lines()
            .filter_map(|l| l.strip_prefix(&prefix))
            .filter_map(|l| {
                let (le, rest) = l.split_once('"')?;
                Some((le.to_owned(), rest.rsplit(' ').next()?.parse().ok()?))
            })
            .collect()
    }

    #[test]
    fn forwarding_times_fall_in_doubling_buckets() {
        let dir = std::env::temp_dir().join(format!("tw-metrics-forwarding-{}", std::process::id()));
        let counters = CountersFile::create(&dir).unwrap();
        let (a, b) = (Arc::new(SharedLatencies::default()), Arc::new(SharedLatencies::default()));
        for ns in [1, 64, 65] {
            a.record(ns);
        }
        for ns in [128, 129, 1_000_000_000] {
            b.record(ns);
        }
        let text = scrape(RouterCollector { counters, times: vec![a, b] });
        let got = buckets(&text, "tickwire_router_forwarding_seconds");
        assert_eq!(got.len(), BUCKETS_EXPORTED, "{text}");
        let want = [("6.4e-8", 2), ("1.28e-7", 4), ("2.56e-7", 5), ("5.12e-7", 5)];
        assert_eq!(&got[..4], want.map(|(le, n)| (le.to_owned(), n)), "<=64, <=128, <=256, <=512: {text}");
        assert_eq!(got[19], ("0.033554432".to_owned(), 5), "{text}");
        assert_eq!(got[20], ("+Inf".to_owned(), 6), "a second: past the last bound: {text}");
        assert!(text.contains("tickwire_router_forwarding_seconds_count 6\n"), "{text}");
        assert!(text.contains("tickwire_router_forwarding_seconds_sum 1.000000387\n"), "{text}");
        assert!(text.contains("tickwire_router_forwarding_samples_dropped_total 0\n"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The forwarding histogram's buckets, `+Inf` included.
    const BUCKETS_EXPORTED: usize = 21;

    #[test]
    fn no_routing_agent_timed_still_exports_every_bucket() {
        let dir = std::env::temp_dir().join(format!("tw-metrics-untimed-{}", std::process::id()));
        let counters = CountersFile::create(&dir).unwrap();
        let text = scrape(RouterCollector { counters, times: Vec::new() });
        let got = buckets(&text, "tickwire_router_forwarding_seconds");
        assert_eq!(got.len(), BUCKETS_EXPORTED, "{text}");
        assert!(got.iter().all(|(_, n)| *n == 0), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn journal_bounds_are_powers_of_two_from_1_ns() {
        assert_eq!(JOURNAL_BOUNDS_NS[..3], [1, 2, 4]);
        assert_eq!(JOURNAL_BOUNDS_NS[46], 1 << 46);
        assert_eq!(FORWARDING_BOUNDS_NS[19], 64 << 19);
    }

    pub(super) fn frame(r: tickwire_wire::client::ClientRepr<'_>) -> Vec<u8> {
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b).unwrap();
        b
    }

    /// The value of `metric`'s sample whose labels contain `label`.
    fn sample(text: &str, metric: &str, label: &str) -> Option<f64> {
        text.lines()
            .filter(|l| l.split(['{', ' ']).next() == Some(metric) && l.contains(label))
            .find_map(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// A lagging client's conflated deliveries are counted in its counter
    /// set and exported per client, beside its discards; the queue bound
    /// per routing agent.
    #[test]
    fn conflated_deliveries_are_exported_per_client() {
        use crate::{Limits, MemoryOut, Outbound, Router};
        use tickwire_wire::client::{ClientKind, ClientRepr, CLIENT_PROTOCOL_VERSION};
        let dir = std::env::temp_dir().join(format!("tw-metrics-conflated-{}", std::process::id()));
        let counters = CountersFile::create(&dir).unwrap();
        let conflate = vec![tickwire_topic::Pattern::parse("md/>").unwrap()];
        let limits = Limits { conflate, queue_bytes: 1 << 20, ..Limits::default() };
        let mut r = Router::new("m", limits, Some(Arc::clone(&counters)));
        let mut client = |name: &str| {
            let out = Outbound::Memory(MemoryOut { frames: Vec::new(), room: usize::MAX });
            let id = r.attach(out, format!("test {name}"));
            let hello =
                ClientRepr { value: CLIENT_PROTOCOL_VERSION, topic: name, ..ClientRepr::new(ClientKind::Hello) };
            r.handle_frame(id, &frame(hello)).unwrap();
            id
        };
        let (p, lag) = (client("p"), client("lag"));
        r.handle_frame(lag, &frame(ClientRepr { value: 1, topic: ">", ..ClientRepr::new(ClientKind::Subscribe) }))
            .unwrap();
        let Some(Outbound::Memory(m)) = r.session_mut(lag).map(|s| s.outbound_mut()) else { panic!() };
        m.room = 0;
        for (topic, body) in [("md/a", b"1"), ("md/a", b"2"), ("md/b", b"1"), ("md/a", b"3"), ("fx/x", b"1")] {
            r.handle_frame(p, &frame(ClientRepr { topic, body, ..ClientRepr::new(ClientKind::Publish) })).unwrap();
        }
        assert_eq!(r.session(lag).unwrap().stats.conflated, 2, "md/a's 2 and 3 replaced 1 in the queue");
        r.publish_counters();

        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(RouterCollector { counters, times: Vec::new() }));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("# TYPE tickwire_router_client_conflated counter"), "{text}");
        let conflated = |name| sample(&text, "tickwire_router_client_conflated_total", &format!("name=\"{name}@test"));
        assert_eq!(conflated("lag"), Some(2.0), "{text}");
        assert_eq!(conflated("p"), Some(0.0), "{text}");
        let queued = sample(&text, "tickwire_router_client_queue_messages", "name=\"lag@test");
        assert_eq!(queued, Some(3.0), "md/a, md/b, fx/x: {text}");
        let discards = sample(&text, "tickwire_router_client_discards_total", "name=\"lag@test");
        assert_eq!(discards, Some(0.0), "{text}");
        assert_eq!(sample(&text, "tickwire_router_client_held", "name=\"p@test"), Some(0.0), "{text}");
        let limit = sample(&text, "tickwire_router_queue_limit_bytes", "router=\"m\"");
        assert_eq!(limit, Some(f64::from(1u32 << 20)), "{text}");
        assert!(!text.contains("tickwire_router_journal_retain_bytes"), "no journal, no limit: {text}");
        drop(r);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
