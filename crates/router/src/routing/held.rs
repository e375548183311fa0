//! Guaranteed publishes to full durable queues: refused (`FullPolicy::Reject`)
//! or held, unacknowledged, until the queue has room (`FullPolicy::Block`),
//! each publisher's in its order, bounded in count and bytes.

use super::guaranteed::Guaranteed;
use super::queue_admin::FullPolicy;
use super::Router;
use std::collections::VecDeque;

/// Publishes held at most, and their bytes.
const HELD_MAX: usize = 65_536;
const HELD_BYTES_MAX: usize = 64 << 20;

/// One guaranteed publish held for a full queue.
#[derive(Debug)]
struct HeldPublish {
    /// Its session and that session's serial.
    from: (u32, u64),
    seq: u64,
    topic: String,
    payload: Vec<u8>,
}

impl HeldPublish {
    fn bytes(&self) -> usize {
        self.payload.len() + self.topic.len()
    }
}

/// Guaranteed publishes held for full queues, in arrival order (one
/// publisher's held ones keep its later ones behind them).
#[derive(Debug, Default)]
pub(super) struct Held {
    list: VecDeque<HeldPublish>,
    bytes: usize,
    /// A queue may have room since the last release (an acknowledgement,
    /// a dead letter, a queue deleted or recounted, a housekeeping).
    pub(super) room: bool,
}

/// What a guaranteed publish may do now.
pub(super) enum Admit {
    /// Be stored.
    Now,
    /// Nothing: it is held.
    Held,
    /// Be refused, for this reason.
    Refused(String),
}

impl Guaranteed {
    /// What a full queue `topic` feeds does with a publish on it: a queue
    /// that refuses wins over one that blocks. `None`: none is full.
    fn full(&self, topic: &str) -> Option<(&str, u64, FullPolicy)> {
        let mut block = None;
        for q in self.queues.values() {
            match q.full_for(topic) {
                Some(FullPolicy::Reject) => return Some((&q.name, q.options.max_depth, FullPolicy::Reject)),
                Some(FullPolicy::Block) => {
                    block = block.or(Some((q.name.as_str(), q.options.max_depth, FullPolicy::Block)))
                }
                None => {}
            }
        }
        block
    }

    /// Whether a guaranteed publish on `topic` from `from` may be stored
    /// now; one behind a held publish of its session, or for a full queue
    /// that blocks, is held (up to the bound).
    pub(super) fn admit(&mut self, from: (u32, u64), topic: &str, payload: &[u8], seq: u64) -> Admit {
        let behind = self.held.list.iter().any(|h| h.from == from);
        let name = match self.full(topic) {
            Some((name, max, FullPolicy::Reject)) => {
                let why = format!("queue {name} is full ({max} messages)");
                self.stats.queue_full += 1;
                return Admit::Refused(why);
            }
            None if !behind => return Admit::Now,
            Some((name, _, FullPolicy::Block)) => name.to_owned(),
            None => String::new(),
        };
        let h = HeldPublish { from, seq, topic: topic.to_owned(), payload: payload.to_vec() };
        if self.held.list.len() >= HELD_MAX || self.held.bytes + h.bytes() > HELD_BYTES_MAX {
            self.stats.queue_full += 1;
            return Admit::Refused(format!("queue {name} is full and the router holds {HELD_MAX} publishes already"));
        }
        self.stats.held += 1;
        self.held.bytes += h.bytes();
        self.held.list.push_back(h);
        Admit::Held
    }

    /// Held publishes waiting.
    pub(super) fn held_count(&self) -> usize {
        self.held.list.len()
    }

    /// Drops every held publish (a router that no longer leads its group);
    /// returns their sessions (session, serial), to be ended.
    pub(super) fn drop_held(&mut self) -> Vec<(u32, u64)> {
        self.held.bytes = 0;
        self.held.list.drain(..).map(|h| h.from).collect()
    }
}

impl Router {
    /// Once a queue may have room: stores the held publishes whose queues
    /// have room now, each publisher's in its order (one still blocked
    /// keeps its publisher's later ones, not the others'); refuses those
    /// a refusing queue is full for; drops those whose session ended
    /// (never acknowledged: their publisher sends them again). Returns how
    /// many moved.
    pub(super) fn release_held(&mut self) -> usize {
        let Some(g) = self.guaranteed.as_deref_mut() else { return 0 };
        if g.held.list.is_empty() || !std::mem::take(&mut g.held.room) {
            return 0;
        }
        let mut list = std::mem::take(&mut g.held.list);
        let (mut keep, mut blocked, mut n) = (VecDeque::new(), Vec::new(), 0);
        while let Some(h) = list.pop_front() {
            let live = matches!(self.sessions.get(h.from.0 as usize), Some(Some(s)) if s.serial == h.from.1);
            let Some(g) = self.guaranteed.as_deref_mut() else { return n };
            let full = g.full(&h.topic).map(|(name, max, p)| (format!("queue {name} is full ({max} messages)"), p));
            if live && (blocked.contains(&h.from) || matches!(full, Some((_, FullPolicy::Block)))) {
                blocked.push(h.from);
                keep.push_back(h);
                continue;
            }
            g.held.bytes = g.held.bytes.saturating_sub(h.bytes());
            n += 1;
            if !live {
                continue;
            }
            // An error here is a refusal the session had no room to be
            // told (its control queue full): its publisher is not
            // acknowledged and sends it again.
            let r = match full {
                Some((why, _)) => {
                    g.stats.queue_full += 1;
                    self.reject(h.from.0, tickwire_wire::client::RejectCode::Limit, h.seq, &why)
                }
                None => self.store_guaranteed(h.from.0, &h.topic, &h.payload, h.seq),
            };
            if let Err(d) = r {
                tracing::debug!(client = h.from.0, reason = %d.reason, "held publish refused");
            }
        }
        if let Some(g) = self.guaranteed.as_deref_mut() {
            g.held.list = keep;
        }
        n
    }
}
