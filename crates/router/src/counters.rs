//! The router's counts: its totals and per-topic counts, and the indices
//! of its values in its counter sets (the names are
//! `tickwire_shm::counters::ROUTER_*_NAMES`, shown by `tickwire stat` and
//! the metrics). A few values come after the named ones, for the metrics
//! only: the queue bound, sessions closed at their hello timeout and
//! journal retention, a client's conflated
//! deliveries and back-pressure state.

use rustc_hash::FxHashMap;
use std::sync::Arc;
use tickwire_shm::counters::Kind;
use tickwire_shm::{CounterSet, CountersFile};
use topic as tc;

/// The router's totals (mirrored into its counter set).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Sessions opened.
    pub connected: u64,
    /// Sessions closed.
    pub disconnected: u64,
    /// Sessions closed for protocol violations.
    pub violations: u64,
    /// Messages published.
    pub messages_in: u64,
    /// Messages nobody subscribed to.
    pub unwanted: u64,
    /// Deliveries made or queued.
    pub deliveries: u64,
    /// Deliveries dropped by full queues (and messages dropped for
    /// another routing agent whose link was full).
    pub discards: u64,
    /// Messages handed to other routing agents.
    pub forwarded: u64,
    /// Refusals by authentication and ACLs (wrong passwords, publishes
    /// and subscriptions not allowed).
    pub forbidden: u64,
    /// Messages delivered from the last-value cache.
    pub cache_deliveries: u64,
    /// Times a publisher was held by a back-pressure client.
    pub back_pressured: u64,
    /// Sessions ended as slow consumers (policy `disconnect`, or
    /// `back-pressure` past its timeout).
    pub slow_disconnected: u64,
    /// Sessions closed for not being welcomed within
    /// `limits.hello_timeout` (no HELLO, a stalled frame or TLS
    /// handshake, a password check not done).
    pub hello_timeouts: u64,
}

impl std::ops::AddAssign for Totals {
    fn add_assign(&mut self, o: Self) {
        self.connected += o.connected;
        self.disconnected += o.disconnected;
        self.violations += o.violations;
        self.messages_in += o.messages_in;
        self.unwanted += o.unwanted;
        self.deliveries += o.deliveries;
        self.discards += o.discards;
        self.forwarded += o.forwarded;
        self.forbidden += o.forbidden;
        self.cache_deliveries += o.cache_deliveries;
        self.back_pressured += o.back_pressured;
        self.slow_disconnected += o.slow_disconnected;
        self.hello_timeouts += o.hello_timeouts;
    }
}

#[derive(Debug, Default)]
struct TopicStat {
    values: [u64; 4],
    set: Option<CounterSet>,
}

impl TopicStat {
    /// Counts `m` messages in (0 or 1) of `len` payload bytes, delivered
    /// `n` times.
    #[inline]
    fn add(&mut self, m: u64, n: u64, len: u64) {
        self.values[tc::MESSAGES_IN] += m;
        self.values[tc::BYTES_IN] += m * len;
        self.values[tc::DELIVERIES] += n;
        self.values[tc::BYTES_OUT] += n * len;
    }
}

/// Which of [`TopicCounts`]' counters a topic counts into, remembered in
/// its topic entry ([`crate::topics`]): no lookup per message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counted(u32);

impl Counted {
    /// Not yet counted: the first count finds its counters.
    pub(crate) const NOT_YET: Counted = Counted(u32::MAX);
}

impl Default for Counted {
    fn default() -> Self {
        Self::NOT_YET
    }
}

/// Per-topic counts: the first `limit` topics counted have a counter set
/// of their own, the rest are counted together as "(other topics)".
#[derive(Debug)]
pub(crate) struct TopicCounts {
    /// The topics with their own counters, and where they are in `stats`.
    named: FxHashMap<Box<str>, u32>,
    /// `stats[0]`: the other topics.
    stats: Vec<TopicStat>,
    limit: usize,
    counters: Option<Arc<CountersFile>>,
}

impl TopicCounts {
    /// Counts with `limit` topics of their own, into `counters`.
    pub(crate) fn new(limit: usize, counters: Option<Arc<CountersFile>>) -> Self {
        let other = TopicStat {
            values: [0; 4],
            set: counters.as_ref().and_then(|c| c.allocate(Kind::RouterTopic, 0, 0, "(other topics)").ok()),
        };
        Self { named: FxHashMap::default(), stats: vec![other], limit, counters }
    }

    /// Counts on `topic`'s counters (see [`TopicStat::add`]), found once
    /// per topic entry (`counted`).
    #[inline]
    pub(crate) fn add(&mut self, counted: &mut Counted, topic: &str, m: u64, n: u64, len: u64) {
        if *counted == Counted::NOT_YET {
            *counted = self.find(topic);
        }
        if let Some(stat) = self.stats.get_mut(counted.0 as usize) {
            stat.add(m, n, len);
        }
    }

    #[cold]
    fn find(&mut self, topic: &str) -> Counted {
        if let Some(&i) = self.named.get(topic) {
            return Counted(i);
        }
        if self.named.len() >= self.limit {
            return Counted(0);
        }
        let set = self.counters.as_ref().and_then(|c| c.allocate(Kind::RouterTopic, 0, 0, topic).ok());
        let i = self.stats.len() as u32;
        self.stats.push(TopicStat { values: [0; 4], set });
        self.named.insert(topic.into(), i);
        Counted(i)
    }

    /// Copies the counts into their counter sets.
    pub(crate) fn publish(&self) {
        for t in &self.stats {
            if let Some(set) = &t.set {
                set.set_all(&t.values);
            }
        }
    }
}

// The values past the names stay inside a set and clear of the names.
const _: () = {
    use tickwire_shm::counters::{ROUTER_CLIENT_NAMES, ROUTER_NAMES, VALUES};
    assert!(router::QUEUE_LIMIT_BYTES >= ROUTER_NAMES.len() && router::JOURNAL_RETAIN_BYTES < VALUES);
    // The metrics read the router's values in this order.
    assert!(router::HELLO_TIMEOUTS == router::QUEUE_LIMIT_BYTES + 1);
    assert!(client::CONFLATED >= ROUTER_CLIENT_NAMES.len() && client::HOLDING_PUBLISHERS < VALUES);
};

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
    /// [`Totals::slow_disconnected`](super::Totals::slow_disconnected).
    pub const SLOW_DISCONNECTED: usize = 12;
    /// `limits.queue_bytes`: the bound of each client's queue (a gauge;
    /// exported by the metrics only).
    pub const QUEUE_LIMIT_BYTES: usize = 13;
    /// [`Totals::hello_timeouts`](super::Totals::hello_timeouts) (exported
    /// by the metrics only).
    pub const HELLO_TIMEOUTS: usize = 14;
    /// The journal's `retain_bytes` (0: no journal on this routing agent,
    /// or no limit; exported by the metrics only).
    pub const JOURNAL_RETAIN_BYTES: usize = 15;
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
    /// Queued deliveries replaced by a newer one of their topic
    /// (conflation; exported by the metrics only).
    pub const CONFLATED: usize = 9;
    /// 1 while its frames are not read: a back-pressure client it
    /// publishes to is behind (exported by the metrics only).
    pub const HELD: usize = 10;
    /// Publishers it holds, a back-pressure client past its queue bound
    /// (exported by the metrics only).
    pub const HOLDING_PUBLISHERS: usize = 11;
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
