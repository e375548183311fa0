//! Reliable UDP in the lab: ping-pong (against kernel UDP in the same run)
//! and one-way throughput. One-way latency at a fixed rate and the rate
//! sweep run through [`super::stream`].
//!
//! Both ends use the embedded driver (`UdpSender::do_work` and
//! `UdpReceiver::poll` in the measuring thread), pinned, spinning.

use crate::{spin_until, LabError, WorkerProcess};
use hdrhistogram::Histogram;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};
use tickwire_agent::pin_current_thread;
use tickwire_driver::udp::{UdpReceiver, UdpSender};
use tickwire_driver::{ChannelUri, Event, OfferError};
use tickwire_wire::stamp;

const TIMEOUT: Duration = Duration::from_secs(10);
const STREAM: u32 = 1201;

fn werr(e: impl std::fmt::Display) -> LabError {
    LabError::Worker(e.to_string())
}

fn uri(port: u16, params: &str) -> Result<ChannelUri, LabError> {
    uri_at(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port), params)
}

fn uri_at(addr: SocketAddrV4, params: &str) -> Result<ChannelUri, LabError> {
    let q = if params.is_empty() { String::new() } else { format!("?{params}") };
    format!("udp://{addr}{q}").parse().map_err(werr)
}

/// Offers, driving the publication while back-pressured (bounded by 10 s).
fn offer(p: &mut UdpSender, msg: &[u8]) -> Result<(), LabError> {
    let start = Instant::now();
    loop {
        match p.offer(msg) {
            Ok(_) => return Ok(()),
            Err(OfferError::BackPressured | OfferError::NotConnected) if start.elapsed() < TIMEOUT => {
                p.do_work();
            }
            Err(e) => return Err(werr(e)),
        }
    }
}

/// Drives both until the publication is connected and the subscription has
/// joined the far side's session.
fn connect(p: &mut UdpSender, s: &mut UdpReceiver) -> Result<(), LabError> {
    spin_until(TIMEOUT, "rudp connection", || {
        p.do_work();
        let _ = s.poll(|_| {}, 16);
        (p.is_connected() && s.session().is_some()).then_some(())
    })
}

/// The ping side: a subscription for the pongs, a publication to the pong
/// worker. Returns half-round-trip latencies. With `netns`, both ends run
/// across a veth pair: the ping side as a worker in namespace a, the pong
/// in namespace b (the channel parameters may say `xdp=required`).
///
/// # Errors
/// Socket or worker failures, or a pong that does not answer in 10 s.
pub fn pingpong_histogram(
    size: usize,
    count: u64,
    warmup: u64,
    cpus: crate::Cpus,
    limit: Option<Duration>,
    params: &str,
    netns: bool,
) -> Result<Histogram<u64>, LabError> {
    if size < 8 {
        return Err(LabError::Usage("rudp ping-pong needs at least 8 bytes".into()));
    }
    if !netns {
        return ping(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, None, size, count, warmup, cpus, limit, params);
    }
    let pair = crate::base::host::netns::NetnsPair::create()?;
    let role = RudpPing {
        host: pair.a_addr.parse().map_err(werr)?,
        far: pair.b_addr.parse().map_err(werr)?,
        far_netns: pair.b.clone(),
        size,
        count,
        warmup,
        cpu: cpus.local,
        far_cpu: cpus.remote,
        limit,
        params: params.to_owned(),
    };
    let line =
        WorkerProcess::spawn_in(Some(&pair.a), &role)?.finish(TIMEOUT + limit.unwrap_or(Duration::from_secs(600)))?;
    crate::base::output::decode_histogram(&line)
}

/// The ping side at `host`, its pong worker at `far` (in `far_netns`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn ping(
    host: Ipv4Addr,
    far: Ipv4Addr,
    far_netns: Option<&str>,
    size: usize,
    count: u64,
    warmup: u64,
    cpus: crate::Cpus,
    limit: Option<Duration>,
    params: &str,
) -> Result<Histogram<u64>, LabError> {
    let mut sub = UdpReceiver::open(&uri_at(SocketAddrV4::new(host, 0), params)?, STREAM, None).map_err(werr)?;
    let back = SocketAddrV4::new(host, sub.local_addr().port());
    let mut pong =
        WorkerProcess::spawn_in(far_netns, &RudpPong { host: far, back, cpu: cpus.remote, params: params.to_owned() })?;
    let port: u16 = pong.read_listening()?;
    let mut publication =
        UdpSender::open(&uri_at(SocketAddrV4::new(far, port), params)?, STREAM, None).map_err(werr)?;
    pin_current_thread(cpus.local)?;
    connect(&mut publication, &mut sub)?;
    let mut msg = vec![0u8; size];
    let h = crate::round_trips(warmup, count, limit, |i| {
        msg[..8].copy_from_slice(&i.to_le_bytes());
        offer(&mut publication, &msg)?;
        publication.do_work();
        let mut ok = None;
        spin_until(TIMEOUT, "rudp pong", || {
            sub.poll(
                |ev| {
                    if let Event::Message(m) = ev {
                        ok = Some(m.payload.len() == size && m.payload[..8] == i.to_le_bytes());
                    }
                },
                1,
            )
            .ok()?;
            if ok.is_none() {
                publication.do_work();
            }
            ok
        })?
        .then_some(())
        .ok_or_else(|| LabError::Worker("rudp pong echoed the wrong message".into()))
    })?;
    offer(&mut publication, &[0])?;
    let _ = publication.close(Duration::from_secs(2)); // the pong counted what it echoed
    pong.finish(TIMEOUT)?;
    Ok(h)
}

/// Worker job [`RudpPong`]: echoes until a 1-byte message.
pub(crate) fn pong(host: Ipv4Addr, back: SocketAddrV4, cpu: usize, params: &str) -> Result<String, LabError> {
    let mut sub = UdpReceiver::open(&uri_at(SocketAddrV4::new(host, 0), params)?, STREAM, None).map_err(werr)?;
    println!("listening {}", sub.local_addr().port());
    let mut publication = UdpSender::open(&uri_at(back, params)?, STREAM, None).map_err(werr)?;
    pin_current_thread(cpu)?;
    // No separate connect phase: a ping arriving early must not be dropped;
    // `offer` waits for the echo's publication to connect.
    let mut buf = Vec::new();
    let mut last = Instant::now();
    loop {
        buf.clear();
        let n = sub
            .poll(
                |ev| {
                    if let Event::Message(m) = ev {
                        buf.extend_from_slice(m.payload);
                    }
                },
                1,
            )
            .map_err(werr)?;
        if n > 0 && !buf.is_empty() {
            if buf.len() == 1 {
                let _ = publication.close(Duration::from_secs(1));
                return Ok("done".into());
            }
            offer(&mut publication, &buf)?;
            last = Instant::now();
        } else if last.elapsed() > Duration::from_secs(30) {
            return Err(LabError::Timeout("no ping for 30 s".into()));
        }
        publication.do_work();
    }
}

/// What the reliable-UDP throughput sink counted.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct RudpThroughput {
    /// Messages received.
    pub count: u64,
    /// Sequence gaps (messages never delivered).
    pub missing: u64,
    /// `Lost` events.
    pub lost_events: u64,
    /// First to last message.
    pub duration_s: f64,
    /// Messages per second.
    pub msgs_per_s: f64,
    /// Datagrams the sink's socket delivered.
    pub datagrams: u64,
    /// NAKs the sink sent.
    pub naks_sent: u64,
}

/// Receives until the stream ends (or the deadline), calling `on_message`
/// with each payload; counts messages, sequence gaps and `Lost` events.
fn sink(
    sub: &mut UdpReceiver,
    deadline: Instant,
    mut on_message: impl FnMut(&[u8]),
) -> Result<RudpThroughput, LabError> {
    let mut rep = RudpThroughput::default();
    let mut expect = 0u64;
    let mut first = None;
    let mut last = Instant::now();
    while !sub.is_ended() && Instant::now() < deadline {
        let n = sub
            .poll(
                |ev| match ev {
                    Event::Message(m) => {
                        let seq = stamp::seq(m.payload).unwrap_or(0);
                        rep.missing += seq.saturating_sub(expect);
                        expect = seq + 1;
                        rep.count += 1;
                        on_message(m.payload);
                    }
                    Event::Lost { .. } => rep.lost_events += 1,
                    _ => {}
                },
                4096,
            )
            .map_err(werr)?;
        if n > 0 {
            last = Instant::now();
            first.get_or_insert(last);
        }
    }
    let secs = first.map_or(0.0, |f: Instant| last.duration_since(f).as_secs_f64());
    rep.duration_s = secs;
    rep.msgs_per_s = if secs > 0.0 { (rep.count as f64 / secs).round() } else { 0.0 };
    rep.datagrams = sub.stats().datagrams;
    rep.naks_sent = sub.stats().naks_sent;
    Ok(rep)
}

/// One-way throughput: a worker publishes `size`-byte messages as fast as
/// flow control allows for `duration`; this process receives and counts.
///
/// # Errors
/// Socket or worker failures.
pub fn throughput(
    size: usize,
    duration: Duration,
    cpus: crate::Cpus,
    params: &str,
) -> Result<RudpThroughput, LabError> {
    let mut sub = UdpReceiver::open(&uri(0, params)?, STREAM, None).map_err(werr)?;
    let port = sub.local_addr().port();
    let blaster =
        WorkerProcess::spawn(&RudpBlast { port, cpu: cpus.remote, size, duration, params: params.to_owned() })?;
    pin_current_thread(cpus.local)?;
    let rep = sink(&mut sub, Instant::now() + duration + TIMEOUT * 3, |_| {})?;
    blaster.finish(TIMEOUT)?;
    Ok(rep)
}

/// Worker job [`RudpBlast`].
pub(crate) fn blast(port: u16, cpu: usize, size: usize, duration: Duration, params: &str) -> Result<String, LabError> {
    let mut p = UdpSender::open(&uri(port, params)?, STREAM, None).map_err(werr)?;
    pin_current_thread(cpu)?;
    spin_until(TIMEOUT, "rudp sink", || {
        p.do_work();
        p.is_connected().then_some(())
    })?;
    let mut msg = vec![0u8; size.max(8)];
    let end = Instant::now() + duration;
    let mut seq = 0u64;
    'outer: loop {
        // Offer a batch, then send it: the batching that makes this fast.
        for _ in 0..256 {
            msg[..8].copy_from_slice(&seq.to_le_bytes());
            match p.offer(&msg) {
                Ok(_) => seq += 1,
                Err(OfferError::BackPressured) => break,
                Err(e) => return Err(werr(e)),
            }
        }
        p.do_work();
        if seq % 4096 < 256 && Instant::now() >= end {
            break 'outer;
        }
    }
    let _ = p.close(TIMEOUT); // the sink counts what arrived
    Ok(format!("sent {seq}"))
}

/// The throughput floor of reliable UDP: plain kernel UDP moving the same
/// datagrams tickwire's would (messages of `size` bytes framed and packed
/// up to the default MTU), sent with `sendmmsg` in batches of up to 64 and
/// received with `recvmmsg` in batches of 32, as tickwire's sockets are.
/// No protocol: no retention, no flow control, no reordering window; what
/// the receiver counts is the most this path carries. Messages lost by the
/// kernel (the sender may outrun the receiver) are counted as `missing`.
///
/// # Errors
/// Socket or worker failures.
pub fn raw_throughput(size: usize, duration: Duration, cpus: crate::Cpus) -> Result<RudpThroughput, LabError> {
    use tickwire_transport::{RecvBatch, Transport};
    let (frame, _) = packing(size);
    let mut sock = loopback_socket()?;
    let port = sock.local_addr().port();
    let blaster = WorkerProcess::spawn(&UdpBlast { port, cpu: cpus.remote, size, duration })?;
    pin_current_thread(cpus.local)?;
    let mut batch = RecvBatch::new(32, 2048);
    let mut rep = RudpThroughput::default();
    let (mut expect, mut first, mut last) = (0u64, None::<Instant>, Instant::now());
    let deadline = Instant::now() + duration + TIMEOUT;
    'recv: while Instant::now() < deadline {
        let n = sock.recv_batch(&mut batch).map_err(werr)?;
        for i in 0..n {
            let (d, _) = batch.get(i);
            if d.len() == 1 {
                break 'recv;
            }
            for m in d.chunks_exact(frame) {
                let seq = stamp::seq(&m[tickwire_wire::data::HEADER_LEN..]).unwrap_or(0);
                rep.missing += seq.saturating_sub(expect);
                expect = seq + 1;
                rep.count += 1;
            }
        }
        if n > 0 {
            rep.datagrams += n as u64;
            last = Instant::now();
            first.get_or_insert(last);
        } else if first.is_some() && last.elapsed() > Duration::from_millis(200) {
            break; // the end datagrams were lost
        }
    }
    blaster.finish(TIMEOUT)?;
    let secs = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    rep.duration_s = secs;
    rep.msgs_per_s = if secs > 0.0 { (rep.count as f64 / secs).round() } else { 0.0 };
    Ok(rep)
}

/// A plain UDP socket on loopback with reliable UDP's default buffers.
fn loopback_socket() -> Result<tickwire_transport::UdpTransport, LabError> {
    let bind = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
    let cfg =
        tickwire_transport::UdpConfig { bind, multicast: None, buffer_bytes: tickwire_driver::DEFAULT_BUFFER_BYTES };
    tickwire_transport::UdpTransport::open(&cfg).map_err(werr)
}

/// A `size`-byte message's frame length in reliable UDP (DATA header,
/// aligned) and how many fit a datagram of the default MTU.
fn packing(size: usize) -> (usize, usize) {
    let frame = (tickwire_wire::data::HEADER_LEN + size).next_multiple_of(tickwire_wire::FRAME_ALIGNMENT);
    (frame, (tickwire_proto::SenderConfig::default().mtu / frame).max(1))
}

/// Worker job [`UdpBlast`]: sends packed datagrams of `size`-byte
/// messages to `port` as fast as the socket takes them, for `duration`.
pub(crate) fn raw_blast(port: u16, cpu: usize, size: usize, duration: Duration) -> Result<String, LabError> {
    use tickwire_transport::{Transport, MAX_BATCH};
    let (frame, per) = packing(size);
    let mut sock = loopback_socket()?;
    let to = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    pin_current_thread(cpu)?;
    let len = frame * per;
    let mut out = vec![0u8; MAX_BATCH * len];
    let mut msg = vec![0u8; size.max(8)];
    let end = Instant::now() + duration;
    let mut seq = 0u64;
    while Instant::now() < end {
        // Pack a batch as the sender packs its retention into datagrams.
        for d in out.chunks_exact_mut(len) {
            for m in d.chunks_exact_mut(frame) {
                msg[..8].copy_from_slice(&seq.to_le_bytes());
                m[tickwire_wire::data::HEADER_LEN..tickwire_wire::data::HEADER_LEN + size]
                    .copy_from_slice(&msg[..size]);
                seq += 1;
            }
        }
        let mut refs: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
        for (r, d) in refs.iter_mut().zip(out.chunks_exact(len)) {
            *r = d;
        }
        let mut sent = 0;
        while sent < refs.len() {
            sent += sock.send_batch(to, &refs[sent..]).map_err(werr)?;
        }
    }
    for _ in 0..3 {
        sock.send_batch(to, &[&[0u8]]).map_err(werr)?;
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(format!("sent {seq}"))
}

/// Worker job: echoes reliable-UDP pings, bound at `host`, back to `back`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RudpPong {
    pub host: Ipv4Addr,
    pub back: SocketAddrV4,
    pub cpu: usize,
    pub params: String,
}

impl crate::base::worker::Job for RudpPong {
    const ROLE: &'static str = "rudp-pong";

    fn run(self) -> Result<String, LabError> {
        pong(self.host, self.back, self.cpu, &self.params)
    }
}

/// Worker job: the ping side of reliable UDP at `host` (in a namespace), its pong at
/// `far` in `far_netns`; prints its histogram.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RudpPing {
    pub host: Ipv4Addr,
    pub far: Ipv4Addr,
    pub far_netns: String,
    pub size: usize,
    pub count: u64,
    pub warmup: u64,
    pub cpu: usize,
    pub far_cpu: usize,
    pub limit: Option<Duration>,
    pub params: String,
}

impl crate::base::worker::Job for RudpPing {
    const ROLE: &'static str = "rudp-ping";

    fn run(self) -> Result<String, LabError> {
        let cpus = crate::Cpus { local: self.cpu, remote: self.far_cpu };
        let h = ping(
            self.host,
            self.far,
            Some(&self.far_netns),
            self.size,
            self.count,
            self.warmup,
            cpus,
            self.limit,
            &self.params,
        )?;
        Ok(crate::base::output::encode_histogram(&h))
    }
}

/// Worker job: sends reliable UDP as fast as flow control allows for `duration`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RudpBlast {
    pub port: u16,
    pub cpu: usize,
    pub size: usize,
    pub duration: Duration,
    pub params: String,
}

impl crate::base::worker::Job for RudpBlast {
    const ROLE: &'static str = "rudp-blast";

    fn run(self) -> Result<String, LabError> {
        blast(self.port, self.cpu, self.size, self.duration, &self.params)
    }
}

/// Worker job: sends plain UDP datagrams packed as reliable UDP's would, as fast as
/// the socket takes them (reliable UDP's throughput floor).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct UdpBlast {
    pub port: u16,
    pub cpu: usize,
    pub size: usize,
    pub duration: Duration,
}

impl crate::base::worker::Job for UdpBlast {
    const ROLE: &'static str = "udp-blast";

    fn run(self) -> Result<String, LabError> {
        raw_blast(self.port, self.cpu, self.size, self.duration)
    }
}
