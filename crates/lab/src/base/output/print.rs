//! What each command prints on stdout, in the chosen [`Format`], and the
//! files it writes beside (interval log, plots) as its [`Output`] asks.

use super::report::{table, LatencyRow, ThroughputRow};
use super::{csv, sockperf, tag, write_hlog, Measured};
use crate::base::host::doctor::{Finding, Status};
use crate::base::host::machine::Machine;
use crate::LabError;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
pub enum Format {
    /// The papers' table (Min, Median, Mean, 99th, 99.9th, Max, STD, plus 90th and 99.99th).
    #[default]
    Table,
    /// One JSON object per row.
    Json,
    /// CSV with a header line.
    Csv,
    /// sockperf's percentile block, one per row.
    Sockperf,
}

/// Where a run's results go: stdout in `format`, and optionally an
/// HdrHistogram interval log and an SVG plot.
#[derive(Debug, Clone, Default)]
pub struct Output {
    /// The stdout format.
    pub format: Format,
    /// Also write the histograms to this interval log.
    pub hlog: Option<PathBuf>,
    /// Also write an SVG plot here.
    pub plot: Option<PathBuf>,
}

/// The options every measuring command shares (`#[command(flatten)]` in
/// each mode's options).
#[derive(Debug, Clone, PartialEq, Eq, Default, clap::Args, serde::Serialize, serde::Deserialize)]
pub struct Common {
    /// CPUs for the local and remote sides (two different CPUs this process may use).
    #[arg(long, default_value = "0,1", value_parser = crate::Cpus::parse)]
    pub cpus: crate::Cpus,
    /// Allow both sides on one CPU: they take turns by the scheduler's time
    /// slice, so the figures measure the scheduler, and runs take far longer.
    #[arg(long)]
    pub share_cpu: bool,
    /// Print JSON (one object per row); same as --format json.
    #[arg(long)]
    pub json: bool,
    /// Print CSV; same as --format csv.
    #[arg(long)]
    pub csv: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Fail (exit 1) when a row beat its floor by more than the noise
    /// (latency p50 under 0.95x, throughput over 1.05x): the probe is then
    /// not a floor for the work, and no ratio to it means anything.
    #[arg(long)]
    pub strict: bool,
}

impl Common {
    /// These CPUs and every other option at its default.
    pub fn on(cpus: crate::Cpus) -> Self {
        Self { cpus, ..Self::default() }
    }

    /// The stdout format: `--json` and `--csv` before `--format`.
    pub fn format(&self) -> Format {
        match (self.json, self.csv, self.format) {
            (true, _, _) | (_, _, Format::Json) => Format::Json,
            (false, true, _) | (_, _, Format::Csv) => Format::Csv,
            (false, false, f) => f,
        }
    }

    /// Where the results go; the directories of `hlog` and `plot` are
    /// made now, before a run that could not write its results (a failure
    /// is reported when the file is written, naming it).
    pub fn output(&self, hlog: &Option<PathBuf>, plot: &Option<PathBuf>) -> Output {
        for dir in [hlog, plot].into_iter().flatten().filter_map(|p| p.parent()) {
            let _ = std::fs::create_dir_all(dir);
        }
        Output { format: self.format(), hlog: hlog.clone(), plot: plot.clone() }
    }
}

impl Output {
    /// A table on stdout and no files.
    pub fn table() -> Self {
        Self::default()
    }
}

pub fn json_lines<T: serde::Serialize>(rows: &[T]) -> String {
    let mut out = String::new();
    for r in rows {
        out.push_str(&serde_json::to_string(r).unwrap_or_default());
        out.push('\n');
    }
    out
}

/// Prints latency rows: the table with the machine and pinning above it,
/// JSON, CSV, or sockperf's blocks.
pub fn latency(measured: &[Measured], format: Format, machine: &Machine) {
    print!("{}", render_latency(measured, format, machine));
}

/// What [`latency`] prints.
pub fn render_latency(measured: &[Measured], format: Format, machine: &Machine) -> String {
    let mut out = String::new();
    let rows: Vec<LatencyRow> = measured.iter().map(|m| m.row.clone()).collect();
    match format {
        Format::Json => out.push_str(&json_lines(&rows)),
        Format::Csv => out.push_str(&csv(&rows)),
        Format::Sockperf => {
            for m in measured {
                let _ = writeln!(out, "# {}", tag(&m.row));
                out.push_str(&sockperf(m));
            }
        }
        Format::Table => {
            let _ = writeln!(out, "machine: {}", machine.summary());
            if let Some(r) = rows.first().filter(|r| r.mode == "fsync") {
                let _ = writeln!(out, "pinning: CPU {}, one thread", r.cpus);
            } else if let Some(r) = rows.first() {
                let _ = writeln!(
                    out,
                    "pinning: CPUs {} (measuring side, far side), each side busy-spinning unless marked block",
                    r.cpus
                );
                if let Some((a, b)) = r.cpus.split_once(',') {
                    if let (Ok(local), Ok(remote)) = (a.parse(), b.parse()) {
                        let _ = writeln!(
                            out,
                            "topology: {}",
                            crate::base::host::machine::pair(crate::Cpus { local, remote })
                        );
                    }
                }
            }
            out.push_str(&table(&rows));
            for r in rows.iter().filter(|r| r.floor_beaten.is_some()) {
                let _ = writeln!(out, "{} {} {} B: {}", r.mode, r.transport, r.size, BEATEN_NOTE);
            }
        }
    }
    out
}

/// Under a row that beat its floor.
const BEATEN_NOTE: &str = "FLOOR BEATEN: the probe is not a floor for this work (--strict fails the run)";

/// Prints the rows, then writes the interval log and the percentile plot
/// if `out` asks for them.
///
/// # Errors
/// [`LabError::Output`] if a file cannot be written.
pub fn latency_and_files(measured: &[Measured], out: &Output, machine: &Machine, title: &str) -> Result<(), LabError> {
    latency(measured, out.format, machine);
    hlog(out, measured)?;
    if let Some(path) = &out.plot {
        distribution(path, title, measured)?;
    }
    Ok(())
}

/// The pause line under an open-loop table: how much of the run the host
/// took away, and how many messages the pause-free rows leave out.
pub fn pauses_line(r: &LatencyRow) -> String {
    format!(
        "pauses (gaps over 20 us in either side's loop): {} totalling {:.2} ms, longest {:.1} us; \
         {} of {} messages were in flight during one and are left out of the pause-free rows",
        r.pauses.unwrap_or(0),
        r.pause_total_ns.unwrap_or(0) as f64 / 1e6,
        r.pause_max_ns.unwrap_or(0) as f64 / 1e3,
        r.excluded.unwrap_or(0),
        r.count
    )
}

/// Writes the interval log if `out` asks for one.
///
/// # Errors
/// [`LabError::Output`] if it cannot be written.
pub fn hlog(out: &Output, measured: &[Measured]) -> Result<(), LabError> {
    match &out.hlog {
        Some(path) => write_hlog(path, measured).map_err(LabError::Output),
        None => Ok(()),
    }
}

/// Plots the percentile distribution of each row.
///
/// # Errors
/// [`LabError::Output`] if the plot cannot be written.
pub fn distribution(path: &std::path::Path, title: &str, measured: &[Measured]) -> Result<(), LabError> {
    let hists: Vec<(String, &hdrhistogram::Histogram<u64>)> = measured.iter().map(|m| (tag(&m.row), &m.hist)).collect();
    super::plots::percentiles(path, title, &hists).map_err(LabError::Output)
}

/// Prints throughput rows, one line each (or JSON).
pub fn throughput(rows: &[ThroughputRow], format: Format) {
    print!("{}", render_throughput(rows, format));
}

/// What [`throughput`] prints.
pub fn render_throughput(rows: &[ThroughputRow], format: Format) -> String {
    if format == Format::Json {
        return json_lines(rows);
    }
    let mut out = String::new();
    for r in rows {
        let _ = writeln!(
            out,
            "{:<10} {:<4} {:<20} size {:>4}: {:>12.0} msg/s {:>8.1} MB/s, {} messages in {:.2} s{}, lost {}{}",
            r.mode,
            r.transport,
            r.probe.as_deref().unwrap_or("-"),
            r.size,
            r.msgs_per_s,
            r.bytes_per_s / 1e6,
            r.count,
            r.duration_s,
            r.rounds.map(|n| format!(" ({n} rounds, median round's rate)")).unwrap_or_default(),
            r.lost,
            r.ratio
                .map(|x| format!(
                    ", {x:.2}x the floor ({:.0} msg/s, same run{})",
                    r.floor_msgs_per_s.unwrap_or(0.0),
                    match (r.rounds, r.ratio_min, r.ratio_max) {
                        (Some(n), Some(lo), Some(hi)) =>
                            format!("; medians of {n} interleaved rounds, per-round ratio {lo:.2}-{hi:.2}x"),
                        _ => String::new(),
                    }
                ))
                .unwrap_or_default()
        );
        if r.probe.as_deref() == Some(crate::base::line_limit::PROBE) {
            let _ = writeln!(out,
                "  (cache lines moved one way between the CPUs: {:.2} GB/s; at {} B a message, {:.0} msg/s if only the messages' bytes crossed)",
                r.bytes_per_s / 1e9,
                r.size,
                r.msgs_per_s
            );
        } else if let Some(share) = r.of_line_limit {
            let _ = writeln!(out, "  ({share:.2} of the rate the line transfer allows at {} B)", r.size);
        }
        if let Some(share) = r.of_batched_ring {
            let _ = writeln!(
                out,
                "  ({share:.2} of the raw ring publishing its tail in batches: a reference, messages held to their batch's end)"
            );
        }
        if r.floor_beaten.is_some() {
            let _ = writeln!(out, "{} {} {} B: {}", r.mode, r.transport, r.size, BEATEN_NOTE);
        }
    }
    out
}

/// Prints the rate sweep: one line per target rate.
pub fn sweep(rows: &[LatencyRow], format: Format, machine: &Machine, reflect_every: u64) {
    print!("{}", render_sweep(rows, format, machine, reflect_every));
}

/// What [`sweep`] prints.
pub fn render_sweep(rows: &[LatencyRow], format: Format, machine: &Machine, reflect_every: u64) -> String {
    let mut out = String::new();
    match format {
        Format::Json => out.push_str(&json_lines(rows)),
        Format::Csv => out.push_str(&csv(rows)),
        Format::Table | Format::Sockperf => {
            let _ = writeln!(out, "machine: {}", machine.summary());
            let _ = writeln!(out,
                "{:<10} {:>10} {:>10} {:>5} {:>10} {:>7} {:>8} {:>9} {:>8} {:>8} {:>9} {:>10} {:>10} {:>10} {:>8} {:>8}",
                "path",
                "target/s",
                "achieved/s",
                "lost",
                "messages",
                "Min",
                "Median",
                "Mean",
                "90th",
                "99th",
                "99.9th",
                "99.99th",
                "Max",
                "STD",
                "samples",
                "p50/flr"
            );
            for r in rows {
                let path = if r.mode == "floor" { format!("{} floor", r.transport) } else { r.transport.clone() };
                let ratio = r.ratio_p50.map_or_else(|| "-".to_owned(), |x| format!("{x:.2}x"));
                let _ = writeln!(out,
                    "{:<10} {:>10.0} {:>10.0} {:>5} {:>10} {:>7} {:>8} {:>9.1} {:>8} {:>8} {:>9} {:>10} {:>10} {:>10.1} {:>8} {:>8}",
                    path,
                    r.offered_rate.unwrap_or(0.0),
                    r.achieved_rate.unwrap_or(0.0),
                    r.lost,
                    if r.distribution.as_deref() == Some("pause_free") { "pause-free" } else { "all" },
                    r.min_ns,
                    r.p50_ns,
                    r.mean_ns,
                    r.p90_ns,
                    r.p99_ns,
                    r.p999_ns,
                    r.p9999_ns,
                    r.max_ns,
                    r.std_ns,
                    r.count,
                    ratio
                );
            }
            let _ =
                writeln!(out, "(round-trip nanoseconds from the intended send time; 1 in {reflect_every} reflected)");
            for r in rows.iter().filter(|r| r.distribution.as_deref() != Some("pause_free")) {
                let floor = if r.mode == "floor" { " (floor)" } else { "" };
                let _ = writeln!(
                    out,
                    "{}{floor} at {:.0} msg/s, {}",
                    r.transport,
                    r.offered_rate.unwrap_or(0.0),
                    pauses_line(r)
                );
            }
        }
    }
    out
}

/// One hiccup probe: the largest pause seen on a CPU and how many pauses
/// passed 100 µs and 1 ms.
#[derive(Debug, Clone, Copy)]
pub struct Hiccups {
    /// The CPU probed.
    pub cpu: usize,
    /// How long it was probed.
    pub over: Duration,
    /// The largest pause.
    pub max: Duration,
    /// Pauses over 100 µs.
    pub over_100us: u64,
    /// Pauses over 1 ms.
    pub over_1ms: u64,
}

/// Prints the doctor's findings and hiccup probes.
pub fn doctor(findings: &[Finding], probes: &[Hiccups], json: bool) {
    if json {
        let hic: Vec<_> = probes
            .iter()
            .map(|p| serde_json::json!({"cpu": p.cpu, "max_gap_ns": p.max.as_nanos() as u64, "gaps_over_100us": p.over_100us, "gaps_over_1ms": p.over_1ms}))
            .collect();
        println!("{}", serde_json::json!({"findings": findings, "hiccups": hic}));
        return;
    }
    println!("machine: {}", Machine::detect().summary());
    for f in findings {
        let mark = match f.status {
            Status::Ok => "ok    ",
            Status::Advice => "ADVICE",
            Status::Info => "info  ",
        };
        println!("[{mark}] {}: {}", f.check, f.observed);
        if f.status != Status::Ok {
            println!("         {}", f.advice);
            for fix in &f.fixes {
                println!("         --apply writes {} to /{}", fix.value, fix.path);
            }
        }
    }
    for p in probes {
        println!(
            "[{}] hiccups on cpu{} over {:?}: largest pause {:.3} ms, {} pauses > 100 us, {} > 1 ms",
            if p.over_1ms > 0 { "ADVICE" } else { "ok    " },
            p.cpu,
            p.over,
            p.max.as_secs_f64() * 1e3,
            p.over_100us,
            p.over_1ms
        );
    }
    if probes.iter().any(|p| p.over_1ms > 0) {
        println!(
            "         The CPU was taken away for milliseconds with nothing else running (host preemption, \
                  interrupts): open-loop tails will show it; closed-loop ping-pong hides it."
        );
    }
}
