//! A client's connection to its router: a pair of shared-memory logs, or a
//! TCP socket. Both carry the same client frames.

use std::io::{ErrorKind, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;
use tickwire_shm::{Claim, Context, Event, LogAppender, LogConfig, LogReader, OfferError, ReaderOptions};
use tickwire_transport::framing::{FrameError, FrameReader};
use tickwire_transport::tls::{ClientConfig, Wire};
use tickwire_wire::client::{ClientRepr, HEADER_LEN, IPC_IN_CHANNEL, IPC_OUT_CHANNEL};

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

pub(crate) struct TcpConn {
    stream: Wire,
    reader: FrameReader,
    wbuf: Vec<u8>,
    wlimit: usize,
    /// The last poll stopped at its limit: frames may wait in `reader` or
    /// in the TLS layer, where the socket's readiness does not show them.
    more: bool,
}

// The shared-memory side stays inline: no pointer to chase on its hot path.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Conn {
    Ipc(IpcConn),
    Tcp(TcpConn),
}

/// A nonzero id unlikely to be in use: pid, time and a counter mixed.
fn fresh_id(attempt: u32) -> u32 {
    let t = tickwire_shm::os::monotonic_ns();
    let mut x = u64::from(std::process::id()) << 32 ^ t ^ u64::from(attempt).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x as u32).max(1)
}

impl Conn {
    /// Creates this client's log into the router.
    pub(crate) fn open_ipc(ctx: &Context, log_bytes: usize) -> Result<Self, String> {
        let cfg = LogConfig::with_capacity(log_bytes);
        let mut last = String::new();
        for attempt in 0..8 {
            let id = fresh_id(attempt);
            match ctx.appender(IPC_IN_CHANNEL, id, &cfg) {
                Ok(out) => return Ok(Conn::Ipc(IpcConn { id, out, input: None, polls: 0 })),
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    /// Connects to a router's TCP listener; with `tls` (its configuration
    /// and the name the router's certificate must hold), over TLS.
    pub(crate) fn open_tcp(
        addr: SocketAddr,
        tls: Option<(&Arc<ClientConfig>, &str)>,
        max_frame: usize,
        wlimit: usize,
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
        Ok(Conn::Tcp(TcpConn {
            stream,
            reader: FrameReader::new(HEADER_LEN, max_frame),
            wbuf: Vec::new(),
            wlimit,
            more: false,
        }))
    }

    /// Whether frames can flow both ways (shared memory: the router has
    /// attached to our log and made its log for us).
    pub(crate) fn is_ready(&mut self, ctx: Option<&Context>) -> bool {
        match self {
            Conn::Tcp(_) => true,
            Conn::Ipc(c) => {
                c.out.do_work();
                if c.input.is_none() {
                    if let Some(ctx) = ctx {
                        c.input = ctx.reader(IPC_OUT_CHANNEL, c.id, ReaderOptions::default()).ok();
                    }
                }
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
                let at = t.reserve(repr.buffer_len())?;
                let _ = repr.emit(&mut t.wbuf[at..]);
                t.flush()
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
                let at = t.reserve(head + len)?;
                let _ = header.emit_header(&mut t.wbuf[at..]);
                Ok(ClaimInner::Tcp(t, at + head, at - 4))
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
                t.flush()?;
                let mut n = 0;
                let r = t.reader.read_from(&t.stream, |f| {
                    on_frame(f);
                    n += 1;
                    n < limit
                });
                // Stopped by the limit rather than an empty socket.
                t.more = n >= limit;
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
        matches!(self, Conn::Tcp(t) if t.more)
    }

    /// Whether no written byte waits for the socket.
    pub(crate) fn is_flushed(&self) -> bool {
        match self {
            Conn::Ipc(_) => true,
            Conn::Tcp(t) => t.wbuf.is_empty() && !t.stream.wants_write(),
        }
    }

    /// A TCP connection's socket.
    pub(crate) fn as_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        match self {
            Conn::Tcp(t) => Some(t.stream.stream().as_fd()),
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

impl TcpConn {
    /// Appends room for one frame behind its length; returns where the
    /// frame starts.
    fn reserve(&mut self, len: usize) -> Result<usize, SendError> {
        if self.wbuf.len() > self.wlimit {
            self.flush()?;
            if self.wbuf.len() > self.wlimit {
                return Err(SendError::Full);
            }
        }
        self.wbuf.extend_from_slice(&(len as u32).to_le_bytes());
        let at = self.wbuf.len();
        self.wbuf.resize(at + len, 0);
        Ok(at)
    }

    fn flush(&mut self) -> Result<(), SendError> {
        self.stream.flush_tls().map_err(|e| SendError::Broken(format!("write: {e}")))?;
        while !self.wbuf.is_empty() {
            match (&self.stream).write(&self.wbuf) {
                Ok(0) => return Err(SendError::Broken("the router closed the connection".into())),
                Ok(n) => {
                    self.wbuf.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(SendError::Broken(format!("write: {e}"))),
            }
        }
        Ok(())
    }
}

/// A frame being written in place: a log claim (dropped: aborted, it
/// becomes padding), or room at the end of the TCP write buffer (the body
/// starts at the first index; the frame's prefix at the second).
pub(crate) enum ClaimInner<'a> {
    Ipc(Claim<'a>, usize),
    Tcp(&'a mut TcpConn, usize, usize),
}

impl ClaimInner<'_> {
    pub(crate) fn buffer(&mut self) -> &mut [u8] {
        match self {
            ClaimInner::Ipc(c, at) => &mut c.buffer()[*at..],
            ClaimInner::Tcp(t, at, _) => &mut t.wbuf[*at..],
        }
    }
    pub(crate) fn commit(self) {
        match self {
            ClaimInner::Ipc(c, _) => {
                c.commit();
            }
            ClaimInner::Tcp(t, _, _) => {
                // A failure shows at the next poll.
                let _ = t.flush();
            }
        }
    }
    /// Takes the reserved frame back out (TCP; a log claim aborts itself).
    pub(crate) fn abort(self) {
        if let ClaimInner::Tcp(t, _, start) = self {
            t.wbuf.truncate(start);
        }
    }
}
