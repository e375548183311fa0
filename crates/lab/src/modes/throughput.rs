//! `lab throughput`: one-way streaming throughput with every message
//! checked, in rounds interleaved with the floor: for IPC the slot ring
//! (each message visible on its own, as the log makes it), with the
//! batched raw ring and the cache-line stream beside it as references; kernel UDP with `sendmmsg`/`recvmmsg` for
//! reliable UDP, kernel UDP across the same kind of veth pair for AF_XDP.

use crate::base::common::{parse_duration, parse_size};
use crate::base::floor::FloorOptions;
use crate::base::output::print::{self, Common, Format};
use crate::base::output::report::{round3, ThroughputRow};
use crate::base::{line_limit, streaming};
use crate::paths::ipc::{self, IpcOptions};
use crate::paths::sockets::Wait;
use crate::paths::{rudp, Transport};
use crate::LabError;
use std::path::PathBuf;
use std::time::Duration;

/// `lab throughput`.
#[derive(Debug, Clone, clap::Args)]
pub struct Throughput {
    #[command(flatten)]
    pub common: Common,
    /// Transport: ipc, rudp, or xdp (64-byte datagrams over AF_XDP across a veth pair, against kernel
    /// UDP with sendmmsg on the same kind of pair).
    #[arg(long, default_value = "ipc", value_parser = Transport::parse)]
    pub transport: Transport,
    /// xdp: where the XDP program runs: auto, native or generic.
    #[arg(long, default_value = "auto")]
    pub xdp_mode: String,
    /// Message size in bytes (at least 8).
    #[arg(long, default_value = "32", value_parser = parse_size)]
    pub size: usize,
    /// How long to stream.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Log capacity.
    #[arg(long, default_value = "1MiB", value_parser = parse_size)]
    pub capacity: usize,
    /// Skip the same-run floor and references (no ratio is reported).
    #[arg(long)]
    pub no_floor: bool,
    /// ipc: rounds, each a line-stream, a batched-ring and a slot-ring (the floor) round, then a
    /// tickwire round, of --duration / rounds each; rates are the median rounds'.
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// Directory for shared files.
    #[arg(skip)]
    pub dir: PathBuf,
}

/// Throughput in interleaved rounds: a floor round, then a tickwire round,
/// `rounds` times. IPC's floor is a slot ring moving the same payload size,
/// each message visible on its own (the batched raw ring and the line
/// stream are measured in the same rounds as references); reliable UDP's is plain kernel UDP
/// moving the same packed datagrams with `sendmmsg`/`recvmmsg`. The ratio
/// is of the median rounds, with the spread of the per-round ratios beside it.
pub fn run(t: &Throughput) -> Result<(), LabError> {
    let format = t.common.format();
    let cpus = t.common.cpus;
    let rounds = t.rounds.max(1);
    let per = (t.duration / rounds as u32).max(Duration::from_millis(100));
    let o = IpcOptions {
        count: 0,
        warmup: 0,
        size: t.size,
        duration: per,
        capacity: t.capacity,
        cpus,
        dir: t.dir.clone(),
        wait: Wait::Spin,
    };
    let fo = FloorOptions { count: 0, warmup: 0, size: t.size, duration: per, cpus, dir: t.dir.clone() };
    let mut extra = rudp::RudpThroughput::default();
    let mut rudp_row = |r: rudp::RudpThroughput, floor: bool| {
        if !floor {
            extra.datagrams += r.datagrams;
            extra.lost_events += r.lost_events;
            extra.naks_sent += r.naks_sent;
        }
        ThroughputRow {
            mode: if floor { "floor" } else { "throughput" }.into(),
            transport: if floor { "udp" } else { "rudp" }.into(),
            probe: floor.then(|| "sendmmsg_recvmmsg".into()),
            size: t.size,
            count: r.count,
            duration_s: r.duration_s,
            msgs_per_s: r.msgs_per_s,
            bytes_per_s: (r.msgs_per_s * t.size as f64).round(),
            lost: r.missing,
            cpus: cpus.to_string(),
            ..ThroughputRow::default()
        }
    };
    let (mut mine, mut floors, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut lines, mut batched) = (Vec::new(), Vec::new());
    let bar = crate::progress(rounds as u64, "throughput (rounds)");
    for _ in 0..rounds {
        if crate::stop_requested() {
            break;
        }
        let (f, row) = match t.transport {
            Transport::Ipc => {
                let f = if !t.no_floor {
                    // The references, in the same rounds.
                    lines.push(line_limit::stream(cpus, &t.dir, per)?);
                    batched.push(streaming::raw_ring_throughput(&fo)?);
                    Some(streaming::slot_ring_throughput(&fo)?)
                } else {
                    None
                };
                (f, ipc::throughput(&o)?)
            }
            Transport::Rudp => {
                let f = if !t.no_floor { Some(rudp_row(rudp::raw_throughput(t.size, per, cpus)?, true)) } else { None };
                (f, rudp_row(rudp::throughput(t.size, per, cpus, "")?, false))
            }
            Transport::Xdp => {
                // Kernel UDP with sendmmsg/recvmmsg across the same kind of
                // veth pair, then AF_XDP.
                let f = if !t.no_floor {
                    let mut f = crate::paths::xdp::throughput(None, t.size, per, cpus)?;
                    f.mode = "floor".into();
                    Some(f)
                } else {
                    None
                };
                (f, crate::paths::xdp::throughput(Some(&t.xdp_mode), t.size, per, cpus)?)
            }
            other => {
                return Err(LabError::Usage(format!(
                    "throughput over {:?} is not available (ipc, rudp, xdp)",
                    other.name()
                )))
            }
        };
        if let Some(f) = f {
            ratios.push(row.msgs_per_s / f.msgs_per_s.max(1.0));
            floors.push(f);
        }
        mine.push(row);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let Some(mut row) = ThroughputRow::of_rounds(&mine) else { return Ok(()) };
    let mut floor_row = ThroughputRow::of_rounds(&floors);
    let limit = ThroughputRow::of_rounds(&lines).map(|l| line_limit::at_size(&l, t.size));
    let mut batched_row = ThroughputRow::of_rounds(&batched);
    if let Some(b) = &mut batched_row {
        b.mode = "reference".into();
        row.batched_share(b);
    }
    if let Some(limit) = &limit {
        for r in [Some(&mut row), floor_row.as_mut(), batched_row.as_mut()].into_iter().flatten() {
            r.line_share(limit);
        }
    }
    if let Some(f) = &floor_row {
        row.with_floor(f);
        row.ratio_min = Some(round3(ratios.iter().copied().fold(f64::MAX, f64::min)));
        row.ratio_max = Some(round3(ratios.iter().copied().fold(0.0, f64::max)));
    }
    if t.transport == Transport::Rudp && format == Format::Table {
        println!(
            "rudp {} B: {:.1} messages per datagram, {} lost events, {} NAKs sent",
            t.size,
            row.count as f64 / extra.datagrams.max(1) as f64,
            extra.lost_events,
            extra.naks_sent
        );
    }
    let mut rows = vec![row];
    rows.extend(floor_row);
    rows.extend(batched_row);
    rows.extend(limit);
    print::throughput(&rows, format);
    Ok(())
}
