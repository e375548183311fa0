//! The far side of each measurement, run as `tickwire lab worker ROLE ...`.
//! Each role pins itself, does its part, and prints one result line.

use crate::ipc::{offer_spin, subscribe_when_ready, PING_STREAM, PONG_STREAM};
use crate::report::ThroughputRow;
use crate::{spin_until, LabError};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tickwire_agent::pin_current_thread;
use tickwire_shm::floor::{CacheLines, RawRing};
use tickwire_shm::{Context, Event};
use tickwire_wire::stamp;

const IDLE_LIMIT: Duration = Duration::from_secs(30);

fn arg<'a>(args: &'a [String], i: usize, what: &str) -> Result<&'a str, LabError> {
    args.get(i).map(String::as_str).ok_or_else(|| LabError::Usage(format!("worker: missing {what}")))
}

fn num<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Result<T, LabError> {
    arg(args, i, what)?.parse().map_err(|_| LabError::Usage(format!("worker: bad {what}")))
}

/// Runs a worker role; returns the line to print.
///
/// # Errors
/// Bad arguments, set-up failures, or a peer silent for 30 s.
pub fn run(args: &[String]) -> Result<String, LabError> {
    match arg(args, 0, "role")? {
        "cacheline" => cacheline(Path::new(arg(args, 1, "path")?), num(args, 2, "cpu")?),
        "ring-pong" => {
            ring_pong(Path::new(arg(args, 1, "ping")?), Path::new(arg(args, 2, "pong")?), num(args, 3, "cpu")?)
        }
        "ring-sink" => ring_sink(Path::new(arg(args, 1, "path")?), num(args, 2, "cpu")?),
        "ipc-pong" => ipc_pong(
            Path::new(arg(args, 1, "dir")?),
            arg(args, 2, "channel")?,
            num(args, 3, "cpu")?,
            num(args, 4, "capacity")?,
            args.get(5).is_some_and(|w| w == "block"),
        ),
        "udp-pong" => crate::sockets::udp_pong(
            arg(args, 1, "addr")?,
            num(args, 2, "cpu")?,
            arg(args, 3, "wait")?,
            num(args, 4, "size")?,
        ),
        "tcp-pong" => crate::sockets::tcp_pong(
            arg(args, 1, "addr")?,
            num(args, 2, "cpu")?,
            arg(args, 3, "wait")?,
            num(args, 4, "size")?,
        ),
        "sock-ping" => crate::sockets::ping_worker(args),
        "rudp-send" => crate::transfer::sender(args),
        "rudp-pong" => crate::rudp::pong(args),
        "rudp-blast" => crate::rudp::blast(args),
        "rudp-rate" => crate::rudp::rate_sender(args),
        "rudp-recv" => crate::transfer::receiver(args),
        "t2t-sut" => crate::tick_to_trade::sut(
            arg(args, 1, "gateway")?,
            num(args, 2, "cpu")?,
            num(args, 3, "tick size")?,
            num(args, 4, "order size")?,
        ),
        "reflect" => crate::sweep::reflect(
            Path::new(arg(args, 1, "dir")?),
            arg(args, 2, "channel")?,
            num(args, 3, "cpu")?,
            num(args, 4, "every")?,
            num(args, 5, "capacity")?,
        ),
        "oneway-sink" => crate::oneway::sink(
            Path::new(arg(args, 1, "dir")?),
            arg(args, 2, "channel")?,
            num(args, 3, "cpu")?,
            num(args, 4, "publishers")?,
            num(args, 5, "subscribers")?,
            num(args, 6, "stall_every")?,
            num(args, 7, "stall_us")?,
        ),
        "ipc-sink" => ipc_sink(Path::new(arg(args, 1, "dir")?), arg(args, 2, "channel")?, num(args, 3, "cpu")?),
        other => Err(LabError::Usage(format!("worker: unknown role {other}"))),
    }
}

fn cacheline(path: &Path, cpu: usize) -> Result<String, LabError> {
    let lines = CacheLines::open(path)?;
    pin_current_thread(cpu)?;
    let (ping, pong) = (lines.line(0), lines.line(1));
    let mut last = 0;
    loop {
        let v = spin_until(IDLE_LIMIT, "ping", || {
            let v = ping.load(Ordering::Acquire);
            (v != last).then_some(v)
        })?;
        if v == u64::MAX {
            return Ok("done".into());
        }
        pong.store(v, Ordering::Release);
        last = v;
    }
}

fn ring_pong(ping: &Path, pong: &Path, cpu: usize) -> Result<String, LabError> {
    let mut rx = RawRing::open(ping)?;
    let mut tx = RawRing::open(pong)?;
    pin_current_thread(cpu)?;
    let mut buf = vec![0u8; rx.max_payload()];
    loop {
        spin_until(IDLE_LIMIT, "ring ping", || rx.try_pop(|b| buf.copy_from_slice(b)).then_some(()))?;
        if buf[..8] == u64::MAX.to_le_bytes() {
            return Ok("done".into());
        }
        spin_until(IDLE_LIMIT, "ring pong push", || tx.try_push(&buf).then_some(()))?;
    }
}

fn ring_sink(path: &Path, cpu: usize) -> Result<String, LabError> {
    let mut rx = RawRing::open(path)?;
    pin_current_thread(cpu)?;
    let (mut count, mut lost, mut expect) = (0u64, 0u64, 0u64);
    let mut first: Option<Instant> = None;
    let mut done = false;
    let mut idle = 0u32;
    let mut idle_since = Instant::now();
    while !done {
        let got = rx.try_pop(|b| {
            let seq = stamp::seq(b).unwrap_or(0);
            if seq == u64::MAX {
                done = true;
                return;
            }
            lost += seq.saturating_sub(expect);
            expect = seq + 1;
            count += 1;
        });
        if got {
            if idle != 0 {
                idle = 0;
                if first.is_none() {
                    first = Some(Instant::now());
                }
            }
        } else {
            std::hint::spin_loop();
            idle = idle.wrapping_add(1);
            if idle == 1 {
                idle_since = Instant::now();
            } else if idle % 4096 == 0 && idle_since.elapsed() > IDLE_LIMIT {
                return Err(LabError::Timeout("no ring data for 30 s".into()));
            }
        }
    }
    Ok(sink_row(count, lost, first))
}

fn sink_row(count: u64, lost: u64, first: Option<Instant>) -> String {
    let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    let row = ThroughputRow {
        count,
        lost,
        duration_s: (secs * 1e6).round() / 1e6,
        msgs_per_s: if secs > 0.0 { (count as f64 / secs).round() } else { 0.0 },
        ..ThroughputRow::default()
    };
    serde_json::to_string(&row).unwrap_or_default()
}

fn ipc_pong(dir: &Path, channel: &str, cpu: usize, capacity: usize, block: bool) -> Result<String, LabError> {
    let ctx = Context::new(dir)?;
    let mut rx = subscribe_when_ready(&ctx, channel, PING_STREAM)?;
    let mut tx = ctx.appender(channel, PONG_STREAM, &tickwire_shm::LogConfig::with_capacity(capacity))?;
    pin_current_thread(cpu)?;
    let mut stop = false;
    let mut err = None;
    let mut idle_since = Instant::now();
    let mut spins = 0u32;
    while !stop {
        let n = rx
            .poll(
                |e| {
                    if let Event::Message(m) = e {
                        if m.payload.len() == 1 {
                            stop = true;
                        } else if let Err(e) = offer_spin(&mut tx, m.payload) {
                            err = Some(e);
                            stop = true;
                        }
                    }
                },
                1,
            )
            .map_err(|e| LabError::Worker(e.to_string()))?;
        if n > 0 {
            spins = 0;
        } else {
            if block {
                rx.park(Duration::from_millis(100));
            }
            spins = spins.wrapping_add(1);
            if spins == 1 {
                idle_since = Instant::now();
            } else if spins % 4096 == 0 && idle_since.elapsed() > IDLE_LIMIT {
                return Err(LabError::Timeout("no ping for 30 s".into()));
            }
        }
    }
    err.map_or(Ok("done".into()), Err)
}

fn ipc_sink(dir: &Path, channel: &str, cpu: usize) -> Result<String, LabError> {
    let ctx = Context::new(dir)?;
    let mut rx = subscribe_when_ready(&ctx, channel, PING_STREAM)?;
    pin_current_thread(cpu)?;
    let (mut count, mut lost, mut expect) = (0u64, 0u64, 0u64);
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut idle = 0u32;
    loop {
        let n = rx
            .poll(
                |e| {
                    if let Event::Message(m) = e {
                        let seq = stamp::seq(m.payload).unwrap_or(0);
                        lost += seq.saturating_sub(expect);
                        expect = seq + 1;
                        count += 1;
                    }
                },
                256,
            )
            .map_err(|e| LabError::Worker(e.to_string()))?;
        if n > 0 {
            idle = 0;
            if first.is_none() {
                first = Some(Instant::now());
            }
        } else {
            std::hint::spin_loop(); // as Idle::BusySpin does: be gentle on the line being written
            idle = idle.wrapping_add(1);
            if idle % 256 == 0 {
                if rx.is_end_of_stream() {
                    break;
                }
                if idle == 256 {
                    last = Instant::now();
                } else if last.elapsed() > IDLE_LIMIT {
                    return Err(LabError::Timeout("no data for 30 s".into()));
                }
            }
        }
    }
    Ok(sink_row(count, lost, first))
}
