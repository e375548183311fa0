//! The router cluster's metrics, from the cluster agent's status (the same
//! one `router status` shows, refreshed every housekeeping turn of the
//! agent, 20 ms):
//!
//! * `tickwire_router_cluster_patterns_held` and `..._patterns_told`: the
//!   patterns this router's clients hold, and those told to the others;
//! * `..._cluster_links_refused_total`: links refused (a wrong secret,
//!   cluster, name or certificate; a bad frame);
//! * per other router (label `peer`, its name): `..._cluster_link_up` (1
//!   while linked), `..._cluster_link_interest_patterns` (the patterns it
//!   told), `..._cluster_link_round_trip_seconds` (the last measured),
//!   and the counters `..._cluster_link_{messages_out,bytes_out,
//!   messages_in,bytes_in,lost_out,lost_in,connects}_total`.

use crate::cluster::ClusterStatus;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::sync::{Arc, Mutex};

/// What the metrics read of the cluster: the agent's status.
#[derive(Debug, Clone)]
pub struct ClusterMetrics(pub(crate) Arc<Mutex<ClusterStatus>>);

impl Collector for ClusterMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(c) = self.0.lock().ok().map(|c| c.clone()) else { return Ok(()) };
        for (name, help, v) in [
            ("patterns_held", "Patterns this router's clients hold.", c.patterns_held),
            ("patterns_told", "Patterns told to the other routers (the rest are covered by those).", c.patterns_told),
        ] {
            let full = format!("tickwire_router_cluster_{name}");
            let f = encoder.encode_descriptor(&full, help, None, MetricType::Gauge)?;
            ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX)).encode(f)?;
        }
        let help = "Links refused, accepted or dialed (a wrong secret, cluster, name or certificate; a bad frame; too many handshakes).";
        let f = encoder.encode_descriptor("tickwire_router_cluster_links_refused", help, None, MetricType::Counter)?;
        ConstCounter::new(c.refused).encode(f)?;
        type Pick = fn(&crate::cluster::LinkStatus) -> u64;
        let gauges: [(&str, &str, Pick); 2] = [
            ("link_up", "1 while the link to the router is up.", |l| u64::from(l.state == "up")),
            ("link_interest_patterns", "Patterns the router told this one.", |l| l.interest as u64),
        ];
        for (name, help, pick) in gauges {
            let full = format!("tickwire_router_cluster_{name}");
            let mut f = encoder.encode_descriptor(&full, help, None, MetricType::Gauge)?;
            for l in &c.links {
                let v = i64::try_from(pick(l)).unwrap_or(i64::MAX);
                ConstGauge::new(v).encode(f.encode_family(&[("peer", l.router.as_str())])?)?;
            }
        }
        let full = "tickwire_router_cluster_link_round_trip_seconds";
        let help = "The last round trip measured on the link (a PING and its PONG, once per heartbeat interval).";
        let mut f = encoder.encode_descriptor(full, help, None, MetricType::Gauge)?;
        for l in c.links.iter().filter(|l| l.round_trip_us > 0) {
            ConstGauge::new(l.round_trip_us as f64 * 1e-6).encode(f.encode_family(&[("peer", l.router.as_str())])?)?;
        }
        let counters: [(&str, &str, Pick); 7] = [
            ("link_messages_out", "Messages sent to the router.", |l| l.messages_out),
            ("link_bytes_out", "Bytes sent to the router.", |l| l.bytes_out),
            ("link_messages_in", "Messages received from the router.", |l| l.messages_in),
            ("link_bytes_in", "Bytes received from the router.", |l| l.bytes_in),
            ("link_lost_out", "Messages for the router dropped: its link down or full.", |l| l.lost_out),
            (
                "link_lost_in",
                "Messages from the router lost (gaps in its numbers), told to subscribers as discards.",
                |l| l.lost_in,
            ),
            ("link_connects", "Times the link was made.", |l| l.connects),
        ];
        for (name, help, pick) in counters {
            let full = format!("tickwire_router_cluster_{name}");
            let mut f = encoder.encode_descriptor(&full, help, None, MetricType::Counter)?;
            for l in &c.links {
                ConstCounter::new(pick(l)).encode(f.encode_family(&[("peer", l.router.as_str())])?)?;
            }
        }
        Ok(())
    }
}
