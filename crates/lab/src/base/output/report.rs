//! Statistics, the papers' table, and JSON rows.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The workspace's one latency histogram: nanoseconds, 1 ns to 1 hour, 3
/// significant digits (the router's metrics and journal use the same).
pub use tickwire_latency::histogram;

/// One row of results: a latency distribution plus context.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct LatencyRow {
    /// `pingpong`, `floor`, ...
    pub mode: String,
    /// `ipc`, `shm`, ...
    pub transport: String,
    /// For floor rows: `cacheline` or `raw_ring`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<String>,
    /// Message size in bytes.
    pub size: usize,
    /// Samples recorded.
    pub count: u64,
    /// Minimum.
    pub min_ns: u64,
    /// Median.
    pub p50_ns: u64,
    /// Mean.
    pub mean_ns: f64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// 99.99th percentile.
    pub p9999_ns: u64,
    /// Maximum.
    pub max_ns: u64,
    /// Standard deviation.
    pub std_ns: f64,
    /// `spin` or `block` for kernel-socket transports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
    /// Messages per second the sender tried to send (open-loop modes).
    pub offered_rate: Option<f64>,
    /// Round trips (ping-pong) or messages (one-way) per second achieved.
    pub achieved_rate: Option<f64>,
    /// Messages lost.
    pub lost: u64,
    /// How latency was taken.
    pub clock: String,
    /// CPUs used (local, remote).
    pub cpus: String,
    /// The machine (see [`crate::base::host::machine::Machine::summary`]).
    pub machine: String,
    /// Which floor the ratios are to (`raw_ring`, `kernel_udp_spin`), and its message size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor_probe: Option<String>,
    /// The floor's message size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor_size: Option<usize>,
    /// The floor's median from the same run, if measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor_p50_ns: Option<u64>,
    /// The floor's p99.9 from the same run, if measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor_p999_ns: Option<u64>,
    /// p50 / floor p50.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_p50: Option<f64>,
    /// p99 / floor p99.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_p99: Option<f64>,
    /// p99.9 / floor p99.9.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_p999: Option<f64>,
    /// Open-loop runs: `all` messages, or `pause_free` (those whose flight
    /// overlapped no pause recorded on either side).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distribution: Option<String>,
    /// Open-loop runs: pauses recorded on either side (gaps over 20 µs in a
    /// spinning loop), their total and longest length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pauses: Option<u64>,
    /// Total length of the pauses, ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_total_ns: Option<u64>,
    /// The longest pause, ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_max_ns: Option<u64>,
    /// Messages left out of the pause-free distribution.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excluded: Option<u64>,
    /// Set when this row beat its floor by more than the noise (p50 under
    /// [`LATENCY_BEATEN`] of the floor's): the probe is not a floor for
    /// this work ([`floor_beaten`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor_beaten: Option<String>,
}

/// A latency row whose p50 is below this fraction of its floor's beat it.
pub const LATENCY_BEATEN: f64 = 0.95;
/// A throughput row above this multiple of its floor's rate beat it.
pub const THROUGHPUT_BEATEN: f64 = 1.05;
/// What a row that beat its floor says.
pub const BEATEN: &str = "floor beaten: the probe is not a floor for this work";

static ANY_BEATEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a row of this run beat its floor (`lab --strict` then fails).
pub fn floor_beaten() -> bool {
    ANY_BEATEN.load(std::sync::atomic::Ordering::Relaxed)
}

fn mark_beaten() -> Option<String> {
    ANY_BEATEN.store(true, std::sync::atomic::Ordering::Relaxed);
    Some(BEATEN.into())
}

impl LatencyRow {
    /// Fills the statistics from a histogram.
    pub fn from_histogram(mode: &str, transport: &str, size: usize, h: &Histogram<u64>) -> Self {
        Self {
            mode: mode.into(),
            transport: transport.into(),
            size,
            count: h.len(),
            min_ns: h.min(),
            p50_ns: h.value_at_quantile(0.5),
            mean_ns: round1(h.mean()),
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            p9999_ns: h.value_at_quantile(0.9999),
            max_ns: h.max(),
            std_ns: round1(h.stdev()),
            clock: "CLOCK_MONOTONIC (vDSO), half round trip".into(),
            ..Self::default()
        }
    }

    /// The row of two hops like this one back to back, each percentile
    /// doubled (`lab request`'s floor: a round trip is two one-way hops);
    /// its probe says so.
    pub fn twice(mut self) -> Self {
        for v in [
            &mut self.min_ns,
            &mut self.p50_ns,
            &mut self.p90_ns,
            &mut self.p99_ns,
            &mut self.p999_ns,
            &mut self.p9999_ns,
            &mut self.max_ns,
        ] {
            *v = v.saturating_mul(2);
        }
        self.mean_ns *= 2.0;
        self.std_ns *= 2.0;
        self.probe = Some("2x_one_way".into());
        self
    }

    /// Records the floor (same run) and the ratios to it.
    pub fn with_floor(mut self, floor: &LatencyRow) -> Self {
        if self.p50_ns == 0 || floor.p50_ns == 0 {
            // An empty distribution: nothing to compare (e.g. every
            // message overlapped a pause).
            return self;
        }
        self.floor_probe = Some(floor.probe.clone().unwrap_or_else(|| floor.transport.clone()));
        self.floor_size = Some(floor.size);
        self.floor_p50_ns = Some(floor.p50_ns);
        self.floor_p999_ns = Some(floor.p999_ns);
        self.ratio_p50 = Some(ratio(self.p50_ns, floor.p50_ns));
        self.ratio_p99 = Some(ratio(self.p99_ns, floor.p99_ns));
        self.ratio_p999 = Some(ratio(self.p999_ns, floor.p999_ns));
        // Kernel UDP is the baseline of reliable UDP and AF_XDP, not a
        // floor (AF_XDP is built to beat it); and a rate one side did not
        // sustain compares queues, not costs.
        let baseline = floor.probe.as_deref().is_some_and(|p| p.starts_with("kernel_udp"));
        let sustained =
            |r: &LatencyRow| !matches!((r.offered_rate, r.achieved_rate), (Some(o), Some(a)) if a < o * 0.95);
        if !baseline && sustained(&self) && sustained(floor) && self.ratio_p50.is_some_and(|r| r < LATENCY_BEATEN) {
            self.floor_beaten = mark_beaten();
        }
        self
    }
}

/// The probe of IPC's streaming floor (`base::streaming`), the one
/// throughput floor judged.
pub const SLOT_RING_PROBE: &str = "slot_ring_throughput";

/// Throughput results.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ThroughputRow {
    /// `throughput`, `floor`, or `reference` (reported, never judged).
    pub mode: String,
    /// `ipc`, `shm`.
    pub transport: String,
    /// For floor and reference rows: `slot_ring_throughput` (IPC's floor),
    /// `raw_ring_throughput` (the batched ring), `cacheline_stream`,
    /// `sendmmsg_recvmmsg`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe: Option<String>,
    /// Message size.
    pub size: usize,
    /// Messages received.
    pub count: u64,
    /// Seconds from first to last message at the receiver.
    pub duration_s: f64,
    /// Messages per second.
    pub msgs_per_s: f64,
    /// Payload bytes per second.
    pub bytes_per_s: f64,
    /// Messages missing at the receiver (sequence gaps).
    pub lost: u64,
    /// CPUs used (publisher, subscriber).
    pub cpus: String,
    /// The floor's rate in the same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor_msgs_per_s: Option<f64>,
    /// msgs_per_s / floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// Interleaved rounds: how many; `msgs_per_s` is then the median round.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rounds: Option<usize>,
    /// The lowest and highest ratio of one round to the floor round before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_min: Option<f64>,
    /// See `ratio_min`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_max: Option<f64>,
    /// The batched raw ring (a reference): messages per tail publish, the fastest the
    /// probe found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<u64>,
    /// This row's rate over the rate the cache-line transfer between the
    /// two CPUs allows at its message size, measured in the same run
    /// (`base::line_limit`): a reference, reported and never judged
    /// (measured, not a proven bound: the raw ring has passed it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub of_line_limit: Option<f64>,
    /// This row's rate over the batched raw ring's in the same run: a
    /// reference for what visibility in batches would buy, not a floor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub of_batched_ring: Option<f64>,
    /// Set when this row's rate beat its floor's by more than the noise
    /// (over [`THROUGHPUT_BEATEN`] times it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor_beaten: Option<String>,
}

impl ThroughputRow {
    /// Records the floor's rate (same run) and the ratio to it; marks the
    /// row when it beat the slot-ring floor (kernel sockets are a baseline
    /// AF_XDP is built to beat; the batched ring is a reference).
    pub fn with_floor(&mut self, floor: &ThroughputRow) {
        self.floor_msgs_per_s = Some(floor.msgs_per_s);
        let ratio = round3(self.msgs_per_s / floor.msgs_per_s.max(1.0));
        self.ratio = Some(ratio);
        if floor.probe.as_deref() == Some(SLOT_RING_PROBE) && ratio > THROUGHPUT_BEATEN {
            self.floor_beaten = mark_beaten();
        }
    }

    /// Records this row's share of the line-transfer limit at its size,
    /// without judging it: the line stream is a measured reference, not a
    /// bound (in runs in the VM's fast state it moved fewer lines a second
    /// than the raw ring moved slots, and `--strict` failed on a floor
    /// that was not wrong).
    pub fn line_share(&mut self, limit: &ThroughputRow) -> f64 {
        let share = round3(self.msgs_per_s / limit.msgs_per_s.max(1.0));
        self.of_line_limit = Some(share);
        share
    }

    /// Records this row's share of the batched raw ring's rate, without
    /// judging it.
    pub fn batched_share(&mut self, batched: &ThroughputRow) -> f64 {
        let share = round3(self.msgs_per_s / batched.msgs_per_s.max(1.0));
        self.of_batched_ring = Some(share);
        share
    }

    /// One row for several rounds of the same measurement: counts and times
    /// summed, the rate the median round's.
    pub fn of_rounds(rounds: &[ThroughputRow]) -> Option<ThroughputRow> {
        let mut row = rounds.first()?.clone();
        row.count = rounds.iter().map(|r| r.count).sum();
        row.lost = rounds.iter().map(|r| r.lost).sum();
        row.duration_s = rounds.iter().map(|r| r.duration_s).sum();
        row.msgs_per_s = median(rounds.iter().map(|r| r.msgs_per_s).collect());
        row.bytes_per_s = (row.msgs_per_s * row.size as f64).round();
        row.rounds = Some(rounds.len());
        Some(row)
    }
}

/// The median (mean of the middle two for an even count); 0 for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// `x` rounded to 3 decimals, as the lab prints ratios.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `a / b` rounded to 3 decimals (0 when b is 0).
pub fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        round3(a as f64 / b as f64)
    }
}

/// The papers' table: Min, Median, Mean, 99th, 99.9th, Max, STD (plus p90
/// and p99.99), in nanoseconds, one line per row.
pub fn table(rows: &[LatencyRow]) -> String {
    let mut s = format!(
        "{:<13} {:<9} {:<20} {:>6} {:>9} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8}\n",
        "mode",
        "transport",
        "probe",
        "size",
        "count",
        "Min",
        "Median",
        "Mean",
        "90th",
        "99th",
        "99.9th",
        "99.99th",
        "Max",
        "STD"
    );
    for r in rows {
        s.push_str(&format!(
            "{:<13} {:<9} {:<20} {:>6} {:>9} {:>8} {:>8} {:>9.1} {:>8} {:>8} {:>9} {:>9} {:>9} {:>8.1}\n",
            r.mode,
            r.transport,
            r.probe.as_deref().unwrap_or("-"),
            r.size,
            r.count,
            r.min_ns,
            r.p50_ns,
            r.mean_ns,
            r.p90_ns,
            r.p99_ns,
            r.p999_ns,
            r.p9999_ns,
            r.max_ns,
            r.std_ns
        ));
    }
    if rows.iter().all(|r| r.mode == "tick-to-trade") {
        s.push_str("(nanoseconds, tick sent to order received, measured at the harness)\n");
    } else if rows.iter().all(|r| r.mode == "fsync") {
        s.push_str("(nanoseconds, one pwrite and its fdatasync each)\n");
    } else if rows.iter().all(|r| r.mode == "oneway" || r.distribution.is_some()) {
        s.push_str("(nanoseconds, one way, from each message's intended send time)\n");
    } else {
        s.push_str("(nanoseconds, half round trip)\n");
    }
    for r in rows {
        if let (Some(a), Some(b)) = (r.ratio_p50, r.ratio_p999) {
            let floor = match r.floor_probe.as_deref() {
                Some("raw_ring") | None => "raw-ring".to_owned(),
                Some("kernel_udp_spin") => "kernel-UDP".to_owned(),
                Some(other) => other.replace('_', "-"),
            };
            s.push_str(&format!(
                "{} {} {} B: median {:.2}x the {floor} floor at {} B ({} ns), p99.9 {:.2}x ({} ns), same run\n",
                r.mode,
                r.transport,
                r.size,
                a,
                r.floor_size.unwrap_or(r.size),
                r.floor_p50_ns.unwrap_or(0),
                b,
                r.floor_p999_ns.unwrap_or(0)
            ));
        }
    }
    s
}

/// Measures the cost of one `Instant::now()` in nanoseconds.
pub fn clock_cost_ns() -> f64 {
    let n = 200_000u32;
    let t = std::time::Instant::now();
    let mut x = t;
    for _ in 0..n {
        x = std::hint::black_box(std::time::Instant::now());
    }
    let _ = x;
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

/// Median, p99, p99.9 and max of a distribution, ns; and its count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Quantiles {
    /// Values.
    pub count: u64,
    /// ns.
    pub p50: u64,
    /// ns.
    pub p99: u64,
    /// ns.
    pub p999: u64,
    /// ns.
    pub max: u64,
}

impl Quantiles {
    /// The quantiles of `h`.
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Self {
        Self {
            count: h.len(),
            p50: h.value_at_quantile(0.5),
            p99: h.value_at_quantile(0.99),
            p999: h.value_at_quantile(0.999),
            max: h.max(),
        }
    }
}

/// The highest target rate `transport`'s rows (of `mode`) sustained: achieved
/// at least `sustain` of it with nothing lost.
pub fn highest_sustained<'a>(
    rows: &'a [LatencyRow],
    transport: &str,
    mode: &str,
    sustain: f64,
) -> Option<&'a LatencyRow> {
    rows.iter().rfind(|r| {
        r.transport == transport
            && r.mode == mode
            && r.distribution.as_deref() != Some("pause_free")
            && r.lost == 0
            && r.achieved_rate.unwrap_or(0.0) >= r.offered_rate.unwrap_or(f64::MAX) * sustain
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_of_a_known_uniform_distribution() {
        let mut h = histogram();
        for v in 1..=10_000u64 {
            h.record(v).unwrap();
        }
        let r = LatencyRow::from_histogram("t", "x", 64, &h);
        assert_eq!(r.count, 10_000);
        assert_eq!(r.min_ns, 1);
        assert!((r.p50_ns as i64 - 5000).abs() <= 5, "{}", r.p50_ns);
        assert!((r.p99_ns as i64 - 9900).abs() <= 10, "{}", r.p99_ns);
        assert!((r.mean_ns - 5000.5).abs() < 5.0);
        // Uniform on 1..=n: std = sqrt((n^2 - 1) / 12) ~ 2886.8
        assert!((r.std_ns - 2886.8).abs() < 10.0, "{}", r.std_ns);
        assert!(r.min_ns <= r.p50_ns && r.p50_ns <= r.p99_ns && r.p99_ns <= r.max_ns);
    }

    #[test]
    fn constant_distribution_has_zero_spread_and_floor_ratio() {
        let mut h = histogram();
        for _ in 0..1000 {
            h.record(250).unwrap();
        }
        let r = LatencyRow::from_histogram("t", "x", 64, &h);
        assert_eq!((r.min_ns, r.p50_ns, r.max_ns), (250, 250, 250));
        assert_eq!(r.std_ns, 0.0);
        let floor = LatencyRow { p50_ns: 100, p999_ns: 125, ..LatencyRow::default() };
        let r = r.with_floor(&floor);
        assert_eq!((r.ratio_p50, r.ratio_p999), (Some(2.5), Some(2.0)));
        assert!(r.floor_beaten.is_none());
        assert!(table(&[r]).contains("2.50x"));
    }

    #[test]
    fn a_row_faster_than_its_floor_beyond_the_noise_is_marked() {
        let floor = LatencyRow { p50_ns: 100, p99_ns: 100, p999_ns: 100, ..LatencyRow::default() };
        let within = LatencyRow { p50_ns: 96, ..LatencyRow::default() }.with_floor(&floor);
        assert!(within.floor_beaten.is_none(), "0.96x is noise");
        let beaten = LatencyRow { p50_ns: 90, ..LatencyRow::default() }.with_floor(&floor);
        assert_eq!(beaten.floor_beaten.as_deref(), Some(BEATEN));
        let kernel = LatencyRow { probe: Some("kernel_udp_spin".into()), ..floor.clone() };
        let xdp = LatencyRow { p50_ns: 60, ..LatencyRow::default() }.with_floor(&kernel);
        assert!(xdp.floor_beaten.is_none(), "kernel UDP is a baseline, not a floor");
        let behind = LatencyRow { offered_rate: Some(100.0), achieved_rate: Some(50.0), ..floor.clone() };
        let fast = LatencyRow { p50_ns: 10, ..LatencyRow::default() }.with_floor(&behind);
        assert!(fast.floor_beaten.is_none(), "a floor that did not sustain the rate");
        let ring =
            ThroughputRow { msgs_per_s: 100.0, probe: Some("slot_ring_throughput".into()), ..Default::default() };
        let mut rate = ThroughputRow { msgs_per_s: 104.0, ..ThroughputRow::default() };
        rate.with_floor(&ring);
        assert!(rate.floor_beaten.is_none(), "1.04x is noise");
        let mut rate = ThroughputRow { msgs_per_s: 230.0, ..ThroughputRow::default() };
        rate.with_floor(&ring);
        assert_eq!((rate.ratio, rate.floor_beaten.as_deref()), (Some(2.3), Some(BEATEN)));
        let mut xdp = ThroughputRow { msgs_per_s: 230.0, ..ThroughputRow::default() };
        xdp.with_floor(&ThroughputRow { msgs_per_s: 100.0, probe: Some("kernel_udp".into()), ..Default::default() });
        assert!(xdp.floor_beaten.is_none());
        let batched =
            ThroughputRow { msgs_per_s: 100.0, probe: Some("raw_ring_throughput".into()), ..Default::default() };
        let mut rate = ThroughputRow { msgs_per_s: 230.0, ..ThroughputRow::default() };
        rate.with_floor(&batched);
        assert!(rate.floor_beaten.is_none(), "the batched ring is a reference, not a floor");
        assert!(floor_beaten(), "the run remembers it (--strict)");
    }
}
