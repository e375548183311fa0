//! AF_XDP in the lab: datagrams through `tickwire-xdp`'s transport across a
//! veth pair joined by two namespaces (made per round), both ends in user
//! space, against kernel UDP on the same kind of pair in the same run.
//!
//! * Ping-pong: each end a worker pinned to its CPU, spinning on
//!   `recv_batch`; the ping side records half round trips.
//! * Throughput: a blaster sends 32-datagram batches (`send_batch`: one TX
//!   kick per batch over AF_XDP, one `sendmmsg` over kernel UDP) for the
//!   round's duration; the sink counts what arrives and the gaps.
//!
//! The same roles run the kernel-UDP side (`xdp: None`), so both paths use
//! one loop and differ only in the transport.

use crate::base::host::netns::NetnsPair;
use crate::base::output::report::ThroughputRow;
use crate::{spin_until, Cpus, LabError, WorkerProcess};
use hdrhistogram::Histogram;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};
use tickwire_agent::pin_current_thread;
use tickwire_transport::{RecvBatch, Transport, UdpConfig, UdpTransport};

const TIMEOUT: Duration = Duration::from_secs(10);
const BATCH: usize = 32;

fn werr(e: impl std::fmt::Display) -> LabError {
    LabError::Worker(e.to_string())
}

/// Opens the end at `addr`: AF_XDP in `xdp` mode (`auto`, `native`,
/// `generic`), or kernel UDP for `None`. Says which on stderr.
fn open(addr: SocketAddrV4, xdp: Option<&str>) -> Result<Box<dyn Transport>, LabError> {
    let udp = UdpConfig { bind: addr, multicast: None, buffer_bytes: 4 << 20 };
    let Some(mode) = xdp else { return Ok(Box::new(UdpTransport::open(&udp).map_err(werr)?)) };
    #[cfg(feature = "xdp")]
    {
        let cfg = tickwire_xdp::XdpConfig {
            udp,
            peer: None,
            mode: mode.parse().map_err(LabError::Usage)?,
            checksum: tickwire_xdp::Checksum::Verify,
        };
        let t = tickwire_xdp::XdpTransport::open(&cfg).map_err(|e| LabError::Worker(format!("AF_XDP: {e}")))?;
        eprintln!("{}", t.describe());
        Ok(Box::new(t))
    }
    #[cfg(not(feature = "xdp"))]
    {
        let _ = mode;
        Err(LabError::Usage("this build has no AF_XDP (cargo feature xdp)".into()))
    }
}

fn send_all(t: &mut dyn Transport, to: SocketAddrV4, d: &[&[u8]]) -> Result<(), LabError> {
    let mut sent = 0;
    spin_until(TIMEOUT, "send (ring full)", || match t.send_batch(to, &d[sent..]) {
        Ok(n) => {
            sent += n;
            (sent == d.len()).then_some(Ok(()))
        }
        Err(e) => Some(Err(werr(e))),
    })?
}

/// Ping-pong over AF_XDP (`xdp` mode) or, with `None`, kernel UDP (the
/// worker loop is the same): half round trips.
///
/// # Errors
/// Namespace or worker failures, or a pong silent for 10 s.
pub fn pingpong_histogram(
    xdp: Option<&str>,
    size: usize,
    count: u64,
    warmup: u64,
    cpus: Cpus,
    limit: Option<Duration>,
) -> Result<Histogram<u64>, LabError> {
    if !(8..=1472).contains(&size) {
        return Err(LabError::Usage(format!("size {size} out of range (8..=1472 for one AF_XDP frame)")));
    }
    let pair = NetnsPair::create()?;
    pingpong_on(&pair, xdp, size, count, warmup, cpus, limit)
}

/// [`pingpong_histogram`] across a pair made already (`lab accel` runs it
/// beside sockperf on its own): ping in `a`, pong in `b`.
///
/// # Errors
/// Worker failures, or a pong silent for 10 s.
pub fn pingpong_on(
    pair: &NetnsPair,
    xdp: Option<&str>,
    size: usize,
    count: u64,
    warmup: u64,
    cpus: Cpus,
    limit: Option<Duration>,
) -> Result<Histogram<u64>, LabError> {
    let xdp = xdp.map(str::to_owned);
    let mut pong = WorkerProcess::spawn_in(
        Some(&pair.b),
        &XdpPong { addr: format!("{}:0", pair.b_addr), cpu: cpus.remote, xdp: xdp.clone() },
    )?;
    let peer: SocketAddrV4 = pong.read_listening()?;
    let local: Ipv4Addr = pair.a_addr.parse().map_err(werr)?;
    let ping = WorkerProcess::spawn_in(
        Some(&pair.a),
        &XdpPing { local, peer, cpu: cpus.local, size, count, warmup, limit, xdp },
    )?;
    let line = ping.finish(TIMEOUT + limit.unwrap_or(Duration::from_secs(600)))?;
    let h = crate::base::output::decode_histogram(&line)?;
    pong.finish(TIMEOUT)?;
    Ok(h)
}

/// Worker job [`XdpPong`]: echoes every datagram to its source until
/// a 1-byte one.
pub(crate) fn pong(addr: &str, cpu: usize, xdp: Option<&str>) -> Result<String, LabError> {
    let mut t = open(addr.parse().map_err(werr)?, xdp)?;
    println!("listening {}", t.local_addr());
    pin_current_thread(cpu)?;
    let mut batch = RecvBatch::new(BATCH, 2048);
    let mut last = Instant::now();
    loop {
        let n = t.recv_batch(&mut batch).map_err(werr)?;
        for i in 0..n {
            let (d, from) = batch.get(i);
            if d.len() == 1 {
                return Ok(stats_line(t.as_ref()));
            }
            send_all(t.as_mut(), from, &[d])?;
        }
        if n > 0 {
            last = Instant::now();
        } else if last.elapsed() > crate::base::worker::IDLE_LIMIT {
            return Err(LabError::Timeout("no ping for 30 s".into()));
        }
    }
}

fn stats_line(t: &dyn Transport) -> String {
    t.xdp_stats().map_or_else(|| "done".into(), |s| format!("done {s:?}"))
}

/// Worker job [`XdpPing`]: the timed loop; prints the histogram.
#[allow(clippy::too_many_arguments)]
pub(crate) fn ping(
    local: Ipv4Addr,
    peer: SocketAddrV4,
    cpu: usize,
    size: usize,
    count: u64,
    warmup: u64,
    limit: Option<Duration>,
    xdp: Option<&str>,
) -> Result<String, LabError> {
    let mut t = open(SocketAddrV4::new(local, 0), xdp)?;
    pin_current_thread(cpu)?;
    let mut batch = RecvBatch::new(BATCH, 2048);
    let mut msg = vec![0u8; size];
    let h = crate::round_trips(warmup, count, limit, |i| {
        msg[..8].copy_from_slice(&i.to_le_bytes());
        send_all(t.as_mut(), peer, &[&msg])?;
        spin_until(TIMEOUT, "pong", || {
            let n = match t.recv_batch(&mut batch) {
                Ok(n) => n,
                Err(e) => return Some(Err(werr(e))),
            };
            (0..n).any(|j| batch.get(j).0.get(..8) == Some(&i.to_le_bytes()[..])).then_some(Ok(()))
        })?
    })?;
    send_all(t.as_mut(), peer, &[&[0]])?;
    eprintln!("{}", stats_line(t.as_ref()));
    Ok(crate::base::output::encode_histogram(&h))
}

/// One throughput round of 64..1472-byte datagrams over AF_XDP (`xdp`) or
/// kernel UDP with `sendmmsg` (`None`), across a fresh veth pair.
///
/// # Errors
/// Namespace or worker failures.
pub fn throughput(xdp: Option<&str>, size: usize, duration: Duration, cpus: Cpus) -> Result<ThroughputRow, LabError> {
    if !(8..=1472).contains(&size) {
        return Err(LabError::Usage(format!("size {size} out of range (8..=1472)")));
    }
    let pair = NetnsPair::create()?;
    let xdp = xdp.map(str::to_owned);
    let mut sink = WorkerProcess::spawn_in(
        Some(&pair.b),
        &XdpSink { addr: format!("{}:0", pair.b_addr), cpu: cpus.remote, xdp: xdp.clone() },
    )?;
    let peer: SocketAddrV4 = sink.read_listening()?;
    let local: Ipv4Addr = pair.a_addr.parse().map_err(werr)?;
    let blast =
        WorkerProcess::spawn_in(Some(&pair.a), &XdpBlast { local, peer, cpu: cpus.local, size, duration, xdp })?;
    blast.finish(duration + TIMEOUT)?;
    let line = sink.finish(TIMEOUT)?;
    let mut row: ThroughputRow = crate::base::worker::parse_report("sink", &line)?;
    row.size = size;
    row.bytes_per_s = (row.msgs_per_s * size as f64).round();
    row.cpus = cpus.to_string();
    Ok(row)
}

/// Worker job [`XdpBlast`]: batches of 32 for `duration`, then the
/// end mark (1-byte datagrams).
pub(crate) fn blast(
    local: Ipv4Addr,
    peer: SocketAddrV4,
    cpu: usize,
    size: usize,
    duration: Duration,
    xdp: Option<&str>,
) -> Result<String, LabError> {
    let mut t = open(SocketAddrV4::new(local, 0), xdp)?;
    pin_current_thread(cpu)?;
    let mut msgs = vec![vec![0u8; size]; BATCH];
    let start = Instant::now();
    let mut seq = 0u64;
    while start.elapsed() < duration {
        for m in &mut msgs {
            m[..8].copy_from_slice(&seq.to_le_bytes());
            seq += 1;
        }
        let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        send_all(t.as_mut(), peer, &refs)?;
    }
    for _ in 0..100 {
        send_all(t.as_mut(), peer, &[&[0]])?;
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(format!("sent {seq}"))
}

/// Worker job [`XdpSink`]: counts datagrams and sequence gaps until
/// the end mark (or 2 s of silence after the first datagram).
pub(crate) fn sink(addr: &str, cpu: usize, xdp: Option<&str>) -> Result<String, LabError> {
    let mut t = open(addr.parse().map_err(werr)?, xdp)?;
    println!("listening {}", t.local_addr());
    pin_current_thread(cpu)?;
    let mut batch = RecvBatch::new(BATCH, 2048);
    let (mut count, mut lost, mut expect) = (0u64, 0u64, 0u64);
    let (mut first, mut last) = (None, Instant::now());
    let began = Instant::now();
    'run: loop {
        let n = t.recv_batch(&mut batch).map_err(werr)?;
        for i in 0..n {
            let (d, _) = batch.get(i);
            if d.len() < 8 {
                break 'run;
            }
            let seq = u64::from_le_bytes(d[..8].try_into().unwrap_or_default());
            lost += seq.saturating_sub(expect);
            expect = expect.max(seq + 1);
            count += 1;
        }
        if n > 0 {
            last = Instant::now();
            first.get_or_insert(last);
        } else if last.elapsed() > Duration::from_secs(2) && first.is_some()
            || began.elapsed() > crate::base::worker::IDLE_LIMIT
        {
            break;
        }
    }
    let secs = first.map_or(0.0, |f: Instant| last.duration_since(f).as_secs_f64());
    let row = ThroughputRow {
        mode: "throughput".into(),
        transport: if xdp.is_some() { "xdp" } else { "udp" }.into(),
        probe: xdp.is_none().then(|| "sendmmsg_recvmmsg".into()),
        count,
        lost,
        duration_s: (secs * 1e6).round() / 1e6,
        msgs_per_s: if secs > 0.0 { (count as f64 / secs).round() } else { 0.0 },
        ..ThroughputRow::default()
    };
    eprintln!("{}", stats_line(t.as_ref()));
    serde_json::to_string(&row).map_err(werr)
}

/// Worker job: echoes datagrams over AF_XDP (`xdp` mode) or kernel UDP (`None`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct XdpPong {
    pub addr: String,
    pub cpu: usize,
    pub xdp: Option<String>,
}

impl crate::base::worker::Job for XdpPong {
    const ROLE: &'static str = "xdp-pong";

    fn run(self) -> Result<String, LabError> {
        pong(&self.addr, self.cpu, self.xdp.as_deref())
    }
}

/// Worker job: the ping side of [`XdpPong`]; prints its histogram.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct XdpPing {
    pub local: Ipv4Addr,
    pub peer: SocketAddrV4,
    pub cpu: usize,
    pub size: usize,
    pub count: u64,
    pub warmup: u64,
    pub limit: Option<Duration>,
    pub xdp: Option<String>,
}

impl crate::base::worker::Job for XdpPing {
    const ROLE: &'static str = "xdp-ping";

    fn run(self) -> Result<String, LabError> {
        ping(self.local, self.peer, self.cpu, self.size, self.count, self.warmup, self.limit, self.xdp.as_deref())
    }
}

/// Worker job: sends 32-datagram batches over AF_XDP or kernel UDP for `duration`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct XdpBlast {
    pub local: Ipv4Addr,
    pub peer: SocketAddrV4,
    pub cpu: usize,
    pub size: usize,
    pub duration: Duration,
    pub xdp: Option<String>,
}

impl crate::base::worker::Job for XdpBlast {
    const ROLE: &'static str = "xdp-blast";

    fn run(self) -> Result<String, LabError> {
        blast(self.local, self.peer, self.cpu, self.size, self.duration, self.xdp.as_deref())
    }
}

/// Worker job: counts [`XdpBlast`]'s datagrams.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct XdpSink {
    pub addr: String,
    pub cpu: usize,
    pub xdp: Option<String>,
}

impl crate::base::worker::Job for XdpSink {
    const ROLE: &'static str = "xdp-sink";

    fn run(self) -> Result<String, LabError> {
        sink(&self.addr, self.cpu, self.xdp.as_deref())
    }
}
