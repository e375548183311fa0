//! Guaranteed delivery: publishes marked `GUARANTEED` are appended to the
//! journal ([`tickwire_journal`]) and acknowledged to their publisher once
//! durable by the sync policy; a publisher's resends (after a reconnect or
//! a router restart) are recognised by (publisher id, sequence) and stored
//! once. Durable subscriptions, which replay the journal, are in
//! [`super::durable`].
//!
//! Everything here runs on the routing agent's thread; the only system
//! calls are the journal's one `pwrite` per duty cycle with publishes, and
//! the durable subscriptions' reads (from the page cache, in 256 KiB
//! chunks). fsyncs run on the journal's own thread.

use super::durable::{Durable, DurableState};
use super::durable_queue::DurableQueue;
use super::held::{Admit, Held};
use super::replicated::Replication;
use super::{Disconnect, Router};
use crate::status::{DurableStatus, JournalStatus, PublisherStatus};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::time::Duration;
use tickwire_journal::{Journal, JournalConfig, JournalError, Recovery};
use tickwire_topic::check_topic;
use tickwire_wire::client::RejectCode;

/// How guaranteed delivery behaves, beyond the journal's own settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuaranteedConfig {
    /// Deliveries a durable subscription may have unacknowledged.
    pub window: usize,
    /// A delivery unacknowledged this long is sent again (with every one
    /// after it).
    pub ack_timeout: Duration,
    /// A message delivered this many times without an acknowledgement
    /// goes to the dead-letter topic `dead/NAME` instead.
    pub max_deliveries: u32,
}

impl Default for GuaranteedConfig {
    fn default() -> Self {
        Self { window: 1024, ack_timeout: Duration::from_secs(30), max_deliveries: 10 }
    }
}

/// Counts, since start.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GuaranteedStats {
    /// Guaranteed publishes stored.
    pub stored: u64,
    /// Resends recognised and not stored again.
    pub duplicates: u64,
    /// Acknowledgements sent to publishers.
    pub publisher_acks: u64,
    /// Guaranteed deliveries to durable subscriptions (redeliveries too).
    pub deliveries: u64,
    /// Deliveries sent again (after a reconnect, a restart or a timeout).
    pub redeliveries: u64,
    /// Messages moved to a dead-letter topic.
    pub dead_letters: u64,
    /// Loss events sent (retention removed what a subscription needed).
    pub losses: u64,
    /// Guaranteed publishes refused for a full durable queue.
    #[serde(default)]
    pub queue_full: u64,
    /// Guaranteed publishes held for a full durable queue (`full = block`).
    #[serde(default)]
    pub held: u64,
}

/// The journal, its publishers and durable subscriptions.
#[derive(Debug)]
pub struct Guaranteed {
    pub(super) journal: Journal,
    pub(super) cfg: GuaranteedConfig,
    /// Each publisher's highest sequence stored.
    pub(super) stored: HashMap<u64, u64>,
    /// Each publisher's highest sequence acknowledged (what the journal
    /// held at start counts as acknowledged).
    pub(super) acked: HashMap<u64, u64>,
    /// Publishes appended and awaiting durability, in journal order:
    /// (journal sequence, session, session serial, publisher sequence).
    pub(super) awaiting: VecDeque<(u64, u32, u64, u64)>,
    pub(super) durables: BTreeMap<String, Durable>,
    /// The durable queues.
    pub(super) queues: BTreeMap<String, DurableQueue>,
    /// Guaranteed publishes held for a full queue, in arrival order.
    pub(super) held: Held,
    pub(super) state_path: PathBuf,
    /// What was last saved of each durable subscription.
    pub(super) saved: BTreeMap<String, DurableState>,
    pub(super) dirty: bool,
    pub(super) stats: GuaranteedStats,
    /// The journal failed (a write or an fsync): nothing more is
    /// acknowledged, and guaranteed publishes are refused.
    failed: Option<String>,
    /// The high-availability group this router is a member of.
    pub(super) ha: Option<Box<Replication>>,
}

/// The file, in the journal's directory, holding each durable
/// subscription's pattern and acknowledged position.
pub const DURABLES_FILE: &str = "durables.json";

impl Guaranteed {
    /// Opens the journal (recovering it) and the durable subscriptions'
    /// state beside it.
    ///
    /// # Errors
    /// [`JournalError`] from the journal; an unreadable durables file is
    /// [`JournalError::Io`].
    pub fn open(journal: JournalConfig, cfg: GuaranteedConfig) -> Result<(Self, Recovery), JournalError> {
        let state_path = journal.dir.join(DURABLES_FILE);
        let (journal, recovery) = Journal::open(journal)?;
        let loaded = DurableState::load(&state_path)?;
        // What is on disk now: a save of one subscription's limit rewrites
        // the file from this, so it must hold every subscription from the
        // start (else the file would lose the others until the next full
        // save, and a crash then would lose them).
        let saved: BTreeMap<String, DurableState> = loaded.iter().map(|d| (d.name.clone(), d.clone())).collect();
        let (queued, loaded): (Vec<DurableState>, Vec<DurableState>) = loaded.into_iter().partition(|d| d.queue);
        let durables =
            loaded.into_iter().filter_map(|d| Durable::restore(d, &journal).map(|x| (x.name.clone(), x))).collect();
        let queues = queued
            .into_iter()
            .filter_map(|d| DurableQueue::restore(d, &journal).map(|x| (x.name.clone(), x)))
            .collect();
        let g = Self {
            journal,
            cfg,
            stored: recovery.publishers.clone(),
            acked: recovery.publishers.clone(),
            awaiting: VecDeque::new(),
            held: Held::default(),
            durables,
            queues,
            state_path,
            saved,
            dirty: false,
            stats: GuaranteedStats::default(),
            failed: None,
            ha: None,
        };
        Ok((g, recovery))
    }

    /// The journal.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// The counts.
    pub fn stats(&self) -> GuaranteedStats {
        self.stats
    }

    /// Why the journal stopped taking publishes, if it did.
    pub fn failed(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    pub(super) fn fail(&mut self, e: &JournalError) {
        if self.failed.is_none() {
            tracing::error!(error = %e, "journal failed: guaranteed publishes are refused from now on");
            self.failed = Some(e.to_string());
        }
    }

    /// Saves the durable subscriptions' positions if they moved
    /// (write-then-rename: a crash leaves the old file or the new one).
    pub(super) fn save(&mut self) {
        if !self.dirty {
            return;
        }
        self.saved = self.durables.values().map(|d| (d.name.clone(), d.state())).collect();
        self.saved.extend(self.queues.values().map(|q| (q.name.clone(), q.state())));
        match DurableState::save(&self.state_path, self.saved.values()) {
            Ok(()) => self.dirty = false,
            Err(e) => tracing::warn!(error = %e, "durable subscriptions' positions not saved"),
        }
    }
}

impl Drop for Guaranteed {
    fn drop(&mut self) {
        // What was appended goes out (it is not acknowledged; its publisher
        // resends it, and the resend is recognised), and the positions are
        // kept.
        let _ = self.journal.write();
        self.save();
    }
}

impl Router {
    /// Takes guaranteed publishes into `g`'s journal and serves its durable
    /// subscriptions.
    pub fn set_guaranteed(&mut self, g: Guaranteed) {
        self.guaranteed = Some(Box::new(g));
    }

    /// The guaranteed-delivery state, if a journal is configured.
    pub fn guaranteed(&self) -> Option<&Guaranteed> {
        self.guaranteed.as_deref()
    }

    /// A guaranteed PUBLISH from session `id`: stored once per (publisher,
    /// sequence), acknowledged when durable ([`Router::poll_guaranteed`]),
    /// and routed at once to the direct subscribers.
    pub(super) fn publish_guaranteed(
        &mut self,
        id: u32,
        topic: &str,
        payload: &[u8],
        seq: u64,
    ) -> Result<(), Disconnect> {
        let Some(g) = self.guaranteed.as_deref_mut() else {
            return self.reject(id, RejectCode::Unsupported, seq, "guaranteed delivery is not enabled (no journal)");
        };
        if let Some(why) = &g.failed {
            let why = format!("the journal failed: {why}");
            return self.reject(id, RejectCode::Unsupported, seq, &why);
        }
        if let Some(r) = g.ha.as_deref_mut().filter(|r| !r.is_leader()) {
            return Err(r.not_leader());
        }
        let Some(Some(s)) = self.sessions.get_mut(id as usize) else { return Ok(()) };
        let (publisher, serial) = (s.publisher, s.serial);
        if publisher == 0 {
            let why = "a guaranteed publish needs a publisher id in HELLO";
            return self.reject(id, RejectCode::Protocol, seq, why);
        }
        if let Err(e) = check_topic(topic) {
            return self.reject(id, RejectCode::BadTopic, seq, &e.to_string());
        }
        if self.login.enabled() && !s.may(topic, true) {
            let user = s.user().unwrap_or("").to_owned();
            self.totals.forbidden += 1;
            return self.reject(id, RejectCode::Forbidden, seq, &format!("user {user:?} may not publish on {topic}"));
        }
        if g.stored.get(&publisher).is_some_and(|&stored| seq <= stored) {
            // A resend: acknowledged once everything before it is durable.
            g.stats.duplicates += 1;
            g.awaiting.push_back((g.journal.last_appended(), id, serial, seq));
            return Ok(());
        }
        match g.admit((id, serial), topic, payload, seq) {
            Admit::Now => self.store_guaranteed(id, topic, payload, seq),
            Admit::Held => Ok(()),
            Admit::Refused(why) => self.reject(id, RejectCode::Limit, seq, &why),
        }
    }

    /// Appends a guaranteed publish admitted, and routes it to the direct
    /// subscribers.
    pub(super) fn store_guaranteed(
        &mut self,
        id: u32,
        topic: &str,
        payload: &[u8],
        seq: u64,
    ) -> Result<(), Disconnect> {
        let Some(g) = self.guaranteed.as_deref_mut() else { return Ok(()) };
        let Some(Some(s)) = self.sessions.get(id as usize) else { return Ok(()) };
        let (publisher, serial) = (s.publisher, s.serial);
        if let Some(r) = g.ha.as_deref_mut() {
            // Stored when the group commits it (`replicated`), on every
            // member; acknowledged then.
            if topic.len() + payload.len() + 64 > tickwire_journal::record::MAX_RECORD {
                let why = format!("{} bytes: larger than a journal record", payload.len());
                return self.reject(id, RejectCode::TooLarge, seq, &why);
            }
            r.add(publisher, seq, topic, payload, (id, serial, seq));
            return self.route(id, topic, payload, seq);
        }
        let at = match g.journal.append(publisher, seq, topic, payload) {
            Ok(at) => at,
            Err(e @ JournalError::Record(_)) => return self.reject(id, RejectCode::TooLarge, seq, &e.to_string()),
            Err(e) => {
                g.fail(&e);
                return self.reject(id, RejectCode::Unsupported, seq, &e.to_string());
            }
        };
        // Only once it is in: a refused one is not a duplicate later.
        g.stored.insert(publisher, seq);
        g.stats.stored += 1;
        g.queued(at, topic);
        g.awaiting.push_back((at, id, serial, seq));
        self.route(id, topic, payload, seq)
    }

    /// Writes what was appended (one `pwrite`), acknowledges the publishes
    /// now durable, and delivers to the durable subscriptions what they
    /// have room for; `now` is the monotonic clock in ns. Returns the work
    /// done.
    pub fn poll_guaranteed(&mut self, now: u64) -> usize {
        let mut work = self.release_held() + self.poll_replication();
        let Some(g) = self.guaranteed.as_deref_mut() else { return 0 };
        if g.journal.has_pending() {
            if let Err(e) = g.journal.write() {
                g.fail(&e);
            }
            work += 1;
        }
        if g.failed.is_none() && !g.awaiting.is_empty() {
            let durable = g.journal.durable();
            let mut acks: Vec<(u32, u64, u64)> = Vec::new();
            while let Some(&(at, id, serial, seq)) = g.awaiting.front() {
                if at > durable {
                    break;
                }
                g.awaiting.pop_front();
                match acks.iter_mut().find(|a| a.0 == id && a.1 == serial) {
                    Some(a) => a.2 = a.2.max(seq),
                    None => acks.push((id, serial, seq)),
                }
            }
            for (id, serial, seq) in acks {
                let Some(Some(s)) = self.sessions.get_mut(id as usize) else { continue };
                if s.serial != serial {
                    continue; // gone; it resends after reconnecting
                }
                let a = g.acked.entry(s.publisher).or_insert(0);
                *a = (*a).max(seq);
                // Delivered, however far behind the client is in reading:
                // an ACK thrown away would leave it resending for ever.
                s.acknowledge(seq);
                g.stats.publisher_acks += 1;
                s.mark(id, &mut self.backlog);
                work += 1;
            }
        }
        let work = work + self.deliver_durables(now) + self.deliver_queues(now);
        // Idle while an fsync is awaited: give the journal's sync thread
        // the CPU (on a machine whose cores all spin, it would otherwise
        // wait for the scheduler's tick to preempt a spinning thread).
        if work == 0 && self.guaranteed.as_deref().is_some_and(|g| !g.awaiting.is_empty()) {
            std::thread::yield_now();
        }
        work
    }

    /// The journal and its durable subscriptions, for `tickwire router
    /// status` (`None` without a journal).
    pub fn journal_status(&self) -> Option<JournalStatus> {
        let g = self.guaranteed.as_deref()?;
        let j = &g.journal;
        let durable = j.durable();
        let fsync = j.fsync_latencies();
        let fsync = fsync.as_deref();
        Some(JournalStatus {
            dir: j.config().dir.display().to_string(),
            sync: j.config().sync.name().into(),
            segments: j.segment_count(),
            bytes: j.bytes(),
            first: j.first(),
            last: j.written(),
            durable,
            append_p50_ns: j.append_latencies().quantile(0.5),
            append_p99_ns: j.append_latencies().quantile(0.99),
            fsync_p50_ns: fsync.map_or(0, |f| f.quantile(0.5)),
            fsync_p99_ns: fsync.map_or(0, |f| f.quantile(0.99)),
            stats: g.stats,
            ack_lag: j.last_appended().saturating_sub(durable),
            ha: g.ha.as_deref().map(Replication::status),
            held: g.held_count(),
            publishers: self
                .sessions
                .iter()
                .flatten()
                .filter(|s| s.publisher != 0 && g.stored.contains_key(&s.publisher))
                .map(|s| {
                    let stored = g.stored.get(&s.publisher).copied().unwrap_or(0);
                    let acked = g.acked.get(&s.publisher).copied().unwrap_or(0);
                    PublisherStatus { publisher: format!("{:016x}", s.publisher), name: s.name.clone(), stored, acked }
                })
                .collect(),
            durables: g
                .durables
                .values()
                .map(|d| {
                    let s = d.state();
                    DurableStatus {
                        backlog: d.backlog(durable),
                        in_flight: d.in_flight(),
                        client: d.bound.map(|(id, _, _)| self.client_id(id)),
                        name: s.name,
                        pattern: s.pattern,
                        acked: s.acked,
                        detail: String::new(),
                    }
                })
                .chain(g.queues.values().map(|q| {
                    let s = q.state();
                    DurableStatus {
                        backlog: q.depth(),
                        in_flight: q.in_flight(),
                        client: q.consumers.first().map(|((id, _, _), _)| self.client_id(*id)),
                        name: s.name,
                        detail: q.describe(),
                        pattern: s.pattern,
                        acked: s.acked,
                    }
                }))
                .collect(),
        })
    }

    /// Housekeeping (a few times a second): redeliveries after an
    /// acknowledgement timeout, retention, and the durable positions saved.
    pub fn guaranteed_housekeeping(&mut self, now: u64) {
        let Some(g) = self.guaranteed.as_deref_mut() else { return };
        let timeout = g.cfg.ack_timeout.as_nanos() as u64;
        for d in g.durables.values_mut() {
            g.stats.redeliveries += d.expire(now, timeout);
        }
        for q in g.queues.values_mut() {
            // Counted as redeliveries when they go again.
            q.expire(now, timeout);
        }
        if let Err(e) = g.journal.enforce_retention() {
            tracing::warn!(error = %e, "journal retention");
        }
        // Retention took what a queue nobody consumes held: its depth is
        // counted again (once), and held publishes looked at again (their
        // sessions may have ended, too).
        for q in g.queues.values_mut() {
            if q.needs_recount(&g.journal) {
                q.recount(&g.journal);
            }
        }
        g.held.room = true;
        g.save();
        self.replicate_positions();
        self.expire_member_changes(now);
    }
}
