//! # tickwire-driver: reliable UDP publications and subscriptions
//!
//! ```text
//!  app thread ── offer ──► Publication ─ do_work ─► Sender (proto) ─► Transport ─► wire
//!  app thread ◄─ poll ──── Subscription ◄──────────  Receiver (proto) ◄─ Transport ◄─ wire
//!                               └── STATUS / NAK back to the sender ──┘
//! ```
//!
//! **Threading: embedded, invoker mode.** The protocol runs on the thread
//! that owns the publication or subscription: `Publication::do_work` and
//! `Subscription::poll` are the duty cycles (Aeron calls this the agent
//! invoker). There is no driver thread to hand messages to, so no queue hop
//! and no extra core: on a 2-core machine both ends can spin. A separate
//! driver process shared by several clients through shared-memory logs is
//! left for the router work, where clients attach over shared memory anyway.
//!
//! Channels are `udp://host:port` (unicast: the subscription binds it, the
//! publication sends to it) or `udp://239.x.y.z:port?interface=A` (multicast:
//! every member binds the group's port; data and control share the group,
//! so receivers see each other's NAKs and suppress their own). Every setting
//! is a URI parameter; see [`config`] and `docs/configuration.md`.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
mod publication;
mod subscription;
pub mod units;
pub mod uri;

pub use config::{ChannelConfig, DriverError};
pub use publication::Publication;
pub use subscription::Subscription;
pub use tickwire_proto::{Event, Message, OfferError, ReceiverStats, SenderStats};
pub use uri::{ChannelUri, UriError};

/// Nanoseconds on CLOCK_MONOTONIC.
pub(crate) fn now_ns() -> u64 {
    tickwire_shm::os::monotonic_ns()
}
