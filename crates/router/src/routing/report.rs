//! What the routing core reports: its counters, copied into the counters
//! file a few times a second ([`crate::counters`] names them), and the
//! description of its sessions for `tickwire router status`
//! ([`crate::status`]).

use super::Router;
use crate::counters::client as cc;
use crate::counters::router as rc;
use crate::status::{ClientStatus, STATUS_SUBSCRIPTIONS};

impl Router {
    /// Copies every total into the counters file (call a few times a
    /// second, off the per-message path).
    pub fn publish_counters(&self) {
        self.requests.publish();
        if let Some(c) = &self.totals_set {
            let t = &self.totals;
            c.set(rc::CLIENTS, self.clients() as u64);
            c.set(rc::CONNECTED, t.connected);
            c.set(rc::DISCONNECTED, t.disconnected);
            c.set(rc::VIOLATIONS, t.violations);
            c.set(rc::MESSAGES_IN, t.messages_in);
            c.set(rc::UNWANTED, t.unwanted);
            c.set(rc::DELIVERIES, t.deliveries);
            c.set(rc::DISCARDS, t.discards);
            c.set(rc::FORWARDED, t.forwarded);
            c.set(rc::FORBIDDEN, t.forbidden);
            c.set(rc::CACHE_DELIVERIES, t.cache_deliveries);
            c.set(rc::BACK_PRESSURED, t.back_pressured);
            c.set(rc::SLOW_DISCONNECTED, t.slow_disconnected);
            c.set(rc::QUEUE_LIMIT_BYTES, self.limits.queue_bytes as u64);
            c.set(rc::HELLO_TIMEOUTS, t.hello_timeouts);
            let retain = self.guaranteed().and_then(|g| g.journal().config().retain_bytes);
            c.set(rc::JOURNAL_RETAIN_BYTES, retain.unwrap_or(0));
        }
        for s in self.sessions.iter().flatten() {
            s.publish_counters();
            // Values past `tickwire_shm`'s names for the kind: the metrics
            // export them (`tickwire stat` shows the named ones).
            if let Some(c) = &s.counters {
                c.set(cc::CONFLATED, s.stats.conflated);
                c.set(cc::HELD, u64::from(s.paused_by > 0));
                c.set(cc::HOLDING_PUBLISHERS, s.holding.len() as u64);
            }
        }
        self.topic_counts.publish();
    }

    /// Describes every session of this routing agent.
    pub fn client_status(&self) -> Vec<ClientStatus> {
        let mut out = Vec::new();
        for id in self.session_ids() {
            let Some(s) = self.session(id) else { continue };
            // The first few, sorted, without copying every pattern.
            let mut texts: Vec<(&str, u32)> = s.subscriptions.iter().map(|(&sid, p)| (&**p, sid)).collect();
            let more = texts.len().saturating_sub(STATUS_SUBSCRIPTIONS);
            if more > 0 {
                texts.select_nth_unstable(STATUS_SUBSCRIPTIONS);
                texts.truncate(STATUS_SUBSCRIPTIONS);
            }
            let mut subscriptions: Vec<String> = texts
                .into_iter()
                .map(|(p, sid)| match self.topics.queue_group_of(id, sid) {
                    Some(g) => format!("{p} (queue group {g})"),
                    None => p.to_owned(),
                })
                .collect();
            if let Some(g) = self.guaranteed() {
                let bound = g.durables.values().filter(|d| d.bound.is_some_and(|b| b.0 == id));
                subscriptions.extend(bound.map(|d| format!("{} (durable {})", d.pattern(), d.name)));
                let consuming = g.queues.values().filter(|q| q.consumers.iter().any(|((b, _, _), _)| *b == id));
                subscriptions.extend(consuming.map(|q| format!("{} (durable queue {})", q.pattern(), q.name)));
            }
            subscriptions.sort();
            if more > 0 {
                subscriptions.push(format!("(and {more} more)"));
            }
            out.push(ClientStatus {
                client: self.client_id(id),
                name: s.name.clone(),
                peer: s.peer.clone(),
                user: s.user().map(str::to_owned),
                agent: self.me,
                subscriptions,
                queue_messages: s.queued(),
                queue_bytes: s.queue.bytes(),
                slow_consumer: s.policy.as_str().into(),
                held: s.paused_by > 0,
                messages_in: s.stats.messages_in,
                messages_out: s.stats.messages_out,
                discards: s.stats.discards,
            });
        }
        out
    }
}
