//! A router cluster across hosts: subscribers anywhere, each message
//! crossing each link once.
//!
//! ```text
//!  router A                                                     router B
//!  agent k ─ publish ─► link ring ─► ClusterAgent ─ MESSAGE ─► ClusterAgent ─► link ring ─► agent j ─► B's subscribers
//!          ◄─ Interest (agent n) ──                ◄─ INTEREST ─              ─ Interest ─►
//! ```
//!
//! The cluster is one more agent among a router's routing agents
//! ([`crate::peers`]): agent number `n` when there are `n` routing
//! agents, on a thread of its own or, with one routing agent, on that
//! agent's, sharing its doorbell (`[router.cluster] thread`,
//! [`ClusterSettings::own_thread`]) ([`ClusterAgent`]). To the routing
//! agents it is an agent whose clients want what the other routers'
//! clients want, so they forward it matching messages through a ring, as
//! to any agent; what it receives from other routers it hands to the
//! routing agents whose clients want it, and they deliver it to their own
//! clients only. A message therefore makes one hop between routers, never
//! two: no loop and no duplicate, whatever the links and subscriptions.
//!
//! * [`interest`]: which patterns to tell peers (one that another covers
//!   is not told: `md/>` covers `md/eu/*`) and which peers want a topic.
//! * [`groups`]: queue groups with members on several routers, each
//!   message still to one member of each (local members first, else one
//!   router picked by weight).
//! * [`link`]: one connection to another router, its handshake (both
//!   prove they hold the cluster's secret) over the batched stream link of
//!   `tickwire_transport::link`.
//! * [`retell`]: a new link told what this router holds, as it drains.
//! * [`ClusterAgent`]: the links (full mesh: every router dials the routers
//!   it is told of, learns the others from them, and two routers keep one
//!   link: the one the router with the lower name dialed), their
//!   heartbeats and backoff, the sequence numbers that make a message lost
//!   while a link was down a counted gap, and the status.
//!
//! The protocol's frames are `tickwire_wire::cluster`.

pub(crate) mod agent;
pub mod groups;
pub mod interest;
pub mod link;
mod messages;
mod net;
pub mod retell;

pub use agent::ClusterAgent;

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

/// What a router needs to join a cluster.
#[derive(Clone)]
pub struct ClusterSettings {
    /// The cluster's name: links between routers of different names are
    /// refused.
    pub cluster: String,
    /// This router's name (unique in its cluster).
    pub name: String,
    /// Where it takes links from other routers.
    pub listen: SocketAddr,
    /// What it tells others to dial (`listen`, unless its address is
    /// unspecified and another is given).
    pub advertise: String,
    /// Where its own clients connect, told to the other routers for their
    /// clients (URIs separated by commas; empty: none told): `[router.cluster]
    /// client_advertise`, else its TCP listeners not on an unspecified
    /// address (filled in when they are bound).
    pub clients: String,
    /// The routers it dials at start (`IP:PORT`, names resolved when the
    /// configuration was read).
    pub peers: Vec<String>,
    /// The cluster's shared secret.
    pub secret: Vec<u8>,
    /// Heartbeats on idle links; a link silent for twice this is dropped.
    pub heartbeat: Duration,
    /// A router down this long is forgotten (`[router.cluster]
    /// forget_after`).
    pub forget_after: Duration,
    /// Largest frame read from another router: `limits.max_frame` plus
    /// [`link::FRAME_OVERHEAD`] (every router of a cluster needs the same
    /// `limits.max_frame`: a larger message ends a link).
    pub max_frame: usize,
    /// TLS on the links, both ends showing a certificate that names their
    /// router (none: plain TCP, authenticated by the secret alone).
    pub tls: Option<tickwire_transport::tls::PeerTls>,
    /// The cluster's agent on a thread of its own (`Some(true)`), or on
    /// the routing agent's when the router has one, sharing its doorbell
    /// (`Some(false)`: a message crosses no thread between a client and a
    /// link); `None` decides as `[router.cluster] thread = "auto"` says.
    pub own_thread: Option<bool>,
}

impl std::fmt::Debug for ClusterSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSettings")
            .field("cluster", &self.cluster)
            .field("name", &self.name)
            .field("listen", &self.listen)
            .field("peers", &self.peers)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

/// Client URIs a router tells the others, and takes from each, at most.
pub const CLIENT_URIS_MAX: usize = 16;

/// `tcp://HOST:PORT`, `tls://HOST:PORT` or `nats://HOST:PORT`: a port a
/// number, a host others can reach (not `0.0.0.0` or `[::]`), at most 255
/// bytes, no commas, spaces or control characters (it goes in a
/// comma-separated list, and in a WELCOME after a newline).
pub fn is_client_uri(uri: &str) -> bool {
    let scheme = ["tcp://", "tls://", "nats://"].iter().find_map(|s| uri.strip_prefix(s));
    let Some(rest) = scheme else { return false };
    let Some((host, port)) = rest.rsplit_once(':') else { return false };
    let unspecified = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .is_ok_and(|a| a.is_unspecified());
    uri.len() <= 255
        && !host.is_empty()
        && !unspecified
        && port.parse::<u16>().is_ok_and(|p| p != 0)
        && !rest.contains(',')
        && !rest.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// Where the cluster's other routers take clients, their links up: URIs
/// separated by commas, as their HELLOs said. The cluster's agent writes it
/// as links come up and go down; the routing agents read it at each
/// WELCOME (a client of the router then knows where to fail over to).
#[derive(Debug, Default)]
pub struct OtherRouters(std::sync::Mutex<String>);

impl OtherRouters {
    /// The URIs, separated by commas (empty: none known).
    pub fn get(&self) -> String {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Sets the URIs (the cluster's agent, as links come up and go down).
    pub fn set(&self, uris: String) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = uris;
    }
}

/// The cluster as one router sees it (in `router-status.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ClusterStatus {
    /// The cluster's name.
    pub cluster: String,
    /// Where this router takes links.
    pub listen: String,
    /// Patterns this router's clients hold, and how many of them its peers
    /// are told (the rest are covered by others).
    pub patterns_held: usize,
    /// ... told.
    pub patterns_told: usize,
    /// Each other router it knows.
    pub links: Vec<LinkStatus>,
    /// Links refused (a wrong secret, cluster, name or certificate; a bad
    /// frame).
    pub refused: u64,
    /// Links speak TLS.
    #[serde(default)]
    pub tls: bool,
}

/// One other router of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LinkStatus {
    /// Its name.
    pub router: String,
    /// Where it takes links.
    pub addr: String,
    /// `up`, or `down` (being dialed, or waiting for it to dial).
    pub state: String,
    /// Messages and bytes sent to it.
    pub messages_out: u64,
    /// ...
    pub bytes_out: u64,
    /// Messages and bytes received from it.
    pub messages_in: u64,
    /// ...
    pub bytes_in: u64,
    /// Messages for it dropped: its link down or full.
    pub lost_out: u64,
    /// Messages from it lost (gaps in its sequence), told to the
    /// subscribers they were for as discards.
    pub lost_in: u64,
    /// Patterns it told this router.
    pub interest: usize,
    /// (Pattern, queue group) pairs its clients hold members of.
    #[serde(default)]
    pub groups: usize,
    /// Times the link was made.
    pub connects: u64,
    /// Milliseconds since it last came up or went down.
    pub for_ms: u64,
    /// The last round trip measured on the link (a PING and its PONG,
    /// once per heartbeat interval), microseconds; 0 before the first.
    #[serde(default)]
    pub round_trip_us: u64,
}
