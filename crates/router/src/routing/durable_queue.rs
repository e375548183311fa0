//! Durable queues: a named queue in the journal, fed by a topic pattern
//! of its own (as Solace maps topics to queues), whose consumers compete.
//! A consumer binds with SUBSCRIBE flagged `DURABLE | QUEUE` (the queue's
//! name in the body); each message goes to one consumer at a time,
//! round-robin among those with room in their window, and stays in flight
//! until that consumer acknowledges it (its ACK names that one delivery).
//! A message whose consumer leaves, dies or lets the acknowledgement
//! timeout pass is delivered again to a consumer, flagged `REDELIVERED`
//! with its delivery count; past `max_deliveries` it goes to `dead/NAME`.
//! The queue's position (everything up to it done) is saved beside the
//! durable subscriptions', with the same delivery lease, so a restart
//! delivers again only what may not have been acknowledged, flagged.
//!
//! A queue made by `_sys/queue/create` ([`super::queue_admin`]) may be
//! exclusive (one consumer at a time, the next taking over in order) and
//! bounded (`max_depth` messages waiting; a guaranteed publish past it is
//! refused or held, [`FullPolicy`]).

use super::done::Done;
use super::durable::{save_limit, send_record, DurableState, LEASE};
use super::guaranteed::Guaranteed;
use super::queue_admin::{FullPolicy, QueueInfo, QueueOptions};
use super::{control, Disconnect, Router};
use std::collections::{BTreeMap, VecDeque};
use tickwire_journal::{Journal, Read, Reader};
use tickwire_topic::Pattern;
use tickwire_wire::client::{ClientKind, ClientRepr, RejectCode};

/// A consumer: its session, that session's serial, its subscription id.
type Consumer = (u32, u64, u32);

/// A durable queue's live state.
#[derive(Debug)]
pub(super) struct DurableQueue {
    pub(super) name: String,
    pattern: Pattern,
    /// How it was made (`_sys/queue/create`), else the defaults.
    pub(super) options: QueueOptions,
    /// Its messages waiting: stored and not done (delivered ones
    /// included).
    depth: u64,
    /// Its messages stored and not yet durable (the journal is read, and
    /// recounted, up to its durable end only).
    fresh: VecDeque<u64>,
    /// The journal's first sequence at its last count (retention moving
    /// it calls for a recount).
    counted_from: u64,
    /// Every message up to this sequence is done: acknowledged, or not
    /// the queue's.
    pub(super) acked: u64,
    /// The next message never delivered.
    reader: Reader,
    /// Delivered and unacknowledged: its consumer (index into
    /// `consumers`' identities), when sent, deliveries so far.
    inflight: BTreeMap<u64, (Consumer, u64, u32)>,
    /// To deliver again (its consumer left, or its acknowledgement timed
    /// out), with its deliveries so far.
    again: BTreeMap<u64, u32>,
    /// Acknowledged after `acked` (out of order): not to deliver again,
    /// after a restart either.
    done: Done,
    /// The consumers bound, and how many deliveries each has in flight.
    pub(super) consumers: Vec<(Consumer, usize)>,
    /// Where the next round-robin pick starts.
    next: usize,
    /// Saved: no delivery went past this (see [`DurableState::delivered_limit`]).
    pub(super) lease: u64,
    /// Loaded at start: its deliveries up to this may have been made
    /// before the restart.
    flag_upto: u64,
}

impl DurableQueue {
    pub(super) fn new(name: String, pattern: Pattern, acked: u64, lease: u64) -> Self {
        Self {
            name,
            pattern,
            options: QueueOptions::default(),
            depth: 0,
            fresh: VecDeque::new(),
            counted_from: 0,
            acked,
            reader: Reader::new(acked + 1),
            inflight: BTreeMap::new(),
            again: BTreeMap::new(),
            done: Done::default(),
            consumers: Vec::new(),
            next: 0,
            lease,
            flag_upto: lease,
        }
    }

    /// The queue of a saved state (`queue` set), or `None` for a pattern
    /// that no longer parses.
    /// Flags as redelivered every delivery up to `seq` (a new leader of a
    /// group: its predecessor may have delivered them).
    pub(super) fn flag_through(&mut self, seq: u64) {
        self.flag_upto = self.flag_upto.max(seq);
    }

    pub(super) fn restore(s: DurableState, journal: &Journal) -> Option<Self> {
        let (p, flag_upto) = s.restored(journal)?;
        let mut q = Self::new(s.name, p, s.acked, s.delivered_limit);
        q.done = Done::from_ranges(s.acked_beyond.into_iter().filter(|&(_, b)| b > s.acked));
        q.done.drop_below(s.acked + 1);
        q.options = s.options;
        q.flag_upto = flag_upto;
        q.recount(journal);
        Some(q)
    }

    pub(super) fn state(&self) -> DurableState {
        DurableState {
            queue: true,
            acked_beyond: self.done.ranges(),
            options: self.options,
            ..DurableState::of(&self.name, &self.pattern, self.acked, self.lease)
        }
    }

    /// Counts its messages waiting from the journal (at start, and after
    /// retention removed some): those past the reader that it takes and
    /// has not done, and those delivered or to deliver again.
    pub(super) fn recount(&mut self, journal: &Journal) {
        let durable = journal.durable();
        while self.fresh.front().is_some_and(|&s| s <= durable) {
            self.fresh.pop_front();
        }
        let mut r = Reader::new(self.reader.position());
        let mut n = (self.inflight.len() + self.again.len() + self.fresh.len()) as u64;
        loop {
            match r.next(journal, durable) {
                Ok(Read::Record(m)) => {
                    n += u64::from(self.takes(m.topic()) && !self.done.contains(m.sequence()));
                }
                Ok(Read::Lost { .. }) => continue,
                Ok(Read::End) | Err(_) => break,
            }
        }
        self.depth = n;
        self.counted_from = journal.first();
    }

    /// Whether retention removed messages since its last count (it is
    /// then counted again, once).
    pub(super) fn needs_recount(&self, journal: &Journal) -> bool {
        journal.first() > self.counted_from && self.reader.position() < journal.first()
    }

    /// Whether a message on `topic` is this queue's: its pattern matches,
    /// and it is not its own dead letter (a queue fed by `>` would take
    /// them back).
    fn takes(&self, topic: &str) -> bool {
        takes(&self.pattern, &self.name, topic)
    }

    /// Message `seq` on `topic` was stored: one more waiting if it is this
    /// queue's.
    pub(super) fn stored(&mut self, seq: u64, topic: &str) {
        if self.takes(topic) {
            self.depth += 1;
            self.fresh.push_back(seq);
        }
    }

    /// Whether a message on `topic` would find this queue full: its policy
    /// then.
    pub(super) fn full_for(&self, topic: &str) -> Option<FullPolicy> {
        let max = self.options.max_depth;
        (max > 0 && self.depth >= max && self.takes(topic)).then_some(self.options.full)
    }

    /// How `router status` names it.
    pub(super) fn describe(&self) -> String {
        let mut d = format!("queue, {} consumers", self.consumers.len());
        if self.options.exclusive {
            d.push_str(", exclusive");
        }
        if self.options.max_depth > 0 {
            let full = match self.options.full {
                FullPolicy::Reject => "reject",
                FullPolicy::Block => "block",
            };
            d.push_str(&format!(", max depth {} then {full}", self.options.max_depth));
        }
        d
    }

    /// As `list` shows it.
    pub(super) fn info(&self, durable: u64) -> QueueInfo {
        QueueInfo {
            name: self.name.clone(),
            topic: self.pattern.to_string(),
            options: self.options,
            depth: self.depth,
            in_flight: self.inflight.len(),
            consumers: self.consumers.len(),
            acked: self.acked.min(durable),
        }
    }

    /// For `browse`: the deliveries so far of message `seq` on `topic` if
    /// it is this queue's and waiting, else `None`.
    pub(super) fn waiting(&self, seq: u64, topic: &str) -> Option<u32> {
        if seq <= self.acked || self.done.contains(seq) || !self.takes(topic) {
            return None;
        }
        Some(self.inflight.get(&seq).map(|x| x.2).or_else(|| self.again.get(&seq).copied()).unwrap_or(0))
    }

    /// Its topic pattern.
    pub(super) fn pattern(&self) -> &Pattern {
        &self.pattern
    }

    /// Messages waiting.
    pub(super) fn depth(&self) -> u64 {
        self.depth
    }

    /// Deliveries awaiting acknowledgement.
    pub(super) fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Lets go of the consumers `gone` says are gone; what they had in
    /// flight is to be delivered again.
    pub(super) fn remove_consumers(&mut self, gone: impl Fn(&Consumer) -> bool) {
        if !self.consumers.iter().any(|(c, _)| gone(c)) {
            return;
        }
        self.consumers.retain(|(c, _)| !gone(c));
        let again = &mut self.again;
        self.inflight.retain(|&seq, &mut (c, _, count)| {
            let keep = !gone(&c);
            if !keep {
                again.insert(seq, count);
            }
            keep
        });
    }

    /// Consumer `c` acknowledged `seq`; false if it was not its to.
    fn ack(&mut self, c: &Consumer, seq: u64) -> bool {
        match self.inflight.get(&seq) {
            Some((holder, _, _)) if holder == c => {
                self.inflight.remove(&seq);
                self.done.insert(seq);
                self.depth = self.depth.saturating_sub(1);
                self.unload(c);
                true
            }
            _ => false,
        }
    }

    /// One delivery fewer in flight for consumer `c`.
    fn unload(&mut self, c: &Consumer) {
        if let Some((_, load)) = self.consumers.iter_mut().find(|(x, _)| x == c) {
            *load = load.saturating_sub(1);
        }
    }

    /// Deliveries unacknowledged for `timeout` ns are to be delivered
    /// again; returns how many.
    pub(super) fn expire(&mut self, now: u64, timeout: u64) -> u64 {
        let late: Vec<(u64, Consumer, u32)> = self
            .inflight
            .iter()
            .filter(|(_, &(_, sent, _))| now.saturating_sub(sent) >= timeout)
            .map(|(&seq, &(c, _, count))| (seq, c, count))
            .collect();
        for &(seq, c, count) in &late {
            self.inflight.remove(&seq);
            self.again.insert(seq, count);
            self.unload(&c);
        }
        late.len() as u64
    }

    /// Everything before the oldest message in flight, waiting to go
    /// again, or never delivered, is done.
    /// (What it acknowledged up to there is forgotten.)
    fn done_upto(&mut self) -> u64 {
        let first = [self.inflight.keys().next(), self.again.keys().next()]
            .into_iter()
            .flatten()
            .copied()
            .fold(self.reader.position(), u64::min);
        self.done.drop_below(first);
        first.saturating_sub(1)
    }

    /// The consumer to deliver to next: round-robin among those with fewer
    /// than `window` in flight whose session has room (`room`); in an
    /// exclusive queue, the first bound alone.
    fn pick(&mut self, window: usize, room: impl Fn(&Consumer) -> bool) -> Option<usize> {
        let n = if self.options.exclusive { self.consumers.len().min(1) } else { self.consumers.len() };
        if n == 0 {
            return None;
        }
        let k = (0..n).map(|i| (self.next + i) % n).find(|&k| {
            let (c, load) = &self.consumers[k];
            *load < window && room(c)
        })?;
        self.next = (k + 1) % n;
        Some(k)
    }
}

/// Whether queue `name`, fed by `pattern`, takes a message on `topic`: not
/// its own dead letters.
fn takes(pattern: &Pattern, name: &str, topic: &str) -> bool {
    pattern.matches(topic) && topic.strip_prefix("dead/") != Some(name)
}

impl Guaranteed {
    /// Message `seq` on `topic` was stored: one more waiting in each queue
    /// it feeds.
    pub(super) fn queued(&mut self, seq: u64, topic: &str) {
        for q in self.queues.values_mut() {
            q.stored(seq, topic);
        }
    }
}

impl Router {
    /// SUBSCRIBE with `DURABLE | QUEUE`: session `id`'s subscription `sid`
    /// becomes a consumer of durable queue `name` (made now, from the
    /// journal's end, if new).
    pub(super) fn subscribe_durable_queue(
        &mut self,
        id: u32,
        sid: u32,
        pattern: &str,
        name: &[u8],
    ) -> Result<(), Disconnect> {
        let seq = u64::from(sid);
        let Some((name, p, serial)) = self.durable_binding(id, sid, pattern, name, true)? else { return Ok(()) };
        let Some(g) = self.guaranteed.as_deref_mut() else { return Ok(()) };
        if g.durables.contains_key(&name) {
            let why = format!("{name} is a durable subscription, not a queue");
            return self.reject(id, RejectCode::Unsupported, seq, &why);
        }
        match g.queues.get(&name) {
            Some(q) if q.pattern != p => {
                let why = format!("queue {name} is fed by {}, not {pattern}", q.pattern);
                return self.reject(id, RejectCode::Unsupported, seq, &why);
            }
            Some(_) => {}
            None => {
                let from = g.journal.last_appended();
                g.queues.insert(name.clone(), DurableQueue::new(name.clone(), p, from, from));
                g.dirty = true;
                g.save();
            }
        }
        let Some(q) = g.queues.get_mut(&name) else { return Ok(()) };
        let me = (id, serial, sid);
        if !q.consumers.iter().any(|(c, _)| *c == me) {
            q.consumers.push((me, 0));
        }
        tracing::info!(queue = %name, client = id, consumers = q.consumers.len(), "durable queue consumer bound");
        Ok(())
    }

    /// ACK from session `id`'s queue consumer `sid` for the delivery of
    /// `seq`; false if `sid` is no queue consumer of its.
    pub(super) fn ack_queue(&mut self, id: u32, sid: u32, seq: u64) -> bool {
        let Some(g) = self.guaranteed.as_deref_mut() else { return false };
        for q in g.queues.values_mut() {
            if let Some(&(c, _)) = q.consumers.iter().find(|((b, _, s), _)| *b == id && *s == sid) {
                let acked = q.ack(&c, seq);
                g.dirty |= acked;
                g.held.room |= acked;
                return true;
            }
        }
        false
    }

    /// Delivers what each durable queue has for its consumers' room.
    pub(super) fn deliver_queues(&mut self, now: u64) -> usize {
        let Router { guaranteed, sessions, backlog, .. } = self;
        let Some(g) = guaranteed.as_deref_mut() else { return 0 };
        if g.queues.is_empty() {
            return 0;
        }
        let limit = g.journal.durable();
        let (window, max) = (g.cfg.window, g.cfg.max_deliveries);
        let mut work = 0;
        let mut dead: Vec<(String, Vec<u8>)> = Vec::new();
        for q in g.queues.values_mut() {
            while q.fresh.front().is_some_and(|&s| s <= limit) {
                q.fresh.pop_front();
            }
            let mut lost = false;
            let live = |c: &Consumer| matches!(sessions.get(c.0 as usize), Some(Some(s)) if s.serial == c.1);
            q.remove_consumers(|c| !live(c));
            while let Some(k) =
                q.pick(window, |c| matches!(sessions.get(c.0 as usize), Some(Some(s)) if s.has_control_room()))
            {
                // Its session, before a message is taken for it (`pick`
                // saw it open, so this always finds it).
                let (c, _) = q.consumers[k];
                let Some(Some(s)) = sessions.get_mut(c.0 as usize) else { break };
                // A message to deliver again first, else the next new one.
                let again = q.again.pop_first();
                let mut one;
                let reader = match again {
                    Some((seq, _)) => {
                        one = Reader::new(seq);
                        &mut one
                    }
                    None => &mut q.reader,
                };
                let r = match reader.next(&g.journal, limit) {
                    Ok(Read::Record(r)) if again.is_none_or(|(seq, _)| r.sequence() == seq) => r,
                    Ok(Read::End) if again.is_none() => break,
                    Ok(Read::Lost { from, to }) => {
                        // Told to the consumer whose turn it was, as a
                        // durable subscription's subscriber is told.
                        let loss = ClientRepr {
                            value: c.2,
                            sequence: from,
                            body: &to.to_le_bytes(),
                            ..ClientRepr::new(ClientKind::Loss)
                        };
                        let _ = control(s, &loss);
                        g.stats.losses += 1;
                        lost = true;
                        tracing::warn!(queue = %q.name, from, to, "durable queue: messages lost to retention");
                        continue;
                    }
                    // A message to deliver again that retention removed.
                    Ok(_) => {
                        q.depth = q.depth.saturating_sub(1);
                        g.held.room = true;
                        continue;
                    }
                    Err(e) => {
                        tracing::error!(queue = %q.name, error = %e, "durable queue: journal unreadable");
                        if let Some((seq, n)) = again {
                            q.again.insert(seq, n);
                        }
                        break;
                    }
                };
                let seq = r.sequence();
                if again.is_none() && (!takes(&q.pattern, &q.name, r.topic()) || q.done.contains(seq)) {
                    // Not its own: done too while some before it are not,
                    // so what is done stays a few ranges, however the
                    // queue's messages are spread in the journal.
                    if !q.inflight.is_empty() || !q.again.is_empty() {
                        q.done.insert(seq);
                    }
                    continue;
                }
                let count = again.map_or(0, |(_, n)| n) + 1;
                if count > max {
                    dead.push((format!("dead/{}", q.name), r.payload().to_vec()));
                    q.done.insert(seq);
                    q.depth = q.depth.saturating_sub(1);
                    g.held.room = true;
                    continue;
                }
                let redelivered = count > 1 || seq <= q.flag_upto;
                if seq > q.lease {
                    q.lease = seq + LEASE;
                    let state = DurableState {
                        queue: true,
                        acked_beyond: q.done.ranges(),
                        options: q.options,
                        ..DurableState::of(&q.name, &q.pattern, q.acked, q.lease)
                    };
                    save_limit(&mut g.saved, &g.state_path, state);
                }
                send_record(s, (c.2, count, redelivered), seq, (r.topic(), r.payload()));
                s.mark(c.0, backlog);
                q.inflight.insert(seq, (c, now, count));
                q.consumers[k].1 += 1;
                g.stats.deliveries += 1;
                g.stats.redeliveries += u64::from(redelivered);
                work += 1;
            }
            if lost {
                q.recount(&g.journal);
                g.held.room = true;
            }
            let done = q.done_upto();
            if done > q.acked {
                q.acked = done;
                g.dirty = true;
            }
        }
        for (topic, payload) in dead {
            g.stats.dead_letters += 1;
            match g.journal.append(0, 0, &topic, &payload) {
                Ok(at) => g.queued(at, &topic),
                Err(e) => tracing::warn!(error = %e, topic, "dead letter not stored"),
            }
        }
        work
    }
}
