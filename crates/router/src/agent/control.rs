//! What a routing agent is told, and how: its control messages, the
//! mailbox that sends them and rings its doorbell, and what it shares
//! with the server.

use super::IoCounts;
use crate::accept::Slot;
use crate::access::{AuthResult, Users};
use crate::counters::Totals;
use crate::peers::Interest;
use crate::status::ClientStatus;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use tickwire_agent::Doorbell;
use tickwire_shm::{LogAppender, LogReader};
use tickwire_transport::tls::Wire;

/// What a routing agent is told by the server and the other agents.
pub(crate) enum Control {
    /// Serve this shared-memory client.
    Ipc {
        /// Its stream id (its log into the router is `tw-router-in-STREAM`).
        stream: u32,
        /// Its log into the router.
        reader: Box<LogReader>,
        /// Its log out of the router (created by the server).
        out: Box<LogAppender>,
        /// `ipc pid N uid U`.
        peer: String,
        /// Its HELLO, from the login socket.
        hello: Vec<u8>,
        /// Its Unix user, from the login socket.
        uid: u32,
    },
    /// Serve this TCP client.
    Tcp {
        /// Its connection.
        wire: Arc<Wire>,
        /// Where it is.
        peer: SocketAddr,
        /// Its place in the count of connections, given back when its
        /// socket is closed.
        slot: Slot,
        /// It speaks the NATS client protocol ([`crate::nats`]).
        nats: bool,
    },
    /// Another agent's clients' interest changed.
    Interest(Interest),
    /// A password check's answer.
    Authenticated(AuthResult),
    /// The users were reloaded.
    Users(Option<Arc<Users>>),
}

/// An agent's control channel and its doorbell: a send wakes the agent if
/// it is parked, and keeps it from parking until it has read the channel.
#[derive(Debug, Clone)]
pub(crate) struct Mailbox {
    tx: Sender<Control>,
    bell: Arc<Doorbell>,
}

impl Mailbox {
    pub(crate) fn new(tx: Sender<Control>, bell: Arc<Doorbell>) -> Self {
        Self { tx, bell }
    }

    /// Times the agent was woken by its doorbell, and times it waited.
    pub(crate) fn wakes(&self) -> (u64, u64) {
        self.bell.counts()
    }

    /// Sends `c`, and wakes the agent.
    pub(crate) fn send(&self, c: Control) -> Result<(), std::sync::mpsc::SendError<Control>> {
        let r = self.tx.send(c);
        self.bell.post();
        r
    }
}

/// What an agent shares with the server while it runs on its own thread.
#[derive(Debug, Default)]
pub(crate) struct AgentShared {
    /// Sessions it has closed (the server counts those it handed over).
    pub(crate) closed: AtomicUsize,
    /// Its totals, copied at every housekeeping.
    pub(crate) totals: Mutex<Totals>,
    /// Its sessions, described about once a second.
    pub(crate) status: Mutex<Vec<ClientStatus>>,
    /// Its journal, described at the same time (if it has one).
    pub(crate) journal: Mutex<Option<crate::status::JournalStatus>>,
    /// Its system calls on TCP links, copied at every housekeeping.
    pub(crate) io: Mutex<IoCounts>,
}
