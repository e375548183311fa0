//! tickwire IPC: half-round-trip ping-pong and one-way streaming throughput,
//! the far side in a separate process.

use crate::base::output::report::{LatencyRow, ThroughputRow};
use crate::base::worker::IDLE_LIMIT;
use crate::paths::sockets::Wait;
use crate::{spin_until, Cpus, LabError, WorkerProcess};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tickwire_agent::pin_current_thread;
use tickwire_shm::{Context, Event, LogConfig, LogReader, OfferError, ReaderOptions, ShmError};
use tickwire_wire::stamp;

/// Parameters for IPC runs.
#[derive(Debug, Clone)]
pub struct IpcOptions {
    /// Round trips recorded (ping-pong).
    pub count: u64,
    /// Round trips before recording.
    pub warmup: u64,
    /// Payload bytes.
    pub size: usize,
    /// Streaming duration (throughput).
    pub duration: Duration,
    /// Log capacity in bytes.
    pub capacity: usize,
    /// CPUs.
    pub cpus: Cpus,
    /// Directory for the log files.
    pub dir: PathBuf,
    /// Spin, or park on the futex when idle (ping-pong only).
    pub wait: Wait,
}

const TIMEOUT: Duration = Duration::from_secs(10);
pub(crate) const PING_STREAM: u32 = 1;
pub(crate) const PONG_STREAM: u32 = 2;

/// Attaches to a stream, waiting (bounded) for its publisher to appear.
pub(crate) fn subscribe_when_ready(ctx: &Context, channel: &str, stream: u32) -> Result<LogReader, LabError> {
    let start = Instant::now();
    loop {
        match ctx.reader(channel, stream, ReaderOptions::default()) {
            Ok(s) => return Ok(s),
            Err(ShmError::NoPublisher { .. }) if start.elapsed() < TIMEOUT => {
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits (bounded, without sending anything) until a subscriber is attached.
pub(crate) fn wait_connected(p: &mut tickwire_shm::LogAppender) -> Result<(), LabError> {
    let start = Instant::now();
    while !p.is_connected() {
        if start.elapsed() > TIMEOUT {
            return Err(LabError::Timeout("no subscriber attached".into()));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

/// Offers until accepted (spinning on back-pressure and not-connected),
/// bounded by a timeout.
#[inline]
pub(crate) fn offer_spin(p: &mut tickwire_shm::LogAppender, msg: &[u8]) -> Result<(), LabError> {
    spin_until(TIMEOUT, "offer accepted", || match p.offer(msg) {
        Ok(_) => Some(Ok(())),
        Err(OfferError::BackPressured | OfferError::NotConnected) => None,
        Err(e) => Some(Err(LabError::Worker(e.to_string()))),
    })?
}

/// Half-round-trip ping-pong over two IPC streams.
///
/// # Errors
/// Set-up failures, or a peer that does not answer within 10 s.
pub fn pingpong(o: &IpcOptions) -> Result<LatencyRow, LabError> {
    let h = pingpong_histogram(o)?;
    let mut row = LatencyRow::from_histogram("pingpong", "ipc", o.size, &h);
    row.cpus = o.cpus.to_string();
    Ok(row)
}

/// [`pingpong`], returning the histogram of half round trips.
///
/// # Errors
/// As [`pingpong`].
pub fn pingpong_histogram(o: &IpcOptions) -> Result<hdrhistogram::Histogram<u64>, LabError> {
    if o.size < 8 {
        return Err(LabError::Usage("ping-pong needs --size of at least 8".into()));
    }
    let ctx = Context::new(&o.dir)?;
    let channel = crate::run_tag();
    let mut ping = ctx.appender(&channel, PING_STREAM, &LogConfig::with_capacity(o.capacity))?;
    let worker = WorkerProcess::spawn(&IpcPong {
        dir: o.dir.clone(),
        channel: channel.clone(),
        cpu: o.cpus.remote,
        capacity: o.capacity,
        wait: o.wait,
    })?;
    let mut pong = subscribe_when_ready(&ctx, &channel, PONG_STREAM)?;
    let block = o.wait == crate::paths::sockets::Wait::Block;
    pin_current_thread(o.cpus.local)?;
    let mut msg = vec![0u8; o.size];
    // For ping-pong, a non-zero `duration` bounds the run in time as well.
    let limit = (!o.duration.is_zero()).then_some(o.duration);
    let h = crate::round_trips(o.warmup, o.count, limit, |i| {
        msg[..8].copy_from_slice(&i.to_le_bytes());
        offer_spin(&mut ping, &msg)?;
        // A poll may return only a PAD frame (end of ring): wait for a message.
        let mut echoed: Option<bool> = None;
        spin_until(TIMEOUT, "ipc pong", || {
            let polled = pong.poll(
                |e| match e {
                    Event::Message(m) => echoed = Some(stamp::seq(m.payload) == Some(i)),
                    _ => echoed = Some(false),
                },
                1,
            );
            match polled {
                Err(e) => Some(Err(LabError::Worker(e.to_string()))),
                Ok(0) if block => {
                    pong.park(Duration::from_millis(100));
                    None
                }
                Ok(_) => echoed.map(|_| Ok(())),
            }
        })??;
        if echoed == Some(true) {
            Ok(())
        } else {
            Err(LabError::Worker("pong echoed the wrong message".into()))
        }
    })?;
    offer_spin(&mut ping, b"x")?; // one byte: stop
    worker.finish(TIMEOUT)?;
    Ok(h)
}

/// One-way streaming: this process publishes `size`-byte messages carrying a
/// sequence number as fast as the subscriber allows, for `duration`; the
/// subscriber process checks every sequence number.
///
/// # Errors
/// Set-up failures or a stalled subscriber.
pub fn throughput(o: &IpcOptions) -> Result<ThroughputRow, LabError> {
    if o.size < 8 {
        return Err(LabError::Usage("throughput needs --size of at least 8".into()));
    }
    let ctx = Context::new(&o.dir)?;
    let channel = crate::run_tag();
    let mut publisher = ctx.appender(&channel, PING_STREAM, &LogConfig::with_capacity(o.capacity))?;
    let worker = WorkerProcess::spawn(&IpcSink { dir: o.dir.clone(), channel: channel.clone(), cpu: o.cpus.remote })?;
    pin_current_thread(o.cpus.local)?;
    // Wait until the subscriber is attached, without sending anything.
    wait_connected(&mut publisher)?;
    let mut msg = vec![0u8; o.size];
    let mut seq = 0u64;
    let start = Instant::now();
    let mut last_progress = Instant::now();
    while start.elapsed() < o.duration {
        for _ in 0..1024 {
            tickwire_shm::floor::stamp_sequence(&mut msg, seq);
            match publisher.offer(&msg) {
                Ok(_) => seq += 1,
                Err(OfferError::BackPressured) => std::hint::spin_loop(),
                Err(e) => return Err(LabError::Worker(e.to_string())),
            }
        }
        if seq > 0 {
            last_progress = Instant::now();
        } else if last_progress.elapsed() > TIMEOUT {
            return Err(LabError::Timeout("subscriber makes no progress".into()));
        }
    }
    drop(publisher); // closes the stream: the sink drains and reports
    let line = worker.finish(TIMEOUT)?;
    let mut row: ThroughputRow = crate::base::worker::parse_report("sink", &line)?;
    row.mode = "throughput".into();
    row.transport = "ipc".into();
    row.size = o.size;
    row.bytes_per_s = (row.msgs_per_s * o.size as f64).round();
    row.cpus = o.cpus.to_string();
    row.lost += seq.saturating_sub(row.count + row.lost);
    Ok(row)
}

/// Worker job [`IpcPong`]: echoes pings until a 1-byte message.
pub(crate) fn ipc_pong(dir: &Path, channel: &str, cpu: usize, capacity: usize, wait: Wait) -> Result<String, LabError> {
    let block = wait == Wait::Block;
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

/// Worker job [`IpcSink`]: counts the stream until it ends.
pub(crate) fn ipc_sink(dir: &Path, channel: &str, cpu: usize) -> Result<String, LabError> {
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
    Ok(crate::base::worker::sink_report(count, lost, first))
}

/// Worker job: echoes IPC pings on the channel's pong stream.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct IpcPong {
    pub dir: PathBuf,
    pub channel: String,
    pub cpu: usize,
    pub capacity: usize,
    pub wait: Wait,
}

impl crate::base::worker::Job for IpcPong {
    const ROLE: &'static str = "ipc-pong";

    fn run(self) -> Result<String, LabError> {
        ipc_pong(&self.dir, &self.channel, self.cpu, self.capacity, self.wait)
    }
}

/// Worker job: counts an IPC stream (throughput).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct IpcSink {
    pub dir: PathBuf,
    pub channel: String,
    pub cpu: usize,
}

impl crate::base::worker::Job for IpcSink {
    const ROLE: &'static str = "ipc-sink";

    fn run(self) -> Result<String, LabError> {
        ipc_sink(&self.dir, &self.channel, self.cpu)
    }
}
