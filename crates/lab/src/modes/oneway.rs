//! One-way latency at a fixed offered rate, open loop (the method of the
//! Solace paper, 001): publisher and subscriber processes on two cores of one
//! host share CLOCK_MONOTONIC. Message *i* carries its **intended** send time
//! `t0 + i / rate`; the subscriber records `now - intended`. A publisher that
//! falls behind (back-pressure, a stalled receiver) sends late but keeps the
//! intended time, so the stall shows in the percentiles instead of being
//! hidden (coordinated omission).

use crate::host::machine::Machine;
use crate::output::report::{histogram, LatencyRow};
use crate::output::Measured;
use crate::{Cpus, LabError, Role, WorkerProcess};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use tickwire_agent::pin_current_thread;
use tickwire_shm::os::monotonic_ns;
use tickwire_shm::{Context, Event, LogAppender, LogConfig, OfferError, ReaderOptions, ShmError};
use tickwire_wire::stamp;

/// A one-way run.
#[derive(Debug, Clone)]
pub struct OneWay {
    /// Offered rate, messages per second (all publishers together).
    pub rate: u64,
    /// Payload bytes (at least 16: sequence and intended time lead).
    pub size: usize,
    /// How long to publish.
    pub duration: Duration,
    /// Publisher streams (round-robin in the publishing process).
    pub publishers: usize,
    /// Subscribers in the receiving process, each on every stream.
    pub subscribers: usize,
    /// Distinct 12-byte topics carried by the messages.
    pub topics: usize,
    /// CPUs: publisher, subscriber.
    pub cpus: Cpus,
    /// Directory for the logs.
    pub dir: PathBuf,
    /// Log capacity per stream.
    pub capacity: usize,
    /// Test hook: the receiver sleeps `.1` once every `.0` messages.
    pub stall: Option<(u64, Duration)>,
}

const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The 12-byte topic for index `i` (as in 001: 100-byte messages, 12-byte topics).
pub fn topic(i: usize) -> String {
    format!("md/topic{:04}", i % 10_000)
}

/// Runs the measurement.
///
/// # Errors
/// Bad parameters, set-up failures, or a receiver that never finishes.
pub fn run(o: &OneWay, machine: &Machine) -> Result<Measured, LabError> {
    if o.size < 16 || o.rate == 0 || o.publishers == 0 || o.subscribers == 0 || o.topics == 0 {
        return Err(LabError::Usage("oneway needs --size >= 16 and rate, publishers, subscribers, topics >= 1".into()));
    }
    let ctx = Context::new(&o.dir)?;
    let channel = crate::run_tag();
    let cfg = LogConfig::with_capacity(o.capacity);
    let mut pubs: Vec<LogAppender> =
        (0..o.publishers).map(|i| ctx.appender(&channel, i as u32 + 1, &cfg)).collect::<Result<_, _>>()?;
    let (stall_every, stall_for) = o.stall.filter(|s| s.0 > 0).unwrap_or_default();
    let worker = WorkerProcess::spawn(&Role::OnewaySink {
        dir: o.dir.clone(),
        channel: channel.clone(),
        cpu: o.cpus.remote,
        publishers: o.publishers,
        subscribers: o.subscribers,
        stall_every,
        stall_for,
    })?;
    // Wait until every subscriber is attached to every stream.
    let start = Instant::now();
    for i in 0..o.publishers {
        let path = tickwire_shm::log_path(&o.dir, &channel, i as u32 + 1)?;
        while tickwire_shm::status(&path).map(|s| s.subscribers.len()).unwrap_or(0) < o.subscribers {
            if start.elapsed() > SETUP_TIMEOUT {
                return Err(LabError::Timeout("subscribers did not attach".into()));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    pin_current_thread(o.cpus.local)?;
    let topics: Vec<String> = (0..o.topics).map(topic).collect();
    let mut msg = vec![0u8; o.size];
    let interval = 1e9 / o.rate as f64;
    let t0 = monotonic_ns() + 1_000_000;
    let end = t0 + o.duration.as_nanos() as u64;
    let wall = SystemTime::now();
    let mut sent = 0u64;
    let bar = crate::progress(o.duration.as_secs().max(1), "oneway (seconds)");
    let mut next_tick = t0 + 1_000_000_000;
    loop {
        let intended = t0 + (sent as f64 * interval) as u64;
        if intended >= end || (sent % 1024 == 0 && crate::stop_requested()) {
            break;
        }
        if intended >= next_tick {
            bar.inc(1);
            next_tick += 1_000_000_000;
        }
        while monotonic_ns() < intended {
            std::hint::spin_loop();
        }
        stamp::write(&mut msg, sent, intended);
        let p = &mut pubs[(sent % o.publishers as u64) as usize];
        let t = &topics[(sent % o.topics as u64) as usize];
        let stuck = Instant::now();
        loop {
            match p.offer_topic(t, &msg) {
                Ok(_) => break,
                // Late, but the intended time stays in the message.
                Err(OfferError::BackPressured) => {
                    if stuck.elapsed() > SETUP_TIMEOUT {
                        return Err(LabError::Timeout("receiver stuck for 10 s".into()));
                    }
                    std::hint::spin_loop();
                }
                Err(e) => return Err(LabError::Worker(e.to_string())),
            }
        }
        sent += 1;
    }
    bar.finish_and_clear();
    let send_secs = (monotonic_ns().saturating_sub(t0)) as f64 / 1e9;
    drop(pubs); // end of stream
    let line = worker.finish(SETUP_TIMEOUT + o.duration)?;
    let v: serde_json::Value =
        serde_json::from_str(&line).map_err(|e| LabError::Worker(format!("bad sink output {line:?}: {e}")))?;
    let received = v["received"].as_u64().unwrap_or(0);
    let h = crate::output::decode_histogram(v["histogram"].as_str().unwrap_or(""))?;
    let mut row = LatencyRow::from_histogram("oneway", "ipc", o.size, &h);
    row.clock = "CLOCK_MONOTONIC in both processes, from the intended send time".into();
    row.offered_rate = Some(o.rate as f64);
    row.achieved_rate = Some((sent as f64 / send_secs.max(1e-9)).round());
    row.lost = (sent * o.subscribers as u64).saturating_sub(received);
    row.cpus = o.cpus.to_string();
    row.machine = machine.summary();
    Ok(Measured { row, hist: h, start: wall, elapsed: Duration::from_secs_f64(send_secs) })
}

/// Worker role [`Role::OnewaySink`]; `stall` (every N messages, sleep
/// this long) is a test hook for a slow subscriber.
pub(crate) fn sink(
    dir: &Path,
    channel: &str,
    cpu: usize,
    publishers: usize,
    subscribers: usize,
    stall: Option<(u64, Duration)>,
) -> Result<String, LabError> {
    let ctx = Context::new(dir)?;
    let start = Instant::now();
    let mut subs = Vec::with_capacity(publishers * subscribers);
    for _ in 0..subscribers {
        for p in 0..publishers {
            let s = loop {
                match ctx.reader(channel, p as u32 + 1, ReaderOptions::default()) {
                    Ok(s) => break s,
                    Err(ShmError::NoPublisher { .. }) if start.elapsed() < SETUP_TIMEOUT => {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            subs.push(s);
        }
    }
    pin_current_thread(cpu)?;
    let mut h = histogram();
    let mut received = 0u64;
    let mut idle = 0u32;
    let mut last_data = Instant::now();
    loop {
        let mut work = 0;
        for s in &mut subs {
            work += s
                .poll(
                    |e| {
                        if let Event::Message(m) = e {
                            let now = monotonic_ns();
                            let intended = stamp::intended_ns(m.payload).unwrap_or(0);
                            h.saturating_record(now.saturating_sub(intended).max(1));
                            received += 1;
                            if let Some((_, pause)) = stall.filter(|&(every, _)| received % every == 0) {
                                std::thread::sleep(pause);
                            }
                        }
                    },
                    64,
                )
                .map_err(|e| LabError::Worker(e.to_string()))?;
        }
        if work > 0 {
            idle = 0;
            last_data = Instant::now();
            continue;
        }
        std::hint::spin_loop();
        idle = idle.wrapping_add(1);
        if idle % 256 == 0 {
            if subs.iter().all(|s| s.is_end_of_stream()) {
                break;
            }
            if last_data.elapsed() > Duration::from_secs(30) {
                return Err(LabError::Timeout("no data for 30 s".into()));
            }
        }
    }
    Ok(serde_json::json!({"received": received, "histogram": crate::output::encode_histogram(&h)}).to_string())
}
