//! # tickwire-router: topics, fan-out, shared-memory and TCP clients
//!
//! ```text
//!  client (ipc)  ─ PUBLISH ─► [its log in]  ──► LogReader ─┐                    ┌─► LogAppender ─► [its log out] ─► client (ipc)
//!                                                          ├─► Router::handle_frame (routing: sessions ─► publish)
//!  client (tcp)  ─ [len][PUBLISH] ─► socket ─► FrameReader ┘        │ one lookup in the topic table: its targets, agents, ...
//!                                                                    ├─► other agents (peers: a ring each)
//!                                                                    └─► Session::deliver ─► transport, or its bounded
//!                                                                        OutQueue (drop oldest, discard count on the next)
//!                                                                        ─► TcpOut (one write per duty cycle) ─► client (tcp)
//! ```
//!
//! Layers, from the bottom:
//! * [`index`]: which clients want a topic (`tickwire_topic` patterns in a
//!   trie with `*` and `>` branches; no cache of its own).
//! * [`topics`]: the topic table, one entry per topic seen, found with one
//!   hash lookup per publish. An entry holds everything a publish on its
//!   topic needs: its subscribers with the ACLs applied, the other agents
//!   wanting it (both recomputed after a subscription, the users or an
//!   agent's interest change: an epoch), whether it is conflated, its
//!   counters and its last-value slot. Bounded; a topic not used lately is
//!   evicted, and evictions are counted.
//! * [`queue`]: a client's bounded outbound queue with Solace's discard
//!   indication; [`session`]: one client: its transport ([`Outbound`]),
//!   queue, subscriptions and counters.
//! * [`cache`]: the last-value cache; [`access`]: users, passwords
//!   (checked on a thread of their own) and topic ACLs; [`peers`]: with
//!   several routing agents, the patterns the other agents' clients hold
//!   and the rings that carry messages to them.
//! * [`routing`]: the core, sans I/O: [`Router`] takes each client frame
//!   ([`Router::handle_frame`], the client protocol of
//!   `tickwire_wire::client`) and hands back what to send
//!   ([`Router::flush`]) and which sessions must end; it is given the
//!   time, never reads it. One file per concept, each with its own state:
//!   sessions and their frames, the publish path, logging in and the hello
//!   deadline, slow consumers, [`guaranteed`] publishes in the journal
//!   (`tickwire_journal`) and [`durable`] subscriptions replayed from it,
//!   and what it reports ([`counters`], [`status`]).
//! * [`tcp`]: length-prefixed frames on non-blocking sockets.
//! * [`agent`]: a routing agent's duty cycle: its clients' logs and
//!   sockets in, its router, its links from the other agents.
//! * [`accept`]: takes TCP connections and refuses, at once and with a
//!   reason, those past `limits.max_connections`, the per-address limit,
//!   or the descriptors (a spare one kept to refuse with); counts open
//!   connections where their sockets are opened and closed.
//! * [`server`]: takes its directory, its user's own, and the directory's
//!   lock (`lock`); finds shared-memory clients, accepts TCP ones, and hands
//!   each to the agent serving the fewest; runs the first agent and starts
//!   the others; [`config`] is its `router.toml`.
//! * [`metrics`] (Prometheus, read from the counter sets) and [`status`]
//!   (`tickwire router status`): what operators see.
//!
//! Everything a client sends is untrusted: a malformed, oversized or
//! out-of-order frame ends that client's session with a CLOSE naming the
//! reason, and nothing else.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod accept;
pub mod access;
pub mod agent;
pub mod auth;
pub mod cache;
pub mod cluster;
pub mod config;
pub mod counters;
pub mod index;
pub mod ipc_login;
mod lock;
pub mod metrics;
pub mod nats;
pub mod peers;
pub mod queue;
pub mod routing;
pub mod server;
pub mod session;
mod slots;
pub mod status;
pub mod tcp;
pub mod topics;

pub use routing::{durable, guaranteed};

pub use agent::RoutingAgent;
pub use config::RouterConfig;
pub use counters::Totals;
pub use index::SubscriptionIndex;
pub use routing::{Disconnect, Limits, Router};
pub use server::{Server, ShutdownReport, StartError};
pub use session::{MemoryOut, Outbound, Session};
pub use tickwire_wire::client::SlowConsumer;
