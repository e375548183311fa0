//! The floor: cache-line ping-pong and raw-ring ping-pong between two
//! processes pinned to two CPUs (the streaming floors are
//! [`super::streaming`]'s), and the open-loop floors of
//! `oneway` (a raw-ring stream) and `sweep-rate` (a raw-ring stream with a
//! second ring for the reflections).

use crate::base::common::{parse_duration, parse_size};
use crate::base::openloop::ReflectorReport;
use crate::base::openloop::{publish, write_pauses, Offer, PauseRecorder, Published, Samples, SinkReport, Split};
use crate::base::output::report::LatencyRow;
use crate::base::worker::IDLE_LIMIT;
use crate::{spin_until, Cpus, LabError, WorkerProcess};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tickwire_agent::pin_current_thread;
use tickwire_shm::floor::{CacheLines, RawRing};
use tickwire_wire::stamp;

/// Parameters shared by the probes.
#[derive(Debug, Clone, clap::Args)]
pub struct FloorOptions {
    /// Round trips per latency probe.
    #[arg(long, default_value_t = 1_000_000)]
    pub count: u64,
    /// Round trips before recording.
    #[arg(long, default_value_t = 10_000)]
    pub warmup: u64,
    /// Message size of the raw-ring ping-pong.
    #[arg(long, default_value = "64", value_parser = parse_size)]
    pub size: usize,
    /// Duration of the throughput probe.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub duration: Duration,
    /// CPUs (`lab floor`: the command's `--cpus`).
    #[arg(skip)]
    pub cpus: Cpus,
    /// Directory for the shared files.
    #[arg(skip)]
    pub dir: PathBuf,
}

pub(crate) const STOP: u64 = u64::MAX;
pub(crate) const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// Cache-line ping-pong: the cost of moving one line between the CPUs and back.
///
/// # Errors
/// Set-up failures, or a worker that does not answer within 10 s.
pub fn cacheline(o: &FloorOptions) -> Result<LatencyRow, LabError> {
    Ok(row("cacheline", 8, o.cpus, &cacheline_histogram(o)?))
}

/// The row of a floor probe (`cacheline` at 8 bytes, `raw_ring` at its size).
pub fn row(probe: &str, size: usize, cpus: Cpus, h: &hdrhistogram::Histogram<u64>) -> LatencyRow {
    let mut row = LatencyRow::from_histogram("floor", "shm", size, h);
    row.probe = Some(probe.into());
    row.cpus = cpus.to_string();
    row
}

/// [`cacheline`], returning the histogram of half round trips.
///
/// # Errors
/// As [`cacheline`].
pub fn cacheline_histogram(o: &FloorOptions) -> Result<hdrhistogram::Histogram<u64>, LabError> {
    std::fs::create_dir_all(&o.dir)?;
    let path = o.dir.join(format!("{}.cl", crate::run_tag()));
    let lines = CacheLines::create(&path)?;
    let worker = WorkerProcess::spawn(&Cacheline { path: path.clone(), cpu: o.cpus.remote })?;
    pin_current_thread(o.cpus.local)?;
    let (ping, pong) = (lines.line(0), lines.line(1));
    let h = crate::round_trips(o.warmup, o.count, None, |i| {
        // 0 is the lines' initial value: exchange i + 1.
        let v = i + 1;
        ping.store(v, Ordering::Release);
        spin_until(REPLY_TIMEOUT, "cache-line pong", || (pong.load(Ordering::Acquire) == v).then_some(()))
    })?;
    ping.store(STOP, Ordering::Release);
    worker.finish(REPLY_TIMEOUT)?;
    let _ = std::fs::remove_file(&path);
    Ok(h)
}

/// Raw SPSC-ring ping-pong of `size`-byte messages.
///
/// # Errors
/// As [`cacheline`].
pub fn raw_ring(o: &FloorOptions) -> Result<LatencyRow, LabError> {
    Ok(row("raw_ring", o.size, o.cpus, &raw_ring_histogram(o)?))
}

/// [`raw_ring`], returning the histogram of half round trips (to pool
/// rounds interleaved with another measurement).
///
/// # Errors
/// As [`cacheline`].
pub fn raw_ring_histogram(o: &FloorOptions) -> Result<hdrhistogram::Histogram<u64>, LabError> {
    std::fs::create_dir_all(&o.dir)?;
    let tag = crate::run_tag();
    let (pa, pb) = (o.dir.join(format!("{tag}.ping")), o.dir.join(format!("{tag}.pong")));
    let slot = o.size.max(8).div_ceil(64) * 64;
    let mut ping = RawRing::create(&pa, 1024, slot)?;
    let _pong_file = RawRing::create(&pb, 1024, slot)?;
    let mut pong = RawRing::open(&pb)?;
    let worker = WorkerProcess::spawn(&RingPong { ping: pa.clone(), pong: pb.clone(), cpu: o.cpus.remote })?;
    pin_current_thread(o.cpus.local)?;
    let mut msg = vec![0u8; o.size.max(8)];
    let h = crate::round_trips(o.warmup, o.count, None, |i| {
        msg[..8].copy_from_slice(&i.to_le_bytes());
        spin_until(REPLY_TIMEOUT, "ring push", || ping.try_push(&msg).then_some(()))?;
        let mut ok = false;
        spin_until(REPLY_TIMEOUT, "ring pong", || pong.try_pop(|b| ok = b[..8] == i.to_le_bytes()).then_some(()))?;
        if ok {
            Ok(())
        } else {
            Err(LabError::Worker("raw ring echoed the wrong message".into()))
        }
    })?;
    msg[..8].copy_from_slice(&STOP.to_le_bytes());
    spin_until(REPLY_TIMEOUT, "ring stop", || ping.try_push(&msg).then_some(()))?;
    worker.finish(REPLY_TIMEOUT)?;
    let _ = (std::fs::remove_file(&pa), std::fs::remove_file(&pb));
    Ok(h)
}

/// Worker job [`Cacheline`]: answers each ping on the shared line.
pub(crate) fn cacheline_worker(path: &Path, cpu: usize) -> Result<String, LabError> {
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

/// Worker job [`RingPong`]: echoes ring messages until the stop message.
pub(crate) fn ring_pong(ping: &Path, pong: &Path, cpu: usize) -> Result<String, LabError> {
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

/// The open-loop floor: a raw ring streaming messages of `size` bytes at
/// `rate` for `duration`, on the same schedule, stamps and pause recording
/// as a tickwire one-way round, into a ring as deep as the log
/// (`capacity` bytes). Returns what was sent and the sink's report.
///
/// # Errors
/// Set-up failures, or a sink that does not finish.
pub fn ring_oneway(
    rate: u64,
    size: usize,
    duration: Duration,
    cpus: Cpus,
    dir: &Path,
    capacity: usize,
) -> Result<(Published, String), LabError> {
    std::fs::create_dir_all(dir)?;
    let tag = crate::run_tag();
    let path = dir.join(format!("{tag}.ring"));
    let pauses = dir.join(format!("{tag}.pauses"));
    let slot_len = size.max(16).div_ceil(64) * 64;
    let slots = (capacity / slot_len).max(64).next_power_of_two();
    let mut ring = RawRing::create(&path, slots, slot_len)?;
    let expected = (rate as f64 * duration.as_secs_f64()) as u64;
    let worker = WorkerProcess::spawn(&RingOnewaySink {
        path: path.clone(),
        cpu: cpus.remote,
        expected,
        pauses: pauses.clone(),
    })?;
    pin_current_thread(cpus.local)?;
    let mut recorder = PauseRecorder::new(tickwire_shm::os::monotonic_ns());
    let published = publish(rate, size, duration, &mut recorder, &mut |msg: &[u8]| Ok(ring.try_push(msg)))?;
    write_pauses(&pauses, &recorder.into_pauses())?;
    let mut stop = vec![0u8; 16];
    stamp::write(&mut stop, STOP, 0);
    spin_until(REPLY_TIMEOUT, "ring stop", || ring.try_push(&stop).then_some(()))?;
    let line = worker.finish(REPLY_TIMEOUT + duration);
    let _ = std::fs::remove_file(&path);
    Ok((published, line?))
}

/// Worker job [`RingOnewaySink`].
pub(crate) fn ring_oneway_sink(path: &Path, cpu: usize, expected: u64, pauses: &Path) -> Result<String, LabError> {
    use tickwire_shm::os::monotonic_ns;
    let mut rx = RawRing::open(path)?;
    pin_current_thread(cpu)?;
    let mut samples = Samples::with_capacity(expected as usize + 1024);
    let mut recorder = PauseRecorder::new(monotonic_ns());
    let mut done = false;
    let mut watch = super::worker::IdleWatch::default();
    while !done {
        let got = rx.try_pop(|b| {
            if stamp::seq(b) == Some(STOP) {
                done = true;
                return;
            }
            samples.arrived(b);
        });
        recorder.tick(monotonic_ns());
        if got {
            watch.busy();
        } else {
            watch.idle("ring data")?;
        }
    }
    SinkReport::from_run(&samples, recorder.into_pauses(), pauses)
}

/// The rate sweep's open-loop floor: a raw ring streaming `size`-byte
/// messages at `rate` on a sweep step's schedule, stamps and pause
/// recording, and a worker reflecting one in `every` on a second ring.
/// Returns what was sent, the reflections' two distributions (with both
/// sides' pauses) and the reflector's count.
///
/// # Errors
/// Set-up failures, or a reflector that does not finish.
pub fn ring_sweep(
    (rate, size, duration): (u64, usize, Duration),
    every: u64,
    cpus: Cpus,
    dir: &Path,
    capacity: usize,
) -> Result<(Published, Split, ReflectorReport), LabError> {
    std::fs::create_dir_all(dir)?;
    let tag = crate::run_tag();
    let (stream, back, pauses) =
        (dir.join(format!("{tag}.ring")), dir.join(format!("{tag}.back")), dir.join(format!("{tag}.pauses")));
    let slot_len = size.max(16).div_ceil(64) * 64;
    let slots = (capacity / slot_len).max(64).next_power_of_two();
    let tx = RawRing::create(&stream, slots, slot_len)?;
    let _back_file = RawRing::create(&back, slots, slot_len)?;
    let rx = RawRing::open(&back)?;
    let worker = WorkerProcess::spawn(&RingReflect {
        stream: stream.clone(),
        back: back.clone(),
        cpu: cpus.remote,
        every: every.max(1),
        pauses: pauses.clone(),
    })?;
    pin_current_thread(cpus.local)?;
    let mut samples =
        Samples::with_capacity((rate as f64 * duration.as_secs_f64()) as usize / every.max(1) as usize + 1024);
    let mut recorder = PauseRecorder::new(tickwire_shm::os::monotonic_ns());
    let mut path = RingSending { tx, rx, samples: &mut samples };
    let published = publish(rate, size, duration, &mut recorder, &mut path)?;
    // The reflections still on their way, read on the same schedule of
    // turns as during the run (not after the worker's exit, which would
    // make them late by the wait for it).
    let expected = published.sent.div_ceil(every.max(1)) as usize;
    let mut last = (path.samples.len(), Instant::now());
    while path.samples.len() < expected && last.1.elapsed() < Duration::from_millis(50) {
        recorder.tick(tickwire_shm::os::monotonic_ns());
        path.work()?;
        if path.samples.len() != last.0 {
            last = (path.samples.len(), Instant::now());
        }
    }
    let mut stop = vec![0u8; 16];
    stamp::write(&mut stop, STOP, 0);
    spin_until(REPLY_TIMEOUT, "ring stop", || path.tx.try_push(&stop).then_some(()))?;
    let RingSending { mut rx, .. } = path;
    let line = worker.finish(REPLY_TIMEOUT + duration);
    while rx.try_pop(|b| samples.arrived(b)) {}
    let _ = (std::fs::remove_file(&stream), std::fs::remove_file(&back));
    let line = line?;
    let sink: ReflectorReport = crate::base::worker::parse_report("reflector", &line)?;
    Ok((published, samples.split_with_peer(recorder.into_pauses(), &pauses)?, sink))
}

/// The sweep floor's sending path: the stream ring out, the reflections in.
struct RingSending<'a> {
    tx: RawRing,
    rx: RawRing,
    samples: &'a mut Samples,
}

impl Offer for RingSending<'_> {
    #[inline]
    fn offer(&mut self, msg: &[u8]) -> Result<bool, LabError> {
        Ok(self.tx.try_push(msg))
    }

    #[inline]
    fn work(&mut self) -> Result<(), LabError> {
        let samples = &mut *self.samples;
        for _ in 0..16 {
            if !self.rx.try_pop(|b| samples.arrived(b)) {
                break;
            }
        }
        Ok(())
    }
}

/// Worker job [`RingReflect`]: pops the stream, pushes one message
/// in `every` back (dropped if the way back is full), until the stop
/// message; leaves its pauses in `pauses`.
pub(crate) fn ring_reflect(
    stream: &Path,
    back: &Path,
    cpu: usize,
    every: u64,
    pauses: &Path,
) -> Result<String, LabError> {
    use tickwire_shm::os::monotonic_ns;
    let mut rx = RawRing::open(stream)?;
    let mut tx = RawRing::open(back)?;
    pin_current_thread(cpu)?;
    let mut recorder = PauseRecorder::new(monotonic_ns());
    let (mut received, mut first, mut last) = (0u64, None::<Instant>, Instant::now());
    let mut done = false;
    let mut idle = 0u32;
    while !done {
        let got = rx.try_pop(|b| match stamp::seq(b) {
            Some(STOP) => done = true,
            seq => {
                received += 1;
                if seq.unwrap_or(1) % every == 0 {
                    let _ = tx.try_push(b);
                }
            }
        });
        recorder.tick(monotonic_ns());
        if got {
            idle = 0;
            last = Instant::now();
            first.get_or_insert(last);
        } else {
            std::hint::spin_loop();
            idle = idle.wrapping_add(1);
            if idle % 4096 == 0 && last.elapsed() > IDLE_LIMIT {
                return Err(LabError::Timeout("no ring data for 30 s".into()));
            }
        }
    }
    write_pauses(pauses, &recorder.into_pauses())?;
    let seconds = first.map_or(0.0, |f| (last - f).as_secs_f64());
    serde_json::to_string(&ReflectorReport { received, seconds }).map_err(|e| LabError::Worker(e.to_string()))
}

/// Worker job: answers each cache-line ping (floor).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct Cacheline {
    pub path: PathBuf,
    pub cpu: usize,
}

impl crate::base::worker::Job for Cacheline {
    const ROLE: &'static str = "cacheline";

    fn run(self) -> Result<String, LabError> {
        cacheline_worker(&self.path, self.cpu)
    }
}

/// Worker job: echoes raw-ring messages from `ping` to `pong` (floor).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RingPong {
    pub ping: PathBuf,
    pub pong: PathBuf,
    pub cpu: usize,
}

impl crate::base::worker::Job for RingPong {
    const ROLE: &'static str = "ring-pong";

    fn run(self) -> Result<String, LabError> {
        ring_pong(&self.ping, &self.pong, self.cpu)
    }
}

/// Worker job: records one-way latency of an open-loop raw-ring stream (the
/// open-loop floor); the sender's pauses arrive in `pauses`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RingOnewaySink {
    pub path: PathBuf,
    pub cpu: usize,
    pub expected: u64,
    pub pauses: PathBuf,
}

impl crate::base::worker::Job for RingOnewaySink {
    const ROLE: &'static str = "ring-oneway-sink";

    fn run(self) -> Result<String, LabError> {
        ring_oneway_sink(&self.path, self.cpu, self.expected, &self.pauses)
    }
}

/// Worker job: reflects one message in `every` of a raw-ring stream onto `back`
/// (the rate sweep's open-loop floor); its pauses go to `pauses`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RingReflect {
    pub stream: PathBuf,
    pub back: PathBuf,
    pub cpu: usize,
    pub every: u64,
    pub pauses: PathBuf,
}

impl crate::base::worker::Job for RingReflect {
    const ROLE: &'static str = "ring-reflect";

    fn run(self) -> Result<String, LabError> {
        ring_reflect(&self.stream, &self.back, self.cpu, self.every.max(1), &self.pauses)
    }
}
