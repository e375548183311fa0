//! # tickwire-client: talk to a tickwire router
//!
//! A [`Client`] connects to a router over shared memory (`ipc`: the router
//! serving a directory), TCP (`tcp://HOST:PORT`) or TLS (`tls://HOST:PORT`
//! with [`ClientOptions::tls_ca`]), publishes messages on
//! topics, subscribes to patterns with `*` and `>` wildcards, and polls for
//! what the router delivers, with each message's topic, flags and discard
//! count.
//!
//! ```text
//!  Client::publish ─► [log in]  or [len][PUBLISH] on TCP ─► router ─► [log out] or [len][DELIVER] ─► Client::poll(handler)
//!  Client::try_claim ─► write in place ─► commit   (shared memory: zero copy)
//! ```
//!
//! A client started before its router waits for it (`poll` reports
//! [`ClientEvent::Connected`] when it comes); a client whose router goes
//! away reports [`ClientEvent::Disconnected`] and reconnects on its own,
//! subscribing again to everything it had.
//!
//! # Examples
//!
//! ```no_run
//! use tickwire_client::{Client, ClientEvent, ClientOptions};
//! let mut client = Client::connect("ipc", ClientOptions::default())?;
//! client.subscribe("md/eu/>")?;
//! client.wait_connected(std::time::Duration::from_secs(5))?;
//! client.publish("md/eu/VOD", b"bid 101.25")?;
//! client.poll(|e| match e {
//!     ClientEvent::Message(m) => println!("{} {:?} (discarded before: {})", m.topic, m.payload, m.discarded),
//!     ClientEvent::Disconnected { reason } => eprintln!("router gone: {reason}"),
//!     _ => {}
//! }, 64);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod conn;
mod event;
mod flusher;
mod guaranteed;
mod options;

pub use client::{
    Client, ClientClaim, ClientError, ClientEvent, ClientOptions, Delivery, Gather, PublishError, Request,
    RequestError, RouterUri,
};
pub use tickwire_transport::link::{Batching, LinkStats};
pub use tickwire_wire::client::{flags, RejectCode, SlowConsumer};
pub use tickwire_wire::headers::{HeaderError, Headers};
