//! Memory that follows the limits: what the clients' queues hold, as the
//! allocator sees it ([`OutQueue::allocated`](crate::queue::OutQueue::allocated)),
//! kept under the router-wide `limits.max_queued_bytes`, and memory given
//! back when it is no longer used.
//!
//! * Every housekeeping, each queue gives back what it no longer uses
//!   (all of it once empty, half while it holds under a quarter), and the
//!   queues' memory is counted again.
//! * Between two counts, the growth of each queue a delivery grew is added
//!   (a realloc is the only way a queue grows), so the count is never
//!   below the truth and the bound is checked as soon as it is crossed.
//! * Past this agent's share of `max_queued_bytes` (the bound divided by
//!   the routing agents), the largest queues are cut to a common level
//!   that brings the total to seven eighths of the share, each by its
//!   slow-consumer policy: `drop-oldest` drops its oldest (counted as
//!   discards, the next delivery carrying the count) and stays squeezed to
//!   that level until the total is under three quarters of the share;
//!   `disconnect` and `back-pressure` (which never drop) are ended as slow
//!   consumers with the reason. A client whose output moved within the
//!   last 500 ms is left alone unless the others alone cannot make room;
//!   then the clients whose output has been still longest are cut first,
//!   as many as make room, in steps of 20 ms, those whose socket is full
//!   first within a step (in a run's first 500 ms every client moved
//!   lately, and this ranking, not the window, spares the one that
//!   reads). A client whose output moved since the last housekeeping is
//!   let go of its squeeze, and a queue under the level is not touched: a
//!   client that keeps reading loses nothing while others stall.
//! * Once 1 MiB or more was given back (queues, ended sessions and their
//!   subscriptions) and the frees have stopped (or every 64 MiB while
//!   they go on), the allocator is asked to return its free memory to
//!   the OS (`tickwire_shm::os::release_free_memory`): glibc keeps freed
//!   memory otherwise.
//!
//! Its state is [`Memory`].

use super::{Disconnect, Router};
use tickwire_wire::client::{RejectCode, SlowConsumer};

/// Bytes given back, once the frees stop (a housekeeping with none), before
/// the allocator is asked to return its free memory to the OS.
const RELEASE_AFTER: usize = 1 << 20;

/// Bytes given back after which it is asked even while frees go on.
const RELEASE_EVERY: usize = 64 << 20;

/// Housekeepings (of 20 ms) after giving memory back that it is given
/// back once more: past the next status write (once a second).
const AGAIN_AFTER: u32 = 75;

/// What a subscription is taken to free when it goes, bytes (its pattern,
/// its index node, its entry in its session's map): for deciding when to
/// ask the allocator to give memory back, not a measure.
pub(super) const SUBSCRIPTION_BYTES: usize = 256;

/// A client is taken to be reading while its output moved within this
/// long, ns: 500 ms, longer than the pauses a busy or virtual host gives a
/// reader that keeps up (a 20 ms window squeezed a reader paused for that
/// long, and it lost thousands of messages).
const READING_NS: u64 = 500_000_000;

/// How long clients' output has been still is compared in steps of this
/// many ns (20 ms, a housekeeping): the clients of one step are cut
/// alike.
const STILL_STEP_NS: u64 = 20_000_000;

/// The least a squeezed queue keeps, bytes.
const MIN_LEVEL: usize = 4 << 10;

/// The queues' memory, and what was given back.
#[derive(Debug, Default)]
pub(super) struct Memory {
    /// Bytes the queues have allocated: the last count, plus what
    /// deliveries grew them by since (never below the truth).
    queued: usize,
    /// Some queue is squeezed below its limit.
    squeezed: bool,
    /// Bytes given back since the allocator last returned memory.
    released: usize,
    /// `released` at the last housekeeping.
    released_before: usize,
    /// Housekeepings until the allocator is asked once more (0: not):
    /// what was freed just after the first time (the status of sessions
    /// that went, written once a second) goes back too.
    again: u32,
    /// Sessions to end for the bound (`disconnect`, `back-pressure`).
    pub(super) over: Vec<(u32, Disconnect)>,
    /// Queues cut by the bound since start.
    trims: u64,
    /// The router's clock (monotonic ns) at the last flush or
    /// housekeeping: how long a client's output has been still is
    /// measured from it.
    pub(super) now: u64,
}

impl Memory {
    /// Notes `bytes` given back (a session ended, subscriptions went).
    pub(super) fn released(&mut self, bytes: usize) {
        self.released = self.released.saturating_add(bytes);
    }
}

impl Router {
    /// This agent's share of `limits.max_queued_bytes` (0: no bound).
    fn queued_budget(&self) -> usize {
        self.limits.max_queued_bytes / self.agents.max(1) as usize
    }

    /// Bytes this agent's queues have allocated (as of the last count,
    /// plus growth since).
    pub fn queued_allocated(&self) -> usize {
        self.memory.queued
    }

    /// Queues cut by `limits.max_queued_bytes` since start.
    pub fn queue_trims(&self) -> u64 {
        self.memory.trims
    }

    /// Deliveries grew the queues by `grown` bytes: past the bound, the
    /// largest are cut now.
    #[inline]
    pub(super) fn queues_grew(&mut self, grown: usize) {
        self.memory.queued += grown;
        let budget = self.queued_budget();
        if budget > 0 && self.memory.queued > budget {
            self.trim_queued(budget);
        }
    }

    /// The housekeeping's, at `now` (monotonic ns): queues give back what
    /// they no longer use, the bound is enforced on a fresh count
    /// (squeezed queues let go once the total is under three quarters of
    /// it), and the allocator returns its free memory once a few MiB were
    /// given back.
    pub fn housekeep_memory(&mut self, now: u64) {
        self.memory.now = now;
        let mut total = 0;
        for s in self.sessions.iter_mut().flatten() {
            self.memory.released += s.queue.trim();
            total += s.queue.allocated();
            let out = s.stats.messages_out;
            if out != s.out_seen {
                // It reads (sent straight, or flushed): squeezed while it
                // lagged, it is not now.
                (s.out_seen, s.moved_at) = (out, now);
                s.queue.unsqueeze();
            }
        }
        self.memory.queued = total;
        let budget = self.queued_budget();
        if budget > 0 && total > budget {
            self.trim_queued(budget);
        } else if self.memory.squeezed && total <= budget / 4 * 3 {
            for s in self.sessions.iter_mut().flatten() {
                s.queue.unsqueeze();
            }
            self.memory.squeezed = false;
        }
        let m = &mut self.memory;
        let stopped = m.released == m.released_before;
        m.released_before = m.released;
        if m.released >= RELEASE_EVERY || (stopped && m.released >= RELEASE_AFTER) {
            (self.memory.released, self.memory.released_before) = (0, 0);
            self.memory.again = AGAIN_AFTER;
            tickwire_shm::os::release_free_memory();
        } else if self.memory.again > 0 {
            self.memory.again -= 1;
            if self.memory.again == 0 {
                tickwire_shm::os::release_free_memory();
            }
        }
    }

    /// Cuts the largest queues to one level, so that all together hold
    /// seven eighths of `budget`, each by its policy (see the module doc).
    fn trim_queued(&mut self, budget: usize) {
        let target = budget - budget / 8;
        // Sessions closing, or about to be, give theirs back.
        let going = |id: u32, s: &crate::Session| s.closing || self.memory.over.iter().any(|o| o.0 == id);
        // Clients whose output moved lately are cut only if the others
        // alone cannot make room, the stillest first, as many as that
        // takes.
        let now = self.memory.now;
        let (mut total, mut reading) = (0, 0);
        let mut sizes: Vec<(usize, u32)> = Vec::new();
        let mut readers: Vec<(u64, usize, u32)> = Vec::new();
        for (id, s) in self.sessions.iter().enumerate() {
            let Some(s) = s else { continue };
            let a = s.queue.allocated();
            if a > 0 && !going(id as u32, s) {
                total += a;
                let still = now.saturating_sub(s.moved_at);
                if still < READING_NS {
                    // Ranked by the step it has been still for, then by
                    // whether its socket is full now.
                    let rank = still / STILL_STEP_NS * 2 + u64::from(s.write_blocked());
                    reading += a;
                    readers.push((rank, a, id as u32));
                } else {
                    sizes.push((a, id as u32));
                }
            }
        }
        if reading + MIN_LEVEL * sizes.len() > target {
            // Sorted only when readers must be cut: this runs on every
            // delivery past the bound.
            readers.sort_unstable_by_key(|r| std::cmp::Reverse(r.0));
        }
        let mut next = readers.iter().peekable();
        while reading + MIN_LEVEL * sizes.len() > target {
            // The stillest rank goes in whole: clients that stopped about
            // together are cut alike.
            let Some(&&(rank, ..)) = next.peek() else { break };
            while let Some(&(_, a, id)) = next.next_if(|r| r.0 == rank) {
                reading -= a;
                sizes.push((a, id));
            }
        }
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        // The level: the `k` largest cut to it and the rest as they are
        // make `target`, and it is no lower than the next one's size.
        let (mut above, mut cut, mut level) = (0, sizes.len(), MIN_LEVEL);
        for (k, &(size, _)) in sizes.iter().enumerate() {
            above += size;
            let l = target.saturating_sub(total - above) / (k + 1);
            if l >= sizes.get(k + 1).map_or(0, |s| s.0) {
                (cut, level) = (k + 1, l.max(MIN_LEVEL));
                break;
            }
        }
        let max = self.limits.max_queued_bytes;
        for &(size, id) in &sizes[..cut] {
            if size <= level {
                continue;
            }
            let Some(Some(s)) = self.sessions.get_mut(id as usize) else { continue };
            match s.policy {
                SlowConsumer::DropOldest => {
                    let dropped = u64::from(s.queue.squeeze(level));
                    s.stats.discards += dropped;
                    self.totals.discards += dropped;
                    self.memory.released += size.saturating_sub(s.queue.allocated());
                    self.memory.trims += 1;
                    self.memory.squeezed = true;
                }
                SlowConsumer::Disconnect | SlowConsumer::BackPressure => {
                    let reason = format!(
                        "slow consumer: the router's queues hold more than limits.max_queued_bytes \
                         ({max} bytes) and this client's ({size} bytes) is among the largest (policy {})",
                        s.policy.as_str()
                    );
                    self.memory.over.push((id, Disconnect { code: RejectCode::Limit, reason }));
                    self.memory.trims += 1;
                }
            }
        }
        let over = &self.memory.over;
        self.memory.queued = (self.sessions.iter().enumerate())
            .filter_map(|(id, s)| s.as_ref().filter(|s| !s.closing && !over.iter().any(|o| o.0 == id as u32)))
            .map(|s| s.queue.allocated())
            .sum();
    }
}
