//! A routing agent's TCP clients: taking a connection ([`RoutingAgent`]'s
//! `adopt_tcp`), reading the readable ones once per readiness
//! (`poll_tcp`; with mutual TLS, the user a client's certificate names
//! given to its session before its HELLO), heartbeats on welcomed links (`keep_links_alive`),
//! idle links' buffers given back (`trim_links`), and the system calls
//! all of it made ([`IoCounts`]).

use super::{handle, RoutingAgent, POLL_LIMIT};
use crate::accept::Slot;
use crate::nats::{nats_max_payload, NatsIn, NatsOut};
use crate::routing::Disconnect;
use crate::session::Outbound;
use crate::tcp::TcpOut;
use mio::{Interest as Readiness, Token};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;
use tickwire_transport::framing::FrameError;
use tickwire_transport::link;
use tickwire_transport::tls::Wire;
use tickwire_wire::client::{ClientKind, ClientRepr, RejectCode, HEADER_LEN};

/// The system calls a router made on its TCP clients' links: the links'
/// own counts of `read` and `write`/`writev` calls, and the agents'
/// readiness polls (`epoll_wait`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoCounts {
    /// Reads of client sockets (would-block ones included).
    pub reads: u64,
    /// Writes (`writev`) to client sockets.
    pub writes: u64,
    /// Readiness polls of the agents' TCP clients.
    pub polls: u64,
}

impl std::ops::AddAssign for IoCounts {
    fn add_assign(&mut self, o: Self) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.polls += o.polls;
    }
}

/// A TCP client's connection.
pub(super) struct TcpInput {
    pub(super) stream: Arc<Wire>,
    pub(super) reader: link::LinkReader,
    /// A NATS client's: its bytes read and not yet parsed (`reader` is
    /// then unused).
    pub(super) nats: Option<Box<NatsIn>>,
    /// Heartbeats once welcomed (`None` before: the hello timeout's).
    live: Option<link::Liveness>,
    /// The publish number last told in a heartbeat, and when.
    receipt: (u64, u64),
    /// Its place in the count of connections (dropped with it).
    _slot: Slot,
}

impl RoutingAgent {
    pub(super) fn adopt_tcp(&mut self, wire: Arc<Wire>, peer: SocketAddr, slot: Slot, nats: bool) {
        // Registered under the id its session will get.
        let next = self.router.next_id();
        let info = nats.then(|| self.nats_info(&wire, next));
        if let (Some(info), true) = (&info, wire.is_tls()) {
            // NATS over TLS: INFO in the clear, then the client's handshake.
            if let Err(e) = send_info_in_clear(&wire, info) {
                tracing::warn!("nats {peer}: INFO: {e}");
                return;
            }
        }
        let fd = wire.stream().as_raw_fd();
        if let Err(e) =
            self.poll.registry().register(&mut mio::unix::SourceFd(&fd), Token(next as usize), Readiness::READABLE)
        {
            tracing::warn!("tcp://{peer}: {e}");
            return;
        }
        let scheme = match (nats, wire.is_tls()) {
            (true, true) => "nats+tls",
            (true, false) => "nats",
            (false, true) => "tls",
            (false, false) => "tcp",
        };
        let max_frame = self.router.limits().max_frame;
        let out = if let Some(info) = info {
            let info = (!wire.is_tls()).then_some(&info);
            Outbound::Nats(Box::new(NatsOut::new(Arc::clone(&wire), info, self.nats_token_user.clone())))
        } else {
            Outbound::Tcp(TcpOut::new(Arc::clone(&wire)))
        };
        let id = self.router.attach_at(out, format!("{scheme} {peer}"), self.now);
        debug_assert_eq!(id, next);
        // A NATS client's INFO goes with the next flush.
        self.router.mark_pending(id);
        let i = id as usize;
        if self.tcp.len() <= i {
            self.tcp.resize_with(i + 1, || None);
        }
        let reader = link::LinkReader::new(HEADER_LEN, max_frame);
        let nats = nats.then(|| Box::new(NatsIn::new(nats_max_payload(max_frame))));
        self.tcp[i] = Some(TcpInput { stream: wire, reader, nats, live: None, receipt: (0, 0), _slot: slot });
        self.tcp_sessions += 1;
        tracing::info!(client = self.router.client_id(id), %peer, agent = %self.role, "{scheme} client connected");
    }

    /// Watches the sessions the router parked (their sockets full at a
    /// flush) for writability as well as readability: one `epoll_ctl`
    /// each, instead of a failed write every duty cycle until the client
    /// reads. Registering again reports a socket already writable, so no
    /// wake-up is lost between the write and this.
    pub(super) fn watch_parked(&mut self) {
        self.router.poll_parked(&mut self.parked);
        for id in self.parked.drain(..) {
            let Some(Some(input)) = self.tcp.get(id as usize) else { continue };
            let fd = input.stream.stream().as_raw_fd();
            let both = Readiness::READABLE | Readiness::WRITABLE;
            if let Err(e) = self.poll.registry().reregister(&mut mio::unix::SourceFd(&fd), Token(id as usize), both) {
                // Not watched: flushed again at once rather than never.
                tracing::debug!(client = self.router.client_id(id), "watching for writability: {e}");
                self.router.unpark(id);
            }
        }
    }

    pub(super) fn poll_tcp(&mut self) -> usize {
        self.io.polls += 1;
        if self.poll.poll(&mut self.events, Some(Duration::ZERO)).is_err() {
            return 0;
        }
        let mut tokens = std::mem::take(&mut self.tokens);
        tokens.clear();
        let (tcp, poll, router) = (&self.tcp, &self.poll, &mut self.router);
        for e in self.events.iter() {
            if e.is_writable() {
                // A parked session's socket has room again: watch it for
                // reading only, and flush it with the next flush.
                unpark(tcp, poll, router, e.token());
            }
            if e.is_readable() || e.is_read_closed() || e.is_error() {
                tokens.push(e.token());
            }
        }
        if !self.unread.is_empty() {
            let router = &self.router;
            self.unread.retain(|&t| {
                let held = router.is_held(t.0 as u32);
                if !held && !tokens.contains(&t) {
                    tokens.push(t);
                }
                held
            });
        }
        let mut work = 0;
        let any_held = self.router.any_held();
        for &t in &tokens {
            let id = t.0;
            // Held by a back-pressure client: its socket's buffers fill.
            if any_held && self.router.is_held(id as u32) {
                if !self.unread.contains(&t) {
                    self.unread.push(t);
                }
                continue;
            }
            if self.tcp.get(id).is_some_and(|i| i.as_ref().is_some_and(|i| i.nats.is_some())) {
                match self.read_nats(id as u32) {
                    Ok((n, more)) => {
                        work += n;
                        if more && !self.unread.contains(&t) {
                            self.unread.push(t);
                        }
                    }
                    Err(d) => self.close(id as u32, &d),
                }
                continue;
            }
            let Some(Some(TcpInput { stream, reader, .. })) = self.tcp.get_mut(id) else { continue };
            let (router, times, countdown) = (&mut self.router, &self.times, &mut self.countdown);
            let mut why: Option<Disconnect> = None;
            let reads = reader.stats().reads;
            // Once per readiness (again only if the buffer came back full).
            let r = reader.read(
                stream,
                |f| {
                    // Mutual TLS: the handshake is over by the first frame;
                    // HELLO logs in as the user the certificate names.
                    if f.first() == Some(&(ClientKind::Hello as u8)) {
                        if let Some(user) = stream.peer_user() {
                            router.set_certified(id as u32, user);
                        }
                    }
                    match handle(router, times, countdown, id as u32, f) {
                        Ok(()) => true,
                        Err(d) => {
                            why = Some(d);
                            false
                        }
                    }
                },
                POLL_LIMIT,
            );
            self.io.reads += reader.stats().reads - reads;
            let buffered = reader.has_buffered();
            match r {
                Ok(n) => work += n,
                Err(FrameError::Closed(e)) => {
                    why.get_or_insert(Disconnect { code: RejectCode::Normal, reason: e });
                }
                Err(e @ FrameError::TooLarge { .. }) => {
                    why.get_or_insert(Disconnect { code: RejectCode::TooLarge, reason: e.to_string() });
                }
                Err(e) => {
                    why.get_or_insert(Disconnect::protocol(e.to_string()));
                }
            }
            // TLS records the read left unsent (the handshake's replies
            // when the socket was full) go with the session's next flush.
            if why.is_none() && stream.wants_write() {
                self.router.mark_pending(id as u32);
            }
            if let Some(d) = why {
                self.close(id as u32, &d);
            } else if buffered && !self.unread.contains(&t) {
                self.unread.push(t);
            }
        }
        self.tokens = tokens;
        work
    }

    /// Heartbeats on welcomed TCP links (`limits.heartbeat_interval`): one
    /// right after WELCOME to a native client (it learns the interval from
    /// it; a NATS client's first PING comes an interval on), one
    /// whenever nothing was written for an interval, and one an interval
    /// after a publish read since the last (each tells the client one past
    /// the highest publish number read: its receipt); a client nothing was
    /// read from for two intervals is closed as gone.
    pub(super) fn keep_links_alive(&mut self) {
        let interval = self.router.limits().heartbeat_interval;
        if interval.is_zero() || self.tcp_sessions == 0 {
            return;
        }
        let ms = u32::try_from(interval.as_millis()).unwrap_or(u32::MAX);
        let interval_ns = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
        let mut dead = Vec::new();
        for (id, input) in self.tcp.iter_mut().enumerate() {
            let (Some(input), Ok(id)) = (input, u32::try_from(id)) else { continue };
            // A held publisher is not read: its silence proves nothing.
            if self.router.is_held(id) {
                input.live = None;
                continue;
            }
            let Some(s) = self.router.session_mut(id).filter(|s| s.is_welcomed()) else { continue };
            let stats = match s.outbound() {
                Outbound::Tcp(out) => input.reader.stats().plus(out.stats()),
                // PING every interval whatever else is written, as a NATS
                // server does: a NATS subscriber sends nothing but the
                // PONG that answers it (its writes are not counted here).
                Outbound::Nats(_) => {
                    link::LinkStats { bytes_in: input.nats.as_ref().map_or(0, |n| n.bytes_in), ..Default::default() }
                }
                _ => continue,
            };
            // (A NATS client is sent PING, which says nothing of this.)
            let native = matches!(s.outbound(), Outbound::Tcp(_));
            let receipt_due =
                native && s.published_to > input.receipt.0 && self.now >= input.receipt.1.saturating_add(interval_ns);
            let send = receipt_due
                | match &mut input.live {
                    // A native client learns the interval from a beat
                    // right after WELCOME. A NATS client's first PING
                    // comes an interval on, as from a NATS server: its
                    // library reads one line after its own first PING and
                    // takes anything but PONG for a failed connect.
                    None => {
                        input.live = Some(link::Liveness::new(interval, self.now));
                        native
                    }
                    Some(live) => match live.poll(stats, self.now) {
                        link::Beat::Quiet => false,
                        link::Beat::Send => true,
                        link::Beat::Dead(ns) => {
                            dead.push((id, ns));
                            false
                        }
                    },
                };
            if send {
                let beat = ClientRepr { value: ms, sequence: s.published_to, ..ClientRepr::new(ClientKind::Heartbeat) };
                input.receipt = (s.published_to, self.now);
                s.send_control(&beat);
                self.router.mark_pending(id);
            }
        }
        for (id, ns) in dead {
            self.heartbeat_timeouts += 1;
            let reason = format!(
                "no frame or heartbeat from the client in {:.1} s (limits.heartbeat_interval {})",
                ns as f64 / 1e9,
                humantime::format_duration(interval)
            );
            self.close(id, &Disconnect { code: RejectCode::Limit, reason });
        }
    }

    /// Gives back the buffers of TCP links idle since the last
    /// housekeeping (an idle client costs a few KiB, not its peak).
    pub(super) fn trim_links(&mut self) {
        if self.tcp_sessions == 0 {
            return;
        }
        for input in self.tcp.iter_mut().flatten() {
            input.reader.trim();
            if let Some(n) = &mut input.nats {
                n.trim();
            }
        }
        for id in self.router.session_ids() {
            match self.router.session_mut(id).map(crate::Session::outbound_mut) {
                Some(Outbound::Tcp(t)) => t.trim(),
                Some(Outbound::Nats(n)) => n.trim(),
                _ => {}
            }
        }
    }

    /// Its system calls on TCP links so far (closed sessions' included).
    pub(crate) fn io_counts(&self) -> IoCounts {
        let mut io = self.io;
        for id in self.router.session_ids() {
            match self.router.session(id).map(crate::Session::outbound) {
                Some(Outbound::Tcp(t)) => io.writes += t.stats().writes,
                Some(Outbound::Nats(n)) => io.writes += n.stats().writes,
                _ => {}
            }
        }
        for input in self.tcp.iter().flatten() {
            io.reads += input.nats.as_ref().map_or(0, |n| n.reads);
        }
        io
    }
}

/// Session `t`'s socket is writable: back to reading only, and back in the
/// router's backlog.
fn unpark(tcp: &[Option<TcpInput>], poll: &mio::Poll, router: &mut crate::routing::Router, t: Token) {
    let Some(Some(input)) = tcp.get(t.0) else { return };
    let fd = input.stream.stream().as_raw_fd();
    let _ = poll.registry().reregister(&mut mio::unix::SourceFd(&fd), t, Readiness::READABLE);
    router.unpark(t.0 as u32);
}

/// Writes a NATS client's `INFO` to its socket in the clear, before its TLS
/// handshake (a new connection's send buffer takes it whole).
fn send_info_in_clear(wire: &Wire, info: &tickwire_nats::encode::Info) -> std::io::Result<()> {
    use std::io::Write;
    let mut b = Vec::new();
    tickwire_nats::encode::info(&mut b, info);
    let n = wire.stream().write(&b)?;
    if n < b.len() {
        return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "the socket took part of it"));
    }
    Ok(())
}
