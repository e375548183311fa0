//! Durable subscriptions: a named subscription whose position in the
//! journal the router keeps. Its messages are delivered in order from the
//! journal (everything it missed while away, then live, with no seam: it
//! is the same read), each acknowledged by the subscriber (cumulatively);
//! what is not acknowledged is sent again after a reconnect, a restart or
//! the acknowledgement timeout, flagged `REDELIVERED` with its delivery
//! count; past `max_deliveries` a message goes to `dead/NAME`. What
//! retention removed before it was delivered comes as a LOSS event.

use super::queue_admin::QueueOptions;
use super::{control, Disconnect, Router};
use crate::access::Reach;
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use tickwire_journal::{Journal, JournalError, Read, Reader};
use tickwire_topic::Pattern;
use tickwire_wire::client::{flags, guaranteed_value, ClientKind, ClientRepr, RejectCode};

/// What is saved of a durable subscription ([`super::guaranteed::DURABLES_FILE`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DurableState {
    /// Its name.
    pub name: String,
    /// Its topic pattern.
    pub pattern: String,
    /// Every message up to this journal sequence is acknowledged.
    pub acked: u64,
    /// No message after this sequence has been delivered: it is saved
    /// before any delivery passes it (a lease of [`LEASE`] messages), so
    /// that after a crash only what may really have been delivered is
    /// flagged as redelivered.
    #[serde(default)]
    pub delivered_limit: u64,
    /// A durable queue (competing consumers), not a subscription.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queue: bool,
    /// A queue's messages after `acked` acknowledged already, as ranges
    /// (first, last): its consumers acknowledge one delivery each, not in
    /// order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acked_beyond: Vec<(u64, u64)>,
    /// A queue's options (`_sys/queue/create`).
    #[serde(default, skip_serializing_if = "QueueOptions::is_default")]
    pub options: QueueOptions,
}

/// How far past what it has delivered a durable subscription's saved
/// [`DurableState::delivered_limit`] reaches (one save per this many
/// deliveries).
pub const LEASE: u64 = 4096;

impl DurableState {
    pub(super) fn of(name: &str, pattern: &Pattern, acked: u64, delivered_limit: u64) -> Self {
        Self {
            name: name.to_owned(),
            pattern: pattern.to_string(),
            acked,
            delivered_limit,
            queue: false,
            acked_beyond: Vec::new(),
            options: QueueOptions::default(),
        }
    }

    /// Its pattern, parsed (`None`, logged, for one that no longer
    /// parses: it is dropped), and up to where its deliveries may have been
    /// made before the restart: nothing past the journal's end was
    /// delivered; without a saved limit (an older file), anything up to it
    /// may have been.
    pub(super) fn restored(&self, journal: &Journal) -> Option<(Pattern, u64)> {
        match Pattern::parse(&self.pattern) {
            Ok(p) => {
                let limit = if self.delivered_limit == 0 { u64::MAX } else { self.delivered_limit };
                Some((p, limit.min(journal.written())))
            }
            Err(e) => {
                tracing::warn!(durable = %self.name, pattern = %self.pattern, error = %e, "durable subscription or queue dropped");
                None
            }
        }
    }

    pub(super) fn load(path: &Path) -> Result<Vec<Self>, JournalError> {
        let io = |source| JournalError::Io { path: path.to_path_buf(), source };
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        // Never through a link planted in the journal's directory.
        let read = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path).and_then(|f| {
            let mut b = Vec::new();
            f.take(64 << 20).read_to_end(&mut b).map(|_| b)
        });
        match read {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io(e)),
        }
    }

    pub(super) fn save<'a>(path: &Path, all: impl Iterator<Item = &'a Self>) -> std::io::Result<()> {
        let all: Vec<&Self> = all.collect();
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        // An unpredictable name, created new (O_EXCL, no link followed),
        // the router's user's alone whatever the umask.
        let mut nonce = [0u8; 8];
        getrandom::fill(&mut nonce).map_err(std::io::Error::other)?;
        let tmp = path.with_extension(format!("json.{:016x}.tmp", u64::from_le_bytes(nonce)));
        let text = serde_json::to_vec_pretty(&all).map_err(std::io::Error::other)?;
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .and_then(|mut f| f.write_all(&text));
        match written.and_then(|()| std::fs::rename(&tmp, path)) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }
}

/// A durable subscription's live state.
#[derive(Debug)]
pub(super) struct Durable {
    pub(super) name: String,
    pattern: Pattern,
    /// Every message up to this sequence is acknowledged.
    pub(super) acked: u64,
    reader: Reader,
    /// Delivered, not acknowledged: (sequence, when sent, monotonic ns).
    inflight: VecDeque<(u64, u64)>,
    /// The highest sequence delivered (an acknowledgement beyond it is
    /// cut to it).
    sent_hw: u64,
    /// Deliveries made of each unacknowledged sequence.
    counts: BTreeMap<u64, u32>,
    /// The session it is bound to: (session, serial, subscription id).
    pub(super) bound: Option<(u32, u64, u32)>,
    /// Saved: no delivery went past this (see [`DurableState::delivered_limit`]).
    pub(super) lease: u64,
    /// Loaded at start: its deliveries up to this may have been made before
    /// the restart (0: none).
    flag_upto: u64,
}

impl Durable {
    fn new(name: String, pattern: Pattern, acked: u64, lease: u64) -> Self {
        Self {
            name,
            pattern,
            acked,
            reader: Reader::new(acked + 1),
            inflight: VecDeque::new(),
            sent_hw: acked,
            counts: BTreeMap::new(),
            bound: None,
            lease,
            flag_upto: lease,
        }
    }

    /// Flags as redelivered every delivery up to `seq` (a new leader of a
    /// group: its predecessor may have delivered them).
    pub(super) fn flag_through(&mut self, seq: u64) {
        self.flag_upto = self.flag_upto.max(seq);
    }

    pub(super) fn restore(s: DurableState, journal: &Journal) -> Option<Self> {
        let (p, flag_upto) = s.restored(journal)?;
        let mut d = Self::new(s.name, p, s.acked, s.delivered_limit);
        d.flag_upto = flag_upto;
        Some(d)
    }

    pub(super) fn state(&self) -> DurableState {
        DurableState::of(&self.name, &self.pattern, self.acked, self.lease)
    }

    /// Its topic pattern.
    pub(super) fn pattern(&self) -> &Pattern {
        &self.pattern
    }

    /// Messages waiting for it: up to `last` (the journal's durable end).
    pub(super) fn backlog(&self, last: u64) -> u64 {
        last.saturating_sub(self.acked)
    }

    /// Unacknowledged deliveries.
    pub(super) fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Sends again everything from the oldest unacknowledged delivery if it
    /// has waited `timeout` ns; returns how many were in flight.
    pub(super) fn expire(&mut self, now: u64, timeout: u64) -> u64 {
        match self.inflight.front() {
            Some(&(seq, sent)) if self.bound.is_some() && now.saturating_sub(sent) >= timeout => {
                let n = self.inflight.len() as u64;
                self.reader.seek(seq);
                self.inflight.clear();
                n
            }
            _ => 0,
        }
    }

    fn unbind(&mut self) {
        self.bound = None;
        self.inflight.clear();
    }
}

/// Durable names: 1 to 64 of `A-Z a-z 0-9 _ . -` (they become a file key
/// and the topic `dead/NAME`).
pub(super) fn valid_name(n: &str) -> bool {
    (1..=64).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// Saves `state` (a durable's new delivered limit) with every other
/// durable's last saved state, before a delivery passes its old limit.
pub(super) fn save_limit(saved: &mut BTreeMap<String, DurableState>, path: &Path, state: DurableState) {
    let name = state.name.clone();
    saved.insert(name.clone(), state);
    if let Err(e) = DurableState::save(path, saved.values()) {
        tracing::warn!(durable = %name, error = %e, "delivered limit not saved");
    }
}

/// Sends session `s` the guaranteed delivery of journal record `seq`
/// (`topic`, `payload`) for its subscription `sid`, the `count`th
/// (`redelivered`: it may have been delivered before).
pub(super) fn send_record(
    s: &mut crate::session::Session,
    (sid, count, redelivered): (u32, u32, bool),
    seq: u64,
    (topic, payload): (&str, &[u8]),
) {
    let f = ClientRepr {
        flags: flags::GUARANTEED | if redelivered { flags::REDELIVERED } else { 0 },
        value: guaranteed_value(sid, count),
        sequence: seq,
        topic,
        body: payload,
        ..ClientRepr::new(ClientKind::Deliver)
    };
    let _ = control(s, &f);
    s.stats.messages_out += 1;
    s.stats.bytes_out += f.buffer_len() as u64;
}

impl Router {
    /// SUBSCRIBE with `DURABLE`: binds session `id`'s subscription `sid` to
    /// the durable subscription `name` (made now, from the journal's end,
    /// if new); delivery starts after its last acknowledged message.
    pub(super) fn subscribe_durable(
        &mut self,
        id: u32,
        sid: u32,
        pattern: &str,
        name: &[u8],
    ) -> Result<(), Disconnect> {
        let seq = u64::from(sid);
        let Some((name, p, serial)) = self.durable_binding(id, sid, pattern, name, false)? else { return Ok(()) };
        let Some(g) = self.guaranteed.as_deref_mut() else { return Ok(()) };
        if g.queues.contains_key(&name) {
            let why = format!("{name} is a durable queue: consume it with DURABLE and QUEUE");
            return self.reject(id, RejectCode::Unsupported, seq, &why);
        }
        let live = |b: Option<(u32, u64, u32)>| {
            b.is_some_and(|(bid, bserial, _)| {
                matches!(self.sessions.get(bid as usize), Some(Some(x)) if x.serial == bserial) && bid != id
            })
        };
        if let Some(d) = g.durables.get(&name) {
            if d.pattern != p {
                let why = format!("durable {name} is for {}, not {pattern}", d.pattern);
                return self.reject(id, RejectCode::Unsupported, seq, &why);
            }
            if live(d.bound) {
                return self.reject(id, RejectCode::Limit, seq, &format!("durable {name} is in use by another client"));
            }
        } else {
            let from = g.journal.last_appended();
            g.durables.insert(name.clone(), Durable::new(name.clone(), p, from, from));
            g.dirty = true;
            g.save();
        }
        let Some(d) = g.durables.get_mut(&name) else { return Ok(()) };
        d.unbind();
        d.bound = Some((id, serial, sid));
        d.reader.seek(d.acked + 1);
        tracing::info!(durable = %name, client = id, from = d.acked + 1, "durable subscription bound");
        Ok(())
    }

    /// What binding session `id`'s subscription `sid` to durable `name`
    /// (a subscription, or a queue: `queue`) checks first: a journal, the
    /// name, the pattern, and what the session's user may read (a queue's
    /// consumer: every topic it matches, since any may come to it).
    /// Returns (name, pattern, the session's serial), or `None` once
    /// refused (a REJECT sent).
    pub(super) fn durable_binding(
        &mut self,
        id: u32,
        sid: u32,
        pattern: &str,
        name: &[u8],
        queue: bool,
    ) -> Result<Option<(String, Pattern, u64)>, Disconnect> {
        let seq = u64::from(sid);
        let what = if queue { "durable queues" } else { "durable subscriptions" };
        let Some(g) = self.guaranteed.as_deref_mut() else {
            return self.reject(id, RejectCode::Unsupported, seq, &format!("{what} need a journal")).map(|()| None);
        };
        if let Some(r) = g.ha.as_deref_mut().filter(|r| !r.is_leader()) {
            return Err(r.not_leader());
        }
        let name = match std::str::from_utf8(name) {
            Ok(n) if valid_name(n) => n.to_owned(),
            _ => {
                let why = "a durable name is 1 to 64 of A-Z a-z 0-9 _ . -";
                return self.reject(id, RejectCode::Protocol, seq, why).map(|()| None);
            }
        };
        let p = match Pattern::parse(pattern) {
            Ok(p) => p,
            Err(e) => return self.reject(id, RejectCode::BadTopic, seq, &e.to_string()).map(|()| None),
        };
        let Some(Some(s)) = self.sessions.get(id as usize) else { return Ok(None) };
        let serial = s.serial;
        if let Some(user) = s.user.as_ref() {
            let reach = user.subscribe.reach(&p);
            let refused = match queue {
                true => (reach != Reach::All).then(|| format!("may not read every topic {pattern} matches")),
                false => (reach == Reach::None).then(|| format!("may read no topic {pattern} matches")),
            };
            if let Some(why) = refused {
                self.totals.forbidden += 1;
                let why = format!("user {:?} {why}", user.name);
                return self.reject(id, RejectCode::Forbidden, seq, &why).map(|()| None);
            }
        }
        Ok(Some((name, p, serial)))
    }

    /// Lets go of session `id`'s durable subscriptions (`sid`: only that
    /// one); they keep their position.
    pub(super) fn unbind_durables(&mut self, id: u32, sid: Option<u32>) {
        let Some(g) = self.guaranteed.as_deref_mut() else { return };
        for q in g.queues.values_mut() {
            q.remove_consumers(|&(b, _, s)| b == id && sid.is_none_or(|x| x == s));
        }
        for d in g.durables.values_mut() {
            if d.bound.is_some_and(|(b, _, s)| b == id && sid.is_none_or(|x| x == s)) {
                d.unbind();
            }
        }
    }

    /// ACK from session `id`: every delivery of its durable subscription
    /// `sid` up to journal sequence `seq` is done.
    pub(super) fn handle_ack(&mut self, id: u32, sid: u32, seq: u64) {
        if self.ack_queue(id, sid, seq) {
            return;
        }
        let Some(g) = self.guaranteed.as_deref_mut() else { return };
        let Some(d) = g.durables.values_mut().find(|d| d.bound.is_some_and(|(b, _, s)| b == id && s == sid)) else {
            return;
        };
        // (The reader may be behind what was delivered: a redelivery.)
        let upto = seq.min(d.sent_hw.max(d.reader.position().saturating_sub(1)));
        if upto > d.acked {
            d.acked = upto;
            // Both in sequence order: the cost is what is acknowledged, not
            // what is in flight (a subscriber acknowledging every few
            // messages would otherwise pay for the whole window each time).
            while d.inflight.front().is_some_and(|&(s, _)| s <= upto) {
                d.inflight.pop_front();
            }
            while d.counts.first_key_value().is_some_and(|(&s, _)| s <= upto) {
                d.counts.pop_first();
            }
            if d.reader.position() <= upto {
                d.reader.seek(upto + 1); // what it was going to send again is done
            }
            g.dirty = true;
        }
    }

    /// Delivers what each bound durable subscription has room for.
    pub(super) fn deliver_durables(&mut self, now: u64) -> usize {
        let Router { guaranteed, sessions, backlog, login, .. } = self;
        let Some(g) = guaranteed.as_deref_mut() else { return 0 };
        if g.durables.is_empty() {
            return 0;
        }
        let limit = g.journal.durable();
        let mut work = 0;
        let mut dead: Vec<(String, Vec<u8>)> = Vec::new();
        let mut save = false;
        for d in g.durables.values_mut() {
            let Some((id, serial, sid)) = d.bound else { continue };
            let Some(Some(s)) = sessions.get_mut(id as usize) else {
                d.unbind();
                continue;
            };
            if s.serial != serial {
                d.unbind();
                continue;
            }
            let mut sent = 0;
            while d.inflight.len() < g.cfg.window && s.has_control_room() {
                let r = match d.reader.next(&g.journal, limit) {
                    Ok(Read::End) => break,
                    Ok(Read::Lost { from, to }) => {
                        let loss = ClientRepr {
                            value: sid,
                            sequence: from,
                            body: &to.to_le_bytes(),
                            ..ClientRepr::new(ClientKind::Loss)
                        };
                        let _ = control(s, &loss);
                        g.stats.losses += 1;
                        tracing::warn!(durable = %d.name, from, to, "durable subscription: messages lost to retention");
                        sent += 1;
                        continue;
                    }
                    Ok(Read::Record(r)) => r,
                    Err(e) => {
                        tracing::error!(durable = %d.name, error = %e, "durable subscription: journal unreadable");
                        break;
                    }
                };
                let seq = r.sequence();
                if !d.pattern.matches(r.topic()) || (login.enabled() && !s.may(r.topic(), false)) {
                    continue;
                }
                let count = d.counts.entry(seq).or_insert(0);
                *count += 1;
                if *count > g.cfg.max_deliveries {
                    d.counts.remove(&seq);
                    dead.push((format!("dead/{}", d.name), r.payload().to_vec()));
                    continue;
                }
                let count = *count;
                let redelivered = count > 1 || seq <= d.flag_upto;
                if seq > d.lease {
                    d.lease = seq + LEASE;
                    save = true;
                }
                if save {
                    // Before this delivery passes the saved limit.
                    // (Field by field: the reader's record is still borrowed.)
                    let state = DurableState::of(&d.name, &d.pattern, d.acked, d.lease);
                    save_limit(&mut g.saved, &g.state_path, state);
                    save = false;
                }
                send_record(s, (sid, count, redelivered), seq, (r.topic(), r.payload()));
                d.inflight.push_back((seq, now));
                d.sent_hw = d.sent_hw.max(seq);
                g.stats.deliveries += 1;
                g.stats.redeliveries += u64::from(redelivered);
                sent += 1;
            }
            if d.inflight.is_empty() {
                // Everything before the reader is delivered and acknowledged,
                // or not for it.
                let done = d.reader.position().saturating_sub(1);
                if done > d.acked {
                    d.acked = done;
                    g.dirty = true;
                }
            }
            if sent > 0 {
                s.mark(id, backlog);
            }
            work += sent;
        }
        for (topic, payload) in dead {
            g.stats.dead_letters += 1;
            if let Err(e) = g.journal.append(0, 0, &topic, &payload) {
                tracing::warn!(error = %e, topic, "dead letter not stored");
            }
        }
        work
    }
}
