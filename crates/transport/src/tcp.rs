//! TCP behind the datagram [`Transport`] trait: each datagram travels as one
//! length-prefixed frame ([`framing`](crate::framing)) on a connection with
//! `TCP_NODELAY`, so the reliable protocol above runs unchanged over it
//! (`tcp://` channels) and keeps its guarantees across reconnections.
//!
//! Two ends:
//! * [`TcpTransport::listen`] (a subscription's end): accepts any number
//!   of connections; a datagram received comes from its connection's
//!   *identity*, and one sent to an identity goes down that connection.
//! * [`TcpTransport::connect`] (a publication's end): one connection to the
//!   listener, made without blocking and made again (every
//!   [`RECONNECT_INTERVAL`]) whenever it breaks. Its first frame is a
//!   hello carrying its identity: the local address of its first
//!   connection, the same on every reconnection, so the far end's
//!   protocol sees one peer and not a new one per connection.
//!
//! A listener holds at most [`MAX_CONNECTIONS`]; one that has not said
//! hello within [`HELLO_TIMEOUT`] is closed, and a reconnection replaces
//! the older connection of the same identity.
//!
//! Datagrams are what the protocol above expects: sending never blocks,
//! and one with no connection to go down (not connected yet, broken, an
//! identity nobody holds) is dropped and counted ([`TcpTransport::dropped`]),
//! as a network would lose it; the protocol repairs it or reports it lost.
//! Bytes a connection cannot take yet wait in its buffer, up to
//! [`MAX_PENDING`]; past that, sending reports back-pressure (fewer
//! datagrams sent) as a full socket buffer does.

use crate::framing::{self, FrameReader};
use crate::{RecvBatch, Transport, TransportError};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// How often a broken connection is tried again.
pub const RECONNECT_INTERVAL: Duration = Duration::from_millis(100);
/// Bytes a connection may have waiting to be written.
pub const MAX_PENDING: usize = 4 << 20;
/// The largest datagram a frame may carry.
pub const MAX_FRAME: usize = 64 << 10;
/// The hello's length: an IPv4 address and a port.
const HELLO_LEN: usize = 6;
/// A connection that has not said hello by then is closed: silent
/// connections cannot hold a listener's places.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(1);

fn io(op: &'static str) -> impl Fn(std::io::Error) -> TransportError {
    move |e| TransportError::io(op, e)
}

fn v4(a: SocketAddr) -> Result<SocketAddrV4, TransportError> {
    match a {
        SocketAddr::V4(v) => Ok(v),
        SocketAddr::V6(_) => Err(TransportError::io("address", std::io::Error::other("not IPv4"))),
    }
}

/// Resolves `HOST:PORT` (a name or an address), an IPv4 address first
/// (listeners here bind IPv4, and `localhost` may resolve to `::1` first);
/// `None` if it does not resolve. The one place every `tcp://`, `tls://`
/// and router URI turns its host into an address.
pub fn resolve(host_port: &str) -> Option<SocketAddr> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<SocketAddr> = host_port.to_socket_addrs().ok()?.collect();
    addrs.iter().find(|a| a.is_ipv4()).or(addrs.first()).copied()
}

/// One connection.
#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    /// Who is at the other end: the connector's identity (from its hello;
    /// `None` until it came), or the listener's address.
    peer: Option<SocketAddrV4>,
    reader: FrameReader,
    pending: Vec<u8>,
    /// A non-blocking connect still in progress.
    connecting: bool,
    /// Its order among this end's connections (the newest of one identity wins).
    serial: u64,
    /// When it was made (a listener's connection must say hello within
    /// [`HELLO_TIMEOUT`]).
    opened: Instant,
}

impl Conn {
    fn new(stream: TcpStream, peer: Option<SocketAddrV4>, connecting: bool, serial: u64) -> Self {
        let reader = FrameReader::new(0, MAX_FRAME);
        Self { stream, peer, reader, pending: Vec::new(), connecting, serial, opened: Instant::now() }
    }

    /// Writes what is pending; false if the connection broke.
    fn flush(&mut self) -> bool {
        while !self.pending.is_empty() {
            match self.stream.write(&self.pending) {
                Ok(0) => return false,
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        true
    }

    fn queue(&mut self, datagram: &[u8]) {
        framing::push_frame(&mut self.pending, &[datagram]);
    }
}

#[derive(Debug)]
enum End {
    Listen(TcpListener),
    Connect { to: SocketAddrV4, identity: Option<SocketAddrV4>, next_attempt: Instant },
}

/// TCP behind the [`Transport`] trait (see the module documentation).
#[derive(Debug)]
pub struct TcpTransport {
    end: End,
    local: SocketAddrV4,
    conns: Vec<Conn>,
    dropped: u64,
    connections: u64,
    refused: u64,
    /// Receives so far: a listener looks for new connections once in
    /// [`ACCEPT_EVERY`] (each look is a system call).
    receives: u32,
}

/// A listener with connections accepts new ones once in this many receives.
const ACCEPT_EVERY: u32 = 256;
/// Connections a listener holds at once; one more is closed at accept
/// (a subscription has one publication; reconnections replace their old
/// connection once they say who they are).
pub const MAX_CONNECTIONS: usize = 64;

impl TcpTransport {
    /// Listens on `bind` (port 0: any free port).
    ///
    /// # Errors
    /// [`TransportError::Io`] if the address cannot be bound.
    pub fn listen(bind: SocketAddrV4) -> Result<Self, TransportError> {
        let l = TcpListener::bind(bind).map_err(io("tcp listen"))?;
        l.set_nonblocking(true).map_err(io("set non-blocking"))?;
        let local = v4(l.local_addr().map_err(io("local address"))?)?;
        Ok(Self { end: End::Listen(l), local, conns: Vec::new(), dropped: 0, connections: 0, refused: 0, receives: 0 })
    }

    /// Connects to `to`, now and whenever the connection breaks, without
    /// blocking.
    pub fn connect(to: SocketAddrV4) -> Self {
        let mut t = Self {
            end: End::Connect { to, identity: None, next_attempt: Instant::now() },
            local: SocketAddrV4::new(0.into(), 0),
            conns: Vec::new(),
            dropped: 0,
            connections: 0,
            refused: 0,
            receives: 0,
        };
        t.reconnect();
        t
    }

    /// Datagrams dropped because no connection could take them.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Connections made (connector) or accepted (listener).
    pub fn connections(&self) -> u64 {
        self.connections
    }

    /// Connections a listener closed at once, holding [`MAX_CONNECTIONS`].
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Whether a connection is up (connector: connected and greeted).
    pub fn is_connected(&self) -> bool {
        self.conns.iter().any(|c| !c.connecting)
    }

    /// The connector's side: starts a connection if none is up and one is due.
    fn reconnect(&mut self) {
        let End::Connect { to, identity, next_attempt } = &mut self.end else { return };
        if !self.conns.is_empty() || Instant::now() < *next_attempt {
            return;
        }
        *next_attempt = Instant::now() + RECONNECT_INTERVAL;
        let Ok(s) = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)) else { return };
        if s.set_nonblocking(true).is_err() || s.set_nodelay(true).is_err() {
            return;
        }
        let Ok(connecting) = start_connect(&s, (*to).into()) else { return };
        let stream: TcpStream = s.into();
        let Some(local) = stream.local_addr().ok().and_then(|a| v4(a).ok()) else { return };
        let me = *identity.get_or_insert(local);
        self.local = me;
        let mut c = Conn::new(stream, Some(*to), connecting, self.connections);
        let mut hello = [0u8; HELLO_LEN];
        hello[..4].copy_from_slice(&me.ip().octets());
        hello[4..].copy_from_slice(&me.port().to_le_bytes());
        c.queue(&hello);
        self.connections += 1;
        self.conns.push(c);
    }

    /// Accepts what is waiting (listener) or moves the connection along
    /// (connector); drops broken connections.
    fn service(&mut self) {
        match &self.end {
            End::Listen(_) if !self.conns.is_empty() && self.receives % ACCEPT_EVERY != 0 => {}
            End::Listen(l) => loop {
                match l.accept() {
                    Ok((s, _)) => {
                        if self.conns.len() >= MAX_CONNECTIONS {
                            self.refused += 1;
                            continue; // dropped: closed
                        }
                        if s.set_nonblocking(true).is_ok() && s.set_nodelay(true).is_ok() {
                            self.connections += 1;
                            self.conns.push(Conn::new(s, None, false, self.connections));
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            },
            End::Connect { .. } => {
                if let Some(c) = self.conns.first_mut().filter(|c| c.connecting) {
                    // Connected once the peer is known; refused or
                    // unreachable once the socket holds an error.
                    match (c.stream.peer_addr(), c.stream.take_error()) {
                        (Ok(_), Ok(None)) => c.connecting = false,
                        (_, Ok(Some(_)) | Err(_)) => self.conns.clear(),
                        _ => {}
                    }
                }
                self.reconnect();
            }
        }
    }
}

impl Transport for TcpTransport {
    fn send_batch(&mut self, to: SocketAddrV4, datagrams: &[&[u8]]) -> Result<usize, TransportError> {
        if matches!(self.end, End::Connect { .. }) {
            self.service();
        }
        let Some(i) = self.conns.iter().position(|c| c.peer == Some(to) && !c.connecting) else {
            self.dropped += datagrams.len() as u64;
            return Ok(datagrams.len());
        };
        let c = &mut self.conns[i];
        let mut sent = 0;
        for d in datagrams {
            if c.pending.len() + d.len() + 4 > MAX_PENDING && !c.pending.is_empty() {
                break;
            }
            c.queue(d);
            sent += 1;
        }
        if !c.flush() {
            // Broken: what it held is lost (the protocol repairs it).
            self.conns.swap_remove(i);
        }
        Ok(sent)
    }

    fn recv_batch(&mut self, batch: &mut RecvBatch) -> Result<usize, TransportError> {
        batch.clear();
        self.receives = self.receives.wrapping_add(1);
        self.service();
        let mut i = 0;
        let mut greeted: Vec<(SocketAddrV4, u64)> = Vec::new();
        while i < self.conns.len() {
            let c = &mut self.conns[i];
            let mut ok = c.connecting || c.flush();
            // A frame is cut out of the stream only when the batch can take
            // it: one read from a full batch would be a frame lost on a
            // lossless transport (repaired later by NAK, but lost here).
            if ok && !c.connecting && !batch.is_full() {
                let was = c.peer;
                let peer = &mut c.peer;
                let mut bad_hello = false;
                let r = c.reader.read_from(&c.stream, |f| match *peer {
                    // Taken, and reading stops once the batch is full.
                    Some(from) => batch.push(f, from) && !batch.is_full(),
                    // The connector's hello: its identity.
                    None if f.len() == HELLO_LEN => {
                        let ip = std::net::Ipv4Addr::new(f[0], f[1], f[2], f[3]);
                        *peer = Some(SocketAddrV4::new(ip, u16::from_le_bytes([f[4], f[5]])));
                        true
                    }
                    None => {
                        bad_hello = true;
                        false
                    }
                });
                // Any framing error ends the connection (the protocol above
                // repairs what it held).
                ok = !bad_hello && r.is_ok();
                match (was, c.peer) {
                    (None, Some(id)) => greeted.push((id, c.serial)),
                    (None, None) if c.opened.elapsed() > HELLO_TIMEOUT => ok = false,
                    _ => {}
                }
            }
            if ok {
                i += 1;
            } else {
                self.conns.swap_remove(i);
            }
        }
        // A reconnection replaces the connection its peer had before (half
        // dead, or gone without a word): the newest one of an identity wins.
        for (id, serial) in greeted {
            self.conns.retain(|c| c.peer != Some(id) || c.serial >= serial);
        }
        Ok(batch.len())
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), TransportError> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let mut fds: Vec<PollFd<'_>> =
            self.conns.iter().map(|c| PollFd::new(c.stream.as_fd(), PollFlags::POLLIN)).collect();
        if let End::Listen(l) = &self.end {
            fds.push(PollFd::new(l.as_fd(), PollFlags::POLLIN));
        }
        if fds.is_empty() {
            // Nothing to wait on: the connector tries again when due.
            std::thread::sleep(timeout.min(RECONNECT_INTERVAL));
            return Ok(());
        }
        let ms = PollTimeout::from(timeout.as_millis().min(u128::from(u16::MAX)) as u16);
        match poll(&mut fds, ms) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
            Err(e) => Err(TransportError::io("poll", e.into())),
        }
    }

    fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }
}

/// Starts connecting a non-blocking socket to `to`: `true` while the
/// connection is in progress (writable once made), `false` if it was made
/// at once.
///
/// # Errors
/// The refusal, if the kernel refused at once.
pub fn start_connect(s: &Socket, to: std::net::SocketAddr) -> std::io::Result<bool> {
    match s.connect(&SockAddr::from(to)) {
        Ok(()) => Ok(false),
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => Ok(true),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::Ipv4Addr;

    const SECS: Duration = Duration::from_secs(5);

    fn pump(
        a: &mut TcpTransport,
        b: &mut TcpTransport,
        batch: &mut RecvBatch,
        want: usize,
        patience: Duration,
    ) -> Vec<(Vec<u8>, SocketAddrV4)> {
        let start = Instant::now();
        let mut got = Vec::new();
        while got.len() < want && start.elapsed() < patience {
            let _ = a.recv_batch(&mut RecvBatch::new(4, 64));
            for i in 0..b.recv_batch(batch).unwrap() {
                let (d, from) = batch.get(i);
                got.push((d.to_vec(), from));
            }
        }
        got
    }

    /// Issue 43, bug 6: a `recv_batch` whose batch fills mid-stream used
    /// to cut the next frame out of the stream and drop it (a gap, a NAK
    /// and a retransmit on a lossless transport, every time).
    #[test]
    fn a_full_receive_batch_loses_no_frame_of_a_burst() {
        let mut l = TcpTransport::listen(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
        let mut c = TcpTransport::connect(l.local_addr());
        let start = Instant::now();
        while !c.is_connected() {
            c.service();
            assert!(start.elapsed() < SECS, "never connected");
        }
        let sent: Vec<Vec<u8>> = (0..1000u32).map(|i| i.to_le_bytes().to_vec()).collect();
        let refs: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
        let mut n = 0;
        while n < refs.len() {
            n += c.send_batch(l.local_addr(), &refs[n..]).unwrap();
            let _ = c.recv_batch(&mut RecvBatch::new(4, 64));
            assert!(start.elapsed() < SECS, "sent only {n}");
        }
        // Batches of 3: the burst is many times the batch.
        let got = pump(&mut c, &mut l, &mut RecvBatch::new(3, 64), sent.len(), SECS);
        let got: Vec<Vec<u8>> = got.into_iter().map(|(d, _)| d).collect();
        assert_eq!(got.len(), sent.len(), "frames lost");
        assert_eq!(got, sent);
    }

    #[test]
    fn datagrams_cross_both_ways_and_survive_a_new_connection_under_one_identity() {
        let mut l = TcpTransport::listen(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
        let mut c = TcpTransport::connect(l.local_addr());
        let mut batch = RecvBatch::new(16, 2048);
        let start = Instant::now();
        while !c.is_connected() {
            c.service();
            assert!(start.elapsed() < Duration::from_secs(5), "never connected");
        }
        assert_eq!(c.send_batch(l.local_addr(), &[b"one", b"two"]).unwrap(), 2);
        let got = pump(&mut c, &mut l, &mut batch, 2, SECS);
        assert_eq!(got.iter().map(|g| g.0.as_slice()).collect::<Vec<_>>(), [b"one", b"two"]);
        let me = got[0].1;
        assert_eq!(me, c.local_addr(), "the listener sees the connector's identity");
        // And back, to that identity.
        assert_eq!(l.send_batch(me, &[b"back"]).unwrap(), 1);
        let back = pump(&mut l, &mut c, &mut batch, 1, SECS);
        assert_eq!(back, [(b"back".to_vec(), l.local_addr())]);
        // The listener drops the connection: the connector makes a new one
        // and the listener still sees the same identity.
        l.conns.clear();
        let start = Instant::now();
        let mut again = Vec::new();
        while again.is_empty() && start.elapsed() < Duration::from_secs(5) {
            let _ = c.send_batch(l.local_addr(), &[b"again"]);
            again = pump(&mut c, &mut l, &mut batch, 1, Duration::from_millis(20));
        }
        assert_eq!(again[0].1, me);
        assert!(c.connections() >= 2 && c.dropped() >= 1, "{} connections, {} dropped", c.connections(), c.dropped());
    }

    fn hello(s: &mut TcpStream, id: SocketAddrV4) {
        let mut f = vec![HELLO_LEN as u8, 0, 0, 0];
        f.extend_from_slice(&id.ip().octets());
        f.extend_from_slice(&id.port().to_le_bytes());
        s.write_all(&f).unwrap();
    }

    #[test]
    fn a_listener_holds_at_most_its_limit_and_the_newest_connection_of_a_peer() {
        let mut l = TcpTransport::listen(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
        let mut batch = RecvBatch::new(4, 64);
        let id = SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 4000);
        let mut old = TcpStream::connect(l.local_addr()).unwrap();
        hello(&mut old, id);
        let start = Instant::now();
        while l.conns.iter().all(|c| c.peer.is_none()) && start.elapsed() < SECS {
            l.recv_batch(&mut batch).unwrap();
        }
        let mut new = TcpStream::connect(l.local_addr()).unwrap();
        hello(&mut new, id);
        let start = Instant::now();
        while l.connections() < 2 || l.conns.iter().any(|c| c.peer.is_none()) {
            l.receives = ACCEPT_EVERY - 1; // accept on the next receive
            l.recv_batch(&mut batch).unwrap();
            assert!(start.elapsed() < SECS, "the second connection never said hello");
        }
        assert_eq!(l.conns.len(), 1, "two connections of one identity");
        assert_eq!(l.conns[0].serial, 2, "the newest one stays");
        // Past the limit, connections are closed at accept.
        let extra: Vec<TcpStream> =
            (0..MAX_CONNECTIONS + 3).map(|_| TcpStream::connect(l.local_addr()).unwrap()).collect();
        let start = Instant::now();
        while l.refused() < 3 && start.elapsed() < SECS {
            l.receives = ACCEPT_EVERY - 1;
            l.recv_batch(&mut batch).unwrap();
        }
        assert_eq!(l.conns.len(), MAX_CONNECTIONS);
        assert!(l.refused() >= 3);
        // The silent ones are let go after the hello timeout; the greeted one stays.
        std::thread::sleep(HELLO_TIMEOUT + Duration::from_millis(50));
        l.recv_batch(&mut batch).unwrap();
        assert_eq!(l.conns.len(), 1);
        assert_eq!(l.conns[0].peer, Some(id));
        drop((old, new, extra));
    }

    #[test]
    fn names_resolve_to_ipv4_first() {
        assert_eq!(resolve("localhost:7600"), Some("127.0.0.1:7600".parse().unwrap()));
        assert_eq!(resolve("[::1]:7600"), Some("[::1]:7600".parse().unwrap()));
        assert_eq!(resolve("no-port"), None);
    }

    #[test]
    fn with_nobody_listening_datagrams_are_dropped_and_counted_never_blocking() {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let to = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
        let mut c = TcpTransport::connect(to);
        let start = Instant::now();
        for _ in 0..100 {
            assert_eq!(c.send_batch(to, &[b"x"]).unwrap(), 1);
        }
        assert!(start.elapsed() < Duration::from_secs(1));
        assert_eq!(c.dropped(), 100);
        assert!(!c.is_connected());
    }

    #[test]
    fn an_oversized_frame_ends_that_connection_only() {
        let mut l = TcpTransport::listen(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)).unwrap();
        let mut bad = TcpStream::connect(l.local_addr()).unwrap();
        bad.write_all(&(u32::MAX).to_le_bytes()).unwrap();
        let mut good = TcpTransport::connect(l.local_addr());
        let mut batch = RecvBatch::new(16, 2048);
        let start = Instant::now();
        let mut got = Vec::new();
        while got.is_empty() && start.elapsed() < Duration::from_secs(5) {
            let _ = good.send_batch(l.local_addr(), &[b"fine"]);
            got = pump(&mut good, &mut l, &mut batch, 1, Duration::from_millis(20));
        }
        assert_eq!(got[0].0, b"fine");
        assert_eq!(l.conns.len(), 1, "the bad connection was dropped");
    }
}
