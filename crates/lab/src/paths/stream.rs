//! Open-loop streams over the network, both ends: plain kernel UDP and TCP
//! sockets (non-blocking, spinning: the floor of the network transports)
//! and tickwire's reliable UDP. `oneway` and `sweep-rate` drive them the
//! same way ([`crate::modes::network`]):
//!
//! * the [`Source`] sends fixed-size messages as [`publish`](crate::base::openloop::publish)
//!   schedules them, and (sweep) receives the reflections;
//! * the [`Sink`] receives them and reflects the ones it is asked to.
//!
//! The end of a stream is each transport's own: a UDP datagram of one byte
//! (sent a few times: UDP may drop it), TCP's EOF, reliable UDP's
//! END_OF_STREAM.

use crate::paths::Transport;
use crate::LabError;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};
use tickwire_driver::udp::{UdpReceiver, UdpSender};
use tickwire_driver::{ChannelUri, Event, OfferError};

const TIMEOUT: Duration = Duration::from_secs(10);
/// The stream id of both directions of a reliable-UDP run.
const STREAM: u32 = 1301;
/// A reflection that finds the way back full is dropped past this (TCP).
const MAX_PENDING: usize = 64 << 10;

fn io(what: &str, e: std::io::Error) -> LabError {
    LabError::Worker(format!("{what}: {e}"))
}

fn werr(e: impl std::fmt::Display) -> LabError {
    LabError::Worker(e.to_string())
}

fn rudp_uri(addr: SocketAddr, params: &str) -> Result<ChannelUri, LabError> {
    let q = if params.is_empty() { String::new() } else { format!("?{params}") };
    format!("udp://{addr}{q}").parse().map_err(werr)
}

fn udp_socket(local: SocketAddr) -> Result<UdpSocket, LabError> {
    let s = UdpSocket::bind(local).map_err(|e| io(&format!("udp bind {local}"), e))?;
    s.set_nonblocking(true).map_err(|e| io("udp nonblocking", e))?;
    // The buffers reliable UDP's sockets get by default, so the floor has
    // the same room to absorb a pause.
    tickwire_transport::set_socket_buffers(&s, tickwire_driver::DEFAULT_BUFFER_BYTES);
    Ok(s)
}

/// Sends what is pending on a non-blocking stream; whether all of it went.
fn flush(s: &mut TcpStream, pending: &mut Vec<u8>) -> Result<bool, LabError> {
    while !pending.is_empty() {
        match s.write(pending) {
            Ok(n) => {
                pending.drain(..n);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(io("tcp write", e)),
        }
    }
    Ok(true)
}

/// Reads what is there and hands out each complete `size`-byte message;
/// returns the messages and whether the peer closed.
fn read_frames(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    size: usize,
    f: &mut dyn FnMut(&[u8]),
) -> Result<(usize, bool), LabError> {
    let mut chunk = [0u8; 16 << 10];
    let (n, eof) = match s.read(&mut chunk) {
        Ok(0) => (0, true),
        Ok(n) => (n, false),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => (0, false),
        Err(e) => return Err(io("tcp read", e)),
    };
    buf.extend_from_slice(&chunk[..n]);
    let whole = buf.len() / size * size;
    for m in buf[..whole].chunks_exact(size) {
        f(m);
    }
    buf.drain(..whole);
    Ok((whole / size, eof))
}

/// The sending end of a stream.
#[derive(Debug)]
// One per process, made once and never moved on the hot path: boxing the
// large variant would only add a pointer chase to every send.
#[allow(clippy::large_enum_variant)]
pub enum Source {
    /// A kernel UDP socket; reflections come back to it.
    Udp { sock: UdpSocket, peer: SocketAddr, buf: Vec<u8> },
    /// A kernel TCP connection (TCP_NODELAY); reflections come back on it.
    Tcp { s: TcpStream, size: usize, pending: Vec<u8>, inbuf: Vec<u8> },
    /// A reliable-UDP publication, and a subscription for reflections.
    Rudp { tx: UdpSender, back: Option<UdpReceiver> },
}

impl Source {
    /// Opens the sending end to `peer`. `back` (reliable UDP with
    /// reflections) is where its reflection subscription binds.
    ///
    /// # Errors
    /// Sockets that cannot be opened, a TCP peer that does not accept.
    pub fn open(
        transport: Transport,
        peer: SocketAddr,
        back: Option<SocketAddr>,
        size: usize,
        params: &str,
    ) -> Result<Self, LabError> {
        let local: SocketAddr =
            if peer.ip().is_loopback() { "127.0.0.1:0" } else { "0.0.0.0:0" }.parse().map_err(werr)?;
        Ok(match transport {
            Transport::Udp => Source::Udp { sock: udp_socket(local)?, peer, buf: vec![0; size.max(1) + 1] },
            Transport::Tcp => {
                let s = TcpStream::connect_timeout(&peer, TIMEOUT).map_err(|e| io(&format!("connect {peer}"), e))?;
                s.set_nodelay(true).map_err(|e| io("nodelay", e))?;
                s.set_nonblocking(true).map_err(|e| io("nonblocking", e))?;
                Source::Tcp { s, size, pending: Vec::new(), inbuf: Vec::new() }
            }
            Transport::Rudp => {
                let back =
                    back.map(|b| UdpReceiver::open(&rudp_uri(b, params)?, STREAM, None).map_err(werr)).transpose()?;
                let tx = UdpSender::open(&rudp_uri(peer, params)?, STREAM, None).map_err(werr)?;
                Source::Rudp { tx, back }
            }
            Transport::Ipc => return Err(LabError::Usage("ipc is not a network stream".into())),
            Transport::Xdp => {
                return Err(LabError::Usage("open-loop streams over xdp: use rudp with --param xdp=required".into()))
            }
        })
    }

    /// Where reflections come back (reliable UDP only: the others reply on
    /// the sending socket).
    pub fn back_addr(&self) -> Option<SocketAddr> {
        match self {
            Source::Rudp { back: Some(b), .. } => Some(SocketAddr::V4(b.local_addr())),
            _ => None,
        }
    }

    /// Whether both directions are set up: reliable UDP's publication has
    /// a receiver and its reflection subscription a session (the others
    /// need no set-up beyond `open`).
    pub fn is_ready(&self) -> bool {
        match self {
            Source::Rudp { tx, back } => tx.is_connected() && back.as_ref().map_or(true, |b| b.session().is_some()),
            _ => true,
        }
    }

    /// Drives the set-up until [`Source::is_ready`] (the sink polls meanwhile).
    ///
    /// # Errors
    /// [`LabError::Timeout`] after 10 s.
    pub fn connect(&mut self) -> Result<(), LabError> {
        let start = Instant::now();
        while !self.is_ready() {
            self.work(&mut |_| {})?;
            if start.elapsed() > TIMEOUT {
                return Err(LabError::Timeout("the rudp receiver (or the reflections' sender) never connected".into()));
            }
        }
        Ok(())
    }

    /// Offers one message: whether it was taken.
    ///
    /// # Errors
    /// Socket failures.
    #[inline]
    pub fn offer(&mut self, msg: &[u8]) -> Result<bool, LabError> {
        match self {
            Source::Udp { sock, peer, .. } => match sock.send_to(msg, *peer) {
                Ok(_) => Ok(true),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => Ok(false),
                Err(e) => Err(io("udp send", e)),
            },
            Source::Tcp { s, pending, .. } => {
                if !flush(s, pending)? {
                    return Ok(false);
                }
                pending.extend_from_slice(msg);
                flush(s, pending)?;
                Ok(true)
            }
            Source::Rudp { tx, .. } => match tx.offer(msg) {
                Ok(_) => Ok(true),
                Err(OfferError::BackPressured) => Ok(false),
                Err(e) => Err(werr(e)),
            },
        }
    }

    /// Drives the path and hands each reflection to `f`.
    ///
    /// # Errors
    /// Socket failures.
    #[inline]
    pub fn work(&mut self, f: &mut dyn FnMut(&[u8])) -> Result<(), LabError> {
        match self {
            Source::Udp { sock, buf, .. } => loop {
                match sock.recv_from(buf) {
                    Ok((n, _)) => f(&buf[..n]),
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => return Ok(()),
                    Err(e) => return Err(io("udp recv", e)),
                }
            },
            Source::Tcp { s, size, pending, inbuf } => {
                flush(s, pending)?;
                read_frames(s, inbuf, *size, f)?;
                Ok(())
            }
            Source::Rudp { tx, back } => {
                tx.do_work();
                if let Some(b) = back {
                    b.poll(
                        |e| {
                            if let Event::Message(m) = e {
                                f(m.payload);
                            }
                        },
                        64,
                    )
                    .map_err(werr)?;
                }
                Ok(())
            }
        }
    }

    /// Ends the stream and collects the last reflections (for up to 50 ms,
    /// or until TCP's EOF).
    ///
    /// # Errors
    /// Socket failures.
    pub fn finish(mut self, f: &mut dyn FnMut(&[u8])) -> Result<(), LabError> {
        match &mut self {
            Source::Udp { sock, peer, .. } => {
                for _ in 0..3 {
                    let _ = sock.send_to(&[0], *peer);
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            Source::Tcp { s, size, pending, inbuf } => {
                let start = Instant::now();
                while !flush(s, pending)? {
                    if start.elapsed() > TIMEOUT {
                        return Err(LabError::Timeout("tcp peer stopped reading".into()));
                    }
                }
                s.shutdown(Shutdown::Write).map_err(|e| io("tcp shutdown", e))?;
                // The reflections still on their way, up to the peer's EOF.
                while !read_frames(s, inbuf, *size, f)?.1 {
                    if start.elapsed() > TIMEOUT {
                        return Err(LabError::Timeout("tcp peer never closed".into()));
                    }
                }
                return Ok(());
            }
            Source::Rudp { tx, .. } => {
                let _ = tx.close(TIMEOUT); // the sink counts what arrived
            }
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(50) {
            self.work(f)?;
        }
        Ok(())
    }
}

/// The receiving end of a stream.
#[derive(Debug)]
// As for `Source`: one per process, never moved on the hot path.
#[allow(clippy::large_enum_variant)]
pub enum Sink {
    /// A kernel UDP socket; reflections go back to each datagram's source.
    Udp { sock: UdpSocket, buf: Vec<u8>, size: usize, ended: bool },
    /// A kernel TCP listener, then its one connection.
    Tcp { listener: TcpListener, s: Option<TcpStream>, size: usize, inbuf: Vec<u8>, pending: Vec<u8>, ended: bool },
    /// A reliable-UDP subscription, and once told where, a publication for
    /// the reflections.
    Rudp { rx: UdpReceiver, back: Option<UdpSender>, params: String },
}

impl Sink {
    /// Binds the receiving end at `bind` (port 0: any).
    ///
    /// # Errors
    /// Sockets that cannot be opened.
    pub fn bind(transport: Transport, bind: SocketAddr, size: usize, params: &str) -> Result<Self, LabError> {
        Ok(match transport {
            Transport::Udp => Sink::Udp { sock: udp_socket(bind)?, buf: vec![0; size.max(1) + 1], size, ended: false },
            Transport::Tcp => {
                let listener = TcpListener::bind(bind).map_err(|e| io(&format!("tcp bind {bind}"), e))?;
                listener.set_nonblocking(true).map_err(|e| io("nonblocking", e))?;
                Sink::Tcp { listener, s: None, size, inbuf: Vec::new(), pending: Vec::new(), ended: false }
            }
            Transport::Rudp => Sink::Rudp {
                rx: UdpReceiver::open(&rudp_uri(bind, params)?, STREAM, None).map_err(werr)?,
                back: None,
                params: params.to_owned(),
            },
            Transport::Ipc => return Err(LabError::Usage("ipc is not a network stream".into())),
            Transport::Xdp => {
                return Err(LabError::Usage("open-loop streams over xdp: use rudp with --param xdp=required".into()))
            }
        })
    }

    /// The bound address.
    ///
    /// # Errors
    /// A socket that cannot say.
    pub fn local_addr(&self) -> Result<SocketAddr, LabError> {
        match self {
            Sink::Udp { sock, .. } => sock.local_addr().map_err(|e| io("udp addr", e)),
            Sink::Tcp { listener, .. } => listener.local_addr().map_err(|e| io("tcp addr", e)),
            Sink::Rudp { rx, .. } => Ok(SocketAddr::V4(rx.local_addr())),
        }
    }

    /// Reliable UDP: opens the publication that carries reflections to `to`.
    ///
    /// # Errors
    /// A socket that cannot be opened.
    pub fn reflect_to(&mut self, to: SocketAddr) -> Result<(), LabError> {
        if let Sink::Rudp { back, params, .. } = self {
            *back = Some(UdpSender::open(&rudp_uri(to, params)?, STREAM, None).map_err(werr)?);
        }
        Ok(())
    }

    /// Whether the way back is set up (reliable UDP with reflections: its
    /// publication has a receiver; the others need nothing).
    pub fn is_ready(&self) -> bool {
        match self {
            Sink::Rudp { back: Some(b), .. } => b.is_connected(),
            _ => true,
        }
    }

    /// Drives the set-up without taking any message, until
    /// [`Sink::is_ready`] (the source drives its side meanwhile).
    ///
    /// # Errors
    /// Socket failures.
    pub fn prepare(&mut self) -> Result<(), LabError> {
        if let Sink::Rudp { rx, back, .. } = self {
            rx.poll(|_| {}, 0).map_err(werr)?;
            if let Some(b) = back {
                b.do_work();
            }
        }
        Ok(())
    }

    /// Whether the stream has ended.
    pub fn is_ended(&self) -> bool {
        match self {
            Sink::Udp { ended, .. } | Sink::Tcp { ended, .. } => *ended,
            Sink::Rudp { rx, .. } => rx.is_ended(),
        }
    }

    /// Receives what is there: `f` sees each message and says whether to
    /// reflect it (a reflection that finds the way back full is dropped:
    /// it never holds up the stream). Returns the messages received.
    ///
    /// # Errors
    /// Socket failures.
    #[inline]
    pub fn poll(&mut self, f: &mut dyn FnMut(&[u8]) -> bool) -> Result<usize, LabError> {
        match self {
            Sink::Udp { sock, buf, size, ended } => {
                let mut got = 0;
                for _ in 0..64 {
                    match sock.recv_from(buf) {
                        Ok((1, _)) => *ended = true,
                        Ok((n, from)) if n == *size => {
                            got += 1;
                            if f(&buf[..n]) {
                                let _ = sock.send_to(&buf[..n], from);
                            }
                        }
                        Ok(_) => {} // not ours
                        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => break,
                        Err(e) => return Err(io("udp recv", e)),
                    }
                }
                Ok(got)
            }
            Sink::Tcp { listener, s, size, inbuf, pending, ended } => {
                let Some(stream) = s else {
                    match listener.accept() {
                        Ok((c, _)) => {
                            c.set_nodelay(true).map_err(|e| io("nodelay", e))?;
                            c.set_nonblocking(true).map_err(|e| io("nonblocking", e))?;
                            *s = Some(c);
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(e) => return Err(io("tcp accept", e)),
                    }
                    return Ok(0);
                };
                let (got, eof) = read_frames(stream, inbuf, *size, &mut |m| {
                    if f(m) && pending.len() < MAX_PENDING {
                        pending.extend_from_slice(m);
                    }
                })?;
                flush(stream, pending)?;
                *ended |= eof;
                Ok(got)
            }
            Sink::Rudp { rx, back, .. } => {
                let mut got = 0;
                rx.poll(
                    |e| {
                        if let Event::Message(m) = e {
                            got += 1;
                            if f(m.payload) {
                                if let Some(b) = back.as_mut() {
                                    let _ = b.offer(m.payload);
                                }
                            }
                        }
                    },
                    64,
                )
                .map_err(werr)?;
                if let Some(b) = back {
                    b.do_work();
                }
                Ok(got)
            }
        }
    }

    /// Delivers what is left on the way back and closes it.
    ///
    /// # Errors
    /// Socket failures.
    pub fn finish(self) -> Result<(), LabError> {
        match self {
            Sink::Tcp { s: Some(mut s), mut pending, .. } => {
                let start = Instant::now();
                while !flush(&mut s, &mut pending)? && start.elapsed() < TIMEOUT {}
                let _ = s.shutdown(Shutdown::Write);
            }
            Sink::Rudp { back: Some(mut b), .. } => {
                let _ = b.close(Duration::from_millis(200));
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every transport carries a stream end to end, reflects what it is
    /// asked to, and ends it.
    #[test]
    fn each_transport_streams_reflects_and_ends() {
        for t in [Transport::Udp, Transport::Tcp, Transport::Rudp] {
            let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
            let mut sink = Sink::bind(t, any, 32, "").unwrap();
            let mut src = Source::open(t, sink.local_addr().unwrap(), Some(any), 32, "").unwrap();
            if let Some(b) = src.back_addr() {
                sink.reflect_to(b).unwrap();
            }
            let (mut got, mut back) = (Vec::new(), 0usize);
            let deadline = Instant::now() + TIMEOUT;
            while !src.is_ready() || !sink.is_ready() {
                src.work(&mut |_| {}).unwrap();
                sink.prepare().unwrap();
                assert!(Instant::now() < deadline, "{t:?} never connected");
            }
            let mut sent = 0u8;
            while got.len() < 10 {
                if sent < 10 && src.offer(&[sent; 32]).unwrap() {
                    sent += 1;
                }
                src.work(&mut |m| back += usize::from(m[0] % 2 == 0)).unwrap();
                sink.poll(&mut |m| {
                    got.push(m[0]);
                    m[0] % 2 == 0
                })
                .unwrap();
                assert!(Instant::now() < deadline, "{t:?}: {got:?}");
            }
            assert_eq!(got, (0..10).collect::<Vec<u8>>(), "{t:?}");
            let fin = std::thread::spawn(move || {
                let mut n = 0;
                src.finish(&mut |_| n += 1).map(|()| n)
            });
            while !sink.is_ended() {
                sink.poll(&mut |_| false).unwrap();
                assert!(Instant::now() < deadline, "{t:?} never ended");
            }
            sink.finish().unwrap();
            back += fin.join().unwrap().unwrap();
            assert_eq!(back, 5, "{t:?}: reflections");
        }
    }
}
