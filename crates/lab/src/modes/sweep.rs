//! Latency against message rate (Exhibit 4 of papers 000 and 002): stream
//! small messages at a target rate, open loop; the receiver reflects one
//! message in N back; the sender records the round trip from each reflected
//! message's intended send time. Repeated for increasing target rates until
//! the path no longer sustains them. Both sides record their pauses
//! ([`super::openloop`]): each rate gives a row of every reflected message and
//! a row of the pause-free ones.

use super::openloop::{mark, read_pauses, write_pauses, Distribution, PauseRecorder, Samples, Split};
use crate::host::machine::Machine;
use crate::output::report::LatencyRow;
use crate::output::Measured;
use crate::transports::ipc::subscribe_when_ready;
use crate::{Cpus, LabError, Role, WorkerProcess};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tickwire_agent::pin_current_thread;
use tickwire_shm::os::monotonic_ns;
use tickwire_shm::{Context, Event, LogConfig, OfferError};
use tickwire_wire::stamp;

/// A sweep.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// Target rates in messages per second, in order.
    pub rates: Vec<u64>,
    /// Payload bytes (at least 16).
    pub size: usize,
    /// How long each rate is held.
    pub step: Duration,
    /// The receiver reflects one message in this many.
    pub reflect_every: u64,
    /// Stop after the first rate achieved at less than this fraction.
    pub sustain: f64,
    /// CPUs: sender, receiver.
    pub cpus: Cpus,
    /// Directory for the logs.
    pub dir: PathBuf,
    /// Log capacity.
    pub capacity: usize,
}

const STREAM: u32 = 1;
const REFLECT: u32 = 2;
const TIMEOUT: Duration = Duration::from_secs(10);

/// Runs every step; returns one row per target rate (round-trip latency).
///
/// # Errors
/// Set-up failures or a receiver that stops answering.
pub fn run(s: &Sweep, machine: &Machine) -> Result<Vec<LatencyRow>, LabError> {
    Ok(run_measured(s, machine)?.into_iter().map(|m| m.row).collect())
}

/// [`run`], with each step's histogram (for interval logs and plots).
///
/// # Errors
/// As [`run`].
pub fn run_measured(s: &Sweep, machine: &Machine) -> Result<Vec<Measured>, LabError> {
    if s.size < 16 || s.reflect_every == 0 || s.rates.is_empty() {
        return Err(LabError::Usage("sweep-rate needs --size >= 16, --reflect-every >= 1 and rates".into()));
    }
    let mut rows = Vec::new();
    let bar = crate::progress(s.rates.len() as u64, "sweep-rate");
    for &rate in &s.rates {
        if crate::stop_requested() {
            break;
        }
        let [all, pause_free] = step(s, rate, machine)?;
        bar.inc(1);
        let sustained = all.row.achieved_rate.unwrap_or(0.0) >= rate as f64 * s.sustain;
        rows.push(all);
        rows.push(pause_free);
        if !sustained {
            break;
        }
    }
    bar.finish_and_clear();
    Ok(rows)
}

/// One rate: the full and the pause-free rows.
fn step(s: &Sweep, rate: u64, machine: &Machine) -> Result<[Measured; 2], LabError> {
    let wall = std::time::SystemTime::now();
    let ctx = Context::new(&s.dir)?;
    let channel = crate::run_tag();
    let pauses_path = s.dir.join(format!("{channel}.pauses"));
    let mut tx = ctx.appender(&channel, STREAM, &LogConfig::with_capacity(s.capacity))?;
    let worker = WorkerProcess::spawn(&Role::Reflect {
        dir: s.dir.clone(),
        channel: channel.clone(),
        cpu: s.cpus.remote,
        every: s.reflect_every,
        capacity: s.capacity,
        pauses: pauses_path.clone(),
    })?;
    let mut rx = subscribe_when_ready(&ctx, &channel, REFLECT)?;
    crate::transports::ipc::wait_connected(&mut tx)?;
    pin_current_thread(s.cpus.local)?;
    let expected = (rate as f64 * s.step.as_secs_f64()) as u64 / s.reflect_every;
    let mut samples = Samples::with_capacity(expected as usize + 1024);
    let mut pauses = PauseRecorder::new(monotonic_ns());
    let mut record = |e: Event<'_>| {
        if let Event::Message(m) = e {
            let now = monotonic_ns();
            samples.push(stamp::intended_ns(m.payload).unwrap_or(now), now);
        }
    };
    let mut msg = vec![0u8; s.size];
    let interval = 1e9 / rate as f64;
    let t0 = monotonic_ns() + 1_000_000;
    let end = t0 + s.step.as_nanos() as u64;
    let mut sent = 0u64;
    let poll_err = |e: tickwire_shm::PollError| LabError::Worker(e.to_string());
    loop {
        let intended = t0 + (sent as f64 * interval) as u64;
        if intended >= end {
            break;
        }
        let mut now = monotonic_ns();
        while now < intended {
            rx.poll(&mut record, 16).map_err(poll_err)?;
            pauses.tick(now);
            now = monotonic_ns();
        }
        stamp::write(&mut msg, sent, intended);
        let stuck = Instant::now();
        loop {
            match tx.offer(&msg) {
                Ok(_) => break,
                Err(OfferError::BackPressured) => {
                    rx.poll(&mut record, 16).map_err(poll_err)?;
                    pauses.tick(monotonic_ns());
                    if stuck.elapsed() > TIMEOUT {
                        return Err(LabError::Timeout("receiver stuck".into()));
                    }
                }
                Err(e) => return Err(LabError::Worker(e.to_string())),
            }
        }
        pauses.tick(monotonic_ns());
        sent += 1;
    }
    let send_secs = monotonic_ns().saturating_sub(t0) as f64 / 1e9;
    drop(tx); // end of stream: the receiver reports how many it got
              // Collect the last reflections while the receiver drains.
    let drain = Instant::now();
    while !rx.is_end_of_stream() && drain.elapsed() < TIMEOUT {
        rx.poll(&mut record, 64).map_err(poll_err)?;
    }
    while rx.poll(&mut record, 64).map_err(poll_err)? > 0 {}
    let line = worker.finish(TIMEOUT)?;
    let v: serde_json::Value =
        serde_json::from_str(&line).map_err(|e| LabError::Worker(format!("bad receiver output {line:?}: {e}")))?;
    let received = v["received"].as_u64().unwrap_or(0);
    let recv_secs = v["seconds"].as_f64().unwrap_or(send_secs).max(1e-9);
    let mut all_pauses = pauses.into_pauses();
    all_pauses.extend(read_pauses(&pauses_path)?);
    let Split { all, pause_free, excluded, pauses } = samples.split(all_pauses);
    let row = |h: hdrhistogram::Histogram<u64>, d: Distribution| {
        let mut row = LatencyRow::from_histogram("sweep-rate", "ipc", s.size, &h);
        row.clock =
            format!("CLOCK_MONOTONIC, round trip from the intended send time, 1 in {} reflected", s.reflect_every);
        row.offered_rate = Some(rate as f64);
        row.achieved_rate = Some((received as f64 / recv_secs.max(send_secs)).round());
        row.lost = sent.saturating_sub(received);
        row.cpus = s.cpus.to_string();
        row.machine = machine.summary();
        mark(&mut row, d, None, &pauses, excluded);
        Measured { row, hist: h, start: wall, elapsed: Duration::from_secs_f64(send_secs) }
    };
    Ok([row(all, Distribution::All), row(pause_free, Distribution::PauseFree)])
}

/// Worker role [`Role::Reflect`]: receives the stream,
/// sends every Nth message back, and prints how many arrived and over how
/// long (first to last).
pub(crate) fn reflect(
    dir: &Path,
    channel: &str,
    cpu: usize,
    every: u64,
    capacity: usize,
    pauses: &Path,
) -> Result<String, LabError> {
    let ctx = Context::new(dir)?;
    let mut rx = subscribe_when_ready(&ctx, channel, STREAM)?;
    let mut tx = ctx.appender(channel, REFLECT, &LogConfig::with_capacity(capacity))?;
    pin_current_thread(cpu)?;
    let (mut received, mut first, mut last) = (0u64, None::<Instant>, Instant::now());
    let mut err = None;
    let mut idle = 0u32;
    let mut idle_since = Instant::now();
    let mut recorder = PauseRecorder::new(monotonic_ns());
    loop {
        recorder.tick(monotonic_ns());
        let n = rx
            .poll(
                |e| {
                    if let Event::Message(m) = e {
                        received += 1;
                        let seq = stamp::seq(m.payload).unwrap_or(0);
                        if seq % every == 0 {
                            // Never block the stream on the reflection: drop it if full.
                            match tx.offer(m.payload) {
                                Ok(_) | Err(OfferError::BackPressured) => {}
                                Err(e) => err = Some(e),
                            }
                        }
                    }
                },
                64,
            )
            .map_err(|e| LabError::Worker(e.to_string()))?;
        if let Some(e) = err {
            return Err(LabError::Worker(e.to_string()));
        }
        if n > 0 {
            let now = Instant::now();
            first.get_or_insert(now);
            last = now;
            idle = 0;
            continue;
        }
        std::hint::spin_loop();
        idle = idle.wrapping_add(1);
        if idle == 1 {
            idle_since = Instant::now();
        }
        if idle % 256 == 0 {
            if rx.is_end_of_stream() {
                break;
            }
            if idle_since.elapsed() > Duration::from_secs(30) {
                return Err(LabError::Timeout("no data for 30 s".into()));
            }
        }
    }
    let secs = first.map_or(0.0, |f| (last - f).as_secs_f64());
    write_pauses(pauses, &recorder.into_pauses())?;
    Ok(serde_json::json!({"received": received, "seconds": secs}).to_string())
}
