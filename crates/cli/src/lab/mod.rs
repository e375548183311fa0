//! `tickwire lab ...`.

//!
//! Argument parsing only: each subcommand becomes a typed
//! [`tickwire_lab::request::Request`], and the lab measures and prints it.

mod accel;
mod auth;
mod bindings;
mod router;

pub use accel::AccelArgs;
pub use auth::AuthCostArgs;
pub use bindings::BindingsArgs;
pub use router::{ClusterArgs, GuaranteedArgs, RouterArgs, TopicMatchArgs};

use crate::config::Settings;
use crate::units::{parse_duration, parse_size};
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;
use tickwire_lab::base::floor::FloorOptions;
use tickwire_lab::modes::{oneway::OneWay, pingpong::PingPong, reproduce::Reproduce, sweep::Sweep};
use tickwire_lab::modes::{tick_to_trade::TickToTrade, transfer::Transfer};
use tickwire_lab::output::print::{self, Output};
use tickwire_lab::paths::{sockets::Wait, Transport};
use tickwire_lab::request::{self, DoctorRequest, OneWayRequest, Request, ThroughputRequest};
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
    /// The router's topic lookup with few and with many unrelated subscriptions.
    TopicMatch(TopicMatchArgs),
    /// The Solace scenario (paper 001) through the router, beside its forwarding floor.
    Router(RouterArgs),
    /// Request/reply round trips through the router at fixed rates (each publisher a requester, the
    /// subscriber of its topic answering at once), beside two one-way hops through the same router.
    Request(RouterArgs),
    /// A router cluster of three across network namespaces: one-way latency from a publisher on one router to a
    /// subscriber on another beside two TCP forwarders, and the spread scenario's rate beside one router (root).
    Cluster(ClusterArgs),
    /// Guaranteed publishing through the router per sync policy: peak rate, publish-to-ack and -delivery latency, beside this disk's fsync.
    Guaranteed(GuaranteedArgs),
    /// What a shared key (auth=FILE: a MAC on every datagram) costs reliable UDP: ping-pong and throughput, keyed and not, beside kernel UDP.
    AuthCost(AuthCostArgs),
    /// The C and Python examples' shared-memory ping-pong and Python's publish_many, beside the Rust lab's, in the same rounds.
    Bindings(BindingsArgs),
    /// sockperf's UDP ping-pong across a veth pair under `tickwire accel` and not, spinning and blocking, in the same rounds (root).
    Accel(AccelArgs),
    /// Internal: the far side of a measurement.
    #[command(hide = true)]
    Worker {
        /// The job, as the JSON the measuring side wrote.
        role: String,
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
    /// CPUs for the local and remote sides (two different CPUs this process may use).
    #[arg(long, default_value = "0,1", value_parser = parse_cpus)]
    cpus: Cpus,
    /// Allow both sides on one CPU: they take turns by the scheduler's time
    /// slice, so the figures measure the scheduler, and runs take far longer.
    #[arg(long)]
    share_cpu: bool,
    /// Print JSON (one object per row); same as --format json.
    #[arg(long)]
    json: bool,
    /// Print CSV; same as --format csv.
    #[arg(long)]
    csv: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Fail (exit 1) when a row beat its floor by more than the noise
    /// (latency p50 under 0.95x, throughput over 1.05x): the probe is then
    /// not a floor for the work, and no ratio to it means anything.
    #[arg(long)]
    strict: bool,
}

impl Common {
    fn format(&self) -> print::Format {
        match (self.json, self.csv, self.format) {
            (true, _, _) | (_, _, Format::Json) => print::Format::Json,
            (false, true, _) | (_, _, Format::Csv) => print::Format::Csv,
            (false, false, Format::Sockperf) => print::Format::Sockperf,
            (false, false, Format::Table) => print::Format::Table,
        }
    }

    /// Where the results go; the directories of `--hlog` and `--plot` are
    /// made now, before a run that could not write its results (a failure
    /// is reported when the file is written, naming it).
    fn output(&self, hlog: &Option<PathBuf>, plot: &Option<PathBuf>) -> Output {
        for dir in [hlog, plot].into_iter().flatten().filter_map(|p| p.parent()) {
            let _ = std::fs::create_dir_all(dir);
        }
        Output { format: self.format(), hlog: hlog.clone(), plot: plot.clone() }
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
    /// Transport: ipc (tickwire shared memory), udp or tcp (plain kernel sockets), rudp (reliable UDP),
    /// xdp (datagrams over AF_XDP; needs --netns). rudp and xdp are measured against kernel UDP.
    #[arg(long, default_value = "ipc", value_parser = Transport::parse)]
    transport: Transport,
    /// Message size in bytes.
    #[arg(long, default_value = "64", value_parser = parse_size)]
    size: usize,
    /// rudp: any channel parameter, KEY=VALUE (repeatable), e.g. xdp=required.
    #[arg(long = "param")]
    params: Vec<String>,
    /// xdp: where the XDP program runs: auto, native or generic.
    #[arg(long, default_value = "auto")]
    xdp_mode: String,
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
    /// udp, tcp, rudp, xdp: run across two network namespaces joined by a
    /// veth pair (created and removed by the lab; needs root and iproute2).
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
    /// Transport: ipc, rudp, or xdp (64-byte datagrams over AF_XDP across a veth pair, against kernel
    /// UDP with sendmmsg on the same kind of pair).
    #[arg(long, default_value = "ipc", value_parser = Transport::parse)]
    transport: Transport,
    /// xdp: where the XDP program runs: auto, native or generic.
    #[arg(long, default_value = "auto")]
    xdp_mode: String,
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
    /// ipc: rounds, each a raw-ring round then a tickwire round, of
    /// --duration / rounds each; rates are the median rounds'.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
}

#[derive(Debug, Args)]
pub struct OneWayArgs {
    #[command(flatten)]
    common: Common,
    /// Transport: ipc (tickwire shared memory), rudp (reliable UDP; floor: kernel UDP), udp or tcp (plain kernel sockets).
    #[arg(long, default_value = "ipc", value_parser = Transport::parse)]
    transport: Transport,
    /// udp, tcp, rudp: across two network namespaces joined by a veth pair
    /// (created and removed by the lab; needs root and iproute2).
    #[arg(long)]
    netns: bool,
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
    /// Rounds, each a raw-ring round (the open-loop floor, one to one only)
    /// then a tickwire round, of --duration / rounds each.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
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
    /// Allow both sides on one CPU (see `lab pingpong --help`).
    #[arg(long)]
    share_cpu: bool,
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
    #[arg(long, default_value = "rudp", value_parser = parse_rudp)]
    transport: Transport,
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
    /// Transport: ipc, rudp (with kernel UDP at each rate as its floor), udp or tcp (plain kernel sockets).
    #[arg(long, default_value = "ipc", value_parser = Transport::parse)]
    transport: Transport,
    /// udp, tcp, rudp: across two network namespaces joined by a veth pair
    /// (created and removed by the lab; needs root and iproute2).
    #[arg(long)]
    netns: bool,
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

fn parse_only(s: &str, only: Transport, what: &str) -> Result<Transport, String> {
    match Transport::parse(s)? {
        t if t == only => Ok(t),
        t => Err(format!("{what} runs over {} only, not {}", only.name(), t.name())),
    }
}

fn parse_rudp(s: &str) -> Result<Transport, String> {
    parse_only(s, Transport::Rudp, "transfer")
}

fn parse_cpus(s: &str) -> Result<Cpus, String> {
    let (local, remote) = crate::units::parse_cpu_pair(s)?;
    Ok(Cpus { local, remote })
}

impl LabCmd {
    /// The CPUs of a command whose two sides spin, and whether sharing one
    /// CPU was asked for.
    fn spinning_sides(&self) -> Option<(Cpus, bool)> {
        if let LabCmd::Reproduce(a) = self {
            return Some((a.cpus, a.share_cpu));
        }
        self.common().map(|c| (c.cpus, c.share_cpu))
    }

    /// The options every measuring command shares.
    fn common(&self) -> Option<&Common> {
        Some(match self {
            LabCmd::Floor(a) => &a.common,
            LabCmd::Pingpong(a) => &a.common,
            LabCmd::Throughput(a) => &a.common,
            LabCmd::Oneway(a) => &a.common,
            LabCmd::SweepRate(a) => &a.common,
            LabCmd::TickToTrade(a) => &a.common,
            LabCmd::Router(a) | LabCmd::Request(a) => &a.common,
            LabCmd::Cluster(a) => &a.common,
            LabCmd::Guaranteed(a) => &a.common,
            LabCmd::AuthCost(a) => &a.common,
            LabCmd::Bindings(a) => &a.common,
            LabCmd::Accel(a) => &a.common,
            LabCmd::Reproduce(_)
            | LabCmd::Doctor(_)
            | LabCmd::Transfer(_)
            | LabCmd::TopicMatch(_)
            | LabCmd::Worker { .. } => return None,
        })
    }

    /// Whether `--strict` was given.
    fn strict(&self) -> bool {
        self.common().is_some_and(|c| c.strict)
    }

    /// The typed request for the lab; `s.dir` is where shared files go.
    fn into_request(self, s: &Settings) -> Request {
        let dir = s.dir.clone();
        match self {
            LabCmd::Worker { role } => Request::Worker(role),
            LabCmd::Floor(a) => Request::Floor {
                options: FloorOptions {
                    count: a.count,
                    warmup: a.warmup,
                    size: a.size,
                    duration: a.duration,
                    cpus: a.common.cpus,
                    dir,
                },
                output: a.common.output(&a.hlog, &None),
            },
            LabCmd::Pingpong(a) => Request::PingPong {
                run: PingPong {
                    transport: a.transport,
                    wait: if a.block { Wait::Block } else { Wait::Spin },
                    size: a.size,
                    count: a.count,
                    warmup: a.warmup,
                    rounds: a.rounds,
                    floor: !a.no_floor,
                    cpus: a.common.cpus,
                    dir,
                    capacity: a.capacity,
                    netns: a.netns,
                    duration: a.duration,
                    params: a.params.join("&"),
                    xdp_mode: a.xdp_mode.clone(),
                },
                sizes: a.sizes.clone(),
                output: a.common.output(&a.hlog, &a.plot),
            },
            LabCmd::Throughput(a) => Request::Throughput(ThroughputRequest {
                transport: a.transport,
                size: a.size,
                duration: a.duration,
                xdp_mode: a.xdp_mode.clone(),
                capacity: a.capacity,
                floor: !a.no_floor,
                rounds: a.rounds,
                cpus: a.common.cpus,
                dir,
                format: a.common.format(),
            }),
            LabCmd::Oneway(a) => Request::OneWay(OneWayRequest {
                run: OneWay {
                    transport: a.transport,
                    netns: a.netns,
                    params: String::new(),
                    rate: a.rate,
                    size: a.size,
                    duration: a.duration,
                    publishers: a.publishers,
                    subscribers: a.subscribers,
                    topics: a.topics,
                    cpus: a.common.cpus,
                    dir,
                    capacity: a.capacity,
                    rounds: a.rounds,
                    stall: (a.stall_every > 0).then_some((a.stall_every, a.stall_for)),
                },
                loss: a.loss,
                params: a.params.clone(),
                output: a.common.output(&a.hlog, &a.plot),
            }),
            LabCmd::SweepRate(a) => Request::SweepRate {
                sweep: Sweep {
                    transport: a.transport,
                    netns: a.netns,
                    rates: a.rates.clone(),
                    size: a.size,
                    step: a.step,
                    reflect_every: a.reflect_every,
                    sustain: a.sustain,
                    cpus: a.common.cpus,
                    dir,
                    capacity: a.capacity,
                },
                output: a.common.output(&a.hlog, &a.plot),
            },
            LabCmd::TickToTrade(a) => Request::TickToTrade {
                run: TickToTrade {
                    runs: a.runs,
                    warmup: a.warmup,
                    tick_size: a.tick_size,
                    order_size: a.order_size,
                    cpus: a.common.cpus,
                },
                dir,
                output: a.common.output(&a.hlog, &a.plot),
            },
            LabCmd::Reproduce(a) => Request::Reproduce(Reproduce { out: a.out, quick: a.quick, cpus: a.cpus, dir }),
            LabCmd::Transfer(a) => Request::Transfer {
                run: Transfer {
                    bytes: a.bytes as u64,
                    max_size: a.max_size.clamp(16, 1 << 20),
                    loss: a.loss,
                    reorder: a.reorder,
                    duplicate: a.duplicate,
                    seed: a.seed,
                    receivers: a.receivers,
                    netns: a.netns,
                    params: a.params,
                    timeout: a.timeout,
                    dir,
                },
                json: a.json,
            },
            LabCmd::TopicMatch(a) => a.into_request(),
            LabCmd::Router(a) => a.into_request(dir, false),
            LabCmd::Request(a) => a.into_request(dir, true),
            LabCmd::Cluster(a) => a.into_request(dir),
            LabCmd::AuthCost(a) => a.into_request(dir),
            LabCmd::Bindings(a) => a.into_request(dir),
            LabCmd::Accel(a) => a.into_request(dir),
            LabCmd::Guaranteed(a) => a.into_request(dir),
            LabCmd::Doctor(a) => Request::Doctor(DoctorRequest {
                cpus: a.cpus,
                json: a.json,
                apply: a.apply.then_some(a.restore_file),
                restore: a.restore,
                hiccup: a.hiccup,
            }),
        }
    }
}

/// Runs `tickwire lab ...`.
///
/// # Errors
/// The lab's error, as the message to print.
pub fn run(s: &Settings, cmd: LabCmd) -> Result<(), String> {
    if let Some((cpus, false)) = cmd.spinning_sides() {
        if cpus.local == cpus.remote {
            return Err(format!(
                "--cpus {cpus}: both sides of the measurement spin, and two spinning sides on one CPU take \
                 turns by the scheduler's time slice (milliseconds per message, runs of hours); give two \
                 CPUs, or add --share-cpu to measure that anyway"
            ));
        }
    }
    let strict = cmd.strict();
    request::run(cmd.into_request(s)).map_err(|e| e.to_string())?;
    if strict && tickwire_lab::output::report::floor_beaten() {
        return Err("--strict: a row beat its floor (marked FLOOR BEATEN above): the probe is not a floor for \
                    this work, so its ratios mean nothing; see docs/PERFORMANCE.md, floors"
            .into());
    }
    Ok(())
}
