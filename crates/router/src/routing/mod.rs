//! The routing core, sans I/O: sessions in slots, their subscriptions,
//! and what each client frame does. The agent hands it frames read from
//! clients ([`Router::handle_frame`]), messages from the other routing
//! agents ([`Router::route_forwarded`]) and the time where a deadline
//! needs it; it asks the core to move queued frames to their transports
//! ([`Router::flush`]) and for the sessions to end. What a session's
//! transport is does not matter here.
//!
//! [`Router`] is defined here with its shared state (the sessions, the
//! topic table, the totals); each concept's methods and state live in a
//! file of their own, and each keeps its state in a struct of its own
//! whose fields no other file reaches:
//! * `sessions`: attaching and ending sessions, the frame dispatch
//!   (HELLO, SUBSCRIBE, UNSUBSCRIBE, ACK, CLOSE) and the flush;
//! * `publish`: a publish to its subscribers, the other agents and the
//!   last-value cache, through one lookup in the topic table
//!   ([`crate::topics`]);
//! * `login`: users, password checks and the hello deadline (`Login`);
//! * `slow`: the slow-consumer policies (`SlowConsumers`);
//! * `memory`: the queues' memory under `limits.max_queued_bytes`, and
//!   memory given back (`Memory`);
//! * [`guaranteed`], [`durable`] and `durable_queue`: the journal,
//!   guaranteed publishes, durable subscriptions and durable queues
//!   (`Guaranteed`);
//! * [`replicated`]: guaranteed delivery over a high-availability group
//!   (`Replication`, inside `Guaranteed`);
//! * [`request`]: requests and replies (`Requests`);
//! * [`queue_admin`]: the router's own requests, managing durable queues;
//! * [`ha_admin`]: the same for the high-availability group's members;
//! * `report`: the counters and the status of what it serves.

mod done;
pub mod durable;
mod durable_queue;
pub mod guaranteed;
pub mod ha_admin;
mod ha_entry;
mod ha_snapshot;
mod held;
mod login;
mod memory;
mod publish;
pub mod queue_admin;
pub mod replicated;
mod report;
pub mod request;
mod sessions;
pub(crate) use sessions::queue_group;
mod slow;

use crate::cache::LastValues;
use crate::counters::{TopicCounts, Totals};
use crate::peers::Peers;
use crate::session::Session;
use crate::topics::{TopicTableStats, Topics, TOPIC_LIMIT};
use login::Login;
use memory::Memory;
use slow::SlowConsumers;
use std::sync::Arc;
use std::time::Duration;
use tickwire_shm::counters::Kind;
use tickwire_shm::{CounterSet, CountersFile};
use tickwire_topic::Pattern;
use tickwire_wire::client::{ClientRepr, RejectCode, SlowConsumer};

/// Per-client limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest client frame accepted, bytes (a larger one closes the session).
    pub max_frame: usize,
    /// Bytes of deliveries a client may have queued before the oldest are
    /// dropped (the memory its queue may allocate).
    pub queue_bytes: usize,
    /// Bytes all clients' queues together may allocate (0: no bound);
    /// past it the largest are cut first, each by its slow-consumer
    /// policy (`routing::memory`). Each of several routing agents takes
    /// an equal share.
    pub max_queued_bytes: usize,
    /// Subscriptions per client.
    pub max_subscriptions: usize,
    /// Topics given their own counter set (the rest are counted together).
    pub topic_counters: usize,
    /// What happens to a client whose queue is full (unless its user says
    /// otherwise).
    pub slow_consumer: SlowConsumer,
    /// Topics conflated for a lagging client: a message replaces the
    /// newest one of its topic still queued for it.
    pub conflate: Vec<Pattern>,
    /// How long a back-pressure client may hold publishers before it is
    /// disconnected as a slow consumer (`None`: for ever).
    pub back_pressure_timeout: Option<Duration>,
    /// How long a session may take to be welcomed: its HELLO read (on TLS,
    /// after the handshake) and, with users, its password checked. Past
    /// it the session is closed ([`Router::take_expired`]).
    pub hello_timeout: Duration,
    /// TCP and TLS clients: a HEARTBEAT goes to a client the router has
    /// written nothing to for this long, and a client it has read nothing
    /// from for twice this long is closed as gone (zero: no heartbeats).
    pub heartbeat_interval: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_frame: (1 << 20) + 512,
            queue_bytes: 8 << 20,
            max_queued_bytes: 1 << 30,
            max_subscriptions: 10_000,
            topic_counters: 64,
            slow_consumer: SlowConsumer::DropOldest,
            conflate: Vec::new(),
            back_pressure_timeout: Some(Duration::from_secs(5)),
            hello_timeout: Duration::from_secs(2),
            heartbeat_interval: Duration::from_secs(5),
        }
    }
}

/// Why a session ends: a code for the CLOSE frame and a reason for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disconnect {
    /// The code sent in CLOSE (`Normal` when the client said goodbye).
    pub code: RejectCode,
    /// What happened, naming the frame or value.
    pub reason: String,
}

impl Disconnect {
    /// A protocol violation.
    pub fn protocol(reason: impl Into<String>) -> Self {
        Self { code: RejectCode::Protocol, reason: reason.into() }
    }
}

impl std::fmt::Display for Disconnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.code, self.reason)
    }
}

/// Puts session `id` in the backlog if frames wait for its transport.
#[inline]
fn mark(sessions: &mut [Option<Session>], backlog: &mut Vec<u32>, id: u32) {
    if let Some(Some(s)) = sessions.get_mut(id as usize) {
        s.mark(id, backlog);
    }
}

/// A subscription's pattern from its text as its session keeps it
/// (checked when it came, so this does not fail; `None` if it did).
fn parsed(text: &str) -> Option<Pattern> {
    Pattern::parse(text).ok()
}

/// Queues a control frame for `s`.
fn control(s: &mut Session, repr: &ClientRepr<'_>) -> Result<(), Disconnect> {
    if s.send_control(repr) {
        Ok(())
    } else {
        Err(Disconnect { code: RejectCode::Limit, reason: "the client does not read its replies".into() })
    }
}

/// Sessions, subscriptions and routing.
#[derive(Debug)]
pub struct Router {
    name: String,
    limits: Limits,
    /// The sessions, by id (a free slot is reused).
    sessions: Vec<Option<Session>>,
    free: Vec<u32>,
    next_serial: u64,
    /// Sessions with frames waiting for their transport: the only ones
    /// [`Router::flush`] visits.
    backlog: Vec<u32>,
    /// The backlog being flushed (kept: no allocation per flush).
    flushing: Vec<u32>,
    /// Sessions parked by the last flushes (their sockets full), for the
    /// agent to watch for writability ([`Router::poll_parked`]).
    parked: Vec<u32>,
    /// Publishers to let go after a flush (kept).
    releasing: Vec<(u32, u64)>,
    /// The subscriptions, and what each topic seen needs.
    topics: Topics,
    /// The last-value cache, if configured.
    cache: Option<LastValues>,
    /// The other routing agents (none when this is the only one).
    peers: Option<Peers>,
    /// Routing agents, and which one this is: session `id` here is client
    /// `id * agents + me` to the world.
    agents: u32,
    me: u32,
    /// Users, password checks, the hello deadline.
    login: Login,
    /// Sessions found too slow, and the publishers held for them.
    slow: SlowConsumers,
    /// The queues' memory, and what was given back.
    memory: Memory,
    /// The journal and durable subscriptions, if configured.
    guaranteed: Option<Box<guaranteed::Guaranteed>>,
    totals: Totals,
    /// Requests, replies and queue groups.
    requests: request::Requests,
    topic_counts: TopicCounts,
    counters: Option<Arc<CountersFile>>,
    totals_set: Option<CounterSet>,
    /// Where the cluster's other routers take clients, told in WELCOME
    /// (in a cluster).
    other_routers: Option<Arc<crate::cluster::OtherRouters>>,
}

impl Router {
    /// A router named `name` (sent in WELCOME), counting into `counters`.
    pub fn new(name: &str, limits: Limits, counters: Option<Arc<CountersFile>>) -> Self {
        let totals_set = counters.as_ref().and_then(|c| c.allocate(Kind::Router, 0, 0, name).ok());
        let topic_counts = TopicCounts::new(limits.topic_counters, counters.clone());
        Self {
            name: name.into(),
            limits,
            sessions: Vec::new(),
            free: Vec::new(),
            next_serial: 0,
            backlog: Vec::new(),
            flushing: Vec::new(),
            parked: Vec::new(),
            releasing: Vec::new(),
            topics: Topics::new(TOPIC_LIMIT),
            cache: None,
            peers: None,
            agents: 1,
            me: 0,
            login: Login::default(),
            slow: SlowConsumers::default(),
            memory: Memory::default(),
            guaranteed: None,
            totals: Totals::default(),
            requests: request::Requests::new(counters.as_ref(), name),
            topic_counts,
            counters,
            totals_set,
            other_routers: None,
        }
    }

    /// Tells each client welcomed from now on where `routers` (the
    /// cluster's others) take clients.
    pub fn set_other_routers(&mut self, routers: Arc<crate::cluster::OtherRouters>) {
        self.other_routers = Some(routers);
    }

    /// Where the cluster's other routers take NATS clients (`host:port`,
    /// their `nats://` URIs), for a NATS `INFO`'s `connect_urls`.
    pub fn other_nats_routers(&self) -> Vec<String> {
        let Some(r) = &self.other_routers else { return Vec::new() };
        r.get().split(',').filter_map(|u| u.strip_prefix("nats://")).map(str::to_owned).collect()
    }

    /// Wakes the agents sent messages since the last call, if they are
    /// parked (once per duty cycle).
    pub fn ring_peers(&mut self) {
        if let Some(p) = &mut self.peers {
            p.ring();
        }
    }

    /// One of `agents` routing agents, reaching the others through
    /// `peers`; its counter sets are labelled `LABEL [agent K]`.
    pub fn with_peers(
        name: &str,
        limits: Limits,
        counters: Option<Arc<CountersFile>>,
        peers: Peers,
        agents: u32,
    ) -> Self {
        // One routing agent (beside a cluster's) is labelled as the router.
        let label = if agents > 1 { format!("{name} [agent {}]", peers.me()) } else { name.to_owned() };
        let mut r = Self::new(&label, limits, counters);
        name.clone_into(&mut r.name);
        r.me = peers.me();
        r.peers = Some(peers);
        r.agents = agents.max(1);
        r
    }

    /// Its name (sent to clients in WELCOME).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client id the world knows session `id` by (its number across
    /// every routing agent).
    pub fn client_id(&self, id: u32) -> u32 {
        id.wrapping_mul(self.agents).wrapping_add(self.me)
    }

    /// The topic table: topics remembered, and how many were dropped to
    /// make room for others ([`crate::topics`]).
    pub fn topic_table(&self) -> TopicTableStats {
        self.topics.table_stats()
    }

    /// The counters file its sets are in, if it has one.
    pub(crate) fn counters_file(&self) -> Option<&Arc<CountersFile>> {
        self.counters.as_ref()
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
    /// The totals.
    pub fn totals(&self) -> Totals {
        self.totals
    }
    /// Open sessions.
    pub fn clients(&self) -> usize {
        self.sessions.iter().flatten().count()
    }
    /// A session by id.
    pub fn session(&self, id: u32) -> Option<&Session> {
        self.sessions.get(id as usize)?.as_ref()
    }
    /// A session by id, mutably.
    pub fn session_mut(&mut self, id: u32) -> Option<&mut Session> {
        self.sessions.get_mut(id as usize)?.as_mut()
    }
    /// Ids of open sessions.
    pub fn session_ids(&self) -> Vec<u32> {
        (0..self.sessions.len() as u32).filter(|&i| self.sessions[i as usize].is_some()).collect()
    }

    /// The id the next [`Router::attach`] will return.
    pub fn next_id(&self) -> u32 {
        self.free.last().copied().unwrap_or(self.sessions.len() as u32)
    }
}
