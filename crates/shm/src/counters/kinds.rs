//! What a set counts: its [`Kind`] (which side of which stream), and the
//! names of its values, in order, for each kind.

/// Which side of a stream a set counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// A publisher.
    Publisher = 1,
    /// A subscriber.
    Subscriber = 2,
    /// A reliable-UDP sender (publication on `udp://`).
    UdpSender = 3,
    /// A reliable-UDP receiver (subscription on `udp://`).
    UdpReceiver = 4,
    /// A router's totals.
    Router = 5,
    /// One client session of a router (label: the client's name and peer).
    RouterClient = 6,
    /// One topic through a router (label: the topic).
    RouterTopic = 7,
    /// The AF_XDP path of a `udp://` channel that asked for it (label: the
    /// channel); names from `tickwire_transport::XdpStats`.
    Xdp = 8,
    /// One routing agent of a router, beyond routing (label: the agent's
    /// role): its TCP links' system calls, the clients it closed as gone,
    /// and (the first agent) the password checks and the topic table.
    RouterAgent = 9,
    /// A router's accepting of TCP connections (label: the router's name):
    /// connections open and their limit, and the connections refused, by
    /// reason. Router-wide, written by the thread that accepts.
    RouterAccept = 10,
    /// One routing agent's requests and replies, and its queue groups
    /// (label: the agent's role).
    RouterRequests = 11,
    /// A router's link to another router of its cluster (label: the other
    /// router's name), written by the cluster agent.
    RouterClusterLink = 12,
    /// A program run under `tickwire accel` (label: the program and the
    /// interface): its UDP sockets over AF_XDP, written by any of its
    /// threads (values added atomically).
    Accel = 13,
}

impl Kind {
    /// Names of the values of a set of this kind, in index order.
    pub fn names(self) -> &'static [&'static str] {
        match self {
            Kind::Publisher => &PUB_NAMES,
            Kind::Subscriber => &SUB_NAMES,
            Kind::UdpSender => &UDP_SENDER_NAMES,
            Kind::UdpReceiver => &UDP_RECEIVER_NAMES,
            Kind::Router => &ROUTER_NAMES,
            Kind::RouterClient => &ROUTER_CLIENT_NAMES,
            Kind::RouterTopic => &ROUTER_TOPIC_NAMES,
            Kind::Xdp => &XDP_NAMES,
            Kind::RouterAgent => &ROUTER_AGENT_NAMES,
            Kind::RouterAccept => &ROUTER_ACCEPT_NAMES,
            Kind::RouterRequests => &ROUTER_REQUEST_NAMES,
            Kind::RouterClusterLink => &ROUTER_CLUSTER_LINK_NAMES,
            Kind::Accel => &ACCEL_NAMES,
        }
    }
    pub(crate) fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Kind::Publisher),
            2 => Some(Kind::Subscriber),
            3 => Some(Kind::UdpSender),
            4 => Some(Kind::UdpReceiver),
            5 => Some(Kind::Router),
            6 => Some(Kind::RouterClient),
            7 => Some(Kind::RouterTopic),
            8 => Some(Kind::Xdp),
            9 => Some(Kind::RouterAgent),
            10 => Some(Kind::RouterAccept),
            11 => Some(Kind::RouterRequests),
            12 => Some(Kind::RouterClusterLink),
            13 => Some(Kind::Accel),
            _ => None,
        }
    }
}

/// Publisher value indices.
pub mod publisher {
    /// Messages published.
    pub const MESSAGES: usize = 0;
    /// Payload bytes published.
    pub const BYTES: usize = 1;
    /// Offers refused with `BackPressured`.
    pub const BACK_PRESSURED: usize = 2;
    /// Offers refused with `NotConnected`.
    pub const NOT_CONNECTED: usize = 3;
    /// Claims aborted (dropped without commit; they become padding).
    pub const CLAIMS_ABORTED: usize = 4;
    /// PAD frames written at the end of the ring.
    pub const PADS: usize = 5;
    /// Lossy subscribers moved forward (each gets a `Lost` notice).
    pub const EVICTIONS: usize = 6;
    /// Slots of dead subscribers reclaimed.
    pub const REAPED: usize = 7;
    /// The log's lock taken over from a dead holder (a subscriber killed
    /// while joining).
    pub const LOCKS_TAKEN_OVER: usize = 8;
}
const PUB_NAMES: [&str; 9] = [
    "messages",
    "bytes",
    "back_pressured",
    "not_connected",
    "claims_aborted",
    "end_of_ring_pads",
    "lossy_evictions",
    "dead_subscribers_reaped",
    "locks_taken_over",
];

/// Subscriber value indices.
pub mod subscriber {
    /// Messages delivered to the handler.
    pub const MESSAGES: usize = 0;
    /// Payload bytes delivered.
    pub const BYTES: usize = 1;
    /// `Lost` notices delivered.
    pub const LOST_NOTICES: usize = 2;
    /// Bytes of stream skipped by `Lost` notices.
    pub const LOST_BYTES: usize = 3;
    /// Frames rejected as invalid (the subscriber stops on them).
    pub const INVALID_FRAMES: usize = 4;
    /// Claims of a dead publisher this subscriber padded out.
    pub const UNBLOCKED: usize = 5;
    /// Partial messages dropped (missing fragments, over max size).
    pub const REASSEMBLY_DROPPED: usize = 6;
    /// PAD frames skipped (end of ring, aborted claims, dead publishers).
    pub const PADS: usize = 7;
    /// Publishers found dead or silent (each an `Event::PublisherGone`).
    pub const PUBLISHERS_GONE: usize = 8;
}
const SUB_NAMES: [&str; 9] = [
    "messages",
    "bytes",
    "lost_notices",
    "lost_bytes",
    "invalid_frames",
    "unblocked_claims",
    "reassembly_dropped",
    "pads_skipped",
    "publishers_gone",
];

/// Reliable-UDP sender value names, in index order.
pub const UDP_SENDER_NAMES: [&str; 13] = [
    "messages",
    "bytes",
    "naks_received",
    "retransmits",
    "heartbeats",
    "back_pressured",
    "invalid_datagrams",
    "naks_unrecoverable",
    "frames_foreign",
    "unauthenticated",
    "replayed",
    "receivers_joined",
    "receivers_timed_out",
];

/// Reliable-UDP receiver value names, in index order.
pub const UDP_RECEIVER_NAMES: [&str; 12] = [
    "messages",
    "bytes",
    "naks_sent",
    "gaps_detected",
    "lost_events",
    "lost_bytes",
    "invalid_datagrams",
    "duplicates",
    "frames_foreign",
    "unauthenticated",
    "replayed",
    "other_session",
];

/// Router totals, in index order (see `tickwire_router::counters`).
pub const ROUTER_NAMES: [&str; 13] = [
    "clients",
    "clients_connected",
    "clients_disconnected",
    "protocol_violations",
    "messages_in",
    "messages_unwanted",
    "deliveries",
    "discards",
    "forwarded_to_agents",
    "forbidden",
    "cache_deliveries",
    "publishers_held",
    "slow_consumers_disconnected",
];

/// Router client values, in index order.
pub const ROUTER_CLIENT_NAMES: [&str; 9] = [
    "messages_in",
    "bytes_in",
    "messages_out",
    "bytes_out",
    "queue_depth",
    "queue_bytes",
    "discards",
    "rejects",
    "subscriptions",
];

/// Router topic values, in index order.
pub const ROUTER_TOPIC_NAMES: [&str; 4] = ["messages_in", "bytes_in", "deliveries", "bytes_out"];
/// Routing agent values, in index order (see `tickwire_router::agent`).
pub const ROUTER_AGENT_NAMES: [&str; 12] = [
    "socket_reads",
    "socket_writes",
    "readiness_polls",
    "heartbeat_timeouts",
    "logins_checked",
    "logins_remembered",
    "logins_failed",
    "logins_abandoned",
    "logins_throttled",
    "topic_evictions",
    "queue_trims",
    "queued_bytes",
];

/// A router's accepting values, in index order (see
/// `tickwire_router::accept`).
pub const ROUTER_ACCEPT_NAMES: [&str; 7] = [
    "connections",
    "max_connections",
    "refused_max_connections",
    "refused_per_address",
    "refused_no_descriptors",
    "accept_failures",
    "refused_ipc_logins",
];

/// A routing agent's request values, in index order (see
/// `tickwire_router::routing::request`).
pub const ROUTER_REQUEST_NAMES: [&str; 5] =
    ["requests", "no_responders", "replies", "replies_undeliverable", "queue_group_deliveries"];

/// A cluster link's value names: 1 while up, messages and bytes each way,
/// messages lost each way (for it: its link down or full; from it: gaps
/// in its numbers), the patterns it told, times the link was made, the
/// last round trip measured (microseconds).
pub const ROUTER_CLUSTER_LINK_NAMES: [&str; 10] = [
    "up",
    "messages_out",
    "bytes_out",
    "messages_in",
    "bytes_in",
    "lost_out",
    "lost_in",
    "interest",
    "connects",
    "round_trip_us",
];

/// `tickwire accel` value names (`Kind::Accel`).
pub const ACCEL_NAMES: [&str; 10] = [
    "sockets_accelerated",
    "sockets_open",
    "fallbacks",
    "fallbacks_multicast",
    "tx_packets",
    "tx_bytes",
    "rx_packets",
    "rx_bytes",
    "rx_dropped",
    "kernel_path",
];

/// AF_XDP value names (`tickwire_transport::XdpStats::values` order).
pub const XDP_NAMES: [&str; 16] = [
    "xdp_rx_packets",
    "xdp_rx_bytes",
    "xdp_tx_packets",
    "xdp_tx_bytes",
    "rx_ring_full",
    "fill_empty",
    "tx_ring_full",
    "tx_kicks",
    "kernel_rx",
    "kernel_tx",
    "checksum_failures",
    "checksum_partial",
    "malformed",
    "passed_to_kernel",
    "route_changes",
    "fallbacks",
];
