//! `tickwire lab ...`.

use crate::config::Settings;
use crate::units::{parse_duration, parse_size};
use clap::{Args, Subcommand};
use std::time::Duration;
use tickwire_lab::floor::{self, FloorOptions};
use tickwire_lab::ipc::{self, IpcOptions};
use tickwire_lab::report::{table, LatencyRow, ThroughputRow};
use tickwire_lab::Cpus;

#[derive(Debug, Subcommand)]
pub enum LabCmd {
    /// The machine's floor: cache-line and raw-ring ping-pong, raw-ring throughput.
    Floor(FloorArgs),
    /// Half-round-trip latency by message size.
    Pingpong(PingArgs),
    /// One-way streaming throughput with every message checked.
    Throughput(ThroughputArgs),
    /// Internal: the far side of a measurement.
    #[command(hide = true)]
    Worker {
        /// Role and its arguments.
        args: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub struct Common {
    /// CPUs for the local and remote sides.
    #[arg(long, default_value = "0,1", value_parser = parse_cpus)]
    cpus: Cpus,
    /// Print JSON (one object per row).
    #[arg(long)]
    json: bool,
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
}

#[derive(Debug, Args)]
pub struct PingArgs {
    #[command(flatten)]
    common: Common,
    /// Transport (ipc).
    #[arg(long, default_value = "ipc")]
    transport: String,
    /// Message size in bytes.
    #[arg(long, default_value = "64", value_parser = parse_size)]
    size: usize,
    /// Round trips recorded.
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    /// Round trips before recording.
    #[arg(long, default_value_t = 10_000)]
    warmup: u64,
    /// Log capacity.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    capacity: usize,
    /// Skip the same-run floor measurement (no ratio is reported).
    #[arg(long)]
    no_floor: bool,
    /// Rounds that alternate a floor chunk and a transport chunk (count is
    /// split between them), so both see the same machine even when the host
    /// moves the vCPUs mid-run.
    #[arg(long, default_value_t = 10)]
    rounds: u64,
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

fn parse_cpus(s: &str) -> Result<Cpus, String> {
    let (a, b) = s.split_once(',').ok_or("expected two CPUs, e.g. 0,1")?;
    let p = |x: &str| x.trim().parse::<usize>().map_err(|_| format!("bad CPU {x:?}"));
    Ok(Cpus { local: p(a)?, remote: p(b)? })
}

fn need_ipc(t: &str) -> Result<(), String> {
    if t == "ipc" {
        Ok(())
    } else {
        Err(format!("transport {t:?} is not available yet (ipc only; udp/tcp/rudp/xdp arrive with the lab and transport issues)"))
    }
}

fn print_latency(rows: &[LatencyRow], json: bool) {
    if json {
        for r in rows {
            println!("{}", serde_json::to_string(r).unwrap_or_default());
        }
    } else {
        print!("{}", table(rows));
    }
}

fn print_throughput(rows: &[ThroughputRow], json: bool) {
    for r in rows {
        if json {
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

pub fn run(s: &Settings, cmd: LabCmd) -> Result<(), String> {
    let err = |e: tickwire_lab::LabError| e.to_string();
    match cmd {
        LabCmd::Worker { args } => {
            println!("{}", tickwire_lab::worker::run(&args).map_err(err)?);
        }
        LabCmd::Floor(a) => {
            let o = FloorOptions {
                count: a.count,
                warmup: a.warmup,
                size: a.size,
                duration: a.duration,
                cpus: a.common.cpus,
                dir: s.dir.clone(),
            };
            let cl = floor::cacheline(&o).map_err(err)?;
            let rr = floor::raw_ring(&o).map_err(err)?;
            print_latency(&[cl, rr], a.common.json);
            let mut tp = floor::raw_ring_throughput(&o).map_err(err)?;
            tp.bytes_per_s = tp.msgs_per_s * 64.0;
            print_throughput(&[tp], a.common.json);
        }
        LabCmd::Pingpong(a) => {
            need_ipc(&a.transport)?;
            let rounds = a.rounds.clamp(1, a.count.max(1));
            let chunk = a.count.div_ceil(rounds);
            let dir = s.dir.clone();
            let o = IpcOptions {
                count: chunk,
                warmup: a.warmup,
                size: a.size,
                duration: Duration::ZERO,
                capacity: a.capacity,
                cpus: a.common.cpus,
                dir: dir.clone(),
            };
            let fo = FloorOptions {
                count: chunk,
                warmup: a.warmup,
                size: a.size,
                duration: Duration::ZERO,
                cpus: a.common.cpus,
                dir,
            };
            let mut ipc_h = tickwire_lab::report::histogram();
            let mut floor_h = tickwire_lab::report::histogram();
            for _ in 0..rounds {
                if !a.no_floor {
                    floor_h.add(floor::raw_ring_histogram(&fo).map_err(err)?).map_err(|e| e.to_string())?;
                }
                ipc_h.add(ipc::pingpong_histogram(&o).map_err(err)?).map_err(|e| e.to_string())?;
            }
            let cpus = format!("{},{}", a.common.cpus.local, a.common.cpus.remote);
            let mut row = LatencyRow::from_histogram("pingpong", "ipc", a.size, &ipc_h);
            row.cpus.clone_from(&cpus);
            let mut rows = Vec::new();
            if a.no_floor {
                rows.push(row);
            } else {
                let mut f = LatencyRow::from_histogram("floor", "shm", a.size, &floor_h);
                f.probe = Some("raw_ring".into());
                f.cpus = cpus;
                rows.push(row.with_floor(&f));
                if !a.common.json {
                    rows.push(f);
                }
            }
            print_latency(&rows, a.common.json);
        }
        LabCmd::Throughput(a) => {
            need_ipc(&a.transport)?;
            let o = IpcOptions {
                count: 0,
                warmup: 0,
                size: a.size,
                duration: a.duration,
                capacity: a.capacity,
                cpus: a.common.cpus,
                dir: s.dir.clone(),
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
            let mut rows = vec![row];
            if let (Some(mut f), false) = (floor_row, a.common.json) {
                f.bytes_per_s = f.msgs_per_s * 64.0;
                rows.push(f);
            }
            print_throughput(&rows, a.common.json);
        }
    }
    Ok(())
}
