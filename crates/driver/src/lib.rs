//! # tickwire-driver: publications and subscriptions on every channel
//!
//! An application publishes through a [`Publication`] and reads through a
//! [`Subscription`], whatever the [`Channel`]:
//!
//! ```text
//!  ipc:NAME   Publication ─ offer ─► LogAppender ─► [shared-memory log] ─► LogReader ─► Subscription::poll(handler)
//!             (tickwire-shm: claim, commit in place; readers poll the frames where they lie)
//!
//!  udp://...  Publication ─ offer ─► UdpSender ─► proto::Sender ─► Transport ═ UDP ═► Transport ─► proto::Receiver ─► UdpReceiver ─► Subscription::poll(handler)
//!                           do_work  (retention, window,  (sendmmsg)            (recvmmsg)  (reorder window, NAK,
//!                                     retransmit)                                             Lost events)
//!                                    ◄══════════════════════ STATUS / NAK ═════════════════════╝
//! ```
//!
//! Both paths split messages with the same `tickwire_wire::Fragmenter` and
//! deliver through the same `tickwire_wire::Reassembler`, so handlers see
//! the same [`Event`]s and publishers the same [`OfferError`]s.
//!
//! **Threading: embedded, invoker mode.** The protocol runs on the thread
//! that owns the publication or subscription: `Publication::do_work` and
//! `Subscription::poll` are the duty cycles (Aeron calls this the agent
//! invoker). There is no driver thread to hand messages to, so no queue hop
//! and no extra core: on a 2-core machine both ends can spin. A separate
//! driver process shared by several clients through shared-memory logs is
//! left for the router, where clients attach over shared memory anyway.
//!
//! UDP channels are `udp://host:port` (unicast: the subscription binds it,
//! the publication sends to it) or `udp://239.x.y.z:port?interface=A`
//! (multicast: every member binds the group's port; data and control share
//! the group, so receivers see each other's NAKs and suppress their own).
//! Every setting is a URI parameter; see [`config`] and
//! `docs/configuration.md`.
//!
//! # Examples
//!
//! ```
//! use tickwire_driver::{Channel, Event, Publication, Subscription};
//! let dir = std::env::temp_dir().join(format!("tw-driver-doc-{}", std::process::id()));
//! let ctx = tickwire_shm::Context::new(&dir)?;
//! let channel: Channel = "ipc:doc".parse()?;
//! let mut publication = Publication::open(&ctx, &channel, 1)?;
//! let mut subscription = Subscription::open(&ctx, &channel, 1)?;
//! publication.offer_topic("md/eu/VOD", b"bid 101.25")?;
//! let mut got = Vec::new();
//! subscription.poll(|e| if let Event::Message(m) = e { got.push((m.topic.to_owned(), m.payload.to_vec())) }, 10)?;
//! assert_eq!(got, [("md/eu/VOD".to_owned(), b"bid 101.25".to_vec())]);
//! # drop((publication, subscription, ctx)); std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod channel;
pub mod config;
mod publication;
mod subscription;
pub mod udp;
pub mod units;
pub mod uri;

pub use channel::Channel;
pub use config::{read_key, write_key, ChannelConfig, DriverError, DEFAULT_BUFFER_BYTES};
pub use publication::Publication;
pub use subscription::Subscription;
pub use tickwire_proto::{AuthKey, Invalid, InvalidCounts, ReceiverChange, ReceiverStats, SenderStats};
pub use tickwire_transport::XdpStats;
pub use tickwire_wire::{Event, Message, OfferError};
pub use uri::{ChannelUri, UriError};

/// Nanoseconds on CLOCK_MONOTONIC.
pub(crate) fn now_ns() -> u64 {
    tickwire_shm::os::monotonic_ns()
}

/// The code examples of the README, ARCHITECTURE.md and the guides in
/// docs/, compiled by `cargo test` (`make test`) so that they cannot drift
/// from the API (`tickwire-cli`'s doc_tests check that every document with
/// a ```rust block is listed here).
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
#[doc = include_str!("../../../ARCHITECTURE.md")]
#[doc = include_str!("../../../docs/transports.md")]
#[doc = include_str!("../../../docs/router.md")]
#[doc = include_str!("../../../docs/guaranteed.md")]
#[doc = include_str!("../../../docs/ha.md")]
pub struct ReadmeDoctests;
