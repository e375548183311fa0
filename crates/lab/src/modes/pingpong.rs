//! Half-round-trip ping-pong over any transport, interleaved in rounds with
//! the raw-ring floor so that both see the same machine.

use crate::base::common::{parse_duration, parse_size};
use crate::base::floor::{self, FloorOptions};
use crate::base::host::machine::Machine;
use crate::base::output::print::Common;
use crate::base::output::report::{histogram, LatencyRow};
use crate::base::output::Measured;
use crate::paths::ipc::{self, IpcOptions};
use crate::paths::sockets::{self, Proto, SockOptions, Wait};
pub use crate::paths::Transport;
use crate::LabError;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

/// `lab pingpong`: a ping-pong run (at `size`; `sizes` is the command's
/// sweep, one run per size).
#[derive(Debug, Clone, clap::Args)]
pub struct PingPong {
    #[command(flatten)]
    pub common: Common,
    /// Transport: ipc (tickwire shared memory), udp or tcp (plain kernel sockets), rudp (reliable UDP),
    /// xdp (datagrams over AF_XDP; needs --netns). rudp and xdp are measured against kernel UDP.
    #[arg(long, default_value = "ipc", value_parser = Transport::parse)]
    pub transport: Transport,
    /// Message size in bytes.
    #[arg(long, default_value = "64", value_parser = parse_size)]
    pub size: usize,
    /// rudp: any channel parameter, KEY=VALUE (repeatable), e.g. xdp=required.
    #[arg(long = "param")]
    pub params: Vec<String>,
    /// xdp: where the XDP program runs: auto, native or generic.
    #[arg(long, default_value = "auto")]
    pub xdp_mode: String,
    /// Sweep: a row per size, e.g. 64,128,256,512,1024,1472.
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    pub sizes: Vec<usize>,
    /// Round trips recorded per size.
    #[arg(long, default_value_t = 1_000_000)]
    pub count: u64,
    /// Run each size for this long instead of --count round trips (e.g. 10s).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Round trips before recording, per round.
    #[arg(long, default_value_t = 10_000)]
    pub warmup: u64,
    /// Busy-poll while waiting (the default).
    #[arg(long, conflicts_with = "block")]
    pub spin: bool,
    /// Block in the kernel while waiting (sockets: blocking recv; ipc: futex park).
    #[arg(long)]
    pub block: bool,
    /// Log capacity (ipc).
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub capacity: usize,
    /// Skip the same-run floor measurement (no ratio is reported).
    #[arg(long)]
    pub no_floor: bool,
    /// Rounds alternating a floor chunk and a transport chunk, so both see
    /// the same machine even when the host moves the vCPUs mid-run.
    #[arg(long, default_value_t = 10)]
    pub rounds: u64,
    /// Also write the histograms as an HdrHistogram interval log.
    #[arg(long)]
    pub hlog: Option<PathBuf>,
    /// udp, tcp, rudp, xdp: run across two network namespaces joined by a
    /// veth pair (created and removed by the lab; needs root and iproute2).
    #[arg(long)]
    pub netns: bool,
    /// Write an SVG plot: latency against size for --sizes, else the percentile distribution.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Directory for shared files.
    #[arg(skip)]
    pub dir: PathBuf,
}

impl PingPong {
    /// Spin or block while waiting.
    pub fn wait(&self) -> Wait {
        if self.block {
            Wait::Block
        } else {
            Wait::Spin
        }
    }

    /// Whether the floor is measured too.
    pub fn floor(&self) -> bool {
        !self.no_floor
    }

    /// rudp: the channel parameters, `key=value&...`.
    pub fn params(&self) -> String {
        self.params.join("&")
    }
}

/// Runs the rounds; returns the transport's result (with floor ratios) and
/// the floor's, if measured.
///
/// # Errors
/// Any failure of either side.
pub fn run(p: &PingPong, machine: &Machine) -> Result<(Measured, Option<Measured>), LabError> {
    if !p.params.is_empty() && p.transport != Transport::Rudp {
        return Err(LabError::Usage("--param applies to rudp (channel parameters such as xdp=required)".into()));
    }
    let rounds = p.rounds.clamp(1, p.count.max(1));
    let chunk = if p.duration.is_some() { u64::MAX / 2 } else { p.count.div_ceil(rounds) };
    let per_round = p.duration.map(|d| d / rounds as u32);
    let mut fo = FloorOptions {
        count: chunk,
        warmup: p.warmup,
        size: p.size,
        duration: Duration::ZERO,
        cpus: p.common.cpus,
        dir: p.dir.clone(),
    };
    let mut th = histogram();
    let mut fh = histogram();
    let start = SystemTime::now();
    let (mut t_elapsed, mut f_elapsed) = (Duration::ZERO, Duration::ZERO);
    let bar = crate::progress(rounds, &format!("pingpong {} {}B", p.transport.name(), p.size));
    for _ in 0..rounds {
        if crate::stop_requested() {
            break;
        }
        let t = Instant::now();
        let h = match p.transport {
            Transport::Ipc => ipc::pingpong_histogram(&IpcOptions {
                count: chunk,
                warmup: p.warmup,
                size: p.size,
                duration: per_round.unwrap_or(Duration::ZERO),
                capacity: p.capacity,
                cpus: p.common.cpus,
                dir: p.dir.clone(),
                wait: p.wait(),
            })?,
            Transport::Rudp => crate::paths::rudp::pingpong_histogram(
                p.size,
                chunk,
                p.warmup,
                p.common.cpus,
                per_round,
                &p.params(),
                p.netns,
            )?,
            Transport::Xdp => {
                if !p.netns {
                    return Err(LabError::Usage(
                        "--transport xdp runs across a veth pair: add --netns (loopback has no XDP path)".into(),
                    ));
                }
                crate::paths::xdp::pingpong_histogram(
                    Some(&p.xdp_mode),
                    p.size,
                    chunk,
                    p.warmup,
                    p.common.cpus,
                    per_round,
                )?
            }
            Transport::Udp | Transport::Tcp => sockets::pingpong_histogram(&SockOptions {
                proto: if p.transport == Transport::Udp { Proto::Udp } else { Proto::Tcp },
                wait: p.wait(),
                count: chunk,
                warmup: p.warmup,
                size: p.size,
                cpus: p.common.cpus,
                netns: p.netns,
                time_limit: per_round,
            })?,
        };
        t_elapsed += t.elapsed();
        if p.floor() && matches!(p.transport, Transport::Rudp | Transport::Xdp) {
            // The baseline of reliable UDP and of AF_XDP is plain kernel
            // UDP, spinning, same count, over the same path (loopback or a
            // veth pair).
            let t = Instant::now();
            let base = sockets::pingpong_histogram(&SockOptions {
                proto: Proto::Udp,
                wait: Wait::Spin,
                count: h.len().max(1),
                warmup: p.warmup,
                size: p.size,
                cpus: p.common.cpus,
                netns: p.netns,
                time_limit: None,
            })?;
            fh.add(base).map_err(|e| LabError::Worker(e.to_string()))?;
            f_elapsed += t.elapsed();
        } else if p.floor() {
            // As many floor round trips as the transport made this round, so
            // both carry the same weight even when the run is timed.
            fo.count = h.len().max(1);
            let t = Instant::now();
            fh.add(floor::raw_ring_histogram(&fo)?).map_err(|e| LabError::Worker(e.to_string()))?;
            f_elapsed += t.elapsed();
        }
        th.add(h).map_err(|e| LabError::Worker(e.to_string()))?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    if th.is_empty() {
        return Err(LabError::Usage("stopped before anything was measured".into()));
    }
    let cpus = p.common.cpus.to_string();
    let mut row = LatencyRow::from_histogram("pingpong", p.transport.name(), p.size, &th);
    row.wait = Some(p.wait().name().into());
    row.cpus.clone_from(&cpus);
    row.machine = machine.summary();
    row.achieved_rate = Some((th.len() as f64 / t_elapsed.as_secs_f64().max(1e-9)).round());
    if p.netns {
        row.transport = format!("{}-netns", p.transport.name());
    }
    let floor = if p.floor() {
        let rudp = matches!(p.transport, Transport::Rudp | Transport::Xdp);
        let path = match (rudp, p.netns) {
            (true, true) => "udp-netns",
            (true, false) => "udp",
            _ => "shm",
        };
        let mut f = LatencyRow::from_histogram("floor", path, p.size, &fh);
        f.probe = Some(if rudp { "kernel_udp_spin" } else { "raw_ring" }.into());
        f.cpus = cpus;
        f.machine = machine.summary();
        row = row.with_floor(&f);
        Some(Measured { row: f, hist: fh, start, elapsed: f_elapsed })
    } else {
        None
    };
    Ok((Measured { row, hist: th, start, elapsed: t_elapsed }, floor))
}
