//! A client's connection to its router: a pair of shared-memory logs, or a
//! TCP socket. Both carry the same client frames.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tickwire_shm::os::monotonic_ns;
use tickwire_shm::{handover, Claim, Context, Event, LogAppender, LogConfig, LogReader, OfferError, ReaderOptions};
use tickwire_transport::framing::FrameError;
use tickwire_transport::link::{Batching, LinkError, LinkStats, LinkWriter, StreamLink};
use tickwire_transport::tls::{ClientConfig, Wire};
use tickwire_wire::client::{
    ipc_login_message, ClientRepr, HEADER_LEN, IPC_IN_CHANNEL, IPC_LOGIN_SOCKET, IPC_LOGIN_TAKEN, IPC_OUT_CHANNEL,
};

/// Why a frame could not go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SendError {
    /// No room now; try again after polling.
    Full,
    /// The connection is gone (why).
    Broken(String),
    /// The router's end refused this client below the protocol (TLS: its
    /// certificate does not verify, or it does not speak TLS): connecting
    /// again would fail the same way.
    Refused(String),
}

pub(crate) struct IpcConn {
    pub(crate) id: u32,
    out: LogAppender,
    input: Option<LogReader>,
    /// The router's login socket, until the router has attached: a
    /// refusal comes on it.
    login: Option<UnixStream>,
    /// Polls so far: the log's heartbeat is kept every
    /// [`HEARTBEAT_EVERY`] polls, not on each (it reads the clock).
    polls: u32,
}

/// A shared-memory client keeps its log's heartbeat, and an idle one looks
/// for the end of the router's log, once in this many polls.
const HEARTBEAT_EVERY: u32 = 64;

impl IpcConn {
    /// The router closes its log to us when it ends the session (or stops):
    /// frames written after that would be read by nobody.
    #[inline]
    fn check_open(&self) -> Result<(), SendError> {
        match &self.input {
            Some(r) if r.is_closed() => Err(SendError::Broken("the router closed the session".into())),
            _ => Ok(()),
        }
    }
}

/// A TCP or TLS connection: the link the router's sessions use too,
/// shared with the [`flusher`](crate::flusher) (which writes what it held
/// past its batching window when the application does not).
pub(crate) struct TcpConn {
    wire: Arc<Wire>,
    link: Arc<Mutex<StreamLink>>,
}

impl TcpConn {
    #[inline]
    fn lock(&self) -> MutexGuard<'_, StreamLink> {
        self.link.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A client's HEARTBEAT frame.
pub(crate) fn heartbeat_frame() -> [u8; HEADER_LEN] {
    let mut f = [0u8; HEADER_LEN];
    let _ = ClientRepr::new(tickwire_wire::client::ClientKind::Heartbeat).emit(&mut f);
    f
}

/// Sends a heartbeat if the link has been quiet for its interval; with
/// `reading` (the application's poll, which reads), fails it if the router
/// has been silent for two.
pub(crate) fn keep_alive(l: &mut StreamLink, now_ns: u64, reading: bool) -> Result<(), SendError> {
    l.keep_alive(now_ns, &heartbeat_frame(), reading).map_err(link_error)
}

/// Commits the frame reserved last; arms the flusher if it stays held.
#[inline]
fn commit(l: &mut StreamLink) -> Result<(), SendError> {
    let (wire, _, w) = l.parts();
    w.commit(wire, monotonic_ns()).map_err(link_error)?;
    if w.held() > 0 {
        crate::flusher::arm();
    }
    Ok(())
}

// The shared-memory side stays inline: no pointer to chase on its hot path.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Conn {
    Ipc(IpcConn),
    Tcp(TcpConn),
}

/// A nonzero id unlikely to be in use: pid and time mixed.
fn fresh_id() -> u32 {
    let t = tickwire_shm::os::monotonic_ns();
    let mut x = u64::from(std::process::id()) << 32 ^ t;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x as u32).max(1)
}

impl Conn {
    /// Creates this client's log into the router in a sealed anonymous
    /// file and logs in on the router's Unix socket in `dir` with `hello`
    /// (its HELLO frame), the log's descriptor beside it: nothing of the
    /// session has a name in the router's directory, its password crosses
    /// the socket, never shared memory, and the router, whatever user it
    /// runs as, maps a file this client cannot shrink under it.
    pub(crate) fn open_ipc(ctx: &Context, dir: &Path, log_bytes: usize, hello: &[u8]) -> Result<Self, String> {
        let socket = dir.join(IPC_LOGIN_SOCKET);
        let named = |e: std::io::Error| format!("{}: {e}", socket.display());
        let mut login = UnixStream::connect(&socket).map_err(named)?;
        let id = fresh_id();
        let (out, file) =
            ctx.appender_sealed(IPC_IN_CHANNEL, id, &LogConfig::with_capacity(log_bytes)).map_err(|e| e.to_string())?;
        let message = ipc_login_message(id, hello);
        login.set_write_timeout(Some(Duration::from_secs(1))).map_err(named)?;
        // The descriptor rides with the first bytes; the rest follow.
        let sent = handover::send(&login, &message, Some(file.as_fd())).map_err(named)?;
        login.write_all(&message[sent..]).and_then(|()| login.set_nonblocking(true)).map_err(named)?;
        Ok(Conn::Ipc(IpcConn { id, out, input: None, login: Some(login), polls: 0 }))
    }

    /// Reads the router's answer to a shared-memory login: on a taken
    /// login, attaches to the log the router handed over beside it; on a
    /// refusal, or an answer this client cannot use, says why.
    pub(crate) fn refusal(&mut self, ctx: Option<&Context>) -> Option<String> {
        let Conn::Ipc(c) = self else { return None };
        let login = c.login.as_mut()?;
        let (mut buf, mut fds) = ([0u8; 1024], Vec::new());
        let got = handover::recv(&*login, &mut buf, &mut fds);
        if !matches!(&got, Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted) {
            c.login = None;
        }
        match got {
            // Taken: the router's log to us came with the answer.
            Ok(n) if n > 0 && buf[0] == IPC_LOGIN_TAKEN => {
                let (Some(ctx), Some(fd)) = (ctx, fds.pop()) else {
                    return Some("the router took the login but handed over no log".into());
                };
                let label = PathBuf::from(format!("memfd:{IPC_OUT_CHANNEL}-{} (from the router)", c.id));
                match ctx.reader_fd(&File::from(fd), &label, ReaderOptions::default()) {
                    Ok(r) => {
                        c.input = Some(r);
                        None
                    }
                    Err(e) => Some(format!("the router's log: {e}")),
                }
            }
            Ok(n) if n > 0 => Some(format!("the router refused the login: {}", String::from_utf8_lossy(&buf[..n]))),
            // Closed without an answer: the router stopped meanwhile.
            Ok(_) => Some("the router closed the login socket without an answer (it stopped?)".into()),
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => None,
            Err(e) => Some(format!("the router's login socket: {e}")),
        }
    }

    /// Connects to a router's TCP listener; with `tls` (its configuration
    /// and the name the router's certificate must hold), over TLS.
    pub(crate) fn open_tcp(
        addr: SocketAddr,
        tls: Option<(&Arc<ClientConfig>, &str)>,
        max_frame: usize,
        (wlimit, batching): (usize, Batching),
    ) -> Result<Self, String> {
        let stream =
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).map_err(|e| format!("tcp://{addr}: {e}"))?;
        stream
            .set_nodelay(true)
            .and_then(|()| stream.set_nonblocking(true))
            .map_err(|e| format!("tcp://{addr}: {e}"))?;
        let stream = match tls {
            Some((cfg, host)) => Wire::tls_client(stream, cfg, host).map_err(|e| format!("tls://{addr}: {e}"))?,
            None => Wire::plain(stream),
        };
        let wire = Arc::new(stream);
        // A DELIVER may exceed the publisher's frame by what the router
        // adds (a queue member's subscription, a request's inbox).
        let read_limit = max_frame + tickwire_wire::client::DELIVER_SLACK;
        let link = Arc::new(Mutex::new(StreamLink::new(Arc::clone(&wire), (HEADER_LEN, read_limit), wlimit, batching)));
        // Its heartbeats, and what batching leaves held.
        crate::flusher::register(Arc::downgrade(&link));
        Ok(Conn::Tcp(TcpConn { wire, link }))
    }

    /// Whether frames can flow both ways (shared memory: the router has
    /// taken the login and handed over its log to us, and reads ours).
    pub(crate) fn is_ready(&mut self) -> bool {
        match self {
            Conn::Tcp(_) => true,
            Conn::Ipc(c) => {
                c.out.do_work();
                c.input.is_some() && c.out.is_connected()
            }
        }
    }

    /// Sends one frame.
    pub(crate) fn send(&mut self, repr: &ClientRepr<'_>) -> Result<(), SendError> {
        match self {
            Conn::Ipc(c) => {
                c.check_open()?;
                let len = repr.buffer_len();
                if len <= c.out.max_payload() {
                    let mut claim = c.out.try_claim(len).map_err(offer_error)?;
                    let _ = repr.emit(claim.buffer());
                    claim.commit();
                    Ok(())
                } else {
                    let mut buf = vec![0u8; len];
                    let _ = repr.emit(&mut buf);
                    c.out.offer(&buf).map(|_| ()).map_err(offer_error)
                }
            }
            Conn::Tcp(t) => {
                let mut l = t.lock();
                let (wire, _, w) = l.parts();
                let at = w.reserve(wire, repr.buffer_len()).map_err(link_error)?;
                let _ = repr.emit(w.buffer_mut(at));
                commit(&mut l)
            }
        }
    }

    /// Reserves a frame of `len` bytes after `header` for writing in place.
    pub(crate) fn claim(&mut self, header: &ClientRepr<'_>, len: usize) -> Result<ClaimInner<'_>, SendError> {
        let head = HEADER_LEN + header.topic.len();
        match self {
            Conn::Ipc(c) => {
                c.check_open()?;
                let mut claim = c.out.try_claim(head + len).map_err(offer_error)?;
                let _ = header.emit_header(claim.buffer());
                Ok(ClaimInner::Ipc(claim, head))
            }
            Conn::Tcp(t) => {
                let mut l = t.lock();
                let (wire, _, w) = l.parts();
                let at = w.reserve(wire, head + len).map_err(link_error)?;
                let _ = header.emit_header(w.buffer_mut(at));
                Ok(ClaimInner::Tcp(l, at))
            }
        }
    }

    /// Reads up to `limit` frames from the router into `on_frame`.
    pub(crate) fn poll(&mut self, mut on_frame: impl FnMut(&[u8]), limit: usize) -> Result<usize, SendError> {
        match self {
            Conn::Ipc(c) => {
                c.polls = c.polls.wrapping_add(1);
                if c.polls % HEARTBEAT_EVERY == 0 {
                    c.out.do_work();
                }
                let Some(input) = &mut c.input else { return Ok(0) };
                let mut gone = None;
                let n = input
                    .poll(
                        |ev| match ev {
                            Event::Message(m) => on_frame(m.payload),
                            Event::PublisherGone { reason, .. } => gone = Some(format!("router gone: {reason}")),
                            Event::Lost { from, to, .. } => {
                                gone = Some(format!("router log lost bytes [{from}, {to})"))
                            }
                            _ => {}
                        },
                        limit,
                    )
                    .map_err(|e| SendError::Broken(format!("router log: {e}")))?;
                if let Some(g) = gone {
                    return Err(SendError::Broken(g));
                }
                // The end-of-stream word shares a cache line with the tail
                // the router writes on every delivery: looking at it on
                // every idle poll would pull that line across on each one.
                if n == 0 && c.polls % HEARTBEAT_EVERY == 0 && input.is_end_of_stream() {
                    return Err(SendError::Broken("the router closed the session".into()));
                }
                Ok(n)
            }
            Conn::Tcp(t) => {
                let mut l = t.lock();
                let (wire, reader, writer) = l.parts();
                writer.flush_due(wire, monotonic_ns()).map_err(link_error)?;
                if limit == 0 {
                    return Ok(0);
                }
                let r = reader.read(
                    wire,
                    |f| {
                        on_frame(f);
                        true
                    },
                    limit,
                );
                match r {
                    Ok(n) => Ok(n),
                    Err(FrameError::Closed(why)) => Err(SendError::Broken(why)),
                    Err(FrameError::Refused(why)) => Err(SendError::Refused(why)),
                    Err(e) => Err(SendError::Broken(format!("router sent {e}"))),
                }
            }
        }
    }

    /// Whether frames may already wait in the client, read from the socket
    /// (or the TLS layer) but not handed over: the socket's readiness will
    /// not say so.
    pub(crate) fn has_buffered(&self) -> bool {
        matches!(self, Conn::Tcp(t) if t.lock().reader.has_buffered())
    }

    /// Runs `f` on a TCP link's writer (shared memory holds nothing back).
    fn with_writer<T>(
        &mut self,
        f: impl FnOnce(&Wire, &mut LinkWriter) -> Result<T, LinkError>,
    ) -> Result<(), SendError> {
        match self {
            Conn::Ipc(_) => Ok(()),
            Conn::Tcp(t) => {
                let mut l = t.lock();
                let (wire, _, w) = l.parts();
                f(wire, w).map(|_| ()).map_err(link_error)
            }
        }
    }

    /// Writes every frame held for batching now.
    pub(crate) fn flush(&mut self) -> Result<(), SendError> {
        self.with_writer(|wire, w| w.flush(wire, &mut []))
    }

    /// Keeps a TCP link alive (heartbeats, a silent router detected);
    /// `interval`: the router's heartbeat interval, if it just said it.
    pub(crate) fn keep_alive(&mut self, interval: Option<Duration>) -> Result<(), SendError> {
        match self {
            Conn::Ipc(_) => Ok(()),
            Conn::Tcp(t) => {
                let now = monotonic_ns();
                let mut l = t.lock();
                if let Some(i) = interval.filter(|i| *i != l.liveness.interval()) {
                    l.liveness.set_interval(i, now);
                }
                keep_alive(&mut l, now, true)
            }
        }
    }

    /// Writes what batching holds if its window has passed.
    pub(crate) fn flush_due(&mut self) -> Result<(), SendError> {
        // Nothing held (the common case in a duty cycle): no clock read.
        self.with_writer(|wire, w| match w.is_flushed(wire) && w.failure().is_none() {
            true => Ok(true),
            false => w.flush_due(wire, monotonic_ns()),
        })
    }

    /// What a TCP link's halves did (system calls, frames, bytes).
    pub(crate) fn link_stats(&self) -> Option<LinkStats> {
        match self {
            Conn::Tcp(t) => Some(t.lock().stats()),
            Conn::Ipc(_) => None,
        }
    }

    /// Whether no written byte waits for the socket.
    pub(crate) fn is_flushed(&self) -> bool {
        match self {
            Conn::Ipc(_) => true,
            Conn::Tcp(t) => t.lock().writer.is_flushed(&t.wire),
        }
    }

    /// A TCP connection's socket.
    pub(crate) fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        match self {
            Conn::Tcp(t) => Some(t.wire.stream().as_fd()),
            Conn::Ipc(_) => None,
        }
    }

    /// Parks until the router may have written (shared memory), or sleeps a
    /// little (TCP), for at most `max`.
    pub(crate) fn park(&mut self, max: Duration) {
        match self {
            Conn::Ipc(IpcConn { input: Some(r), out, .. }) => {
                // Idle: a good moment for the heartbeat.
                out.do_work();
                r.park(max);
            }
            _ => std::thread::sleep(max.min(Duration::from_micros(200))),
        }
    }
}

fn offer_error(e: OfferError) -> SendError {
    match e {
        OfferError::BackPressured => SendError::Full,
        // Frames go only after the router attached: if it no longer reads
        // the log, it is gone.
        OfferError::NotConnected => SendError::Broken("the router stopped reading this client's log".into()),
        other => SendError::Broken(other.to_string()),
    }
}

fn link_error(e: LinkError) -> SendError {
    match e {
        LinkError::Full => SendError::Full,
        LinkError::Broken(why) => SendError::Broken(why),
    }
}

/// A frame being written in place: a log claim (dropped: aborted, it
/// becomes padding), or room held in the TCP link's write buffer (the
/// frame's body starts at the index).
pub(crate) enum ClaimInner<'a> {
    Ipc(Claim<'a>, usize),
    Tcp(MutexGuard<'a, StreamLink>, usize),
}

impl ClaimInner<'_> {
    pub(crate) fn buffer(&mut self) -> &mut [u8] {
        match self {
            ClaimInner::Ipc(c, at) => &mut c.buffer()[*at..],
            ClaimInner::Tcp(t, at) => t.writer.buffer_mut(*at),
        }
    }
    pub(crate) fn commit(self) {
        match self {
            ClaimInner::Ipc(c, _) => {
                c.commit();
            }
            ClaimInner::Tcp(mut l, _) => {
                // A failure shows at the next poll.
                let _ = commit(&mut l);
            }
        }
    }
    /// Takes the reserved frame back out (TCP; a log claim aborts itself).
    pub(crate) fn abort(self) {
        if let ClaimInner::Tcp(mut t, at) = self {
            t.writer.abort(at);
        }
    }
}
