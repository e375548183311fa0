//! Indices of the router's values in its counter sets (the names are
//! `tickwire_shm::counters::ROUTER_*_NAMES`, shown by `tickwire stat`).

/// The router's totals (`Kind::Router`).
pub mod router {
    /// Sessions open now.
    pub const CLIENTS: usize = 0;
    /// Sessions opened since start.
    pub const CONNECTED: usize = 1;
    /// Sessions closed since start (any reason).
    pub const DISCONNECTED: usize = 2;
    /// Sessions closed for breaking the protocol (malformed, oversized,
    /// out-of-order frames, corrupt logs).
    pub const VIOLATIONS: usize = 3;
    /// Messages published into the router.
    pub const MESSAGES_IN: usize = 4;
    /// Messages no subscription wanted.
    pub const UNWANTED: usize = 5;
    /// Deliveries (one per subscriber per message).
    pub const DELIVERIES: usize = 6;
    /// Deliveries dropped by full client queues (and messages dropped for
    /// another routing agent whose link was full).
    pub const DISCARDS: usize = 7;
    /// Messages handed to other routing agents.
    pub const FORWARDED: usize = 8;
    /// Refusals by authentication and ACLs.
    pub const FORBIDDEN: usize = 9;
    /// Messages delivered from the last-value cache.
    pub const CACHE_DELIVERIES: usize = 10;
    /// Times a publisher was held by a back-pressure client.
    pub const BACK_PRESSURED: usize = 11;
}

/// One client session (`Kind::RouterClient`).
pub mod client {
    /// Frames read from the client.
    pub const MESSAGES_IN: usize = 0;
    /// Frame bytes read from the client.
    pub const BYTES_IN: usize = 1;
    /// Messages handed to its transport.
    pub const MESSAGES_OUT: usize = 2;
    /// Frame bytes handed to its transport.
    pub const BYTES_OUT: usize = 3;
    /// Deliveries waiting in its queue.
    pub const QUEUE_DEPTH: usize = 4;
    /// Bytes waiting in its queue.
    pub const QUEUE_BYTES: usize = 5;
    /// Deliveries dropped for it (queue full).
    pub const DISCARDS: usize = 6;
    /// Requests refused.
    pub const REJECTS: usize = 7;
    /// Subscriptions held.
    pub const SUBSCRIPTIONS: usize = 8;
}

/// One topic (`Kind::RouterTopic`).
pub mod topic {
    /// Messages published on it.
    pub const MESSAGES_IN: usize = 0;
    /// Their payload bytes.
    pub const BYTES_IN: usize = 1;
    /// Deliveries of them.
    pub const DELIVERIES: usize = 2;
    /// Payload bytes delivered.
    pub const BYTES_OUT: usize = 3;
}
