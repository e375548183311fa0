//! The peer links: dials to each other member (sending on them), the
//! connections the others dialed (reading them), and the members' checks
//! of each other (HELLO).

use super::{Member, ACCEPTED, DIALED, LINK_TIMEOUT, MAX_UNSENT, REDIAL};
use crate::peer::{self, Hello, PeerError};
use mio::net::TcpStream;
use mio::{Interest, Token};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Write};
use std::net::SocketAddr;
use tickwire_transport::framing::{FrameError, FrameReader};

/// A link this member dialed.
pub(super) struct Dialed {
    pub(super) id: u64,
    pub(super) addr: SocketAddr,
    pub(super) stream: Option<TcpStream>,
    pub(super) connected: bool,
    pub(super) unsent: Vec<u8>,
    pub(super) retry_at: u64,
    /// A failed dial was logged (once until a dial connects).
    pub(super) warned: bool,
    /// When the dial began (a dial not connected within [`super::DIAL_DEADLINE`]
    /// is dropped and tried again).
    pub(super) dialed_at: u64,
    /// The member left the group: not dialed (its slot, and token, kept
    /// for its return).
    pub(super) retired: bool,
}

impl Dialed {
    /// A link to member `id` at `addr`, dialed at the next housekeeping.
    pub(super) fn new(id: u64, addr: SocketAddr) -> Self {
        Self {
            id,
            addr,
            stream: None,
            connected: false,
            unsent: Vec::new(),
            retry_at: 0,
            warned: false,
            dialed_at: 0,
            retired: false,
        }
    }
}

/// A link another member dialed.
pub(super) struct Accepted {
    pub(super) stream: TcpStream,
    pub(super) reader: FrameReader,
    pub(super) from: Option<u64>,
    pub(super) opened: u64,
}

impl Member {
    pub(super) fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((mut stream, _)) => {
                    if self.accepted.len() >= 4 * self.cfg.members.len() {
                        self.links.refused += 1;
                        continue; // dropped: closed
                    }
                    let slot = self.next_slot;
                    self.next_slot = (self.next_slot + 1) % (1 << 20);
                    if self.poll.registry().register(&mut stream, Token(ACCEPTED + slot), Interest::READABLE).is_err() {
                        continue;
                    }
                    let reader = FrameReader::new(1, peer::MAX_FRAME);
                    let opened = self.now();
                    self.accepted.insert(slot, Accepted { stream, reader, from: None, opened });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    tracing::warn!(error = %e, "ha: accept");
                    return;
                }
            }
        }
    }

    pub(super) fn read(&mut self, token: usize) {
        let slot = token - ACCEPTED;
        let Some(a) = self.accepted.get_mut(&slot) else { return };
        let (me, group) = (self.cfg.id, self.cfg.group.as_str());
        let members = &self.cfg.members;
        let node = &mut self.node;
        let mut bad: Option<String> = None;
        let mut fetch: Option<(u64, u64)> = None;
        let mut bytes = 0u64;
        let from = &mut a.from;
        let r = a.reader.read_counted(&mut a.stream, true, &mut 0, &mut bytes, |frame| {
            match *from {
                // A member fetching a snapshot: this link is handed to a
                // thread that sends it (`transfer`).
                None if frame.first() == Some(&crate::snapshot::FETCH) => {
                    let checked = crate::snapshot::Fetch::parse(frame).and_then(|f| {
                        let h = Hello { from: f.from, to: f.to, group: f.group };
                        check_hello(&h, me, group, members).map(|id| (id, f.index))
                    });
                    match checked {
                        Ok(f) => fetch = Some(f),
                        Err(e) => bad = Some(e.to_string()),
                    }
                    return false;
                }
                None => match Hello::parse(frame).and_then(|h| check_hello(&h, me, group, members)) {
                    Ok(id) => *from = Some(id),
                    Err(e) => {
                        bad = Some(e.to_string());
                        return false;
                    }
                },
                Some(id) => match peer::raft_body(frame) {
                    Ok(body) => {
                        if let Err(e) = node.handle_message(id, body) {
                            tracing::debug!(error = %e, "ha: a peer's message refused");
                        }
                    }
                    Err(e) => {
                        bad = Some(e.to_string());
                        return false;
                    }
                },
            }
            true
        });
        self.links.bytes_in += bytes;
        if let (Some((id, index)), None) = (fetch, &bad) {
            if let Some(mut a) = self.accepted.remove(&slot) {
                let _ = self.poll.registry().deregister(&mut a.stream);
                self.serve(id, index, std::net::TcpStream::from(a.stream));
            }
            return;
        }
        let closed = match (&bad, r) {
            (Some(why), _) => {
                // Said once a second at most: a member that keeps dialing
                // (one not yet added, or removed) is counted, not logged
                // at every dial.
                let now = self.now();
                if now >= self.refusal_logged {
                    self.refusal_logged = now + 1_000_000_000;
                    tracing::warn!(
                        member = self.cfg.id,
                        why,
                        "ha: a peer link refused (said once a second at most; `links refused` counts them)"
                    );
                }
                self.links.refused += 1;
                true
            }
            (None, Err(FrameError::Closed(_))) => true,
            (None, Err(e)) => {
                tracing::warn!(member = self.cfg.id, error = %e, "ha: a peer link refused");
                self.links.refused += 1;
                true
            }
            (None, Ok(_)) => false,
        };
        if closed {
            self.links.disconnects += self.close_accepted(&[slot]);
            return;
        }
        // A member that dialed again left its older link behind (a peer
        // that crashed sends no FIN): the new one replaces it.
        let Some(from) = self.accepted.get(&slot).and_then(|a| a.from) else { return };
        let older: Vec<usize> =
            self.accepted.iter().filter(|(&k, a)| k != slot && a.from == Some(from)).map(|(&k, _)| k).collect();
        self.links.disconnects += self.close_accepted(&older);
    }

    /// Closes the accepted links in `slots`; how many there were.
    pub(super) fn close_accepted(&mut self, slots: &[usize]) -> u64 {
        let mut n = 0;
        for slot in slots {
            if let Some(mut a) = self.accepted.remove(slot) {
                let _ = self.poll.registry().deregister(&mut a.stream);
                n += 1;
            }
        }
        n
    }

    pub(super) fn dial_ready(&mut self, i: usize) {
        let Some(d) = self.dialed.get_mut(i) else { return };
        let Some(s) = d.stream.as_ref() else { return };
        if !d.connected {
            match (s.take_error(), s.peer_addr()) {
                (Ok(None), Ok(_)) => {
                    d.connected = true;
                    d.warned = false;
                    let _ = s.set_nodelay(true);
                    self.links.connects += 1;
                }
                (Ok(None), Err(e)) if e.kind() == ErrorKind::NotConnected => return,
                _ => return self.drop_link(i),
            }
        }
        // Readable on a link that only sends: the other side closed (or
        // broke the protocol).
        let mut probe = [0u8; 1];
        match std::io::Read::read(&mut &*s, &mut probe) {
            Ok(_) => self.drop_link(i),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => self.drop_link(i),
        }
    }

    pub(super) fn drop_link(&mut self, i: usize) {
        let now = self.now();
        let d = &mut self.dialed[i];
        if let Some(mut s) = d.stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
            if d.connected {
                self.links.disconnects += 1;
            }
        }
        d.connected = false;
        d.unsent.clear();
        d.retry_at = now + REDIAL.as_nanos() as u64;
        let id = d.id;
        self.node.report_unreachable(id);
    }

    pub(super) fn redial(&mut self, now: u64) {
        for i in 0..self.dialed.len() {
            let d = &mut self.dialed[i];
            if d.stream.is_some() || d.retired || now < d.retry_at {
                continue;
            }
            match dial(self.cfg.members[&self.cfg.id], d.addr) {
                Ok(mut s) => {
                    let token = Token(DIALED + i);
                    if self.poll.registry().register(&mut s, token, Interest::READABLE | Interest::WRITABLE).is_ok() {
                        d.unsent.clear();
                        Hello { from: self.cfg.id, to: d.id, group: &self.cfg.group }.emit(&mut d.unsent);
                        d.stream = Some(s);
                        d.dialed_at = now;
                    }
                }
                Err(e) => {
                    if !d.warned {
                        d.warned = true;
                        tracing::warn!(member = self.cfg.id, peer = d.id, addr = %d.addr, error = %e, "ha: a dial failed (tried again every 50 ms)");
                    }
                    d.retry_at = now + REDIAL.as_nanos() as u64;
                }
            }
        }
    }

    /// Puts each message for a peer on its link.
    pub(super) fn route(&mut self) {
        while let Some((to, msg)) = self.node.poll_transmit() {
            let Some(i) = self.dialed.iter().position(|d| d.id == to) else {
                self.links.dropped += 1;
                continue;
            };
            let d = &mut self.dialed[i];
            if d.retired && self.out && self.cfg.members.contains_key(&to) {
                // Removed, and contacted by a member it knows: added
                // again, perhaps. It answers, on a link dialed again (this
                // message is dropped: Raft sends again what is not
                // answered).
                d.retired = false;
                d.retry_at = 0;
            }
            if d.stream.is_none() || d.unsent.len() + msg.len() > MAX_UNSENT {
                self.links.dropped += 1;
                continue;
            }
            peer::emit_raft(&msg, &mut d.unsent);
        }
    }

    pub(super) fn flush_all(&mut self) {
        for i in 0..self.dialed.len() {
            let d = &mut self.dialed[i];
            if !d.connected || d.unsent.is_empty() {
                continue;
            }
            let Some(s) = d.stream.as_mut() else { continue };
            let mut at = 0;
            let mut failed = false;
            while at < d.unsent.len() {
                match s.write(&d.unsent[at..]) {
                    Ok(0) => {
                        failed = true;
                        break;
                    }
                    Ok(n) => at += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            self.links.bytes_out += at as u64;
            d.unsent.drain(..at);
            if failed {
                self.drop_link(i);
            }
        }
    }
}

/// A TCP socket for a link to `to`, bound to `from`'s address (the port
/// the kernel's choice) unless `from` is a wildcard, with [`LINK_TIMEOUT`].
fn link_socket(from: SocketAddr, to: SocketAddr) -> std::io::Result<Socket> {
    let s = Socket::new(Domain::for_address(to), Type::STREAM, Some(Protocol::TCP))?;
    s.set_tcp_user_timeout(Some(LINK_TIMEOUT))?;
    if !from.ip().is_unspecified() && from.is_ipv4() == to.is_ipv4() {
        // The address as given (an IPv6 one keeps its scope), any port.
        let mut local = from;
        local.set_port(0);
        s.bind(&SockAddr::from(local))?;
    }
    Ok(s)
}

/// A blocking dial from `from` to `to` (see [`link_socket`]), connected
/// within `deadline`.
pub(crate) fn dial_blocking(
    from: SocketAddr,
    to: SocketAddr,
    deadline: std::time::Duration,
) -> std::io::Result<std::net::TcpStream> {
    let s = link_socket(from, to)?;
    s.connect_timeout(&SockAddr::from(to), deadline)?;
    Ok(s.into())
}

/// Starts a non-blocking dial (see [`link_socket`]).
fn dial(from: SocketAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = link_socket(from, to)?;
    s.set_nonblocking(true)?;
    tickwire_transport::tcp::start_connect(&s, to)?;
    Ok(TcpStream::from_std(s.into()))
}

/// The member a HELLO names, if it is for this member of this group.
pub(super) fn check_hello(
    h: &Hello<'_>,
    me: u64,
    group: &str,
    members: &BTreeMap<u64, SocketAddr>,
) -> Result<u64, PeerError> {
    if h.group != group {
        return Err(PeerError::Group { got: h.group.into(), want: group.into() });
    }
    if h.to != me {
        return Err(PeerError::Member { from: h.from, to: h.to, why: "not this member" });
    }
    if h.from == me || !members.contains_key(&h.from) {
        return Err(PeerError::Member { from: h.from, to: h.to, why: "not a member of the group" });
    }
    Ok(h.from)
}
