//! Latency against message rate (Exhibit 4 of papers 000 and 002): stream
//! small messages at a target rate, open loop; the receiver reflects one
//! message in N back; the sender records the round trip from each reflected
//! message's intended send time. Repeated for increasing target rates until
//! the path no longer sustains them. Both sides record their pauses
//! ([`crate::base::openloop`]): each rate gives a row of every reflected message and
//! a row of the pause-free ones.

use super::network::{self, NetRound};
use crate::base::common::{parse_duration, parse_rate, parse_size};
use crate::base::host::machine::Machine;
use crate::base::host::netns::NetnsPair;
use crate::base::openloop::ReflectorReport;
use crate::base::openloop::{mark, publish, write_pauses, Distribution, Offer, PauseRecorder, Samples, Split};
use crate::base::output::print::Common;
use crate::base::output::report::LatencyRow;
use crate::base::output::Measured;
use crate::paths::ipc::subscribe_when_ready;
use crate::paths::Transport;
use crate::{LabError, WorkerProcess};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tickwire_agent::pin_current_thread;
use tickwire_shm::os::monotonic_ns;
use tickwire_shm::{Context, Event, LogAppender, LogConfig, LogReader, OfferError};
use tickwire_wire::stamp;

/// `lab sweep-rate`: a rate sweep.
#[derive(Debug, Clone, clap::Args)]
pub struct Sweep {
    #[command(flatten)]
    pub common: Common,
    /// Transport: ipc, rudp (with kernel UDP at each rate as its floor), udp or tcp (plain kernel sockets).
    #[arg(long, default_value = "ipc", value_parser = Transport::parse)]
    pub transport: Transport,
    /// udp, tcp, rudp: across two network namespaces joined by a veth pair
    /// (created and removed by the lab; needs root and iproute2).
    #[arg(long)]
    pub netns: bool,
    /// Target rates, in order.
    #[arg(long, value_delimiter = ',', value_parser = parse_rate,
          default_value = "10k,50k,100k,500k,1M,2M,5M,10M,20M,40M")]
    pub rates: Vec<u64>,
    /// Payload bytes (at least 16).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    pub size: usize,
    /// How long each rate is held.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub step: Duration,
    /// The receiver reflects one message in this many.
    #[arg(long, default_value_t = 100)]
    pub reflect_every: u64,
    /// Stop after the first rate achieved below this fraction of its target.
    #[arg(long, default_value_t = 0.95)]
    pub sustain: f64,
    /// Write SVG plots: RTT percentiles against target rate here, and achieved
    /// against target beside it (`<name>-achieved.svg`).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Also write each step's histogram to an HdrHistogram interval log.
    #[arg(long)]
    pub hlog: Option<PathBuf>,
    /// Log capacity.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    pub capacity: usize,
    /// Directory for the logs.
    #[arg(skip)]
    pub dir: PathBuf,
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
    if s.netns && s.transport == Transport::Ipc {
        return Err(LabError::Usage("--netns applies to udp, tcp and rudp (ipc is shared memory on one host)".into()));
    }
    let pair = if s.netns { Some(NetnsPair::create()?) } else { None };
    let mut rows = Vec::new();
    let bar = crate::progress(s.rates.len() as u64, "sweep-rate");
    for &rate in &s.rates {
        if crate::stop_requested() {
            break;
        }
        let [mut all, mut pause_free] = match s.transport {
            Transport::Ipc => step(s, rate, machine)?,
            t => net_step(s, t, rate, pair.as_ref(), machine)?,
        };
        // The open-loop floor at the same rate and size, just after: a raw
        // ring reflecting on a second ring for IPC, kernel UDP for
        // reliable UDP (kernel UDP and TCP are their own floor).
        let floor = match s.transport {
            Transport::Ipc => {
                let (p, split, sink) = crate::base::floor::ring_sweep(
                    (rate, s.size, s.step),
                    s.reflect_every,
                    s.common.cpus,
                    &s.dir,
                    s.capacity,
                )?;
                let secs = sink.seconds.max(p.secs);
                Some(step_rows(
                    s,
                    Some(("shm", "raw_ring")),
                    rate,
                    (p.sent, sink.received, secs),
                    split,
                    machine,
                    std::time::SystemTime::now(),
                ))
            }
            Transport::Rudp => Some(net_step(s, Transport::Udp, rate, pair.as_ref(), machine)?),
            Transport::Udp | Transport::Tcp | Transport::Xdp => None,
        };
        if let Some([f_all, f_free]) = &floor {
            all.row = all.row.with_floor(&f_all.row);
            pause_free.row = pause_free.row.with_floor(&f_free.row);
        }
        bar.inc(1);
        let sustained = all.row.lost == 0 && all.row.achieved_rate.unwrap_or(0.0) >= rate as f64 * s.sustain;
        rows.push(all);
        rows.push(pause_free);
        rows.extend(floor.into_iter().flatten());
        if !sustained {
            break;
        }
    }
    bar.finish_and_clear();
    Ok(rows)
}

/// A step's two rows: the sweep's own (`floor` None) or a floor probe's
/// (`(transport, probe)`).
#[allow(clippy::too_many_arguments)]
fn step_rows(
    s: &Sweep,
    floor: Option<(&str, &str)>,
    rate: u64,
    (sent, received, secs): (u64, u64, f64),
    split: Split,
    machine: &Machine,
    wall: std::time::SystemTime,
) -> [Measured; 2] {
    let Split { all, pause_free, excluded, pauses } = split;
    let row = |h: hdrhistogram::Histogram<u64>, d: Distribution| {
        let (mode, transport, probe) = match floor {
            Some((transport, probe)) => ("floor", transport, Some(probe)),
            None => ("sweep-rate", s.transport.name(), None),
        };
        let mut row = LatencyRow::from_histogram(mode, transport, s.size, &h);
        row.clock =
            format!("CLOCK_MONOTONIC, round trip from the intended send time, 1 in {} reflected", s.reflect_every);
        row.offered_rate = Some(rate as f64);
        row.achieved_rate = Some((received as f64 / secs.max(1e-9)).round());
        row.lost = sent.saturating_sub(received);
        row.cpus = s.common.cpus.to_string();
        row.machine = machine.summary();
        mark(&mut row, d, probe, &pauses, excluded);
        Measured { row, hist: h, start: wall, elapsed: Duration::from_secs_f64(secs) }
    };
    [row(all, Distribution::All), row(pause_free, Distribution::PauseFree)]
}

/// One rate over the network: a round of [`network`] with reflections.
fn net_step(
    s: &Sweep,
    transport: Transport,
    rate: u64,
    pair: Option<&NetnsPair>,
    machine: &Machine,
) -> Result<[Measured; 2], LabError> {
    let wall = std::time::SystemTime::now();
    let r = NetRound {
        transport,
        rate,
        size: s.size,
        duration: s.step,
        reflect_every: s.reflect_every,
        cpus: s.common.cpus,
        dir: &s.dir,
        params: "",
        netns: pair,
    };
    let (source, line) = network::round(&r)?;
    let sink: ReflectorReport = crate::base::worker::parse_report("reflector", &line)?;
    let reflections =
        source.reflections.ok_or_else(|| LabError::Worker("the source reported no reflections".into()))?;
    let split = Split {
        all: crate::base::output::decode_histogram(&reflections.histogram)?,
        pause_free: crate::base::output::decode_histogram(&reflections.pause_free)?,
        excluded: reflections.excluded,
        pauses: reflections.pauses,
    };
    let secs = sink.seconds.max(source.published.secs);
    let floor = (transport != s.transport).then_some((transport.name(), "kernel_udp"));
    Ok(step_rows(s, floor, rate, (source.published.sent, sink.received, secs), split, machine, wall))
}

/// One rate: the full and the pause-free rows.
fn step(s: &Sweep, rate: u64, machine: &Machine) -> Result<[Measured; 2], LabError> {
    let wall = std::time::SystemTime::now();
    let ctx = Context::new(&s.dir)?;
    let channel = crate::run_tag();
    let pauses_path = s.dir.join(format!("{channel}.pauses"));
    let mut tx = ctx.appender(&channel, STREAM, &LogConfig::with_capacity(s.capacity))?;
    let worker = WorkerProcess::spawn(&Reflect {
        dir: s.dir.clone(),
        channel: channel.clone(),
        cpu: s.common.cpus.remote,
        every: s.reflect_every,
        capacity: s.capacity,
        pauses: pauses_path.clone(),
    })?;
    let rx = subscribe_when_ready(&ctx, &channel, REFLECT)?;
    crate::paths::ipc::wait_connected(&mut tx)?;
    pin_current_thread(s.common.cpus.local)?;
    let expected = (rate as f64 * s.step.as_secs_f64()) as u64 / s.reflect_every;
    let mut samples = Samples::with_capacity(expected as usize + 1024);
    let mut pauses = PauseRecorder::new(monotonic_ns());
    let mut path = IpcSending { tx, rx, samples: &mut samples };
    let published = publish(rate, s.size, s.step, &mut pauses, &mut path)?;
    let IpcSending { tx, mut rx, .. } = path;
    drop(tx); // end of stream: the receiver reports how many it got
              // Collect the last reflections while the receiver drains.
    let mut record = |e: Event<'_>| reflected(&mut samples, e);
    let poll_err = |e: tickwire_shm::PollError| LabError::Worker(e.to_string());
    let drain = Instant::now();
    while !rx.is_end_of_stream() && drain.elapsed() < TIMEOUT {
        rx.poll(&mut record, 64).map_err(poll_err)?;
    }
    while rx.poll(&mut record, 64).map_err(poll_err)? > 0 {}
    let line = worker.finish(TIMEOUT)?;
    let sink: ReflectorReport = crate::base::worker::parse_report("reflector", &line)?;
    let split = samples.split_with_peer(pauses.into_pauses(), &pauses_path)?;
    let secs = sink.seconds.max(published.secs);
    Ok(step_rows(s, None, rate, (published.sent, sink.received, secs), split, machine, wall))
}

/// The sender's path for [`publish`]: offers to the stream, and keeps the
/// reflections' intended times and arrivals.
struct IpcSending<'a> {
    tx: LogAppender,
    rx: LogReader,
    samples: &'a mut Samples,
}

impl Offer for IpcSending<'_> {
    #[inline]
    fn offer(&mut self, msg: &[u8]) -> Result<bool, LabError> {
        match self.tx.offer(msg) {
            Ok(_) => Ok(true),
            Err(OfferError::BackPressured) => Ok(false),
            Err(e) => Err(LabError::Worker(e.to_string())),
        }
    }

    #[inline]
    fn work(&mut self) -> Result<(), LabError> {
        let samples = &mut *self.samples;
        self.rx.poll(|e| reflected(samples, e), 16).map_err(|e| LabError::Worker(e.to_string()))?;
        Ok(())
    }
}

#[inline]
fn reflected(samples: &mut Samples, e: Event<'_>) {
    if let Event::Message(m) = e {
        samples.arrived(m.payload);
    }
}

/// Worker job [`Reflect`]: receives the stream,
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
    let seconds = first.map_or(0.0, |f| (last - f).as_secs_f64());
    write_pauses(pauses, &recorder.into_pauses())?;
    serde_json::to_string(&ReflectorReport { received, seconds }).map_err(|e| LabError::Worker(e.to_string()))
}

/// Worker job: receives an IPC stream and reflects one message in `every` (rate sweep).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct Reflect {
    pub dir: PathBuf,
    pub channel: String,
    pub cpu: usize,
    pub every: u64,
    pub capacity: usize,
    pub pauses: PathBuf,
}

impl crate::base::worker::Job for Reflect {
    const ROLE: &'static str = "reflect";

    fn run(self) -> Result<String, LabError> {
        reflect(&self.dir, &self.channel, self.cpu, self.every.max(1), self.capacity, &self.pauses)
    }
}
