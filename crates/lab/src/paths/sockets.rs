//! Ping-pong over plain kernel sockets on loopback: UDP, and TCP with
//! TCP_NODELAY. `Wait::Spin` polls non-blocking sockets (like sockperf
//! `--nonblocked`); `Wait::Block` sleeps in `recv` (sockperf's default).
//! The pong side is a worker process pinned to the remote CPU.

use crate::{spin_until, Cpus, LabError, WorkerProcess};
use hdrhistogram::Histogram;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};
use tickwire_agent::pin_current_thread;

/// How a side waits for the next message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Wait {
    /// Busy-poll a non-blocking socket.
    Spin,
    /// Block in the kernel.
    Block,
}

impl Wait {
    /// `spin` or `block`.
    pub fn name(self) -> &'static str {
        match self {
            Wait::Spin => "spin",
            Wait::Block => "block",
        }
    }
}

/// Which kernel protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    /// Datagrams.
    Udp,
    /// A stream with TCP_NODELAY.
    Tcp,
}

/// Parameters of a socket ping-pong.
#[derive(Debug, Clone)]
pub struct SockOptions {
    /// Protocol.
    pub proto: Proto,
    /// Spin or block.
    pub wait: Wait,
    /// Round trips recorded.
    pub count: u64,
    /// Round trips before recording.
    pub warmup: u64,
    /// Payload bytes (8..=65507 for UDP).
    pub size: usize,
    /// CPUs.
    pub cpus: Cpus,
    /// Across two network namespaces joined by veth instead of loopback.
    pub netns: bool,
    /// Also stop after this long (then `count` is only an upper bound).
    pub time_limit: Option<Duration>,
}

const TIMEOUT: Duration = Duration::from_secs(10);
const IDLE_LIMIT: Duration = Duration::from_secs(30);

fn io_err(what: &str, e: std::io::Error) -> LabError {
    LabError::Worker(format!("{what}: {e}"))
}

/// Receives one datagram, spinning or blocking, bounded by `TIMEOUT`.
fn udp_recv(sock: &UdpSocket, buf: &mut [u8], wait: Wait, limit: Duration) -> Result<usize, LabError> {
    // A signal (Ctrl-C asking for a graceful stop) interrupts a blocking
    // recv: retry, the round finishes.
    spin_until(limit, "udp reply", || match sock.recv_from(buf) {
        Ok((n, _)) => Some(Ok(n)),
        Err(e) if e.kind() == ErrorKind::WouldBlock && wait == Wait::Spin => None,
        Err(e) if e.kind() == ErrorKind::Interrupted => None,
        Err(e) => Some(Err(io_err("udp recv", e))),
    })?
}

/// Reads exactly `buf.len()` bytes from a TCP stream, spinning or blocking.
fn tcp_read(s: &mut TcpStream, buf: &mut [u8], wait: Wait, limit: Duration) -> Result<bool, LabError> {
    let mut got = 0;
    let start = Instant::now();
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Ok(false), // EOF
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock && wait == Wait::Spin => {
                if start.elapsed() > limit {
                    return Err(LabError::Timeout("tcp read".into()));
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(io_err("tcp read", e)),
        }
    }
    Ok(true)
}

fn tcp_write(s: &mut TcpStream, buf: &[u8]) -> Result<(), LabError> {
    let mut sent = 0;
    let start = Instant::now();
    while sent < buf.len() {
        match s.write(&buf[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if start.elapsed() > TIMEOUT {
                    return Err(LabError::Timeout("tcp write".into()));
                }
                std::hint::spin_loop();
            }
            Err(e) => return Err(io_err("tcp write", e)),
        }
    }
    Ok(())
}

/// Runs the ping side (on loopback, or across a veth pair between two
/// namespaces the lab creates and removes); returns half-round-trip latencies.
///
/// # Errors
/// Socket errors, namespace set-up errors, or a pong that does not answer
/// within 10 s.
pub fn pingpong_histogram(o: &SockOptions) -> Result<Histogram<u64>, LabError> {
    if o.size < 8 || (o.proto == Proto::Udp && o.size > 65_507) {
        return Err(LabError::Usage(format!("size {} out of range (8..=65507 for UDP, >= 8 for TCP)", o.size)));
    }
    let pair = if o.netns { Some(crate::base::host::netns::NetnsPair::create()?) } else { None };
    let addr = pair.as_ref().map_or("127.0.0.1:0".to_owned(), |p| format!("{}:0", p.b_addr));
    let mut pong = WorkerProcess::spawn_in(
        pair.as_ref().map(|p| p.b.as_str()),
        &SockPong { proto: o.proto, addr, cpu: o.cpus.remote, wait: o.wait, size: o.size },
    )?;
    let peer: SocketAddr = pong.read_listening()?;
    let h = match &pair {
        None => ping_loop(o.proto, peer, o.wait, o.size, o.count, o.warmup, o.cpus.local, o.time_limit)?,
        Some(p) => {
            // The ping side must live in namespace a too: run it as a worker
            // there and take its histogram back.
            let ping = WorkerProcess::spawn_in(
                Some(&p.a),
                &SockPing {
                    proto: o.proto,
                    peer,
                    cpu: o.cpus.local,
                    wait: o.wait,
                    size: o.size,
                    count: o.count,
                    warmup: o.warmup,
                    limit: o.time_limit,
                },
            )?;
            let line = ping.finish(TIMEOUT + Duration::from_secs(600))?;
            crate::base::output::decode_histogram(&line)?
        }
    };
    pong.finish(TIMEOUT)?;
    drop(pair);
    Ok(h)
}

/// The ping side's loop: `count` timed round trips after `warmup`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn ping_loop(
    proto: Proto,
    peer: SocketAddr,
    wait: Wait,
    size: usize,
    count: u64,
    warmup: u64,
    cpu: usize,
    time_limit: Option<Duration>,
) -> Result<Histogram<u64>, LabError> {
    pin_current_thread(cpu)?;
    let mut msg = vec![0u8; size];
    let mut reply = vec![0u8; size.max(1)];
    let h;
    match proto {
        Proto::Udp => {
            // Unconnected, sendto/recvfrom per message, like sockperf (a
            // connected socket skips the per-send route lookup and measures
            // 10-20% lower; see docs/PERFORMANCE.md).
            let local = if peer.ip().is_loopback() { "127.0.0.1:0" } else { "0.0.0.0:0" };
            let sock = UdpSocket::bind(local).map_err(|e| io_err("bind", e))?;
            sock.set_nonblocking(wait == Wait::Spin).map_err(|e| io_err("nonblocking", e))?;
            sock.set_read_timeout(Some(TIMEOUT)).map_err(|e| io_err("timeout", e))?;
            h = crate::round_trips(warmup, count, time_limit, |i| {
                msg[..8].copy_from_slice(&i.to_le_bytes());
                sock.send_to(&msg, peer).map_err(|e| io_err("udp send", e))?;
                let n = udp_recv(&sock, &mut reply, wait, TIMEOUT)?;
                if n != size || reply[..8] != i.to_le_bytes() {
                    return Err(LabError::Worker(format!("udp pong echoed the wrong message ({n} bytes)")));
                }
                Ok(())
            })?;
            sock.send_to(&[0u8], peer).map_err(|e| io_err("udp stop", e))?;
        }
        Proto::Tcp => {
            let mut s = TcpStream::connect_timeout(&peer, TIMEOUT).map_err(|e| io_err("connect", e))?;
            s.set_nodelay(true).map_err(|e| io_err("nodelay", e))?;
            s.set_nonblocking(wait == Wait::Spin).map_err(|e| io_err("nonblocking", e))?;
            s.set_read_timeout(Some(TIMEOUT)).map_err(|e| io_err("timeout", e))?;
            h = crate::round_trips(warmup, count, time_limit, |i| {
                msg[..8].copy_from_slice(&i.to_le_bytes());
                tcp_write(&mut s, &msg)?;
                if !tcp_read(&mut s, &mut reply, wait, TIMEOUT)? {
                    return Err(LabError::Worker("tcp pong closed the connection".into()));
                }
                if reply[..8] != i.to_le_bytes() {
                    return Err(LabError::Worker("tcp pong echoed the wrong message".into()));
                }
                Ok(())
            })?;
            drop(s); // EOF stops the pong
        }
    }
    Ok(h)
}

/// Worker job [`SockPong`]: the echo side over a kernel socket.
pub(crate) fn pong(proto: Proto, addr: &str, cpu: usize, wait: Wait, size: usize) -> Result<String, LabError> {
    match proto {
        Proto::Udp => udp_pong(addr, cpu, wait, size),
        Proto::Tcp => tcp_pong(addr, cpu, wait, size),
    }
}

/// Worker job [`SockPong`] over UDP. Prints `listening ADDR`,
/// echoes datagrams (sendto the first sender, unconnected, as sockperf's
/// server does) until a 1-byte one arrives.
fn udp_pong(addr: &str, cpu: usize, wait: Wait, size: usize) -> Result<String, LabError> {
    let sock = UdpSocket::bind(addr).map_err(|e| io_err("bind", e))?;
    println!("listening {}", sock.local_addr().map_err(|e| io_err("addr", e))?);
    pin_current_thread(cpu)?;
    sock.set_read_timeout(Some(IDLE_LIMIT)).map_err(|e| io_err("timeout", e))?;
    let mut buf = vec![0u8; size.max(1) + 1];
    // The first datagram tells us who the ping side is.
    let (n, from) = sock.recv_from(&mut buf).map_err(|e| io_err("udp recv", e))?;
    sock.set_nonblocking(wait == Wait::Spin).map_err(|e| io_err("nonblocking", e))?;
    let mut n = n;
    loop {
        if n == 1 {
            return Ok("done".into());
        }
        sock.send_to(&buf[..n], from).map_err(|e| io_err("udp send", e))?;
        n = udp_recv(&sock, &mut buf, wait, IDLE_LIMIT)?;
    }
}

/// Worker job [`SockPong`] over TCP. Prints `listening
/// ADDR`, accepts one connection and echoes SIZE-byte messages until EOF.
fn tcp_pong(addr: &str, cpu: usize, wait: Wait, size: usize) -> Result<String, LabError> {
    let listener = TcpListener::bind(addr).map_err(|e| io_err("bind", e))?;
    println!("listening {}", listener.local_addr().map_err(|e| io_err("addr", e))?);
    pin_current_thread(cpu)?;
    listener.set_nonblocking(true).map_err(|e| io_err("nonblocking", e))?;
    let start = Instant::now();
    let mut s = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == ErrorKind::WouldBlock && start.elapsed() < IDLE_LIMIT => {
                std::thread::sleep(Duration::from_micros(100));
            }
            Err(e) => return Err(io_err("accept", e)),
        }
    };
    s.set_nodelay(true).map_err(|e| io_err("nodelay", e))?;
    s.set_nonblocking(wait == Wait::Spin).map_err(|e| io_err("nonblocking", e))?;
    s.set_read_timeout(Some(IDLE_LIMIT)).map_err(|e| io_err("timeout", e))?;
    let mut buf = vec![0u8; size.max(1)];
    while tcp_read(&mut s, &mut buf, wait, IDLE_LIMIT)? {
        tcp_write(&mut s, &buf)?;
    }
    Ok("done".into())
}

/// Worker job: echoes over a kernel UDP or TCP socket bound to `addr`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct SockPong {
    pub proto: Proto,
    pub addr: String,
    pub cpu: usize,
    pub wait: Wait,
    pub size: usize,
}

impl crate::base::worker::Job for SockPong {
    const ROLE: &'static str = "sock-pong";

    fn run(self) -> Result<String, LabError> {
        pong(self.proto, &self.addr, self.cpu, self.wait, self.size)
    }
}

/// Worker job: the ping side over a kernel socket (inside a namespace); prints its histogram.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct SockPing {
    pub proto: Proto,
    pub peer: SocketAddr,
    pub cpu: usize,
    pub wait: Wait,
    pub size: usize,
    pub count: u64,
    pub warmup: u64,
    pub limit: Option<Duration>,
}

impl crate::base::worker::Job for SockPing {
    const ROLE: &'static str = "sock-ping";

    fn run(self) -> Result<String, LabError> {
        let h = ping_loop(self.proto, self.peer, self.wait, self.size, self.count, self.warmup, self.cpu, self.limit)?;
        Ok(crate::base::output::encode_histogram(&h))
    }
}
