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
//!
//! Files: [`links`] (the links and HELLO), [`transfer`] (snapshots sent
//! and fetched, on threads of their own); here, the member's loop.

mod links;
mod members;
mod transfer;

pub(crate) use links::dial_blocking;
pub(crate) use members::MEMBERS_FILE;

use crate::node::{Event, HaError, Node};
use crate::snapshot::Manifest;
use crate::{HaConfig, HaStatus};
use links::{Accepted, Dialed};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token, Waker};
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    /// Snapshots sent whole to a member.
    #[serde(default)]
    pub snapshots_sent: u64,
    /// Snapshot bytes sent.
    #[serde(default)]
    pub snapshot_bytes_out: u64,
    /// Snapshot bytes fetched.
    #[serde(default)]
    pub snapshot_bytes_in: u64,
    /// Snapshot transfers that failed (either side).
    #[serde(default)]
    pub transfers_failed: u64,
}

enum Command {
    Propose(u64, Vec<u8>),
    Applied(u64),
    Member(u64, Option<std::net::SocketAddr>, u64),
    Offer(PathBuf, Manifest),
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

    /// Proposes adding member `id`, which listens for its peers on
    /// `addr` (a configuration change through raft-rs, the address in
    /// it); refused like a proposal, with `token`. Once committed, every
    /// member dials it and [`Event::Members`] says so. The new member
    /// starts with [`HaConfig::join`] and catches up from a snapshot.
    pub fn add_member(&self, token: u64, id: u64, addr: std::net::SocketAddr) {
        self.send(Command::Member(id, Some(addr), token));
    }

    /// Proposes removing member `id`; refused like a proposal, with
    /// `token`. Once committed, no member dials it, and it no longer
    /// votes or stands.
    pub fn remove_member(&self, token: u64, id: u64) {
        self.send(Command::Member(id, None, token));
    }

    /// The application's snapshot, which [`Event::SnapshotWanted`] asked
    /// for: its files (names and lengths) in `dir` reflect every entry up
    /// to `index` and nothing after. They must stay readable until a newer
    /// snapshot is offered (a transfer opens them all when it starts).
    pub fn snapshot_ready(&self, index: u64, dir: PathBuf, files: Vec<(String, u64)>) {
        self.send(Command::Offer(dir, Manifest { index, files, addresses: Vec::new() }));
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
    /// The snapshot the application offers.
    offer: Option<transfer::Offer>,
    serving: Vec<transfer::Serving>,
    fetching: Option<transfer::Fetching>,
    /// When a refused peer link may be logged again (ns).
    refusal_logged: u64,
    /// This member was removed from its group: it dials no one.
    out: bool,
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
        let mut cfg = cfg;
        cfg.members = members::load(&cfg)?;
        let voters: Vec<u64> = node.status().members.iter().map(|m| m.id).collect();
        let mut member = Self {
            cfg,
            node,
            poll,
            listener,
            dialed: Vec::new(),
            accepted: BTreeMap::new(),
            next_slot: 0,
            commands,
            events,
            status,
            links: PeerStats::default(),
            start: Instant::now(),
            next_housekeeping: 0,
            offer: None,
            serving: Vec::new(),
            fetching: None,
            refusal_logged: 0,
            out: false,
        };
        member.keep_members(&voters);
        member.sync_links();
        member.node.set_addresses(&member.cfg.members);
        Ok(member)
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
            self.start_fetches();
            self.finish_fetch();
            while let Some(ev) = self.node.poll_event() {
                if let Event::Members { voters, change, addresses } = &ev {
                    self.members_changed(voters, *change, addresses);
                }
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
                Ok(Command::Member(id, addr, token)) => match self.node.propose_member(id, addr) {
                    Ok(()) => {}
                    Err(crate::Refused::NotLeader { leader }) => {
                        let _ = self.events.send(Event::Refused { token, leader });
                    }
                    Err(crate::Refused::Busy) => {
                        let _ = self.events.send(Event::Refused { token, leader: self.cfg.id });
                    }
                },
                Ok(Command::Offer(dir, manifest)) => {
                    if self.node.set_offer(&manifest) {
                        self.offer = Some((dir, manifest));
                    }
                }
                Ok(Command::Stop) | Err(mpsc::TryRecvError::Disconnected) => return false,
                Err(mpsc::TryRecvError::Empty) => return true,
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
        self.links.refused += self.close_accepted(&late);
        for a in self.accepted.values_mut() {
            a.reader.trim();
        }
        self.watch_serving();
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
