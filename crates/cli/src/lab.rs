//! `tickwire lab ...`.

use crate::config::Settings;
use crate::units::{parse_duration, parse_size};
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;
use tickwire_lab::floor::{self, FloorOptions};
use tickwire_lab::ipc::{self, IpcOptions};
use tickwire_lab::machine::Machine;
use tickwire_lab::output::{self, Measured};
use tickwire_lab::pingpong::{self, PingPong, Transport};
use tickwire_lab::report::{table, LatencyRow, ThroughputRow};
use tickwire_lab::sockets::Wait;
use tickwire_lab::Cpus;

#[derive(Debug, Subcommand)]
pub enum LabCmd {
    /// The machine's floor: cache-line and raw-ring ping-pong, raw-ring throughput.
    Floor(FloorArgs),
    /// Half-round-trip latency by message size (ipc, udp, tcp).
    Pingpong(PingArgs),
    /// One-way streaming throughput with every message checked.
    Throughput(ThroughputArgs),
    /// One-way latency at a fixed offered rate, open loop (coordinated-omission free).
    Oneway(OneWayArgs),
    /// Inspect the machine for latency pitfalls; change nothing unless --apply.
    Doctor(DoctorArgs),
    /// Round-trip latency against message rate (Exhibit 4), up to the highest sustained rate.
    SweepRate(SweepArgs),
    /// UDP tick in, TCP order out, timed with kernel timestamps (paper 004).
    TickToTrade(TickArgs),
    /// Every measurement of the papers, into DIR/report.md with plots.
    Reproduce(ReproduceArgs),
    /// Send a generated stream over reliable UDP under chosen loss, and check it arrived intact.
    Transfer(TransferArgs),
    /// Internal: the far side of a measurement.
    #[command(hide = true)]
    Worker {
        /// Role and its arguments.
        args: Vec<String>,
    },
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// The papers' table (Min, Median, Mean, 99th, 99.9th, Max, STD, plus 90th and 99.99th).
    Table,
    /// One JSON object per row.
    Json,
    /// CSV with a header line.
    Csv,
    /// sockperf's percentile block, one per row.
    Sockperf,
}

#[derive(Debug, Args)]
pub struct Common {
    /// CPUs for the local and remote sides.
    #[arg(long, default_value = "0,1", value_parser = parse_cpus)]
    cpus: Cpus,
    /// Print JSON (one object per row); same as --format json.
    #[arg(long)]
    json: bool,
    /// Print CSV; same as --format csv.
    #[arg(long)]
    csv: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

impl Common {
    fn format(&self) -> Format {
        if self.json {
            Format::Json
        } else if self.csv {
            Format::Csv
        } else {
            self.format
        }
    }
}

#[derive(Debug, Args)]
pub struct FloorArgs {
    #[command(flatten)]
    common: Common,
    /// Round trips per latency probe.
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    /// Round trips before recording.
    #[arg(long, default_value_t = 10_000)]
    warmup: u64,
    /// Message size of the raw-ring ping-pong.
    #[arg(long, default_value = "64", value_parser = parse_size)]
    size: usize,
    /// Duration of the throughput probe.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    duration: Duration,
    /// Also write the latency histograms to an HdrHistogram interval log.
    #[arg(long)]
    hlog: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PingArgs {
    #[command(flatten)]
    common: Common,
    /// Transport: ipc (tickwire shared memory), udp or tcp (plain kernel sockets on loopback).
    #[arg(long, default_value = "ipc", value_parser = Transport::parse)]
    transport: Transport,
    /// Message size in bytes.
    #[arg(long, default_value = "64", value_parser = parse_size)]
    size: usize,
    /// Sweep: a row per size, e.g. 64,128,256,512,1024,1472.
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Round trips recorded per size.
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    /// Run each size for this long instead of --count round trips (e.g. 10s).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Round trips before recording, per round.
    #[arg(long, default_value_t = 10_000)]
    warmup: u64,
    /// Busy-poll while waiting (the default).
    #[arg(long, conflicts_with = "block")]
    spin: bool,
    /// Block in the kernel while waiting (sockets: blocking recv; ipc: futex park).
    #[arg(long)]
    block: bool,
    /// Log capacity (ipc).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    capacity: usize,
    /// Skip the same-run floor measurement (no ratio is reported).
    #[arg(long)]
    no_floor: bool,
    /// Rounds alternating a floor chunk and a transport chunk, so both see
    /// the same machine even when the host moves the vCPUs mid-run.
    #[arg(long, default_value_t = 10)]
    rounds: u64,
    /// Also write the histograms as an HdrHistogram interval log.
    #[arg(long)]
    hlog: Option<PathBuf>,
    /// udp/tcp: run across two network namespaces joined by a veth pair
    /// (created and removed by the lab; needs root and iproute2).
    #[arg(long)]
    netns: bool,
    /// Write an SVG plot: latency against size for --sizes, else the percentile distribution.
    #[arg(long)]
    plot: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ThroughputArgs {
    #[command(flatten)]
    common: Common,
    /// Transport (ipc).
    #[arg(long, default_value = "ipc")]
    transport: String,
    /// Message size in bytes (at least 8).
    #[arg(long, default_value = "32", value_parser = parse_size)]
    size: usize,
    /// How long to stream.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Log capacity.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    capacity: usize,
    /// Skip the same-run raw-ring throughput (no ratio is reported).
    #[arg(long)]
    no_floor: bool,
}

#[derive(Debug, Args)]
pub struct OneWayArgs {
    #[command(flatten)]
    common: Common,
    /// Transport (ipc).
    #[arg(long, default_value = "ipc")]
    transport: String,
    /// Offered rate in messages per second, all publishers together (e.g. 100k, 1M).
    #[arg(long, default_value = "100k", value_parser = crate::units::parse_rate)]
    rate: u64,
    /// Payload bytes (at least 16).
    #[arg(long, default_value = "100", value_parser = parse_size)]
    size: usize,
    /// How long to publish.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    duration: Duration,
    /// Publisher streams.
    #[arg(long, default_value_t = 1)]
    publishers: usize,
    /// Subscribers, each on every stream.
    #[arg(long, default_value_t = 1)]
    subscribers: usize,
    /// Distinct 12-byte topics.
    #[arg(long, default_value_t = 1)]
    topics: usize,
    /// Log capacity per stream.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    capacity: usize,
    /// Also write the histogram as an HdrHistogram interval log.
    #[arg(long)]
    hlog: Option<PathBuf>,
    /// Write an SVG plot of the percentile distribution.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// rudp: drop this fraction of the datagrams each end sends (repaired by NAK).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// rudp: any channel parameter, KEY=VALUE (repeatable), e.g. nak-delay=50us.
    #[arg(long = "param")]
    params: Vec<String>,
    /// Test hook: the receiver sleeps --stall-for once every N messages.
    #[arg(long, hide = true, default_value_t = 0)]
    stall_every: u64,
    /// Test hook: how long the receiver sleeps.
    #[arg(long, hide = true, default_value = "0s", value_parser = parse_duration)]
    stall_for: Duration,
}

#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// Output directory for report.md and the plots.
    #[arg(long)]
    out: PathBuf,
    /// CPUs for the measuring and far sides.
    #[arg(long, default_value = "0,1", value_parser = parse_cpus)]
    cpus: Cpus,
    /// Seconds instead of about a minute (a smoke test; figures are not meaningful).
    #[arg(long)]
    quick: bool,
}

#[derive(Debug, Args)]
pub struct TickArgs {
    #[command(flatten)]
    common: Common,
    /// Ticks measured.
    #[arg(long, default_value_t = 25_000)]
    runs: u64,
    /// Ticks before measuring.
    #[arg(long, default_value_t = 1_000)]
    warmup: u64,
    /// Tick size (UDP payload).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    tick_size: usize,
    /// Order size (TCP payload).
    #[arg(long, default_value = "400", value_parser = parse_size)]
    order_size: usize,
    /// Write an SVG plot of the percentile distributions.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Also write the histograms as an HdrHistogram interval log.
    #[arg(long)]
    hlog: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TransferArgs {
    /// Transport (rudp).
    #[arg(long, default_value = "rudp")]
    transport: String,
    /// Payload bytes to send.
    #[arg(long, default_value = "10MiB", value_parser = parse_size)]
    bytes: usize,
    /// Largest message; sizes are uniform from 16 bytes up to it.
    #[arg(long, default_value = "4k", value_parser = parse_size)]
    max_size: usize,
    /// Drop this fraction of the datagrams each end sends (data and control).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Reorder this fraction, likewise.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Duplicate this fraction, likewise.
    #[arg(long, default_value_t = 0.0)]
    duplicate: f64,
    /// Seed of the impairments and the generated content.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Receivers; more than one is multicast and needs --netns.
    #[arg(long, default_value_t = 1)]
    receivers: usize,
    /// Run across network namespaces (veth pair; a bridge for several receivers).
    #[arg(long)]
    netns: bool,
    /// Any channel parameter, KEY=VALUE (repeatable), e.g. send-data-drop=65536-65537, nak-delay=50us.
    #[arg(long = "param")]
    params: Vec<String>,
    /// Give up after this long.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    timeout: Duration,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    common: Common,
    /// Transport (ipc).
    #[arg(long, default_value = "ipc")]
    transport: String,
    /// Target rates, in order.
    #[arg(long, value_delimiter = ',', value_parser = crate::units::parse_rate,
          default_value = "10k,50k,100k,500k,1M,2M,5M,10M,20M,40M")]
    rates: Vec<u64>,
    /// Payload bytes (at least 16).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    size: usize,
    /// How long each rate is held.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    step: Duration,
    /// The receiver reflects one message in this many.
    #[arg(long, default_value_t = 100)]
    reflect_every: u64,
    /// Stop after the first rate achieved below this fraction of its target.
    #[arg(long, default_value_t = 0.95)]
    sustain: f64,
    /// Write SVG plots: RTT percentiles against target rate here, and achieved
    /// against target beside it (`<name>-achieved.svg`).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Also write each step's histogram to an HdrHistogram interval log.
    #[arg(long)]
    hlog: Option<PathBuf>,
    /// Log capacity.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    capacity: usize,
}

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// CPUs to probe for hiccups.
    #[arg(long, default_value = "0,1", value_parser = parse_cpus)]
    cpus: Cpus,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Write the suggested settings (root only), saving the current ones first.
    #[arg(long, conflicts_with = "restore")]
    apply: bool,
    /// Where --apply saves the current settings.
    #[arg(long, default_value = "tickwire-doctor-restore.json")]
    restore_file: PathBuf,
    /// Put back the settings saved by --apply.
    #[arg(long)]
    restore: Option<PathBuf>,
    /// How long to probe each CPU for hiccups (0s: skip).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    hiccup: Duration,
}

fn parse_cpus(s: &str) -> Result<Cpus, String> {
    let (a, b) = s.split_once(',').ok_or("expected two CPUs, e.g. 0,1")?;
    let p = |x: &str| x.trim().parse::<usize>().map_err(|_| format!("bad CPU {x:?}"));
    Ok(Cpus { local: p(a)?, remote: p(b)? })
}

fn print_latency(measured: &[Measured], format: Format, machine: &Machine) {
    let rows: Vec<LatencyRow> = measured.iter().map(|m| m.row.clone()).collect();
    match format {
        Format::Json => {
            for r in &rows {
                println!("{}", serde_json::to_string(r).unwrap_or_default());
            }
        }
        Format::Csv => print!("{}", output::csv(&rows)),
        Format::Sockperf => {
            for m in measured {
                println!("# {}", output::tag(&m.row));
                print!("{}", output::sockperf(m));
            }
        }
        Format::Table => {
            println!("machine: {}", machine.summary());
            if let Some(r) = rows.first() {
                println!(
                    "pinning: CPUs {} (measuring side, far side), each side busy-spinning unless marked block",
                    r.cpus
                );
            }
            print!("{}", table(&rows));
        }
    }
}

/// A short raw-ring floor (100,000 round trips, milliseconds) measured just
/// before a run, so that every report carries its floor ratio.
fn quick_floor(cpus: Cpus, dir: &std::path::Path) -> Result<LatencyRow, String> {
    let fo =
        FloorOptions { count: 100_000, warmup: 5_000, size: 64, duration: Duration::ZERO, cpus, dir: dir.to_owned() };
    floor::raw_ring(&fo).map_err(|e| e.to_string())
}

/// Prints the rows, then writes the interval log and the distribution plot
/// if asked.
fn finish(
    measured: &[Measured],
    format: Format,
    machine: &Machine,
    hlog: Option<&PathBuf>,
    plot: Option<&PathBuf>,
    title: &str,
) -> Result<(), String> {
    print_latency(measured, format, machine);
    if let Some(path) = hlog {
        output::write_hlog(path, measured)?;
    }
    if let Some(path) = plot {
        plot_distribution(path, title, measured)?;
    }
    Ok(())
}

fn plot_distribution(path: &std::path::Path, title: &str, measured: &[Measured]) -> Result<(), String> {
    let hists: Vec<(String, &hdrhistogram::Histogram<u64>)> =
        measured.iter().map(|m| (output::tag(&m.row), &m.hist)).collect();
    tickwire_lab::plots::percentiles(path, title, &hists)
}

fn print_throughput(rows: &[ThroughputRow], format: Format) {
    for r in rows {
        if format == Format::Json {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        } else {
            println!(
                "{:<10} {:<4} {:<20} size {:>4}: {:>12.0} msg/s {:>8.1} MB/s, {} messages in {:.2} s, lost {}{}",
                r.mode,
                r.transport,
                r.probe.as_deref().unwrap_or("-"),
                r.size,
                r.msgs_per_s,
                r.bytes_per_s / 1e6,
                r.count,
                r.duration_s,
                r.lost,
                r.ratio
                    .map(|x| format!(
                        ", {x:.2}x the raw ring ({:.0} msg/s, same run)",
                        r.floor_msgs_per_s.unwrap_or(0.0)
                    ))
                    .unwrap_or_default()
            );
        }
    }
}

fn doctor(a: DoctorArgs) -> Result<(), String> {
    use tickwire_lab::doctor::{hiccups, Doctor, Status};
    let d = Doctor::default();
    if let Some(file) = &a.restore {
        for s in d.restore(file)? {
            println!("restored {} = {}", s.path, s.old);
        }
        return Ok(());
    }
    let findings = d.inspect();
    let mut probes = Vec::new();
    if !a.hiccup.is_zero() {
        for cpu in [a.cpus.local, a.cpus.remote] {
            let (max, over_100us, over_1ms) = hiccups(cpu, a.hiccup).map_err(|e| e.to_string())?;
            probes.push((cpu, max, over_100us, over_1ms));
        }
    }
    if a.json {
        let hic: Vec<_> = probes
            .iter()
            .map(|(c, m, a, b)| serde_json::json!({"cpu": c, "max_gap_ns": m.as_nanos() as u64, "gaps_over_100us": a, "gaps_over_1ms": b}))
            .collect();
        println!("{}", serde_json::json!({"findings": findings, "hiccups": hic}));
    } else {
        println!("machine: {}", Machine::detect().summary());
        for f in &findings {
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
        for (cpu, max, over_100us, over_1ms) in &probes {
            println!(
                "[{}] hiccups on cpu{cpu} over {:?}: largest pause {:.3} ms, {over_100us} pauses > 100 us, {over_1ms} > 1 ms",
                if *over_1ms > 0 { "ADVICE" } else { "ok    " },
                a.hiccup,
                max.as_secs_f64() * 1e3
            );
        }
        if probes.iter().any(|p| p.3 > 0) {
            println!(
                "         The CPU was taken away for milliseconds with nothing else running (host preemption, \
                      interrupts): open-loop tails will show it; closed-loop ping-pong hides it."
            );
        }
    }
    if a.apply {
        let saved = d.apply(&findings, &a.restore_file)?;
        println!(
            "applied {} settings; undo with: tickwire lab doctor --restore {}",
            saved.len(),
            a.restore_file.display()
        );
    }
    Ok(())
}

pub fn run(s: &Settings, cmd: LabCmd) -> Result<(), String> {
    let err = |e: tickwire_lab::LabError| e.to_string();
    if matches!(cmd, LabCmd::Worker { .. }) {
        tickwire_lab::ignore_ctrl_c();
    } else {
        tickwire_lab::install_ctrl_c();
    }
    match cmd {
        LabCmd::Worker { args } => {
            println!("{}", tickwire_lab::worker::run(&args).map_err(err)?);
        }
        LabCmd::Floor(a) => {
            let machine = Machine::detect();
            let o = FloorOptions {
                count: a.count,
                warmup: a.warmup,
                size: a.size,
                duration: a.duration,
                cpus: a.common.cpus,
                dir: s.dir.clone(),
            };
            let wall = std::time::SystemTime::now();
            let t = std::time::Instant::now();
            let clh = floor::cacheline_histogram(&o).map_err(err)?;
            let rrh = floor::raw_ring_histogram(&o).map_err(err)?;
            let elapsed = t.elapsed();
            let mk = |h: &hdrhistogram::Histogram<u64>, probe: &str, size: usize| {
                let mut r = LatencyRow::from_histogram("floor", "shm", size, h);
                r.probe = Some(probe.into());
                r.cpus = format!("{},{}", a.common.cpus.local, a.common.cpus.remote);
                r.machine = machine.summary();
                r
            };
            let (cl, rr) = (mk(&clh, "cacheline", 8), mk(&rrh, "raw_ring", a.size));
            if let Some(path) = &a.hlog {
                let m = [
                    Measured { row: cl.clone(), hist: clh.clone(), start: wall, elapsed },
                    Measured { row: rr.clone(), hist: rrh.clone(), start: wall, elapsed },
                ];
                output::write_hlog(path, &m)?;
            }
            let format = a.common.format();
            let rows = [cl, rr];
            match format {
                Format::Json => rows.iter().for_each(|r| println!("{}", serde_json::to_string(r).unwrap_or_default())),
                Format::Csv => print!("{}", output::csv(&rows)),
                Format::Table | Format::Sockperf => {
                    println!("machine: {}", machine.summary());
                    print!("{}", table(&rows));
                }
            }
            let mut tp = floor::raw_ring_throughput(&o).map_err(err)?;
            tp.bytes_per_s = tp.msgs_per_s * 64.0;
            if format != Format::Csv {
                print_throughput(&[tp], format);
            }
        }
        LabCmd::Pingpong(a) => {
            let machine = Machine::detect();
            let sizes = if a.sizes.is_empty() { vec![a.size] } else { a.sizes.clone() };
            let format = a.common.format();
            let mut measured = Vec::new();
            for size in sizes {
                if tickwire_lab::stop_requested() {
                    break;
                }
                let p = PingPong {
                    transport: a.transport,
                    wait: if a.block { Wait::Block } else { Wait::Spin },
                    size,
                    count: a.count,
                    warmup: a.warmup,
                    rounds: a.rounds,
                    floor: !a.no_floor,
                    cpus: a.common.cpus,
                    dir: s.dir.clone(),
                    capacity: a.capacity,
                    netns: a.netns,
                    duration: a.duration,
                };
                if a.netns && a.transport == Transport::Ipc {
                    return Err("--netns applies to udp and tcp (ipc is shared memory on one host)".into());
                }
                let (row, floor_row) = pingpong::run(&p, &machine).map_err(err)?;
                measured.push(row);
                // The floor's own row is shown in tables; JSON/CSV rows carry its figures.
                if let (Some(f), Format::Table | Format::Sockperf) = (floor_row, format) {
                    measured.push(f);
                }
            }
            print_latency(&measured, format, &machine);
            if let Some(path) = &a.hlog {
                output::write_hlog(path, &measured)?;
            }
            if let Some(path) = &a.plot {
                let mine: Vec<&Measured> = measured.iter().filter(|m| m.row.mode == "pingpong").collect();
                if mine.len() > 1 {
                    let line = |f: fn(&LatencyRow) -> u64| -> Vec<(f64, f64)> {
                        mine.iter().map(|m| (m.row.size as f64, f(&m.row) as f64 / 1000.0)).collect()
                    };
                    let name = a.transport.name();
                    tickwire_lab::plots::lines(
                        path,
                        &format!("Half-round-trip latency against message size ({name})"),
                        "message size (bytes)",
                        &[(format!("{name} p50"), line(|r| r.p50_ns)), (format!("{name} p99"), line(|r| r.p99_ns))],
                        false,
                    )?;
                } else {
                    plot_distribution(path, "Half-round-trip latency by percentile", &measured)?;
                }
            }
        }
        LabCmd::Doctor(a) => doctor(a)?,
        LabCmd::Reproduce(a) => {
            let machine = Machine::detect();
            let r = tickwire_lab::reproduce::Reproduce {
                out: a.out.clone(),
                quick: a.quick,
                cpus: a.cpus,
                dir: s.dir.clone(),
            };
            let path = tickwire_lab::reproduce::run(&r, &machine).map_err(err)?;
            println!("wrote {} (plots beside it)", path.display());
        }
        LabCmd::Transfer(a) => {
            if a.transport != "rudp" {
                return Err(format!("transfer runs over rudp, not {:?}", a.transport));
            }
            for p in [a.loss, a.reorder, a.duplicate] {
                if !(0.0..=1.0).contains(&p) {
                    return Err(format!("probabilities must be within [0, 1], got {p}"));
                }
            }
            let t = tickwire_lab::transfer::Transfer {
                bytes: a.bytes as u64,
                max_size: a.max_size.clamp(16, 1 << 20),
                loss: a.loss,
                reorder: a.reorder,
                duplicate: a.duplicate,
                seed: a.seed,
                receivers: a.receivers,
                netns: a.netns,
                params: a.params.clone(),
                timeout: a.timeout,
            };
            let r = tickwire_lab::transfer::run(&t).map_err(err)?;
            if a.json {
                println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
            } else {
                println!("channel {}", r.channel);
                println!(
                    "sent {} B in {:.3} s; received {} B; identical {}; in order {}",
                    r.bytes_sent, r.duration_s, r.bytes_received, r.identical, r.in_order
                );
                println!(
                    "NAKs sent {}, retransmissions {}, data datagrams dropped {}, lost events {}",
                    r.naks_sent, r.retransmits, r.datagrams_dropped, r.lost_events
                );
            }
            if !r.identical && r.lost_events == 0 {
                return Err("the received stream differs from the sent one, and no loss was reported".into());
            }
        }
        LabCmd::TickToTrade(a) => {
            let machine = Machine::detect();
            let t = tickwire_lab::tick_to_trade::TickToTrade {
                runs: a.runs,
                warmup: a.warmup,
                tick_size: a.tick_size,
                order_size: a.order_size,
                cpus: a.common.cpus,
            };
            let f = quick_floor(a.common.cpus, &s.dir)?;
            let (mut kernel, mut user) = tickwire_lab::tick_to_trade::run(&t, &machine).map_err(err)?;
            user.row = user.row.clone().with_floor(&f);
            if let Some(k) = kernel.as_mut() {
                k.row = k.row.clone().with_floor(&f);
            }
            let format = a.common.format();
            if kernel.is_none() && format == Format::Table {
                println!("(no kernel timestamps on this system: user-space clock only)");
            }
            let measured: Vec<Measured> = kernel.into_iter().chain(std::iter::once(user)).collect();
            finish(&measured, format, &machine, a.hlog.as_ref(), a.plot.as_ref(), "Tick-to-trade by percentile")?;
        }
        LabCmd::SweepRate(a) => {
            if a.transport != "ipc" {
                return Err(format!("sweep-rate over {:?} is not available yet (ipc only)", a.transport));
            }
            let machine = Machine::detect();
            let sweep = tickwire_lab::sweep::Sweep {
                rates: a.rates.clone(),
                size: a.size,
                step: a.step,
                reflect_every: a.reflect_every,
                sustain: a.sustain,
                cpus: a.common.cpus,
                dir: s.dir.clone(),
                capacity: a.capacity,
            };
            let f = quick_floor(a.common.cpus, &s.dir)?;
            let measured: Vec<Measured> = tickwire_lab::sweep::run_measured(&sweep, &machine)
                .map_err(err)?
                .into_iter()
                .map(|mut m| {
                    m.row = m.row.clone().with_floor(&f);
                    m
                })
                .collect();
            if let Some(path) = &a.hlog {
                output::write_hlog(path, &measured)?;
            }
            let rows: Vec<LatencyRow> = measured.iter().map(|m| m.row.clone()).collect();
            if let Some(path) = &a.plot {
                let pick = |f: fn(&LatencyRow) -> f64| -> Vec<(f64, f64)> {
                    rows.iter().map(|r| (r.offered_rate.unwrap_or(1.0), f(r))).collect()
                };
                tickwire_lab::plots::lines(
                    path,
                    "Round-trip latency against target message rate",
                    "target rate (messages per second)",
                    &[
                        ("RTT p50".into(), pick(|r| r.p50_ns as f64 / 1000.0)),
                        ("RTT p99".into(), pick(|r| r.p99_ns as f64 / 1000.0)),
                        ("RTT p99.9".into(), pick(|r| r.p999_ns as f64 / 1000.0)),
                    ],
                    true,
                )?;
                let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "sweep".into());
                let achieved = path.with_file_name(format!("{stem}-achieved.svg"));
                tickwire_lab::plots::lines_with(
                    &achieved,
                    "Achieved against target message rate",
                    "target rate (messages per second)",
                    "messages per second",
                    &[
                        ("achieved".into(), pick(|r| r.achieved_rate.unwrap_or(0.0).max(1.0))),
                        ("target".into(), pick(|r| r.offered_rate.unwrap_or(1.0))),
                    ],
                    true,
                )?;
            }
            match a.common.format() {
                Format::Json => rows.iter().for_each(|r| println!("{}", serde_json::to_string(r).unwrap_or_default())),
                Format::Csv => print!("{}", output::csv(&rows)),
                Format::Table | Format::Sockperf => {
                    println!("machine: {}", machine.summary());
                    println!(
                        "{:>10} {:>10} {:>5} {:>7} {:>8} {:>9} {:>8} {:>8} {:>9} {:>10} {:>10} {:>10} {:>8} {:>8}",
                        "target/s",
                        "achieved/s",
                        "lost",
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
                    for r in &rows {
                        println!(
                            "{:>10.0} {:>10.0} {:>5} {:>7} {:>8} {:>9.1} {:>8} {:>8} {:>9} {:>10} {:>10} {:>10.1} {:>8} {:>7.1}x",
                            r.offered_rate.unwrap_or(0.0),
                            r.achieved_rate.unwrap_or(0.0),
                            r.lost,
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
                            r.ratio_p50.unwrap_or(0.0)
                        );
                    }
                    println!(
                        "(round-trip nanoseconds from the intended send time; 1 in {} reflected)",
                        a.reflect_every
                    );
                }
            }
        }
        LabCmd::Oneway(a) if a.transport == "rudp" => {
            if !(0.0..=1.0).contains(&a.loss) {
                return Err(format!("--loss must be within [0, 1], got {}", a.loss));
            }
            let machine = Machine::detect();
            let mut params = a.params.clone();
            if a.loss > 0.0 {
                params.push(format!("loss={}&seed=7", a.loss));
            }
            let nak_delay =
                params.iter().find_map(|p| p.strip_prefix("nak-delay=")).unwrap_or("20us (unicast default)").to_owned();
            let (h, rep) = tickwire_lab::rudp::oneway_histogram(
                a.size.max(16),
                a.rate as f64,
                a.duration,
                a.common.cpus,
                &params.join("&"),
            )
            .map_err(err)?;
            let mut row = LatencyRow::from_histogram("oneway", "rudp", a.size.max(16), &h);
            row.offered_rate = Some(a.rate as f64);
            row.achieved_rate = Some(rep.msgs_per_s);
            row.lost = rep.missing;
            row.cpus = format!("{},{}", a.common.cpus.local, a.common.cpus.remote);
            row.machine = machine.summary();
            if a.common.format() == Format::Table {
                println!(
                    "offered {} msg/s, achieved {:.0} msg/s, loss injected {} per datagram each way, NAK delay {nak_delay}; \
                     {} NAKs sent, {} messages never delivered, {} lost events; latency from the intended send time",
                    a.rate, rep.msgs_per_s, a.loss, rep.naks_sent, rep.missing, rep.lost_events
                );
            }
            let m = Measured { row, hist: h, start: std::time::SystemTime::now(), elapsed: a.duration };
            finish(
                &[m],
                a.common.format(),
                &machine,
                a.hlog.as_ref(),
                a.plot.as_ref(),
                "One-way latency by percentile (rudp)",
            )?;
        }
        LabCmd::Oneway(a) => {
            if a.transport != "ipc" {
                return Err(format!("oneway over {:?} is not available yet (ipc only)", a.transport));
            }
            let machine = Machine::detect();
            let o = tickwire_lab::oneway::OneWay {
                rate: a.rate,
                size: a.size,
                duration: a.duration,
                publishers: a.publishers,
                subscribers: a.subscribers,
                topics: a.topics,
                cpus: a.common.cpus,
                dir: s.dir.clone(),
                capacity: a.capacity,
                stall: (a.stall_every > 0).then_some((a.stall_every, a.stall_for)),
            };
            let f = quick_floor(a.common.cpus, &s.dir)?;
            let mut m = tickwire_lab::oneway::run(&o, &machine).map_err(err)?;
            m.row = m.row.with_floor(&f);
            if a.common.format() == Format::Table {
                let r = &m.row;
                println!(
                    "offered {:.0} msg/s, achieved {:.0} msg/s, lost {}; {} publisher(s), {} subscriber(s), {} topic(s); latency from the intended send time",
                    r.offered_rate.unwrap_or(0.0),
                    r.achieved_rate.unwrap_or(0.0),
                    r.lost,
                    a.publishers,
                    a.subscribers,
                    a.topics
                );
            }
            finish(
                &[m],
                a.common.format(),
                &machine,
                a.hlog.as_ref(),
                a.plot.as_ref(),
                "One-way latency by percentile (from the intended send time)",
            )?;
        }
        LabCmd::Throughput(a) => {
            if a.transport == "rudp" {
                let r = tickwire_lab::rudp::throughput(a.size, a.duration, a.common.cpus, "").map_err(err)?;
                if a.common.format() == Format::Json {
                    println!(
                        "{}",
                        serde_json::json!({"mode": "throughput", "transport": "rudp", "size": a.size, "count": r.count,
                        "missing": r.missing, "lost_events": r.lost_events, "duration_s": r.duration_s, "msgs_per_s": r.msgs_per_s,
                        "datagrams": r.datagrams, "naks_sent": r.naks_sent, "cpus": format!("{},{}", a.common.cpus.local, a.common.cpus.remote)})
                    );
                } else {
                    println!(
                        "rudp {} B: {} messages in {:.3} s = {:.0} msg/s ({:.1} messages per datagram), missing {}, lost events {}",
                        a.size, r.count, r.duration_s, r.msgs_per_s, r.count as f64 / r.datagrams.max(1) as f64, r.missing, r.lost_events
                    );
                }
                return Ok(());
            }
            if a.transport != "ipc" {
                return Err(format!("throughput over {:?} is not available yet (ipc, rudp)", a.transport));
            }
            let o = IpcOptions {
                count: 0,
                warmup: 0,
                size: a.size,
                duration: a.duration,
                capacity: a.capacity,
                cpus: a.common.cpus,
                dir: s.dir.clone(),
                wait: Wait::Spin,
            };
            let fo = FloorOptions {
                count: 0,
                warmup: 0,
                size: 64,
                duration: a.duration.min(Duration::from_secs(3)),
                cpus: a.common.cpus,
                dir: s.dir.clone(),
            };
            // The floor before and after; the higher is kept (conservative ratio).
            let before = if a.no_floor { None } else { Some(floor::raw_ring_throughput(&fo).map_err(err)?) };
            let mut row = ipc::throughput(&o).map_err(err)?;
            let floor_row = match before {
                None => None,
                Some(b) => {
                    let after = floor::raw_ring_throughput(&fo).map_err(err)?;
                    let (lo, hi) = (b.msgs_per_s.min(after.msgs_per_s), b.msgs_per_s.max(after.msgs_per_s));
                    if lo > 0.0 && hi / lo > 1.5 {
                        eprintln!(
                            "tickwire lab: warning: the floor moved from {:.0} to {:.0} msg/s during the run \
                             (the host changed CPU placement); the ratio is not reliable, run again",
                            b.msgs_per_s, after.msgs_per_s
                        );
                    }
                    Some(if after.msgs_per_s > b.msgs_per_s { after } else { b })
                }
            };
            if let Some(f) = &floor_row {
                row.floor_msgs_per_s = Some(f.msgs_per_s);
                row.ratio = Some((row.msgs_per_s / f.msgs_per_s * 1000.0).round() / 1000.0);
            }
            let format = a.common.format();
            let mut rows = vec![row];
            if let (Some(mut f), false) = (floor_row, format == Format::Json) {
                f.bytes_per_s = f.msgs_per_s * 64.0;
                rows.push(f);
            }
            print_throughput(&rows, format);
        }
    }
    Ok(())
}
