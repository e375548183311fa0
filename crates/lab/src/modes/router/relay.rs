//! `lab cluster`'s floor: the harness's schedule through two plain TCP
//! forwarders, one in router A's namespace and one in router B's, that do
//! nothing but copy bytes (publisher → forwarder A → forwarder B →
//! subscriber: the same hops as publisher → router A → router B →
//! subscriber, without topics, sessions or the cluster's link).
//!
//! Each forwarder is worker job [`RelaySpec`] started in
//! its namespace, pinned to the routers' CPU: it binds, prints
//! `listening ADDR`, accepts one connection (within 10 s), dials the next
//! hop, and copies (TCP_NODELAY both ways) until the end of the stream,
//! which it passes on. Its reads block (30 s at most): with nothing to
//! copy it leaves the CPU to the other forwarder, as an idle `lab cluster`
//! router sleeps (yielding instead was tried: under EEVDF a yield need not
//! hand the CPU to the forwarder with work).

use crate::base::openloop::{publish, Offer, PauseRecorder, Published, Samples, SinkReport};
use crate::paths::stream::{Sink, Source};
use crate::paths::Transport;
use crate::{Cpus, LabError, WorkerProcess};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};
use tickwire_agent::pin_current_thread;
use tickwire_shm::os::monotonic_ns;

/// How long a forwarder waits for its connection, and a round for its end.
const SETUP: Duration = Duration::from_secs(10);
/// How long a round waits for the messages still on their way.
const DRAIN: Duration = Duration::from_secs(2);
/// A forwarder that hears nothing for this long gives up.
const SILENT: Duration = Duration::from_secs(30);

/// What a forwarder needs (a worker job).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelaySpec {
    /// The address it binds (port 0: any), in its namespace.
    pub bind: String,
    /// The next hop.
    pub to: SocketAddr,
    /// The CPU to pin to.
    pub cpu: usize,
}

/// Worker job [`RelaySpec`]: prints the bytes it copied.
pub(crate) fn relay(spec: &RelaySpec) -> Result<String, LabError> {
    let io = |what: &str, e: std::io::Error| LabError::Worker(format!("relay {what}: {e}"));
    pin_current_thread(spec.cpu)?;
    let listener = TcpListener::bind(format!("{}:0", spec.bind)).map_err(|e| io("bind", e))?;
    println!("listening {}", listener.local_addr().map_err(|e| io("address", e))?);
    listener.set_nonblocking(true).map_err(|e| io("listener", e))?;
    let start = Instant::now();
    let from = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && start.elapsed() < SETUP => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(io("accept", e)),
        }
    };
    let mut from: TcpStream = from;
    from.set_nonblocking(false).map_err(|e| io("blocking", e))?;
    from.set_read_timeout(Some(SILENT)).map_err(|e| io("timeout", e))?;
    let mut to = TcpStream::connect_timeout(&spec.to, SETUP).map_err(|e| io("connect", e))?;
    for s in [&from, &to] {
        s.set_nodelay(true).map_err(|e| io("nodelay", e))?;
    }
    let mut buf = vec![0u8; 64 * 1024];
    let mut copied = 0u64;
    loop {
        // Blocks until there is something (30 s at most).
        let n = from.read(&mut buf).map_err(|e| io("read", e))?;
        if n == 0 {
            break;
        }
        to.write_all(&buf[..n]).map_err(|e| io("write", e))?;
        copied += n as u64;
    }
    to.shutdown(Shutdown::Write).map_err(|e| io("shutdown", e))?;
    // The sender waits for the end of the stream back.
    let _ = from.shutdown(Shutdown::Both);
    Ok(format!("{{\"copied\":{copied}}}"))
}

/// One floor round: a subscriber socket here (the hub), a forwarder in
/// `a` (its namespace and address), one in `b`, the publisher's socket
/// here; the schedule at `rate` for `duration` from this thread on
/// `cpus.local`. Returns what was sent and the deliveries' report (the
/// harness's own pauses: the forwarders record none).
///
/// # Errors
/// A forwarder that fails, or a socket error.
pub(crate) fn floor_round(
    hub: &str,
    a: (&str, &str),
    b: (&str, &str),
    (rate, size, duration): (u64, usize, Duration),
    cpus: Cpus,
) -> Result<(Published, SinkReport), LabError> {
    let addr = |s: String| s.parse::<SocketAddr>().map_err(|e| LabError::Usage(format!("{s}: {e}")));
    let mut sink = Sink::bind(Transport::Tcp, addr(format!("{hub}:0"))?, size, "")?;
    let relay = |(ns, ip): (&str, &str), to: SocketAddr| {
        WorkerProcess::spawn_in(Some(ns), &RelaySpec { bind: ip.to_owned(), to, cpu: cpus.remote })
    };
    let mut far = relay(b, sink.local_addr()?)?;
    let mut near = relay(a, far.read_listening()?)?;
    let mut source = Source::open(Transport::Tcp, near.read_listening()?, None, size, "")?;
    pin_current_thread(cpus.local)?;
    let expected = (rate as f64 * duration.as_secs_f64()) as u64;
    let mut samples = Samples::with_capacity(expected as usize + 1024);
    let mut recorder = PauseRecorder::new(monotonic_ns());
    let mut path = Forwarded { source: &mut source, sink: &mut sink, samples: &mut samples, received: 0 };
    let published = publish(rate, size, duration, &mut recorder, &mut path)?;
    let end = Instant::now();
    while path.received < published.sent && end.elapsed() < DRAIN {
        recorder.tick(monotonic_ns());
        path.work()?;
    }
    source.finish(&mut |_| {})?;
    while !sink.is_ended() && end.elapsed() < DRAIN + SETUP {
        sink.poll(&mut |_| false)?;
    }
    sink.finish()?;
    near.finish(SETUP)?;
    far.finish(SETUP)?;
    let split = samples.split(recorder.into_pauses());
    Ok((published, SinkReport::of(&split)))
}

/// The floor's path for [`publish`]: offers to the publisher's socket,
/// and reads the subscriber's on every turn.
struct Forwarded<'a> {
    source: &'a mut Source,
    sink: &'a mut Sink,
    samples: &'a mut Samples,
    received: u64,
}

impl Offer for Forwarded<'_> {
    #[inline]
    fn offer(&mut self, msg: &[u8]) -> Result<bool, LabError> {
        self.source.offer(msg)
    }

    #[inline]
    fn work(&mut self) -> Result<(), LabError> {
        self.source.work(&mut |_| {})?;
        let (samples, received) = (&mut *self.samples, &mut self.received);
        self.sink.poll(&mut |m| {
            samples.arrived(m);
            *received += 1;
            false
        })?;
        Ok(())
    }
}

impl crate::base::worker::Job for RelaySpec {
    const ROLE: &'static str = "relay";

    fn run(self) -> Result<String, LabError> {
        relay(&self)
    }
}
