//! Every report format the lab writes, from fixed rows and histograms,
//! against a file kept in `tests/golden/`: a change that alters what a
//! user sees or a script parses (a column, a rounding, a unit, a line
//! moved) fails here, and a restructuring that changes nothing passes.
//!
//! The formats: the latency table, JSON and CSV rows, sockperf's blocks,
//! the HdrHistogram interval log, the throughput lines (table and JSON),
//! the rate sweep's table, and the SVG plots (a percentile distribution
//! and latency against rate). Measured values never reach these files:
//! the histograms are filled from a seeded sequence and the machine is
//! given, so the output is the same on every host. The topology line of
//! the latency table reads sysfs, so the rows name CPUs it cannot parse
//! and that one line is left out.
//!
//! After an intended change of output, rewrite the files with
//! `TICKWIRE_BLESS=1 cargo test -p tickwire-lab --test golden` and review
//! the diff.

use hdrhistogram::Histogram;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};
use tickwire_lab::host::machine::Machine;
use tickwire_lab::output::print::{self, Format};
use tickwire_lab::output::report::{histogram, LatencyRow, ThroughputRow};
use tickwire_lab::output::{plots, write_hlog, Measured};

/// `n` latencies from a seeded sequence: a body near `base` ns and a
/// tail of rarer, longer ones, as a real run has.
fn filled(seed: u64, base: u64, n: usize) -> Histogram<u64> {
    let mut h = histogram();
    let mut x = seed;
    for _ in 0..n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let r = x >> 33;
        let v = match r % 1000 {
            0 => base * 40 + r % (base * 10),
            1..=9 => base * 4 + r % (base * 2),
            _ => base + r % (base / 4),
        };
        h.record(v).unwrap();
    }
    h
}

fn machine() -> Machine {
    Machine {
        cpu: "Golden CPU @ 3.00GHz".into(),
        cpus: 2,
        kernel: "6.18.0-golden".into(),
        virtualization: "KVM".into(),
        clocksource: "tsc".into(),
        clock_cost_ns: 21.4,
    }
}

/// The start of every recording: fixed, so the interval log is too.
fn start(offset_s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_000_000 + offset_s)
}

fn row(mode: &str, transport: &str, size: usize, h: &Histogram<u64>) -> LatencyRow {
    let mut r = LatencyRow::from_histogram(mode, transport, size, h);
    r.cpus = "cpu0+cpu1".into();
    r.machine = machine().summary();
    r
}

/// A ping-pong over IPC beside its raw-ring floor, and one over kernel UDP
/// (spinning) beside its own.
fn pingpong() -> Vec<Measured> {
    let floor_h = filled(1, 120, 20_000);
    let mut floor = row("floor", "ipc", 64, &floor_h);
    floor.probe = Some("raw_ring".into());
    let ipc_h = filled(2, 140, 20_000);
    let ipc = row("pingpong", "ipc", 64, &ipc_h).with_floor(&floor);
    let udp_h = filled(3, 2_600, 20_000);
    let mut udp = row("pingpong", "udp", 64, &udp_h);
    udp.wait = Some("spin".into());
    udp.lost = 2;
    [(floor, floor_h, 0), (ipc, ipc_h, 1), (udp, udp_h, 2)]
        .into_iter()
        .map(|(row, hist, k)| Measured { row, hist, start: start(k), elapsed: Duration::from_millis(900) })
        .collect()
}

fn throughput_rows() -> Vec<ThroughputRow> {
    let mut floor = ThroughputRow {
        mode: "floor".into(),
        transport: "ipc".into(),
        probe: Some("slot_ring_throughput".into()),
        size: 32,
        count: 80_000_000,
        duration_s: 4.0,
        msgs_per_s: 20_000_000.0,
        bytes_per_s: 640_000_000.0,
        cpus: "cpu0+cpu1".into(),
        ..ThroughputRow::default()
    };
    let mut batched = ThroughputRow {
        mode: "reference".into(),
        probe: Some("raw_ring_throughput".into()),
        count: 120_000_000,
        msgs_per_s: 30_000_000.0,
        bytes_per_s: 960_000_000.0,
        batch: Some(64),
        ..floor.clone()
    };
    let lines = ThroughputRow {
        mode: "floor".into(),
        transport: "ipc".into(),
        probe: Some("cacheline_stream".into()),
        size: 32,
        count: 150_000_000,
        duration_s: 4.0,
        msgs_per_s: 75_000_000.0,
        bytes_per_s: 2_400_000_000.0,
        cpus: "cpu0+cpu1".into(),
        ..ThroughputRow::default()
    };
    let rounds: Vec<ThroughputRow> = [9.1e6, 9.8e6, 10.4e6]
        .iter()
        .map(|&rate| ThroughputRow {
            mode: "throughput".into(),
            transport: "ipc".into(),
            size: 32,
            count: (rate * 1.3) as u64,
            duration_s: 1.3,
            msgs_per_s: rate,
            bytes_per_s: rate * 32.0,
            lost: 0,
            cpus: "cpu0+cpu1".into(),
            ..ThroughputRow::default()
        })
        .collect();
    let mut ipc = ThroughputRow::of_rounds(&rounds).unwrap();
    ipc.with_floor(&floor);
    ipc.ratio_min = Some(0.44);
    ipc.ratio_max = Some(0.53);
    ipc.batched_share(&batched);
    ipc.line_share(&lines);
    floor.line_share(&lines);
    batched.line_share(&lines);
    vec![floor, batched, lines, ipc]
}

/// A rate sweep: a floor and IPC at two rates, all and pause-free rows.
fn sweep_rows() -> Vec<LatencyRow> {
    let mut out = Vec::new();
    for (k, rate) in [10_000.0, 100_000.0].into_iter().enumerate() {
        let floor_h = filled(10 + k as u64, 300, 5_000);
        let mut floor = row("floor", "ipc", 64, &floor_h);
        floor.offered_rate = Some(rate);
        floor.achieved_rate = Some(rate * 0.999);
        let ipc_h = filled(20 + k as u64, 380, 5_000);
        let mut ipc = row("sweep", "ipc", 64, &ipc_h);
        ipc.offered_rate = Some(rate);
        ipc.achieved_rate = Some(rate * 0.998);
        let ipc = ipc.with_floor(&floor);
        for mut r in [floor, ipc] {
            r.distribution = Some("all".into());
            r.pauses = Some(3 + k as u64);
            r.pause_total_ns = Some(412_000);
            r.pause_max_ns = Some(250_000);
            r.excluded = Some(17);
            let mut free = r.clone();
            free.distribution = Some("pause_free".into());
            out.push(r);
            out.push(free);
        }
    }
    out
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Compares `got` with the golden file `name` (or writes it, blessing).
fn check(name: &str, got: &[u8]) {
    let path = golden_dir().join(name);
    if std::env::var_os("TICKWIRE_BLESS").is_some() {
        std::fs::create_dir_all(golden_dir()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e} (TICKWIRE_BLESS=1 writes it)", path.display()));
    if want != got {
        let (w, g) = (String::from_utf8_lossy(&want), String::from_utf8_lossy(got));
        let line =
            w.lines().zip(g.lines()).position(|(a, b)| a != b).unwrap_or(w.lines().count().min(g.lines().count()));
        panic!(
            "{name}: the output changed at line {}:\n  golden: {:?}\n  now:    {:?}\n(an intended change: TICKWIRE_BLESS=1 and review the diff)",
            line + 1,
            w.lines().nth(line),
            g.lines().nth(line)
        );
    }
}

/// A scratch file this test made, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        Self(std::env::temp_dir().join(format!("tw-golden-{}-{name}", std::process::id())))
    }
    fn read(&self) -> Vec<u8> {
        std::fs::read(&self.0).unwrap()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_latency_table_is_unchanged() {
    check("latency.txt", print::render_latency(&pingpong(), Format::Table, &machine()).as_bytes());
}

#[test]
fn the_latency_json_rows_are_unchanged() {
    check("latency.json", print::render_latency(&pingpong(), Format::Json, &machine()).as_bytes());
}

#[test]
fn the_latency_csv_is_unchanged() {
    check("latency.csv", print::render_latency(&pingpong(), Format::Csv, &machine()).as_bytes());
}

#[test]
fn the_sockperf_blocks_are_unchanged() {
    check("latency.sockperf", print::render_latency(&pingpong(), Format::Sockperf, &machine()).as_bytes());
}

#[test]
fn the_interval_log_is_unchanged() {
    let f = Scratch::new("latency.hlog");
    write_hlog(&f.0, &pingpong()).unwrap();
    check("latency.hlog", &f.read());
}

#[test]
fn the_percentile_plot_is_unchanged() {
    let f = Scratch::new("percentiles.svg");
    print::distribution(&f.0, "ping-pong, 64 B", &pingpong()).unwrap();
    check("percentiles.svg", &f.read());
}

#[test]
fn the_throughput_lines_are_unchanged() {
    check("throughput.txt", print::render_throughput(&throughput_rows(), Format::Table).as_bytes());
    check("throughput.json", print::render_throughput(&throughput_rows(), Format::Json).as_bytes());
}

#[test]
fn the_sweep_table_and_its_csv_are_unchanged() {
    check("sweep.txt", print::render_sweep(&sweep_rows(), Format::Table, &machine(), 100).as_bytes());
    check("sweep.csv", print::render_sweep(&sweep_rows(), Format::Csv, &machine(), 100).as_bytes());
}

#[test]
fn the_rate_plot_is_unchanged() {
    let rows = sweep_rows();
    let series: Vec<plots::Series> = ["floor", "sweep"]
        .iter()
        .map(|mode| {
            let points = rows
                .iter()
                .filter(|r| r.mode == *mode && r.distribution.as_deref() == Some("all"))
                .map(|r| (r.offered_rate.unwrap(), r.p50_ns as f64 / 1e3))
                .collect();
            (mode.to_string(), points)
        })
        .collect();
    let f = Scratch::new("rate.svg");
    plots::lines(&f.0, "latency against rate", "offered rate (msg/s)", &series, true).unwrap();
    check("rate.svg", &f.read());
}
