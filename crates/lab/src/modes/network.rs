//! Open-loop runs over the network (`oneway` and `sweep-rate` with
//! `--transport udp|tcp|rudp`): one round is a sink worker and a source
//! worker, on loopback or, with `--netns`, in two namespaces joined by a
//! veth pair (the source in `a`, the sink in `b`). Both are pinned and spin.
//!
//! The source sends on [`publish`]'s schedule (message *i* at `t0 + i /
//! rate`, stamped with that intended time). In a one-way round the sink
//! keeps each message's intended time and arrival; in a sweep round it
//! reflects one message in N and the source keeps the reflections'. Both
//! record their pauses and hand them over through a file, as the IPC modes
//! do ([`crate::base::openloop`]), so every round gives both distributions.
//!
//! Set-up: the sink binds and prints `listening ADDR`; the source is
//! started with ADDR. Reliable UDP reflections need a way back: the source
//! binds a subscription, prints `listening BACK`, and the measuring side
//! passes BACK to the sink on its stdin.

use crate::base::host::netns::NetnsPair;
use crate::base::openloop::{
    publish, write_pauses, Offer, PauseRecorder, Published, ReflectorReport, Samples, SinkReport,
};
use crate::base::worker::{read_stdin_line, IDLE_LIMIT};
use crate::paths::stream::{Sink, Source};
use crate::paths::Transport;
use crate::{Cpus, LabError, WorkerProcess};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tickwire_agent::pin_current_thread;
use tickwire_shm::os::monotonic_ns;
use tickwire_wire::stamp;

const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// A UDP sink that got data and then nothing for this long takes the
/// stream as ended (its end datagrams may have been dropped).
const UDP_QUIET_END: Duration = Duration::from_millis(500);

/// One round's parameters.
#[derive(Debug, Clone)]
pub struct NetRound<'a> {
    /// What carries the stream.
    pub transport: Transport,
    /// Offered rate, messages per second.
    pub rate: u64,
    /// Payload bytes (at least 16).
    pub size: usize,
    /// How long the source sends.
    pub duration: Duration,
    /// 0: one-way (the sink measures); N: the sink reflects one in N (the
    /// source measures round trips).
    pub reflect_every: u64,
    /// Source CPU (`local`), sink CPU (`remote`).
    pub cpus: Cpus,
    /// Where the pause files go.
    pub dir: &'a Path,
    /// Reliable-UDP channel parameters (`key=value&...`).
    pub params: &'a str,
    /// Across this namespace pair, else loopback.
    pub netns: Option<&'a NetnsPair>,
}

/// The sink worker's part of a round ([`SinkSpec`], a worker job).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SinkSpec {
    /// What carries the stream.
    pub transport: Transport,
    /// Where to bind (port 0: any); printed back as `listening ADDR`.
    pub bind: SocketAddr,
    /// The CPU to pin to.
    pub cpu: usize,
    /// Message size.
    pub size: usize,
    /// 0: record one-way latency; N: reflect one message in N.
    pub reflect_every: u64,
    /// Messages expected (sample buffer size).
    pub expected: u64,
    /// One-way: where the source leaves its pauses; sweep: where this side leaves its own.
    pub pauses: PathBuf,
    /// Reliable-UDP channel parameters.
    pub params: String,
}

/// The source worker's part of a round ([`SourceSpec`], a worker job).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SourceSpec {
    /// What carries the stream.
    pub transport: Transport,
    /// The sink's address.
    pub peer: SocketAddr,
    /// Reliable UDP with reflections: where the reflections' subscription binds.
    pub back: Option<SocketAddr>,
    /// The CPU to pin to.
    pub cpu: usize,
    /// Message size.
    pub size: usize,
    /// Offered rate, messages per second.
    pub rate: u64,
    /// How long to send.
    pub duration: Duration,
    /// 0: one-way; N: the sink reflects one in N and this side measures.
    pub reflect_every: u64,
    /// One-way: where this side leaves its pauses; sweep: where the sink leaves its own.
    pub pauses: PathBuf,
    /// Reliable-UDP channel parameters.
    pub params: String,
}

/// What a sweep round's source reports: what it sent and the reflections' report.
#[derive(Debug, Serialize, Deserialize)]
pub struct SourceReport {
    /// Messages sent.
    pub published: Published,
    /// Round trips of the reflections (sweep), absent in one-way.
    pub reflections: Option<SinkReport>,
}

/// The round's two results: the source's report and the sink's line
/// (a [`SinkReport`] in one-way, a [`ReflectorReport`] in a sweep).
///
/// # Errors
/// Set-up failures or a side that does not finish.
pub fn round(r: &NetRound<'_>) -> Result<(SourceReport, String), LabError> {
    if r.size < 16 || r.rate == 0 {
        return Err(LabError::Usage("a network stream needs --size >= 16 and a rate".into()));
    }
    std::fs::create_dir_all(r.dir)?;
    let pauses = r.dir.join(format!("{}.pauses", crate::run_tag()));
    let (sink_ip, source_ip) = match r.netns {
        Some(p) => (p.b_addr.as_str(), p.a_addr.as_str()),
        None => ("127.0.0.1", "127.0.0.1"),
    };
    let addr = |ip: &str| -> Result<SocketAddr, LabError> {
        format!("{ip}:0").parse().map_err(|e| LabError::Usage(format!("address {ip}: {e}")))
    };
    let expected = (r.rate as f64 * r.duration.as_secs_f64()) as u64;
    let mut sink = WorkerProcess::spawn_in(
        r.netns.map(|p| p.b.as_str()),
        &SinkSpec {
            transport: r.transport,
            bind: addr(sink_ip)?,
            cpu: r.cpus.remote,
            size: r.size,
            reflect_every: r.reflect_every,
            expected,
            pauses: pauses.clone(),
            params: r.params.to_owned(),
        },
    )?;
    let peer: SocketAddr = sink.read_listening()?;
    let reflect_back = r.reflect_every > 0 && r.transport == Transport::Rudp;
    let mut source = WorkerProcess::spawn_in(
        r.netns.map(|p| p.a.as_str()),
        &SourceSpec {
            transport: r.transport,
            peer,
            back: if reflect_back { Some(addr(source_ip)?) } else { None },
            cpu: r.cpus.local,
            size: r.size,
            rate: r.rate,
            duration: r.duration,
            reflect_every: r.reflect_every,
            pauses,
            params: r.params.to_owned(),
        },
    )?;
    if reflect_back {
        let back: SocketAddr = source.read_listening()?;
        sink.write_line(&format!("back {back}"))?;
    }
    let limit = SETUP_TIMEOUT * 2 + r.duration;
    let source_line = source.finish(limit)?;
    let sink_line = sink.finish(SETUP_TIMEOUT)?;
    let report = crate::base::worker::parse_report("source", &source_line)?;
    Ok((report, sink_line))
}

/// The source's path for [`publish`]: offers to the stream, and keeps the
/// reflections' intended times and arrivals.
struct Sending<'a> {
    source: &'a mut Source,
    samples: &'a mut Samples,
}

impl Offer for Sending<'_> {
    #[inline]
    fn offer(&mut self, msg: &[u8]) -> Result<bool, LabError> {
        self.source.offer(msg)
    }

    #[inline]
    fn work(&mut self) -> Result<(), LabError> {
        let samples = &mut *self.samples;
        self.source.work(&mut |m| samples.arrived(m))
    }
}

/// Worker job [`SourceSpec`].
pub(crate) fn source(spec: &SourceSpec) -> Result<String, LabError> {
    let SourceSpec { transport, peer, back, cpu, size, rate, duration, reflect_every, ref pauses, ref params } = *spec;
    let mut source = Source::open(transport, peer, back, size, params)?;
    if let Some(b) = source.back_addr() {
        println!("listening {b}");
    }
    source.connect()?;
    pin_current_thread(cpu)?;
    let expected = ((rate as f64 * duration.as_secs_f64()) as u64).checked_div(reflect_every).unwrap_or(0);
    let mut samples = Samples::with_capacity(expected as usize + 1024);
    let mut recorder = PauseRecorder::new(monotonic_ns());
    let published =
        publish(rate, size, duration, &mut recorder, &mut Sending { source: &mut source, samples: &mut samples })?;
    let mine = recorder.into_pauses();
    let reflections = if reflect_every == 0 {
        // The sink splits: it needs these before the stream ends.
        write_pauses(pauses, &mine)?;
        source.finish(&mut |_| {})?;
        None
    } else {
        source.finish(&mut |m| samples.arrived(m))?;
        Some(SinkReport::of(&samples.split_with_peer(mine, pauses)?))
    };
    serde_json::to_string(&SourceReport { published, reflections }).map_err(|e| LabError::Worker(e.to_string()))
}

/// Worker job [`SinkSpec`].
pub(crate) fn sink(spec: &SinkSpec) -> Result<String, LabError> {
    let SinkSpec { transport, bind, cpu, size, reflect_every, expected, ref pauses, ref params } = *spec;
    let mut sink = Sink::bind(transport, bind, size, params)?;
    println!("listening {}", sink.local_addr()?);
    if reflect_every > 0 && transport == Transport::Rudp {
        let back: SocketAddr =
            read_stdin_line("back")?.parse().map_err(|e| LabError::Worker(format!("bad reflection address: {e}")))?;
        sink.reflect_to(back)?;
        let start = Instant::now();
        while !sink.is_ready() {
            sink.prepare()?;
            if start.elapsed() > SETUP_TIMEOUT {
                return Err(LabError::Timeout("the reflections' receiver never connected".into()));
            }
        }
    }
    pin_current_thread(cpu)?;
    let oneway = reflect_every == 0;
    let mut samples = Samples::with_capacity(if oneway { expected as usize + 1024 } else { 0 });
    let mut recorder = PauseRecorder::new(monotonic_ns());
    let (mut received, mut first, mut last) = (0u64, None::<Instant>, Instant::now());
    let mut idle = 0u32;
    loop {
        let n = sink.poll(&mut |m| {
            received += 1;
            if oneway {
                samples.arrived(m);
                false
            } else {
                stamp::seq(m).unwrap_or(1) % reflect_every == 0
            }
        })?;
        recorder.tick(monotonic_ns());
        if n > 0 {
            last = Instant::now();
            first.get_or_insert(last);
            idle = 0;
            continue;
        }
        idle = idle.wrapping_add(1);
        if idle % 256 == 0 {
            let quiet = last.elapsed();
            if sink.is_ended() || (transport == Transport::Udp && first.is_some() && quiet > UDP_QUIET_END) {
                break;
            }
            if quiet > IDLE_LIMIT {
                return Err(LabError::Timeout(format!("no {} data for 30 s", transport.name())));
            }
        }
    }
    sink.finish()?;
    if oneway {
        return SinkReport::from_run(&samples, recorder.into_pauses(), pauses);
    }
    write_pauses(pauses, &recorder.into_pauses())?;
    let seconds = first.map_or(0.0, |f| (last - f).as_secs_f64());
    serde_json::to_string(&ReflectorReport { received, seconds }).map_err(|e| LabError::Worker(e.to_string()))
}

impl crate::base::worker::Job for SinkSpec {
    const ROLE: &'static str = "net-sink";

    fn run(self) -> Result<String, LabError> {
        sink(&self)
    }
}

impl crate::base::worker::Job for SourceSpec {
    const ROLE: &'static str = "net-source";

    fn run(self) -> Result<String, LabError> {
        source(&self)
    }
}
