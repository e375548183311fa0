//! The cluster agent's sockets: its listener, the routers it dials (with
//! backoff), reading each link's frames, flushing what they hold,
//! heartbeats and the handshake's deadline, and one link per pair of
//! routers.

use super::agent::ClusterAgent;
use super::link::{PeerLink, Stage, HANDSHAKE_DEADLINE};
use super::ClusterSettings;
use mio::{Events, Interest as Readiness, Poll, Token};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;
use tickwire_transport::link::Beat;
use tickwire_transport::link::LinkError;
use tickwire_transport::tls::{PeerTls, Wire};
use tickwire_wire::cluster::{ClusterFrame, NONCE_LEN};

const LISTENER: Token = Token(usize::MAX - 1);
/// Frames read from one link per duty cycle.
const READ_LIMIT: usize = 256;
/// The first wait before dialing again, doubled up to [`MAX_BACKOFF_NS`].
const FIRST_BACKOFF_NS: u64 = 100_000_000;
const MAX_BACKOFF_NS: u64 = 5_000_000_000;
/// Refused links are logged at most this often.
const LOG_EVERY_NS: u64 = 1_000_000_000;
/// Routers a router learns of from the others' ROUTERS frames, at most
/// (those that link to it are known whatever their number).
const MAX_ROUTERS: usize = 256;
/// Why a link to this router itself ends.
const SELF: &str = super::link::TO_ITSELF;
/// Why the second link between two routers ends.
const SECOND: &str = "a second link between the same routers";
/// Accepted links whose handshake has not ended, at most (more are closed
/// at once), and at most from one address.
const MAX_PENDING: usize = 64;
const MAX_PENDING_PER_ADDRESS: usize = 8;
/// The shortest heartbeat interval a peer may ask for.
const MIN_HEARTBEAT: Duration = Duration::from_millis(100);

/// A router to dial: a configured peer, or one learned from another.
#[derive(Debug)]
pub(super) struct Dial {
    addr: String,
    /// Its name, once a link to it came up.
    name: Option<String>,
    /// The link slot dialing it now.
    slot: Option<usize>,
    next_at: u64,
    backoff: u64,
    /// It turned out to be this router.
    is_self: bool,
    /// Learned from another router (not configured): given up when the
    /// router is forgotten, as nats-server gives up on implicit routes.
    learned: bool,
}

/// The sockets.
pub(super) struct Net {
    pub(super) poll: Poll,
    events: Events,
    listener: TcpListener,
    dials: Vec<Dial>,
    last_log: u64,
    unlogged: u64,
    /// Frames read from one link, end to end, and where each ends (kept:
    /// no allocation per read).
    inbox: Vec<u8>,
    cuts: Vec<(usize, usize)>,
}

impl Net {
    /// Binds `settings.listen`.
    pub(super) fn bind(settings: &ClusterSettings, now: u64) -> std::io::Result<Self> {
        let poll = Poll::new()?;
        let listener = TcpListener::bind(settings.listen)
            .map_err(|e| std::io::Error::new(e.kind(), format!("cluster listen on {}: {e}", settings.listen)))?;
        listener.set_nonblocking(true)?;
        poll.registry().register(&mut mio::unix::SourceFd(&listener.as_raw_fd()), LISTENER, Readiness::READABLE)?;
        let dials = settings
            .peers
            .iter()
            .map(|a| Dial {
                addr: a.clone(),
                name: None,
                slot: None,
                next_at: now,
                backoff: FIRST_BACKOFF_NS,
                is_self: false,
                learned: false,
            })
            .collect();
        Ok(Self {
            poll,
            events: Events::with_capacity(64),
            listener,
            dials,
            last_log: 0,
            unlogged: 0,
            inbox: Vec::new(),
            cuts: Vec::new(),
        })
    }

    /// Whether the router named `name` is dialed (a dial that reached it).
    pub(super) fn dials_router(&self, name: &str) -> bool {
        self.dials.iter().any(|d| d.name.as_deref() == Some(name))
    }

    /// The listener's address.
    pub(super) fn listening(&self) -> String {
        self.listener.local_addr().map(|a| a.to_string()).unwrap_or_default()
    }
}

/// Starts a non-blocking connection to `addr` (`IP:PORT`: names were
/// resolved when the configuration was read, so no lookup blocks the
/// agent; a learned address that is not one is not dialed), TLS over it
/// with `tls`.
fn dial(addr: &str, tls: Option<&PeerTls>) -> std::io::Result<(Wire, bool)> {
    let to: std::net::SocketAddr = addr.parse().map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{addr:?} is not IP:PORT (not looked up here)"))
    })?;
    let s = socket2::Socket::new(socket2::Domain::for_address(to), socket2::Type::STREAM, None)?;
    s.set_nonblocking(true)?;
    s.set_nodelay(true)?;
    let pending = tickwire_transport::tcp::start_connect(&s, to)?;
    let stream: TcpStream = s.into();
    let wire = match tls {
        None => Wire::plain(stream),
        // The name is not checked by TLS but after it: the certificate
        // must name the router the HELLO names (`PeerLink::handshake`).
        Some(t) => Wire::tls_client(stream, &t.client, &to.ip().to_string())
            .map_err(|e| std::io::Error::other(e.to_string()))?,
    };
    Ok((wire, pending))
}

impl ClusterAgent {
    /// Puts a link in a free slot, watching its socket.
    fn add_link(&mut self, l: PeerLink) -> Option<usize> {
        let slot = self.links.iter().position(Option::is_none).unwrap_or(self.links.len());
        let fd = l.link.wire().stream().as_raw_fd();
        let r = self.net.poll.registry().register(
            &mut mio::unix::SourceFd(&fd),
            Token(slot),
            Readiness::READABLE | Readiness::WRITABLE,
        );
        if let Err(e) = r {
            tracing::warn!("cluster link to {}: {e}", l.addr);
            return None;
        }
        if slot == self.links.len() {
            self.links.push(Some(l));
        } else {
            self.links[slot] = Some(l);
        }
        Some(slot)
    }

    /// Ends the link in `slot` (CLOSE offered), its peer down, its dial
    /// (if any) tried again after its backoff.
    pub(super) fn close(&mut self, slot: usize, why: &str) {
        let Some(mut l) = self.links.get_mut(slot).and_then(Option::take) else { return };
        let fd = l.link.wire().stream().as_raw_fd();
        let _ = self.net.poll.registry().deregister(&mut mio::unix::SourceFd(&fd));
        if l.stage != Stage::Connecting {
            // Said before closing, in the handshake too: the other end
            // logs and counts why it was refused.
            let _ = l.send(&ClusterFrame::Close(why), self.now);
            let (wire, _, writer) = l.link.parts();
            let _ = writer.flush(wire, &mut []);
        }
        let who = l.them().map_or_else(|| l.addr.clone(), |t| format!("{} ({})", t.name, l.addr));
        if let Some(k) = l.peer {
            let p = &mut self.peers[k as usize];
            if p.link == Some(slot) {
                p.link = None;
                p.changed = self.now;
                p.status.round_trip_us = 0;
                self.retell_other_routers();
                if why == SECOND {
                    tracing::debug!("cluster: the second link with router {who} closed");
                } else {
                    tracing::warn!("cluster link to router {who} down: {why}");
                }
            }
        } else if why == SELF {
            tracing::debug!("cluster: {} is this router (a peer list shared by every router names it too)", l.addr);
        } else if l.dialed
            && matches!(l.stage, Stage::Connecting | Stage::Hello)
            && !l.answered
            && !why.contains("tls: ")
        {
            // Not answered (not started yet, gone): dialed again later. A
            // frame received, or a TLS handshake that failed, was an
            // answer: a refusal either way.
            tracing::debug!("cluster: dialing {}: {why}", l.addr);
        } else {
            self.refused += 1;
            if self.now.saturating_sub(self.net.last_log) >= LOG_EVERY_NS {
                let more = std::mem::take(&mut self.net.unlogged);
                let more = if more > 0 { format!(" ({more} more since the last line)") } else { String::new() };
                tracing::warn!("cluster link with {who} refused: {why}{more}");
                self.net.last_log = self.now;
            } else {
                self.net.unlogged += 1;
            }
        }
        for d in &mut self.net.dials {
            if d.slot == Some(slot) {
                d.slot = None;
                d.next_at = self.now + d.backoff;
                d.backoff = (d.backoff * 2).min(MAX_BACKOFF_NS);
                d.is_self |= why == SELF;
            }
        }
        let _ = l.link.wire().stream().shutdown(std::net::Shutdown::Both);
    }

    /// A router another told of: dialed if this router has the lower name
    /// (the other waits for it), unless already linked or dialed.
    pub(super) fn learn(&mut self, name: &str, listen: &str) {
        if name == self.me.name || listen.is_empty() {
            return;
        }
        let known = self.peers.iter().filter(|p| !p.forgotten).count();
        if (known >= MAX_ROUTERS || self.peers.len() >= 4 * MAX_ROUTERS) && !self.by_name.contains_key(name) {
            // A bound on what another router's ROUTERS frames can make
            // this one remember and dial.
            tracing::debug!("cluster: router {name:?} ({listen}) not learned: {MAX_ROUTERS} routers known already");
            return;
        }
        let k = self.peer(name, listen);
        let linked = self.peers[k as usize].link.is_some();
        let known = self.net.dials.iter().any(|d| d.addr == listen || d.name.as_deref() == Some(name));
        if !linked && !known && *self.me.name < *name {
            let now = self.now;
            // Told of again: dialed for another `forget_after` at most.
            let p = &mut self.peers[k as usize];
            if p.forgotten {
                p.forgotten = false;
                p.changed = now;
            }
            self.net.dials.push(Dial {
                addr: listen.into(),
                name: Some(name.into()),
                slot: None,
                next_at: now,
                backoff: FIRST_BACKOFF_NS,
                is_self: false,
                learned: true,
            });
        }
    }

    /// Accepts, completes connections, and reads every readable link.
    pub(super) fn poll_net(&mut self) -> usize {
        if self.net.poll.poll(&mut self.net.events, Some(Duration::ZERO)).is_err() {
            return 0;
        }
        let tokens: Vec<Token> = self.net.events.iter().map(|e| e.token()).collect();
        let mut work = tokens.len();
        for t in tokens {
            if t == LISTENER {
                self.accept();
                continue;
            }
            work += self.read_link(t.0);
        }
        // Links that stopped at the read limit have more.
        for slot in 0..self.links.len() {
            if self.links[slot].as_ref().is_some_and(|l| l.link.reader.has_buffered()) {
                work += self.read_link(slot);
            }
        }
        work
    }

    fn accept(&mut self) {
        loop {
            match self.net.listener.accept() {
                Ok((std_stream, from)) => {
                    // Accepted links in their handshake: a bound in all, and
                    // a smaller one per address, so that one host cannot
                    // hold every place.
                    let pending = |l: &&PeerLink| !l.dialed && l.them().is_none();
                    let same =
                        |l: &&PeerLink| l.addr.parse::<std::net::SocketAddr>().is_ok_and(|a| a.ip() == from.ip());
                    let all = self.links.iter().flatten().filter(pending).count();
                    let theirs = self.links.iter().flatten().filter(pending).filter(same).count();
                    if all >= MAX_PENDING || theirs >= MAX_PENDING_PER_ADDRESS {
                        self.refused += 1;
                        tracing::debug!("cluster link from {from} closed: too many handshakes under way");
                        continue;
                    }
                    if let Err(e) = std_stream.set_nonblocking(true) {
                        tracing::warn!("cluster link from {from}: {e}");
                        continue;
                    }
                    let _ = std_stream.set_nodelay(true);
                    let wire = match &self.settings.tls {
                        None => Wire::plain(std_stream),
                        Some(tls) => match Wire::tls_server(std_stream, &tls.server) {
                            Ok(w) => w,
                            Err(e) => {
                                tracing::warn!("cluster link from {from}: {e}");
                                continue;
                            }
                        },
                    };
                    let mut l = PeerLink::new(
                        Arc::new(wire),
                        (false, false),
                        from.to_string(),
                        self.settings.max_frame,
                        self.now,
                    );
                    if let Err(e) = l.hello(&self.me, self.now) {
                        tracing::warn!("cluster link from {from}: {e}");
                        continue;
                    }
                    self.add_link(l);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    tracing::warn!("cluster listener: {e}");
                    return;
                }
            }
        }
    }

    /// Reads the link in `slot`: a connection made sends HELLO; frames are
    /// handshaken or handled.
    fn read_link(&mut self, slot: usize) -> usize {
        let Some(l) = self.links.get_mut(slot).and_then(Option::as_mut) else { return 0 };
        if l.stage == Stage::Connecting {
            let s = l.link.wire().stream();
            match s.take_error() {
                Ok(None) if s.peer_addr().is_ok() => {}
                Ok(None) => return 0,
                Ok(Some(e)) | Err(e) => {
                    let why = format!("connect: {e}");
                    self.close(slot, &why);
                    return 1;
                }
            }
            if let Err(e) = l.hello(&self.me, self.now) {
                self.close(slot, &e.to_string());
                return 1;
            }
        }
        let (mut buf, mut cuts) = (std::mem::take(&mut self.net.inbox), std::mem::take(&mut self.net.cuts));
        buf.clear();
        cuts.clear();
        let (wire, reader, _) = l.link.parts();
        let r = reader.read(
            wire,
            |f| {
                let at = buf.len();
                buf.extend_from_slice(f);
                cuts.push((at, buf.len()));
                true
            },
            READ_LIMIT,
        );
        let n = cuts.len();
        let mut ended = false;
        for &(a, b) in &cuts {
            if let Err(why) = self.frame(slot, &buf[a..b]) {
                self.close(slot, &why);
                ended = true;
                break;
            }
        }
        (self.net.inbox, self.net.cuts) = (buf, cuts);
        if let (Err(e), false) = (r, ended) {
            self.close(slot, &e.to_string());
        }
        n
    }

    /// One frame from the link in `slot`.
    fn frame(&mut self, slot: usize, bytes: &[u8]) -> Result<(), String> {
        if let Some(l) = self.links.get_mut(slot).and_then(Option::as_mut) {
            l.answered = true;
        }
        let f = ClusterFrame::parse(bytes).map_err(|e| e.to_string())?;
        let Some(l) = self.links.get_mut(slot).and_then(Option::as_mut) else { return Ok(()) };
        if let (Some(k), Some(_)) = (l.peer, l.them()) {
            return self.handle(slot, k, f);
        }
        if !l.handshake(&self.me, &f, self.now)? {
            return Ok(());
        }
        let them = l.them().cloned().ok_or("no peer")?;
        let k = self.peer(&them.name, &them.listen);
        // A dial that reached this router is known by its name from now on
        // (it is not dialed again while the router is linked).
        for d in &mut self.net.dials {
            if d.slot == Some(slot) {
                d.name = Some(them.name.clone());
                d.backoff = FIRST_BACKOFF_NS;
            }
        }
        let old = self.peers[k as usize].link.filter(|&o| self.links.get(o).is_some_and(Option::is_some));
        // A link from an earlier run of the peer is half open: the new one
        // stays.
        if let Some(other) = old.filter(|&o| {
            self.links[o].as_ref().and_then(|l| l.them()).is_some_and(|t| t.incarnation != them.incarnation)
        }) {
            self.close(other, "the router started again");
        }
        let old = self.peers[k as usize].link.filter(|&o| self.links.get(o).is_some_and(Option::is_some));
        if let Some(other) = old {
            // Two links between one pair: the one the lower name dialed
            // stays (of two it dialed, the one with the lower nonce), as the
            // other router decides too.
            let lower = *self.me.name < *them.name;
            let rank = |l: &PeerLink| (l.dialed != lower, l.dialer_nonce().unwrap_or([0xff; NONCE_LEN]));
            let ours = self.links[slot].as_ref().map(rank);
            if ours >= self.links[other].as_ref().map(rank) {
                // Not a refusal: the pair keeps the other.
                if let Some(l) = self.links[slot].as_mut() {
                    l.peer = Some(k);
                }
                tracing::debug!("cluster: a second link with router {} closed", them.name);
                return Err(SECOND.into());
            }
            self.close(other, SECOND);
        }
        // Both ends beat at the shorter of their intervals.
        let theirs = Duration::from_millis(u64::from(them.heartbeat_ms));
        let beat = self.settings.heartbeat.min(theirs.max(MIN_HEARTBEAT));
        if let Some(l) = self.links[slot].as_mut() {
            l.peer = Some(k);
            l.link.liveness = tickwire_transport::link::Liveness::new(beat, self.now);
        }
        tracing::info!("cluster link to router {} ({}) up", them.name, them.listen);
        // What it says of its clients goes to ours: only what is a client
        // URI, and a few.
        let told = them.clients.split(',').filter(|u| super::is_client_uri(u)).take(super::CLIENT_URIS_MAX);
        self.peers[k as usize].clients = told.collect::<Vec<_>>().join(",");
        self.link_up(slot, k);
        self.retell_other_routers();
        Ok(())
    }

    /// Writes what links hold once their batching window passed.
    pub(super) fn flush_links(&mut self) {
        for slot in 0..self.links.len() {
            let Some(l) = self.links[slot].as_mut() else { continue };
            if l.stage == Stage::Connecting {
                continue;
            }
            let (wire, _, writer) = l.link.parts();
            if let Err(e) = writer.flush_due(wire, self.now) {
                self.close(slot, &e.to_string());
            }
        }
    }

    /// Dials what is due, ends handshakes past their deadline, keeps links
    /// alive.
    pub(super) fn housekeeping(&mut self) {
        let now = self.now;
        let deadline = u64::try_from(HANDSHAKE_DEADLINE.as_nanos()).unwrap_or(u64::MAX);
        for slot in 0..self.links.len() {
            let Some(l) = self.links[slot].as_mut() else { continue };
            if l.them().is_none() {
                if now.saturating_sub(l.since) >= deadline {
                    self.close(slot, "no handshake within 5 s");
                }
                continue;
            }
            let every = u64::try_from(self.settings.heartbeat.as_nanos()).unwrap_or(u64::MAX);
            if now.saturating_sub(l.pinged) >= every {
                l.pinged = now;
                // A link full of messages is alive: no PING this time.
                if let Err(LinkError::Broken(e)) = l.send(&ClusterFrame::Ping(now), now) {
                    self.close(slot, &e);
                    continue;
                }
            }
            let stats = l.link.stats();
            match l.link.liveness.poll(stats, now) {
                Beat::Quiet => {}
                Beat::Send => {
                    if let Err(e) = l.send(&ClusterFrame::Heartbeat, now) {
                        self.close(slot, &e.to_string());
                    }
                }
                Beat::Dead(ns) => self.close(slot, &format!("nothing heard in {:.1} s", ns as f64 / 1e9)),
            }
        }
        for i in 0..self.net.dials.len() {
            let d = &self.net.dials[i];
            let up = d
                .name
                .as_ref()
                .and_then(|n| self.by_name.get(n))
                .is_some_and(|&k| self.peers[k as usize].link.is_some());
            if d.is_self || d.slot.is_some() || up || now < d.next_at {
                continue;
            }
            let addr = d.addr.clone();
            let slot = match dial(&addr, self.settings.tls.as_ref()) {
                Ok((wire, pending)) => {
                    let mut l = PeerLink::new(Arc::new(wire), (true, true), addr.clone(), self.settings.max_frame, now);
                    if !pending {
                        let _ = l.hello(&self.me, now);
                    }
                    self.add_link(l)
                }
                Err(e) => {
                    tracing::debug!("cluster: dialing {addr}: {e}");
                    None
                }
            };
            let d = &mut self.net.dials[i];
            d.slot = slot;
            if slot.is_none() {
                d.next_at = now + d.backoff;
                d.backoff = (d.backoff * 2).min(MAX_BACKOFF_NS);
            }
        }
        self.forget_gone(now);
    }

    /// Forgets the routers down for [`ClusterSettings::forget_after`]: what
    /// they wanted is withdrawn (messages for them are no longer numbered
    /// and counted lost), and those only learned of are no longer dialed.
    fn forget_gone(&mut self, now: u64) {
        let after = u64::try_from(self.settings.forget_after.as_nanos()).unwrap_or(u64::MAX);
        for k in 0..self.peers.len() as u32 {
            let p = &mut self.peers[k as usize];
            if p.forgotten || p.link.is_some() || now.saturating_sub(p.changed) < after {
                continue;
            }
            p.forgotten = true;
            p.stale = None;
            // Its counter set back to the router's (taken again if it links).
            p.counters = None;
            let name = p.name.clone();
            let before = self.net.dials.len();
            self.net.dials.retain(|d| !(d.learned && d.name.as_deref() == Some(name.as_str())));
            let given_up = if self.net.dials.len() < before { ", no longer dialed" } else { "" };
            let wanted = self.remote.len(k) > 0 || self.groups.len(k) > 0;
            tracing::info!(
                "cluster: router {name} down for {:?}: forgotten{}{given_up}",
                self.settings.forget_after,
                if wanted { ", what it wanted withdrawn" } else { "" }
            );
            if wanted {
                let all = self.remote.patterns(k);
                for c in self.remote.remove_all(k, all) {
                    self.tell_agents(&c);
                }
                for w in self.groups.forget(k) {
                    if let Some(c) = self.remote.group(&w) {
                        self.tell_agents(&c);
                    }
                }
            }
        }
    }
}
