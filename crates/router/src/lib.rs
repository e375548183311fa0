//! # tickwire-router: topics, fan-out, shared-memory and TCP clients
//!
//! ```text
//!  client (ipc)  ─ PUBLISH ─► [its log in]  ──► LogReader ─┐                    ┌─► LogAppender ─► [its log out] ─► client (ipc)
//!                                                          ├─► Router::handle_frame ─ topic table (one lookup) ─ SubscriptionIndex (trie)
//!  client (tcp)  ─ [len][PUBLISH] ─► socket ─► FrameReader ┘        │ fan-out, once per client
//!                                                                    └─► Session::deliver ─► transport, or its bounded
//!                                                                        OutQueue (drop oldest, discard count on the next)
//!                                                                        ─► TcpOut (one write per duty cycle) ─► client (tcp)
//! ```
//!
//! Layers, from the bottom:
//! * [`index`]: which clients want a topic (`tickwire_topic` patterns in a
//!   trie with `*` and `>` branches); [`topics`]: one entry per topic seen,
//!   found with one hash lookup per publish, caching its subscribers (ACLs
//!   applied), the other agents wanting it, its conflation, counters and
//!   last-value slot until a subscription, the users or an agent's interest
//!   change; bounded, evicting.
//! * [`queue`]: a client's bounded outbound queue with Solace's discard
//!   indication.
//! * [`session`]: one client: its transport ([`Outbound`]), queue,
//!   subscriptions and counters.
//! * [`cache`]: the last-value cache; [`access`]: users, passwords
//!   (checked on a thread of their own) and topic ACLs.
//! * [`routing`]: the core, no I/O of its own: [`Router::handle_frame`]
//!   validates each client frame (the client protocol of
//!   `tickwire_wire::client`) and routes; [`Router::flush`] moves queues.
//!   Beside it, in private modules extending [`Router`]: the delivery loop
//!   (`fanout`), logging in (`login`), the slow-consumer policies
//!   (`slow`); and [`counters`], its totals and counter sets.
//! * [`guaranteed`]: guaranteed publishes stored in the journal
//!   (`tickwire_journal`) and acknowledged when durable; [`durable`]
//!   subscriptions replayed from it, acknowledged, redelivered.
//! * [`peers`]: with several routing agents, the patterns the other
//!   agents' clients hold and the rings that carry messages to them.
//! * [`tcp`]: length-prefixed frames on non-blocking sockets.
//! * [`agent`]: a routing agent's duty cycle: its clients' logs and
//!   sockets in, its router, its links from the other agents.
//! * [`server`]: finds shared-memory clients, accepts TCP ones, and hands
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

pub mod access;
pub mod agent;
pub mod cache;
pub mod config;
pub mod counters;
pub mod durable;
mod fanout;
pub mod guaranteed;
pub mod index;
mod login;
pub mod metrics;
pub mod peers;
pub mod queue;
pub mod routing;
pub mod server;
pub mod session;
mod slow;
pub mod status;
pub mod tcp;
pub mod topics;

pub use agent::RoutingAgent;
pub use config::RouterConfig;
pub use counters::Totals;
pub use index::SubscriptionIndex;
pub use routing::{Disconnect, Limits, Router};
pub use server::{Server, ShutdownReport, StartError};
pub use session::{MemoryOut, Outbound, Session};
pub use tickwire_wire::client::SlowConsumer;
