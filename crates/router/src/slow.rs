//! Slow consumers ([`SlowConsumer`](crate::SlowConsumer)): what the
//! routing core does when a client's queue is full. `drop-oldest` lives in
//! the queue itself ([`crate::queue`]); here are `disconnect` (the session
//! is closed, its CLOSE sent before it goes) and `back-pressure` (the
//! publishers that send it past its bound are held, not read, until it has
//! read half).
//!
//! Here too the other client too slow to be kept: one not welcomed within
//! [`Limits::hello_timeout`](crate::Limits::hello_timeout) of its
//! connection ([`Router::take_expired`]).

use crate::routing::{mark, Disconnect, Router};
use tickwire_wire::client::{ClientKind, ClientRepr, RejectCode};

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
        for (sid, p) in s.subscriptions.drain() {
            self.topics.unsubscribe(&p, id, sid);
            if let Some(peers) = &mut self.peers {
                peers.release(&p);
            }
        }
        let dropped = s.queue.clear() as u64;
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
    /// is [`SlowConsumer::Disconnect`](crate::SlowConsumer::Disconnect), each once, with why.
    pub fn take_slow(&mut self) -> Vec<(u32, Disconnect)> {
        if self.slow.is_empty() {
            return Vec::new();
        }
        let mut ids = std::mem::take(&mut self.slow);
        ids.sort_unstable();
        ids.dedup();
        let bytes = self.limits.queue_bytes;
        let why = format!("slow consumer: its queue of {bytes} bytes is full (policy disconnect)");
        ids.into_iter().map(|id| (id, Disconnect { code: RejectCode::Limit, reason: why.clone() })).collect()
    }

    /// Back-pressure sessions that have held publishers for longer than
    /// [`Limits::back_pressure_timeout`](crate::Limits::back_pressure_timeout)
    /// at `now` (monotonic ns), each once, with why: the agent ends them as
    /// slow consumers, which lets their publishers go. Called from
    /// housekeeping (a hold is first seen there, so the timeout is met
    /// within one housekeeping period).
    pub fn take_stuck(&mut self, now: u64) -> Vec<(u32, Disconnect)> {
        let Some(timeout) = self.limits.back_pressure_timeout else { return Vec::new() };
        if self.holds == 0 {
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

    /// Sessions not welcomed within
    /// [`Limits::hello_timeout`](crate::Limits::hello_timeout) of their
    /// attachment at `now` (monotonic ns), each once, with why (code
    /// `Limit`), counted in [`Totals::hello_timeouts`](crate::counters::Totals::hello_timeouts):
    /// no HELLO came (a silent connection, a frame stopped halfway, a TLS
    /// handshake that stalled), or its password is still being checked
    /// (the check's answer is then dropped: its ticket is gone). The
    /// agent closes them. Each call looks at the sessions attached
    /// longest ago only: a call where nothing expires costs one look.
    pub fn take_expired(&mut self, now: u64) -> Vec<(u32, Disconnect)> {
        let timeout = self.limits.hello_timeout;
        let limit = timeout.as_nanos() as u64;
        let mut expired = Vec::new();
        if self.unstamped {
            // Attached without a time ([`Router::attach`]): their deadline
            // runs from now. Kept in order of time (the agent never does
            // this: it says when).
            self.unstamped = false;
            for e in self.unwelcomed.iter_mut().filter(|e| e.2 == 0) {
                e.2 = now.max(1);
            }
            self.unwelcomed.make_contiguous().sort_by_key(|e| e.2);
        }
        while let Some(&(id, serial, at)) = self.unwelcomed.front() {
            let Some(ticket) = self.awaiting_welcome(id, serial) else {
                // Welcomed, closing or gone.
                self.unwelcomed.pop_front();
                continue;
            };
            if now.saturating_sub(at) < limit {
                break;
            }
            self.unwelcomed.pop_front();
            let d = humantime::format_duration(timeout);
            let reason = match ticket {
                None => format!("no HELLO within {d}"),
                Some(t) => {
                    // Not yet handed to the worker: it never is.
                    self.auth_out.retain(|r| r.session != id || r.ticket != t);
                    format!("not logged in within {d}")
                }
            };
            self.totals.hello_timeouts += 1;
            expired.push((id, Disconnect { code: RejectCode::Limit, reason }));
        }
        expired
    }

    /// Whether session `id` of `serial` still waits to be welcomed (and
    /// is not closing); if so, its password check's ticket, if any.
    fn awaiting_welcome(&self, id: u32, serial: u64) -> Option<Option<u64>> {
        match self.sessions.get(id as usize) {
            Some(Some(s)) if s.serial == serial && !s.is_welcomed() && !s.closing => Some(s.ticket),
            _ => None,
        }
    }

    /// Drops the sessions at the front of the deadline queue that no longer
    /// wait (welcomed, closing, gone), so that it stays short even where
    /// [`Router::take_expired`] is not called.
    pub(crate) fn trim_unwelcomed(&mut self) {
        while let Some(&(id, serial, _)) = self.unwelcomed.front() {
            if self.awaiting_welcome(id, serial).is_some() {
                break;
            }
            self.unwelcomed.pop_front();
        }
    }

    /// Publisher `from` sent the back-pressure sessions in `held` past
    /// their bound: it is not read until they have read half their queue.
    pub(crate) fn hold(&mut self, from: u32) {
        let serial = match self.sessions.get(from as usize) {
            Some(Some(p)) => p.serial,
            _ => return self.held.clear(),
        };
        let mut newly = 0u32;
        for &c in &self.held {
            if let Some(Some(s)) = self.sessions.get_mut(c as usize) {
                if !s.holding.contains(&(from, serial)) {
                    s.holding.push((from, serial));
                    newly += 1;
                }
            }
        }
        self.held.clear();
        if newly > 0 {
            if let Some(Some(p)) = self.sessions.get_mut(from as usize) {
                p.paused_by += newly;
            }
            self.holds += newly as usize;
            self.totals.back_pressured += u64::from(newly);
        }
    }

    /// Lets go of the publishers in `list` ((session, serial)), once each.
    pub(crate) fn release(&mut self, list: &[(u32, u64)]) {
        for &(id, serial) in list {
            self.holds = self.holds.saturating_sub(1);
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
        self.holds > 0
    }

    /// Whether session `id`'s frames must not be read now: a back-pressure
    /// client it publishes to has not read enough.
    #[inline]
    pub fn is_held(&self, id: u32) -> bool {
        matches!(self.sessions.get(id as usize), Some(Some(s)) if s.paused_by > 0)
    }
}
