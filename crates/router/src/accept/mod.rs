//! Taking TCP (and TLS) connections, and refusing them clearly at a
//! limit: the [`Server`](crate::Server) calls [`Acceptor::accept`] once a
//! millisecond, and it hands each connection it admits to a routing agent
//! with its [`Slot`].
//!
//! A connection is refused, at once and never left to hang:
//! * past `limits.max_connections` open connections, router-wide (by
//!   default the descriptor limit's share: the soft `RLIMIT_NOFILE` less
//!   [`RESERVED_DESCRIPTORS`](crate::config::RESERVED_DESCRIPTORS), never
//!   more);
//! * past `limits.max_connections_per_address` from its IP address;
//! * when `accept` fails for lack of descriptors (EMFILE, ENFILE): the
//!   acceptor keeps a spare descriptor (`/dev/null`), closes it, accepts
//!   the connection, refuses it and opens the spare again (libev's and
//!   nginx's way), so the backlog drains instead of waiting for a
//!   descriptor that may never come, and the accept loop does not spin on
//!   the error.
//!
//! Over plain TCP the client gets CLOSE (`Limit`) saying which limit,
//! then the end of the stream; over TLS there is no handshake yet to say
//! it in, so the connection is reset (`SO_LINGER` 0: an RST). Each refusal
//! is counted by reason ([`Refusal`], the `Kind::RouterAccept` counter
//! set: `tickwire stat`, `tickwire_router_accept_*`) and logged at most
//! once a second with the count since the last line ([`RefusalLog`]).

pub mod refusals;
pub mod slots;

pub use refusals::RefusalLog;
pub use slots::{Connections, Refusal, Slot};

use crate::config::LimitsConfig;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use tickwire_shm::counters::Kind;
use tickwire_shm::{CounterSet, CountersFile};
use tickwire_transport::framing;
use tickwire_transport::tls::{ServerConfig, Wire};
use tickwire_wire::client::{ClientKind, ClientRepr, RejectCode};

/// Connections taken from one listener per call at most (the rest wait
/// for the next millisecond).
const ACCEPTS_PER_CALL: usize = 256;
/// Connections the kernel holds for a listener until they are taken
/// (`listen`'s backlog; the kernel caps it at `net.core.somaxconn`).
/// Rust's default, 128, fills between two accepts under a burst of
/// connections, and the kernel then drops SYNs: those clients wait a
/// second for their retransmission before they can even be refused.
pub const ACCEPT_BACKLOG: i32 = 1024;
/// Refusals are logged at most this often, ns.
const LOG_INTERVAL_NS: u64 = 1_000_000_000;
/// What a soft `RLIMIT_NOFILE` that cannot be read is taken to be.
const UNKNOWN_NOFILE: u64 = 1024;

/// Values of the `Kind::RouterAccept` set (names:
/// `tickwire_shm::counters::ROUTER_ACCEPT_NAMES`).
pub mod counter {
    /// TCP and TLS connections open now.
    pub const CONNECTIONS: usize = 0;
    /// `limits.max_connections` in force.
    pub const MAX_CONNECTIONS: usize = 1;
    /// Refusals, by [`Refusal::index`](super::Refusal::index), from here.
    pub const REFUSED: usize = 2;
    /// Shared-memory logins refused ([`crate::ipc_login`]).
    pub const REFUSED_IPC_LOGINS: usize = 6;
}

/// The soft and hard `RLIMIT_NOFILE` of this process (`(1024, 1024)` if
/// it cannot be read).
pub fn descriptor_limit() -> (u64, u64) {
    use nix::sys::resource::{getrlimit, Resource};
    getrlimit(Resource::RLIMIT_NOFILE).map_or((UNKNOWN_NOFILE, UNKNOWN_NOFILE), |(s, h)| (s, h))
}

/// The TCP listeners, the connections they let in, and the refusals.
pub struct Acceptor {
    /// Each listener, its address, and whether it takes NATS clients.
    listeners: Vec<(TcpListener, SocketAddr, bool)>,
    /// TLS on every native listener (NATS listeners are plain).
    tls: Option<Arc<ServerConfig>>,
    connections: Arc<Connections>,
    /// The descriptor given up to accept a connection when there is none
    /// left to refuse it with.
    spare: Option<File>,
    /// When it last said it had no spare to refuse with (`accept` fails
    /// with EMFILE every call then, whether or not a connection waits:
    /// not a refusal, said at most once a second).
    no_spare_said: Option<u64>,
    log: RefusalLog,
    set: Option<CounterSet>,
    /// Shared-memory logins refused (counted by the login socket).
    ipc_refused: u64,
}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acceptor").field("listeners", &self.addrs()).field("connections", &self.connections).finish()
    }
}

fn open_spare() -> Option<File> {
    File::open("/dev/null").ok()
}

impl Acceptor {
    /// Takes connections from `listeners` (non-blocking) under `limits`,
    /// counting into a set of `counters` labelled `name`.
    pub(crate) fn new(
        listeners: Vec<(TcpListener, SocketAddr, bool)>,
        tls: Option<Arc<ServerConfig>>,
        limits: &LimitsConfig,
        counters: Option<&Arc<CountersFile>>,
        name: &str,
    ) -> Self {
        let (soft, _) = descriptor_limit();
        let (max, lowered) = limits.max_connections(soft);
        if let Some(why) = lowered {
            tracing::warn!("{why}");
        }
        for (l, addr, _) in &listeners {
            if let Err(e) = nix::sys::socket::Backlog::new(ACCEPT_BACKLOG).and_then(|b| nix::sys::socket::listen(l, b))
            {
                tracing::warn!("tcp://{addr}: a backlog of {ACCEPT_BACKLOG}: {e}");
            }
        }
        let per_address = limits.max_connections_per_address;
        let set = counters.and_then(|c| c.allocate(Kind::RouterAccept, 0, 0, name).ok());
        let a = Self {
            listeners,
            tls,
            connections: Connections::new(max, per_address),
            spare: open_spare(),
            no_spare_said: None,
            log: RefusalLog::new(LOG_INTERVAL_NS, max, per_address),
            set,
            ipc_refused: 0,
        };
        a.publish();
        a
    }

    /// The native listeners' bound addresses.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().filter(|l| !l.2).map(|(_, a, _)| *a).collect()
    }

    /// The NATS listeners' bound addresses.
    pub fn nats_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().filter(|l| l.2).map(|(_, a, _)| *a).collect()
    }

    /// Whether the listeners speak TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The TLS configuration for connections accepted from now on (a
    /// reload; those open keep the handshake they made). Listeners cannot
    /// change scheme: the caller keeps `None` as `None`.
    pub fn set_tls(&mut self, cfg: Arc<ServerConfig>) {
        if self.tls.is_some() {
            self.tls = Some(cfg);
        }
    }

    /// The connections open and their limits.
    pub fn connections(&self) -> &Connections {
        &self.connections
    }

    /// Refusals since start, by [`Refusal::index`].
    pub fn refusals(&self) -> [u64; Refusal::ALL.len()] {
        self.log.totals()
    }

    /// Takes the connections waiting (at most [`ACCEPTS_PER_CALL`] per
    /// listener), hands each one admitted to `hand` with its slot and
    /// refuses the others; returns how many it took.
    pub(crate) fn accept(&mut self, now: u64, mut hand: impl FnMut(Wire, SocketAddr, Slot, bool)) -> usize {
        let mut n = 0;
        for i in 0..self.listeners.len() {
            let nats = self.listeners[i].2;
            for _ in 0..ACCEPTS_PER_CALL {
                match self.listeners[i].0.accept() {
                    Ok((stream, peer)) => {
                        n += 1;
                        self.admit(stream, peer, now, nats, &mut hand);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                        if !self.refuse_with_spare(i, &e, now) {
                            break;
                        }
                        n += 1;
                    }
                    // One connection gone before it was taken: the next.
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => {
                        self.note(Refusal::AcceptFailed, None, Some(&e), now);
                    }
                    Err(e) => {
                        self.note(Refusal::AcceptFailed, None, Some(&e), now);
                        break;
                    }
                }
            }
        }
        if n > 0 {
            self.publish();
        }
        n
    }

    /// Its housekeeping: the refusals' line if one is due, the counters.
    pub(crate) fn housekeeping(&mut self, now: u64) {
        if let Some(line) = self.log.due(now) {
            tracing::warn!("{line}");
        }
        self.publish();
    }

    fn note(&mut self, why: Refusal, peer: Option<SocketAddr>, error: Option<&std::io::Error>, now: u64) {
        let error = error.map(ToString::to_string);
        if let Some(line) = self.log.refused(why, peer, error.as_deref(), now) {
            tracing::warn!("{line}");
        }
    }

    fn admit(
        &mut self,
        stream: TcpStream,
        peer: SocketAddr,
        now: u64,
        nats: bool,
        hand: &mut impl FnMut(Wire, SocketAddr, Slot, bool),
    ) {
        let slot = match self.connections.take(peer.ip()) {
            Ok(slot) => slot,
            Err(why) => {
                self.refuse(stream, peer, why, nats);
                self.note(why, Some(peer), None, now);
                return;
            }
        };
        if let Err(e) = stream.set_nonblocking(true).and_then(|()| stream.set_nodelay(true)) {
            tracing::warn!("tcp://{peer}: {e}");
            return;
        }
        let wire = match &self.tls {
            // A NATS client's handshake starts after the INFO the agent
            // sends in the clear (`tls_required`), as NATS's does.
            Some(cfg) => Wire::tls_server(stream, cfg),
            _ => Ok(Wire::plain(stream)),
        };
        match wire {
            Ok(w) => hand(w, peer, slot, nats),
            Err(e) => tracing::warn!("tcp://{peer}: {e}"),
        }
    }

    /// `accept` on listener `i` failed with `e` for lack of descriptors:
    /// gives up the spare, accepts, refuses, takes the spare again.
    /// Returns whether it refused one and may go on.
    fn refuse_with_spare(&mut self, i: usize, e: &std::io::Error, now: u64) -> bool {
        let Some(spare) = self.spare.take() else {
            // None to give up: the connection waits in the backlog until
            // a descriptor is free (and the spare with it).
            self.spare = open_spare();
            if self.spare.is_none() && self.no_spare_said.is_none_or(|t| now.saturating_sub(t) >= LOG_INTERVAL_NS) {
                self.no_spare_said = Some(now);
                tracing::warn!("accept: {e}, and no spare descriptor to refuse with: connections wait for one");
            }
            return false;
        };
        drop(spare);
        let nats = self.listeners[i].2;
        let refused = match self.listeners[i].0.accept() {
            Ok((stream, peer)) => {
                self.refuse(stream, peer, Refusal::NoDescriptors, nats);
                self.note(Refusal::NoDescriptors, Some(peer), Some(e), now);
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
            Err(e) => {
                self.note(Refusal::AcceptFailed, None, Some(&e), now);
                false
            }
        };
        self.spare = open_spare();
        refused && self.spare.is_some()
    }

    /// Refuses a connection just taken: CLOSE (`Limit`) with the reason
    /// and the end of the stream over TCP (a NATS client: `-ERR`), a
    /// reset over TLS.
    fn refuse(&self, stream: TcpStream, peer: SocketAddr, why: Refusal, nats: bool) {
        let c = &self.connections;
        let reason = match why {
            Refusal::MaxConnections => format!("too many connections: {} (limits.max_connections)", c.max()),
            Refusal::PerAddress => format!(
                "too many connections from {}: {} (limits.max_connections_per_address)",
                peer.ip(),
                c.per_address()
            ),
            Refusal::NoDescriptors | Refusal::AcceptFailed => {
                "too many connections: the router is out of file descriptors (RLIMIT_NOFILE)".to_owned()
            }
        };
        if nats {
            let mut b = Vec::new();
            tickwire_nats::encode::err(&mut b, &format!("maximum connections exceeded: {reason}"));
            say_and_close(stream, &b);
        } else if self.tls.is_some() {
            reset(&stream);
        } else {
            close_with(stream, &reason);
        }
        tracing::debug!(%peer, "refused: {reason}");
    }

    /// Copies the counts into the counter set.
    fn publish(&self) {
        let Some(set) = &self.set else { return };
        set.set(counter::CONNECTIONS, self.connections.open() as u64);
        set.set(counter::MAX_CONNECTIONS, self.connections.max() as u64);
        for (k, v) in self.log.totals().into_iter().enumerate() {
            set.set(counter::REFUSED + k, v);
        }
        set.set(counter::REFUSED_IPC_LOGINS, self.ipc_refused);
    }

    /// Notes the shared-memory logins refused so far, for its counters.
    pub(crate) fn set_ipc_refused(&mut self, n: u64) {
        self.ipc_refused = n;
    }
}

/// A plain TCP connection's refusal: the CLOSE frame (one write into an
/// empty send buffer, never blocking), the end of the stream after it,
/// and what the client already sent read, so closing does not turn into
/// a reset that could overtake the CLOSE.
fn close_with(stream: TcpStream, reason: &str) {
    let close =
        ClientRepr { value: RejectCode::Limit as u32, body: reason.as_bytes(), ..ClientRepr::new(ClientKind::Close) };
    let mut frame = Vec::with_capacity(framing::PREFIX_LEN + close.buffer_len());
    let at = framing::reserve_frame(&mut frame, close.buffer_len());
    if close.emit(&mut frame[at..]).is_err() {
        reset(&stream);
        return;
    }
    say_and_close(stream, &frame);
}

/// Writes `bytes` (one write into an empty send buffer, never blocking),
/// ends the stream, and reads what the client sent (so closing does not
/// turn into a reset that could overtake the bytes).
fn say_and_close(mut stream: TcpStream, bytes: &[u8]) {
    if stream.set_nonblocking(true).is_err() {
        reset(&stream);
        return;
    }
    let _ = stream.write(bytes);
    let _ = stream.shutdown(Shutdown::Write);
    let mut sink = [0u8; 1024];
    let _ = stream.read(&mut sink);
}

/// Ends a connection with a reset (`SO_LINGER` 0) when it is dropped.
fn reset(stream: &TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt::Linger};
    let _ = setsockopt(stream, Linger, &libc::linger { l_onoff: 1, l_linger: 0 });
}
