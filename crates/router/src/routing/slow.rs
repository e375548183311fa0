//! Slow consumers ([`SlowConsumer`](crate::SlowConsumer)): what the
//! routing core does when a client's queue is full. `drop-oldest` lives in
//! the queue itself ([`crate::queue`]); here are `disconnect` (the session
//! is closed, its CLOSE sent before it goes) and `back-pressure` (the
//! publishers that send it past its bound are held, not read, until it has
//! read half).
//!
//! Its state is [`SlowConsumers`]: the sessions found slow, and the count
//! of publishers held.

use super::{mark, Disconnect, Router};
use crate::session::Session;
use tickwire_wire::client::{ClientKind, ClientRepr, RejectCode, SlowConsumer};

/// The slow consumers found, and the publishers held for them.
#[derive(Debug, Default)]
pub(super) struct SlowConsumers {
    /// Sessions whose queue overflowed under [`SlowConsumer::Disconnect`]
    /// ([`Router::take_slow`]).
    slow: Vec<u32>,
    /// Back-pressure sessions over their bound after one delivery (kept:
    /// no allocation per message).
    held: Vec<u32>,
    /// Publishers held by back-pressure sessions, counted with
    /// repetition; 0: nothing held, nothing to check.
    holds: usize,
}

impl SlowConsumers {
    /// Notes what a delivery to session `c` left: its queue overflowed
    /// under `disconnect`, or went past its bound under `back-pressure`
    /// (`local`: the publisher is on this agent, so it can be held).
    #[inline]
    pub(super) fn after_delivery(&mut self, c: u32, s: &Session, dropped: u32, local: bool) {
        match s.policy {
            SlowConsumer::Disconnect if dropped > 0 => self.slow.push(c),
            SlowConsumer::BackPressure if local && s.queue.is_over() => self.held.push(c),
            _ => {}
        }
    }

    /// Whether the last publish sent back-pressure sessions past their
    /// bound ([`Router::hold`] its publisher).
    #[inline]
    pub(super) fn any_newly_held(&self) -> bool {
        !self.held.is_empty()
    }
}

impl Router {
    /// Starts ending session `id` for a reason its client should hear
    /// although it is not reading (a slow consumer): its subscriptions go
    /// now and its queued deliveries are dropped (counted), so its CLOSE is
    /// the next thing it reads after what its transport already holds. The
    /// agent ends the session ([`Router::disconnect`]) once
    /// [`Router::close_sent`], or at a deadline. False if it is gone or
    /// already closing.
    pub fn begin_close(&mut self, id: u32, why: &Disconnect) -> bool {
        let Some(Some(s)) = self.sessions.get_mut(id as usize) else { return false };
        if s.closing {
            return false;
        }
        s.closing = true;
        self.totals.slow_disconnected += 1;
        let subscriptions: Vec<(u32, Box<str>)> = s.subscriptions.drain().collect();
        for (sid, text) in subscriptions {
            let Some(p) = super::parsed(&text) else { continue };
            self.drop_subscription(&p, id, sid);
        }
        let Some(Some(s)) = self.sessions.get_mut(id as usize) else { return false };
        let held = s.queue.allocated();
        let dropped = s.queue.clear() as u64;
        self.memory.released(held);
        s.stats.discards += dropped;
        self.totals.discards += dropped;
        let close =
            ClientRepr { value: why.code as u32, body: why.reason.as_bytes(), ..ClientRepr::new(ClientKind::Close) };
        s.send_control(&close);
        mark(&mut self.sessions, &mut self.backlog, id);
        true
    }

    /// Whether closing session `id` has sent its CLOSE (or is gone, or
    /// not closing).
    pub fn close_sent(&self, id: u32) -> bool {
        self.session(id).is_none_or(|s| !s.closing || !s.needs_flush())
    }

    /// Whether session `id` is closing ([`Router::begin_close`]).
    pub fn is_closing(&self, id: u32) -> bool {
        self.session(id).is_some_and(|s| s.closing)
    }

    /// Sessions to end because their queue overflowed and their policy
    /// is [`SlowConsumer::Disconnect`], each once, with why.
    /// Those over the router-wide `limits.max_queued_bytes` under
    /// `disconnect` or `back-pressure` too (`routing::memory`).
    pub fn take_slow(&mut self) -> Vec<(u32, Disconnect)> {
        if self.slow.slow.is_empty() && self.memory.over.is_empty() {
            return Vec::new();
        }
        let mut ids = std::mem::take(&mut self.slow.slow);
        ids.sort_unstable();
        ids.dedup();
        let mut out = std::mem::take(&mut self.memory.over);
        ids.retain(|id| !out.iter().any(|o| o.0 == *id));
        let bytes = self.limits.queue_bytes;
        let why = format!("slow consumer: its queue of {bytes} bytes is full (policy disconnect)");
        out.extend(ids.into_iter().map(|id| (id, Disconnect { code: RejectCode::Limit, reason: why.clone() })));
        out
    }

    /// Back-pressure sessions that have held publishers for longer than
    /// [`Limits::back_pressure_timeout`](crate::Limits::back_pressure_timeout)
    /// at `now` (monotonic ns), each once, with why: the agent ends them as
    /// slow consumers, which lets their publishers go. Called from
    /// housekeeping (a hold is first seen there, so the timeout is met
    /// within one housekeeping period).
    pub fn take_stuck(&mut self, now: u64) -> Vec<(u32, Disconnect)> {
        let Some(timeout) = self.limits.back_pressure_timeout else { return Vec::new() };
        if self.slow.holds == 0 {
            return Vec::new();
        }
        let limit = timeout.as_nanos() as u64;
        let mut stuck = Vec::new();
        for (id, s) in self.sessions.iter_mut().enumerate() {
            let Some(s) = s else { continue };
            if s.holding.is_empty() || s.closing {
                continue;
            }
            if s.holding_since == 0 {
                s.holding_since = now.max(1);
            } else if now.saturating_sub(s.holding_since) >= limit {
                let why = format!(
                    "slow consumer: held {} publisher(s) for {} (policy back-pressure, back_pressure_timeout)",
                    s.holding.len(),
                    humantime::format_duration(timeout)
                );
                stuck.push((id as u32, Disconnect { code: RejectCode::Limit, reason: why }));
            }
        }
        stuck
    }

    /// Publisher `from` sent the back-pressure sessions in `held` past
    /// their bound: it is not read until they have read half their queue.
    pub(super) fn hold(&mut self, from: u32) {
        let serial = match self.sessions.get(from as usize) {
            Some(Some(p)) => p.serial,
            _ => return self.slow.held.clear(),
        };
        let mut newly = 0u32;
        for &c in &self.slow.held {
            if let Some(Some(s)) = self.sessions.get_mut(c as usize) {
                if !s.holding.contains(&(from, serial)) {
                    s.holding.push((from, serial));
                    newly += 1;
                }
            }
        }
        self.slow.held.clear();
        if newly > 0 {
            if let Some(Some(p)) = self.sessions.get_mut(from as usize) {
                p.paused_by += newly;
            }
            self.slow.holds += newly as usize;
            self.totals.back_pressured += u64::from(newly);
        }
    }

    /// Lets go of the publishers in `list` ((session, serial)), once each.
    pub(super) fn release(&mut self, list: &[(u32, u64)]) {
        for &(id, serial) in list {
            self.slow.holds = self.slow.holds.saturating_sub(1);
            if let Some(Some(p)) = self.sessions.get_mut(id as usize) {
                if p.serial == serial {
                    p.paused_by = p.paused_by.saturating_sub(1);
                }
            }
        }
    }

    /// Whether any publisher is held (then [`Router::is_held`] says which).
    #[inline]
    pub fn any_held(&self) -> bool {
        self.slow.holds > 0
    }

    /// Whether session `id`'s frames must not be read now: a back-pressure
    /// client it publishes to has not read enough.
    #[inline]
    pub fn is_held(&self, id: u32) -> bool {
        matches!(self.sessions.get(id as usize), Some(Some(s)) if s.paused_by > 0)
    }
}
