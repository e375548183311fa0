//! One-way latency at a fixed offered rate, open loop (the method of the
//! Solace paper, 001): publisher and subscriber processes on two cores of one
//! host share CLOCK_MONOTONIC. Message *i* carries its **intended** send time
//! `t0 + i / rate`; the subscriber records `now - intended`. A publisher that
//! falls behind (back-pressure, a stalled receiver) sends late but keeps the
//! intended time, so the stall shows in the percentiles instead of being
//! hidden (coordinated omission).
//!
//! A run is `rounds` rounds. In a one-to-one IPC run each round first
//! streams a raw shared-memory ring at the same rate and size on the same
//! schedule (the open-loop floor), then tickwire; over reliable UDP the
//! floor is a plain kernel UDP socket pair. Kernel UDP and TCP are their
//! own floor. Both sides of both record their
//! pauses ([`crate::base::openloop`]), and every row comes twice: all messages,
//! and the pause-free ones. Tickwire's rows carry ratios to the floor's row
//! of the same kind.

use super::network::{self, NetRound};
use crate::base::common::{parse_duration, parse_rate, parse_size};
use crate::base::host::machine::Machine;
use crate::base::host::netns::NetnsPair;
use crate::base::openloop::{
    publish, write_pauses, PauseRecorder, Published, RunShape, RunTotals, Samples, SinkReport,
};
use crate::base::output::print::Common;
use crate::base::output::Measured;
use crate::paths::Transport;
use crate::{LabError, WorkerProcess};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use tickwire_agent::pin_current_thread;
use tickwire_shm::os::monotonic_ns;
use tickwire_shm::{Context, Event, LogAppender, LogConfig, OfferError, ReaderOptions, ShmError};

/// `lab oneway`: a one-way run.
#[derive(Debug, Clone, clap::Args)]
pub struct OneWay {
    #[command(flatten)]
    pub common: Common,
    /// Transport: ipc (tickwire shared memory), rudp (reliable UDP; floor: kernel UDP), udp or tcp (plain kernel sockets).
    #[arg(long, default_value = "ipc", value_parser = Transport::parse)]
    pub transport: Transport,
    /// udp, tcp, rudp: across two network namespaces joined by a veth pair
    /// (created and removed by the lab; needs root and iproute2).
    #[arg(long)]
    pub netns: bool,
    /// Offered rate in messages per second, all publishers together (e.g. 100k, 1M).
    #[arg(long, default_value = "100k", value_parser = parse_rate)]
    pub rate: u64,
    /// Payload bytes (at least 16).
    #[arg(long, default_value = "100", value_parser = parse_size)]
    pub size: usize,
    /// How long to publish.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Publisher streams.
    #[arg(long, default_value_t = 1)]
    pub publishers: usize,
    /// Subscribers, each on every stream.
    #[arg(long, default_value_t = 1)]
    pub subscribers: usize,
    /// Distinct 12-byte topics.
    #[arg(long, default_value_t = 1)]
    pub topics: usize,
    /// Log capacity per stream.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    pub capacity: usize,
    /// Rounds, each a raw-ring round (the open-loop floor, one to one only)
    /// then a tickwire round, of --duration / rounds each.
    #[arg(long, default_value_t = 10)]
    pub rounds: usize,
    /// Also write the histogram as an HdrHistogram interval log.
    #[arg(long)]
    pub hlog: Option<PathBuf>,
    /// Write an SVG plot of the percentile distribution.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// rudp: drop this fraction of the datagrams each end sends (repaired by NAK).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// rudp: any channel parameter, KEY=VALUE (repeatable), e.g. nak-delay=50us.
    #[arg(long = "param")]
    pub params: Vec<String>,
    /// Test hook: the receiver sleeps --stall-for once every N messages.
    #[arg(long, hide = true, default_value_t = 0)]
    pub stall_every: u64,
    /// Test hook: how long the receiver sleeps.
    #[arg(long, hide = true, default_value = "0s", value_parser = parse_duration)]
    pub stall_for: Duration,
    /// Directory for the logs.
    #[arg(skip)]
    pub dir: PathBuf,
}

impl OneWay {
    /// Reliable UDP's channel parameters (`key=value&...`): `--param`s,
    /// and the injected loss.
    pub fn params(&self) -> String {
        let mut params = self.params.clone();
        if self.loss > 0.0 {
            params.push(format!("loss={}&seed=7", self.loss));
        }
        params.join("&")
    }
}

const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The 12-byte topic for index `i` (as in 001: 100-byte messages, 12-byte topics).
pub fn topic(i: usize) -> String {
    format!("md/topic{:04}", i % 10_000)
}

/// Runs the measurement in rounds. Returns tickwire's full and pause-free
/// rows, then (one to one only) the raw ring's at the same rate and size,
/// with each tickwire row's ratios to the floor row of the same kind.
///
/// # Errors
/// Bad parameters, set-up failures, or a receiver that never finishes.
pub fn run(o: &OneWay, machine: &Machine) -> Result<Vec<Measured>, LabError> {
    if o.size < 16 || o.rate == 0 || o.publishers == 0 || o.subscribers == 0 || o.topics == 0 {
        return Err(LabError::Usage("oneway needs --size >= 16 and rate, publishers, subscribers, topics >= 1".into()));
    }
    let rounds = o.rounds.max(1);
    let per_round = (o.duration / rounds as u32).max(Duration::from_millis(50));
    let one_to_one = o.publishers == 1 && o.subscribers == 1;
    let network = o.transport != Transport::Ipc;
    if network && !one_to_one {
        return Err(LabError::Usage(format!("oneway over {} is one publisher to one subscriber", o.transport.name())));
    }
    if o.netns && !network {
        return Err(LabError::Usage("--netns applies to udp, tcp and rudp (ipc is shared memory on one host)".into()));
    }
    let pair = if o.netns { Some(NetnsPair::create()?) } else { None };
    let wall = SystemTime::now();
    let (mut mine, mut floor) = (RunTotals::new(), RunTotals::new());
    let bar = crate::progress(rounds as u64, "oneway (rounds)");
    for _ in 0..rounds {
        if crate::stop_requested() {
            break;
        }
        let params = o.params();
        let net = |transport| {
            let r = NetRound {
                transport,
                rate: o.rate,
                size: o.size,
                duration: per_round,
                reflect_every: 0,
                cpus: o.common.cpus,
                dir: &o.dir,
                params: if transport == Transport::Rudp { &params } else { "" },
                netns: pair.as_ref(),
            };
            network::round(&r).map(|(source, line)| (source.published, line))
        };
        match o.transport {
            Transport::Ipc if one_to_one => {
                let (p, line) =
                    crate::base::floor::ring_oneway(o.rate, o.size, per_round, o.common.cpus, &o.dir, o.capacity)?;
                floor.add(p, &line)?;
            }
            Transport::Rudp => {
                let (p, line) = net(Transport::Udp)?;
                floor.add(p, &line)?;
            }
            _ => {}
        }
        let (p, line) = if network { net(o.transport)? } else { round(o, per_round)? };
        mine.add(p, &line)?;
        bar.inc(1);
    }
    bar.finish_and_clear();
    let shape = |fan: usize| RunShape { size: o.size, rate: o.rate, fan: fan as u64, cpus: o.common.cpus };
    let [mut all, mut free] = mine.rows("oneway", o.transport.name(), None, &shape(o.subscribers), machine, wall);
    let [f_all, f_free] = match o.transport {
        Transport::Ipc if one_to_one => floor.rows("floor", "shm", Some("raw_ring"), &shape(1), machine, wall),
        Transport::Rudp => floor.rows("floor", "udp", Some("kernel_udp"), &shape(1), machine, wall),
        _ => return Ok(vec![all, free]),
    };
    all.row = all.row.with_floor(&f_all.row);
    free.row = free.row.with_floor(&f_free.row);
    Ok(vec![all, free, f_all, f_free])
}

/// One tickwire round: the sink process attaches, this thread publishes
/// open loop, then hands its pauses over and ends the streams.
fn round(o: &OneWay, duration: Duration) -> Result<(Published, String), LabError> {
    let ctx = Context::new(&o.dir)?;
    let channel = crate::run_tag();
    let pauses_path = o.dir.join(format!("{channel}.pauses"));
    let cfg = LogConfig::with_capacity(o.capacity);
    let mut pubs: Vec<LogAppender> =
        (0..o.publishers).map(|i| ctx.appender(&channel, i as u32 + 1, &cfg)).collect::<Result<_, _>>()?;
    let (stall_every, stall_for) = if o.stall_every > 0 { (o.stall_every, o.stall_for) } else { (0, Duration::ZERO) };
    let worker = WorkerProcess::spawn(&OnewaySink {
        dir: o.dir.clone(),
        channel: channel.clone(),
        cpu: o.common.cpus.remote,
        publishers: o.publishers,
        subscribers: o.subscribers,
        stall_every,
        stall_for,
        expected: (o.rate as f64 * duration.as_secs_f64()) as u64 * o.subscribers as u64,
        pauses: pauses_path.clone(),
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
    pin_current_thread(o.common.cpus.local)?;
    let topics: Vec<String> = (0..o.topics).map(topic).collect();
    let mut recorder = PauseRecorder::new(monotonic_ns());
    let mut n = 0usize;
    let published = publish(o.rate, o.size, duration, &mut recorder, &mut |msg: &[u8]| {
        let t = &topics[n % o.topics];
        match pubs[n % o.publishers].offer_topic(t, msg) {
            Ok(_) => {
                n += 1;
                Ok(true)
            }
            Err(OfferError::BackPressured) => Ok(false),
            Err(e) => Err(LabError::Worker(e.to_string())),
        }
    })?;
    write_pauses(&pauses_path, &recorder.into_pauses())?;
    drop(pubs); // end of stream
    let line = worker.finish(SETUP_TIMEOUT + duration)?;
    Ok((published, line))
}

/// Worker job [`OnewaySink`]: every subscriber polls on this one
/// pinned thread; each message's intended time and arrival are kept, the
/// loop's pauses recorded, and at the end the publisher's pauses read from
/// `pauses` to split the two distributions. `stall` (every N messages,
/// sleep this long) is a test hook for a slow subscriber.
pub(crate) fn sink(
    dir: &Path,
    channel: &str,
    cpu: usize,
    fan: (usize, usize),
    stall: Option<(u64, Duration)>,
    expected: u64,
    pauses: &Path,
) -> Result<String, LabError> {
    let (publishers, subscribers) = fan;
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
    let mut samples = Samples::with_capacity(expected as usize + 1024);
    let mut recorder = PauseRecorder::new(monotonic_ns());
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
                            samples.arrived(m.payload);
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
        recorder.tick(monotonic_ns());
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
    SinkReport::from_run(&samples, recorder.into_pauses(), pauses)
}

/// Worker job: subscribes `subscribers` times to each of `publishers` streams and
/// records one-way latency; the stall is a test hook.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct OnewaySink {
    pub dir: PathBuf,
    pub channel: String,
    pub cpu: usize,
    pub publishers: usize,
    pub subscribers: usize,
    pub stall_every: u64,
    pub stall_for: Duration,
    /// Messages expected (sample buffer size).
    pub expected: u64,
    /// Where the publisher leaves its pauses.
    pub pauses: PathBuf,
}

impl crate::base::worker::Job for OnewaySink {
    const ROLE: &'static str = "oneway-sink";

    fn run(self) -> Result<String, LabError> {
        let stall = (self.stall_every > 0).then_some((self.stall_every, self.stall_for));
        sink(
            &self.dir,
            &self.channel,
            self.cpu,
            (self.publishers, self.subscribers),
            stall,
            self.expected,
            &self.pauses,
        )
    }
}
