//! A member's thread: its [`Node`], its peer links on TCP (mio), its ticks,
//! and the queues to and from the application ([`Ha`]).
//!
//! Links: a member dials each other member and sends on that connection
//! (HELLO first), and reads the connections the others dialed. Every wait
//! is bounded: a dial is retried every [`REDIAL`], an accepted connection
//! that has not said HELLO within [`HELLO_DEADLINE`] is closed, a link's
//! unsent bytes are bounded by [`MAX_UNSENT`] (past it, messages are
//! dropped and counted: Raft sends again what is not answered), and the
//! accepted connections by four per member. A dialed link whose bytes go
//! unacknowledged for [`LINK_TIMEOUT`] (a peer cut off, its host gone, or
//! a peer that stopped reading) is closed by the kernel
//! (`TCP_USER_TIMEOUT`) and dialed again, so a healed partition is crossed
//! within about that long, not after TCP's retransmissions back off to
//! minutes. A dial leaves from the member's own
//! address (when it listens on one), so a host's group traffic takes the
//! interface its members were given.

use crate::node::{Event, HaError, Node};
use crate::peer::{self, Hello, PeerError};
use crate::{HaConfig, HaStatus};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Write};
use std::net::SocketAddr;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tickwire_transport::framing::{FrameError, FrameReader};

/// How long a dropped dial waits before the next.
pub const REDIAL: Duration = Duration::from_millis(50);
/// How long a dial may take to connect.
pub const DIAL_DEADLINE: Duration = Duration::from_secs(1);
/// How long an accepted connection has to say HELLO.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(2);
/// The most bytes waiting to go to one member.
pub const MAX_UNSENT: usize = 64 << 20;
/// How long a dialed link's bytes may go unacknowledged before it is
/// closed and dialed again.
pub const LINK_TIMEOUT: Duration = Duration::from_secs(3);

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);
/// Tokens of dialed links: `DIALED + member index`.
const DIALED: usize = 16;
/// Tokens of accepted links: `ACCEPTED + slot`.
const ACCEPTED: usize = 1 << 20;

/// The peer links' counts since start.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PeerStats {
    /// Dials that connected.
    pub connects: u64,
    /// Links lost (either direction).
    pub disconnects: u64,
    /// Accepted connections refused: a bad or late HELLO, too many, a bad frame.
    pub refused: u64,
    /// Messages dropped for a link down or too far behind.
    pub dropped: u64,
    /// Bytes sent and received.
    pub bytes_out: u64,
    /// Bytes received.
    pub bytes_in: u64,
}

enum Command {
    Propose(u64, Vec<u8>),
    Applied(u64),
    Member(u64, bool, u64),
    Stop,
}

/// A running member: its thread, and the application's side of it.
///
/// Dropping it stops the member (its log stays).
#[derive(Debug)]
pub struct Ha {
    commands: Sender<Command>,
    waker: Arc<Waker>,
    events: Receiver<Event>,
    status: Arc<Mutex<HaStatus>>,
    thread: Option<JoinHandle<()>>,
}

impl Ha {
    /// Opens the member's log, listens on its own address and starts its
    /// thread.
    ///
    /// # Errors
    /// [`HaError`] from the configuration, the log, or the listener.
    pub fn start(cfg: HaConfig) -> Result<Self, HaError> {
        let node = Node::open(&cfg)?;
        let io = |what: String| move |source| HaError::Io { what, source };
        let addr = cfg.members[&cfg.id];
        let poll = Poll::new().map_err(io("poll".into()))?;
        let listener = TcpListener::bind(addr).map_err(io(format!("ha member {} listening on {addr}", cfg.id)))?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER).map_err(io("waker".into()))?);
        let (commands, rx) = mpsc::channel();
        let (tx, events) = mpsc::channel();
        let status = Arc::new(Mutex::new(node.status()));
        let mut member = Member::new(cfg, node, poll, listener, rx, tx, status.clone())?;
        let name = format!("tw-ha-{}", member.node.id());
        let events_on_panic = member.events.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                // A panic inside raft-rs (a peer's message it cannot take)
                // stops this member, and says so: the application leaves
                // the group rather than wait on a dead thread.
                let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| member.run()));
                if run.is_err() {
                    let _ = events_on_panic.send(Event::Failed("the member's thread panicked".into()));
                }
            })
            .map_err(io("the member's thread".into()))?;
        Ok(Self { commands, waker, events, status, thread: Some(thread) })
    }

    fn send(&self, c: Command) {
        if self.commands.send(c).is_ok() {
            let _ = self.waker.wake();
        }
    }

    /// Proposes `data`; it comes back as [`Event::Committed`] on every
    /// member once a majority holds it, or as [`Event::Refused`] with
    /// `token` if this member does not lead.
    pub fn propose(&self, token: u64, data: Vec<u8>) {
        self.send(Command::Propose(token, data));
    }

    /// The application has applied, durably, every entry up to `index`.
    pub fn applied(&self, index: u64) {
        self.send(Command::Applied(index));
    }

    /// Proposes adding (`add`) or removing member `id` (the group's
    /// configuration change, through raft-rs); refused like a proposal,
    /// with `token`.
    pub fn change_member(&self, token: u64, id: u64, add: bool) {
        self.send(Command::Member(id, add, token));
    }

    /// Whether the member's thread still runs (it ends on a log it cannot
    /// write, a panic, or [`Ha::stop`]).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the member (its thread ends soon after; its log stays).
    pub fn stop(&self) {
        self.send(Command::Stop);
    }

    /// The next event, if one is waiting.
    pub fn try_event(&self) -> Option<Event> {
        self.events.try_recv().ok()
    }

    /// The next event, waiting at most `timeout`.
    pub fn wait_event(&self, timeout: Duration) -> Option<Event> {
        self.events.recv_timeout(timeout).ok()
    }

    /// The member's view of its group (a few ms old at most).
    pub fn status(&self) -> HaStatus {
        self.status.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl Drop for Ha {
    fn drop(&mut self) {
        self.send(Command::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A link this member dialed.
struct Dialed {
    id: u64,
    addr: SocketAddr,
    stream: Option<TcpStream>,
    connected: bool,
    unsent: Vec<u8>,
    retry_at: u64,
    /// A failed dial was logged (once until a dial connects).
    warned: bool,
    /// When the dial began (a dial not connected within [`DIAL_DEADLINE`]
    /// is dropped and tried again).
    dialed_at: u64,
}

/// A link another member dialed.
struct Accepted {
    stream: TcpStream,
    reader: FrameReader,
    from: Option<u64>,
    opened: u64,
}

struct Member {
    cfg: HaConfig,
    node: Node,
    poll: Poll,
    listener: TcpListener,
    dialed: Vec<Dialed>,
    accepted: BTreeMap<usize, Accepted>,
    next_slot: usize,
    commands: Receiver<Command>,
    events: Sender<Event>,
    status: Arc<Mutex<HaStatus>>,
    links: PeerStats,
    start: Instant,
    next_housekeeping: u64,
}

impl Member {
    fn new(
        cfg: HaConfig,
        node: Node,
        poll: Poll,
        mut listener: TcpListener,
        commands: Receiver<Command>,
        events: Sender<Event>,
        status: Arc<Mutex<HaStatus>>,
    ) -> Result<Self, HaError> {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(|source| HaError::Io { what: "registering the listener".into(), source })?;
        let dialed = cfg
            .members
            .iter()
            .filter(|(&id, _)| id != cfg.id)
            .map(|(&id, &addr)| Dialed {
                id,
                addr,
                stream: None,
                connected: false,
                unsent: Vec::new(),
                retry_at: 0,
                warned: false,
                dialed_at: 0,
            })
            .collect();
        Ok(Self {
            cfg,
            node,
            poll,
            listener,
            dialed,
            accepted: BTreeMap::new(),
            next_slot: 0,
            commands,
            events,
            status,
            links: PeerStats::default(),
            start: Instant::now(),
            next_housekeeping: 0,
        })
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn run(&mut self) {
        let mut events = Events::with_capacity(64);
        loop {
            let now = self.now();
            let wake = self.node.poll_timeout().unwrap_or(now).min(now + 10_000_000);
            let timeout = Duration::from_nanos(wake.saturating_sub(now));
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != ErrorKind::Interrupted {
                    let _ = self.events.send(Event::Failed(format!("poll: {e}")));
                    return;
                }
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    Token(t) if t >= ACCEPTED => self.read(t),
                    Token(t) => self.dial_ready(t - DIALED),
                }
            }
            if !self.commands() {
                return;
            }
            let now = self.now();
            self.node.handle_timeout(now);
            if let Err(e) = self.node.poll() {
                tracing::error!(member = self.cfg.id, error = %e, "ha member stopped");
                let _ = self.events.send(Event::Failed(e.to_string()));
                return;
            }
            self.route();
            self.flush_all();
            while let Some(ev) = self.node.poll_event() {
                let _ = self.events.send(ev);
            }
            if now >= self.next_housekeeping && !self.housekeeping(now) {
                return;
            }
        }
    }

    /// Takes the application's commands; false on Stop (or its side gone).
    fn commands(&mut self) -> bool {
        loop {
            match self.commands.try_recv() {
                Ok(Command::Propose(token, data)) => {
                    if let Err(crate::Refused::NotLeader { leader }) = self.node.propose(data) {
                        let _ = self.events.send(Event::Refused { token, leader });
                    }
                }
                Ok(Command::Applied(i)) => self.node.set_applied(i),
                Ok(Command::Member(id, add, token)) => {
                    if let Err(crate::Refused::NotLeader { leader }) = self.node.propose_member(id, add) {
                        let _ = self.events.send(Event::Refused { token, leader });
                    }
                }
                Ok(Command::Stop) | Err(mpsc::TryRecvError::Disconnected) => return false,
                Err(mpsc::TryRecvError::Empty) => return true,
            }
        }
    }

    fn accept(&mut self) {
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

    fn read(&mut self, token: usize) {
        let slot = token - ACCEPTED;
        let Some(a) = self.accepted.get_mut(&slot) else { return };
        let (me, group) = (self.cfg.id, self.cfg.group.as_str());
        let members = &self.cfg.members;
        let node = &mut self.node;
        let mut bad: Option<String> = None;
        let mut bytes = 0u64;
        let from = &mut a.from;
        let r = a.reader.read_counted(&mut a.stream, true, &mut 0, &mut bytes, |frame| {
            match *from {
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
        let closed = match (&bad, r) {
            (Some(why), _) => {
                tracing::warn!(member = self.cfg.id, why, "ha: a peer link refused");
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
            if let Some(mut a) = self.accepted.remove(&slot) {
                let _ = self.poll.registry().deregister(&mut a.stream);
                self.links.disconnects += 1;
            }
            return;
        }
        // A member that dialed again left its older link behind (a peer
        // that crashed sends no FIN): the new one replaces it.
        let Some(from) = self.accepted.get(&slot).and_then(|a| a.from) else { return };
        let older: Vec<usize> =
            self.accepted.iter().filter(|(&k, a)| k != slot && a.from == Some(from)).map(|(&k, _)| k).collect();
        for k in older {
            if let Some(mut a) = self.accepted.remove(&k) {
                let _ = self.poll.registry().deregister(&mut a.stream);
                self.links.disconnects += 1;
            }
        }
    }

    fn dial_ready(&mut self, i: usize) {
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

    fn drop_link(&mut self, i: usize) {
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

    fn redial(&mut self, now: u64) {
        for i in 0..self.dialed.len() {
            let d = &mut self.dialed[i];
            if d.stream.is_some() || now < d.retry_at {
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
    fn route(&mut self) {
        while let Some((to, msg)) = self.node.poll_transmit() {
            let Some(i) = self.dialed.iter().position(|d| d.id == to) else {
                self.links.dropped += 1;
                continue;
            };
            let d = &mut self.dialed[i];
            if d.stream.is_none() || d.unsent.len() + msg.len() > MAX_UNSENT {
                self.links.dropped += 1;
                continue;
            }
            peer::emit_raft(&msg, &mut d.unsent);
        }
    }

    fn flush_all(&mut self) {
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

    /// Returns false if the member must stop.
    fn housekeeping(&mut self, now: u64) -> bool {
        self.next_housekeeping = now + 20_000_000;
        let deadline = DIAL_DEADLINE.as_nanos() as u64;
        for i in 0..self.dialed.len() {
            let d = &self.dialed[i];
            if d.stream.is_some() && !d.connected && now - d.dialed_at > deadline {
                self.drop_link(i);
            }
        }
        self.redial(now);
        let deadline = HELLO_DEADLINE.as_nanos() as u64;
        let late: Vec<usize> = self
            .accepted
            .iter()
            .filter(|(_, a)| a.from.is_none() && now - a.opened > deadline)
            .map(|(&k, _)| k)
            .collect();
        for slot in late {
            if let Some(mut a) = self.accepted.remove(&slot) {
                let _ = self.poll.registry().deregister(&mut a.stream);
                self.links.refused += 1;
            }
        }
        for a in self.accepted.values_mut() {
            a.reader.trim();
        }
        if let Err(e) = self.node.compact() {
            tracing::error!(member = self.cfg.id, error = %e, "ha: log compaction failed: the member stops");
            let _ = self.events.send(Event::Failed(e.to_string()));
            return false;
        }
        let mut st = self.node.status();
        st.links = self.links;
        if let Ok(mut s) = self.status.lock() {
            *s = st;
        }
        true
    }
}

/// Starts a non-blocking dial to `to`, from `from`'s address (the port the
/// kernel's choice) unless `from` is a wildcard, with [`LINK_TIMEOUT`].
fn dial(from: SocketAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let s = Socket::new(Domain::for_address(to), Type::STREAM, Some(Protocol::TCP))?;
    s.set_nonblocking(true)?;
    s.set_tcp_user_timeout(Some(LINK_TIMEOUT))?;
    if !from.ip().is_unspecified() && from.is_ipv4() == to.is_ipv4() {
        // The address as given (an IPv6 one keeps its scope), any port.
        let mut local = from;
        local.set_port(0);
        s.bind(&SockAddr::from(local))?;
    }
    match s.connect(&SockAddr::from(to)) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(TcpStream::from_std(s.into()))
}

/// The member a HELLO names, if it is for this member of this group.
fn check_hello(h: &Hello<'_>, me: u64, group: &str, members: &BTreeMap<u64, SocketAddr>) -> Result<u64, PeerError> {
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
