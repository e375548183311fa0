//! Guaranteed delivery over a high-availability group ([`tickwire_ha`]):
//! the leader proposes guaranteed publishes and durable positions as Raft
//! entries; every member applies what is committed to its own journal in
//! the same order, so journal sequences (and durable positions) mean the
//! same on every member; the leader acknowledges a publish once its entry
//! is committed (a majority holds it, written ahead under the sync policy)
//! and applied.
//!
//! Exactly once: a member applies a publish only if its (publisher id,
//! sequence) is past what it stored, so a resend proposed again, or an
//! entry applied again after a restart (a member replays its log from the
//! compaction point), is stored once on every member alike.
//!
//! Followers serve direct messages to their own clients; a guaranteed
//! publish or a durable subscription there ends its session with CLOSE
//! `NotLeader`, and a client given the group's URL list tries the next
//! router. A leader that loses its leadership ends the same sessions, so
//! they resend to the new one.
//!
//! An entry, as proposed (checked when applied: a malformed one is skipped
//! and counted on every member alike):
//!
//! ```text
//! kind: u8 | proposer: u64 LE | token: u64 LE | body
//! kind 1 (publishes): { publisher u64 | sequence u64 | topic_len u16 | payload_len u32 | topic | payload }*
//! kind 2 (positions): the durable subscriptions' and queues' states, JSON
//! kind 3 (removals): the names of durable subscriptions and queues gone (a
//!   queue deleted on the leader), JSON
//! ```

use super::durable::{Durable, DurableState};
use super::durable_queue::DurableQueue;
use super::guaranteed::Guaranteed;
use super::ha_entry::{publishes, HEADER, POSITIONS, PUBLISHES, RECORD_HEADER, REMOVALS};
use super::{Disconnect, Router};
use crate::status::HaGroupStatus;
use std::collections::{BTreeMap, HashMap, VecDeque};
use tickwire_ha::{Event, Ha, HaConfig};
use tickwire_wire::client::RejectCode;

/// A batch is proposed once it holds this many bytes (and at the end of
/// every duty cycle with publishes).
const BATCH_BYTES: usize = 256 << 10;

/// Counts since start.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReplicationStats {
    /// Entries proposed.
    pub proposed: u64,
    /// Publishes proposed.
    pub publishes_proposed: u64,
    /// Entries applied.
    pub applied: u64,
    /// Publishes applied that were stored already (resends).
    pub duplicates: u64,
    /// Entries that did not parse (skipped on every member).
    pub malformed: u64,
    /// Sessions ended for `NotLeader`.
    pub not_leader: u64,
    /// Times this member lost the leadership.
    pub demotions: u64,
}

/// One publish, as the leader's batch remembers it: the session to
/// acknowledge.
type Pending = (u32, u64, u64);

/// A checkpoint offered to the group: its index, directory and files
/// (names and lengths).
pub(super) type Checkpoint = (u64, std::path::PathBuf, Vec<(String, u64)>);

/// The router's side of its group.
#[derive(Debug)]
pub struct Replication {
    pub(super) ha: Ha,
    me: u64,
    leading: bool,
    leader: u64,
    /// Entries up to this index may have been delivered by an earlier
    /// leader: what they store is flagged as redelivered here.
    flag_index: u64,
    batch: Vec<u8>,
    batch_from: Vec<Pending>,
    next_token: u64,
    proposed: HashMap<u64, Vec<Pending>>,
    /// (log index, journal sequence after applying it): reported applied
    /// once the journal holds that sequence durably.
    pub(super) unreported: VecDeque<(u64, u64)>,
    /// Sessions to end (`NotLeader`).
    ended: Vec<(u32, Disconnect)>,
    /// The highest index applied with its records durable in the journal
    /// (saved, then reported to the log, at housekeeping).
    pub(super) durably_applied: u64,
    /// The last index applied (a snapshot made now reflects it).
    pub(super) last_applied: u64,
    /// The checkpoint offered: its index, directory and files.
    pub(super) offered: Option<Checkpoint>,

    /// Where `durably_applied` is saved: the log's directory.
    pub(super) dir: std::path::PathBuf,
    /// The router left its group (its journal or its log failed).
    left: bool,
    /// The durable states last proposed.
    positions: BTreeMap<String, DurableState>,
    stats: ReplicationStats,
    /// Membership changes awaiting their answer (`ha_admin`).
    pub(super) changes: Vec<super::ha_admin::PendingChange>,
    /// The group's voters, as the last change applied here left them.
    pub(super) voters: Vec<u64>,
    pub(super) next_change: u64,
}

impl Replication {
    /// Starts this member (its log in `cfg.dir`).
    ///
    /// # Errors
    /// [`tickwire_ha::HaError`] from the log, the configuration or the
    /// listener.
    pub fn start(mut cfg: HaConfig) -> Result<Self, tickwire_ha::HaError> {
        let me = cfg.id;
        let dir = cfg.dir.clone();
        // What this router applied durably, as last saved: the log hands
        // over again only what follows (retention may have removed a
        // publisher's older records from the journal, so what the journal
        // remembers of publishers cannot be trusted for more).
        // No file: nothing applied yet (a member whose log was installed
        // from a snapshot before its first save then gets it again).
        cfg.applied = Some(read_applied(&dir).unwrap_or(0));
        // Checkpoints a previous run offered: no transfer reads them now.
        crate::routing::ha_snapshot::remove_checkpoints(&cfg.snapshot_dir());
        let last_applied = cfg.applied.unwrap_or(0);
        let ha = Ha::start(cfg)?;
        let voters = ha.status().members.iter().map(|m| m.id).collect();
        Ok(Self {
            ha,
            voters,
            me,
            leading: false,
            leader: 0,
            flag_index: 0,
            batch: Vec::new(),
            batch_from: Vec::new(),
            // Random per start: an entry a previous run proposed, committed
            // after a restart, never matches this run's pending batches.
            next_token: random_token(),
            proposed: HashMap::new(),
            unreported: VecDeque::new(),
            ended: Vec::new(),
            durably_applied: 0,
            last_applied,
            offered: None,
            dir,
            left: false,
            positions: BTreeMap::new(),
            stats: ReplicationStats::default(),
            changes: Vec::new(),
            next_change: 0,
        })
    }

    /// Whether this member leads its group.
    pub fn is_leader(&self) -> bool {
        self.leading
    }

    /// This member's id.
    pub(super) fn me(&self) -> u64 {
        self.me
    }

    /// The leader this member knows of (0: none).
    pub(super) fn leader(&self) -> u64 {
        self.leader
    }

    /// The CLOSE a follower ends a guaranteed session with.
    pub(super) fn not_leader(&mut self) -> Disconnect {
        self.stats.not_leader += 1;
        let leader = match self.leader {
            0 => "no leader is known yet".to_owned(),
            l => format!("member {l} leads"),
        };
        Disconnect {
            code: RejectCode::NotLeader,
            reason: format!("this router (member {}) does not lead its group: {leader}", self.me),
        }
    }

    /// Adds a guaranteed publish to the next proposal.
    pub(super) fn add(&mut self, publisher: u64, seq: u64, topic: &str, payload: &[u8], from: Pending) {
        // A large publish does not make the batch larger than it and the
        // batch bound together (an append carries at least one entry
        // whole: it must fit a peer frame).
        if !self.batch.is_empty() && self.batch.len() + RECORD_HEADER + topic.len() + payload.len() > BATCH_BYTES {
            self.propose_batch();
        }
        if self.batch.is_empty() {
            self.batch.push(PUBLISHES);
            self.batch.extend_from_slice(&self.me.to_le_bytes());
            self.batch.extend_from_slice(&self.next_token.to_le_bytes());
        }
        self.batch.extend_from_slice(&publisher.to_le_bytes());
        self.batch.extend_from_slice(&seq.to_le_bytes());
        self.batch.extend_from_slice(&(topic.len() as u16).to_le_bytes());
        self.batch.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        self.batch.extend_from_slice(topic.as_bytes());
        self.batch.extend_from_slice(payload);
        self.batch_from.push(from);
        self.stats.publishes_proposed += 1;
        if self.batch.len() >= BATCH_BYTES {
            self.propose_batch();
        }
    }

    fn propose_batch(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let token = self.next_token;
        self.next_token += 1;
        self.proposed.insert(token, std::mem::take(&mut self.batch_from));
        self.ha.propose(token, std::mem::take(&mut self.batch));
        self.stats.proposed += 1;
    }

    /// Proposes the durable states that changed since the last proposal
    /// (leader only).
    fn propose_positions(&mut self, now: BTreeMap<String, DurableState>) {
        let removed: Vec<String> = self.positions.keys().filter(|n| !now.contains_key(*n)).cloned().collect();
        if !removed.is_empty() {
            self.propose_json(REMOVALS, &removed);
        }
        let changed: Vec<&DurableState> = now.values().filter(|s| self.positions.get(&s.name) != Some(*s)).collect();
        if !changed.is_empty() {
            self.propose_json(POSITIONS, &changed);
        }
        self.positions = now;
    }

    /// Proposes an entry of `kind` whose body is `body` as JSON.
    fn propose_json<T: serde::Serialize>(&mut self, kind: u8, body: &T) {
        let mut e = vec![kind];
        e.extend_from_slice(&self.me.to_le_bytes());
        e.extend_from_slice(&0u64.to_le_bytes());
        if serde_json::to_writer(&mut e, body).is_ok() {
            self.ha.propose(0, e);
            self.stats.proposed += 1;
        }
    }

    /// The sessions to end, each once.
    pub(super) fn take_ended(&mut self) -> Vec<(u32, Disconnect)> {
        std::mem::take(&mut self.ended)
    }

    /// The group as this member sees it.
    pub fn status(&self) -> HaGroupStatus {
        let mut group = self.ha.status();
        // Its thread gone, the member's last status would stand for ever:
        // it is out of its group, and says so.
        if self.left || !self.ha.is_running() {
            group.role = "left".into();
            group.leader = 0;
        }
        HaGroupStatus { group, replication: self.stats }
    }
}

fn random_token() -> u64 {
    let mut b = [0u8; 8];
    let _ = getrandom::fill(&mut b);
    // Clear of the counter's wrap for the life of a process.
    (u64::from_le_bytes(b) >> 1).max(1)
}

/// The file, in the Raft log's directory, holding the highest index this
/// router applied durably.
const APPLIED_FILE: &str = "applied";

fn read_applied(dir: &std::path::Path) -> Option<u64> {
    std::fs::read_to_string(dir.join(APPLIED_FILE)).ok()?.trim().parse().ok()
}

/// Saves `index` (write, sync, rename: a crash leaves the old or the new).
/// The directory is synced too: the rename itself, before anything that
/// relies on it (a staged snapshot removed).
pub(super) fn save_applied(dir: &std::path::Path, index: u64) -> std::io::Result<()> {
    tickwire_ha::files::replace(dir, APPLIED_FILE, format!("{index}\n").as_bytes())
}

impl Guaranteed {
    /// Applies one committed entry (on every member).
    fn apply(&mut self, index: u64, data: &[u8]) {
        // Once the journal failed nothing more is applied (nor reported
        // applied): this router leaves its group.
        if self.failed().is_some() {
            return;
        }
        let Some(r) = self.ha.as_deref_mut() else { return };
        r.stats.applied += 1;
        r.last_applied = index;
        if data.len() < HEADER {
            r.stats.malformed += 1;
            return;
        }
        let proposer = u64::from_le_bytes(data[1..9].try_into().unwrap_or_default());
        let token = u64::from_le_bytes(data[9..17].try_into().unwrap_or_default());
        let mine = proposer == r.me && r.leading;
        match data[0] {
            PUBLISHES => {
                let list = match publishes(&data[HEADER..]) {
                    Ok(l) => l,
                    Err(why) => {
                        r.stats.malformed += 1;
                        tracing::error!(index, why, "ha: a committed entry does not parse (skipped)");
                        return;
                    }
                };
                let from = if mine { r.proposed.remove(&token).unwrap_or_default() } else { Vec::new() };
                for (i, p) in list.iter().enumerate() {
                    let stored = self.stored.get(&p.publisher).is_some_and(|&s| p.seq <= s);
                    let at = if stored {
                        if let Some(r) = self.ha.as_deref_mut() {
                            r.stats.duplicates += 1;
                        }
                        self.stats.duplicates += 1;
                        self.journal.last_appended()
                    } else {
                        match self.journal.append(p.publisher, p.seq, p.topic, p.payload) {
                            Ok(at) => {
                                self.stored.insert(p.publisher, p.seq);
                                self.stats.stored += 1;
                                self.queued(at, p.topic);
                                at
                            }
                            Err(e) => {
                                // The same on every member: skipped alike.
                                tracing::error!(index, error = %e, "ha: a committed publish not stored");
                                if !matches!(e, tickwire_journal::JournalError::Record(_)) {
                                    self.fail(&e);
                                    return;
                                }
                                continue;
                            }
                        }
                    };
                    if let Some(&(id, serial, seq)) = from.get(i) {
                        self.awaiting.push_back((at, id, serial, seq));
                    }
                }
            }
            // A leader's positions are its own: an earlier leader's, committed
            // after this one took over, are older than what its clients
            // acknowledged here since; only those of subscriptions and
            // queues it does not know (made just before the fail-over) are
            // taken.
            POSITIONS => {
                let Ok(states) = serde_json::from_slice::<Vec<DurableState>>(&data[HEADER..]) else {
                    r.stats.malformed += 1;
                    return;
                };
                let (leading, earlier) = (r.leading, index <= r.flag_index);
                for s in states {
                    let known = self.durables.contains_key(&s.name) || self.queues.contains_key(&s.name);
                    if !leading || (earlier && !known) {
                        self.adopt(s);
                    }
                }
            }
            // Gone on the leader: gone here (a follower's queues have no
            // consumers; their sessions are the leader's). A new leader
            // takes its predecessor's removals too, unless consumers bound
            // the queue here since.
            REMOVALS if !r.leading || index <= r.flag_index => {
                let Ok(names) = serde_json::from_slice::<Vec<String>>(&data[HEADER..]) else {
                    r.stats.malformed += 1;
                    return;
                };
                for name in names {
                    if self.queues.get(&name).is_some_and(|q| !q.consumers.is_empty()) {
                        continue;
                    }
                    let queue = self.queues.remove(&name).is_some();
                    let durable = self.durables.remove(&name).is_some();
                    if queue || durable {
                        self.saved.remove(&name);
                        self.held.room = true;
                        self.dirty = true;
                        tracing::info!(name = %name, queue, "ha: removed on the leader, removed here");
                    }
                }
            }
            REMOVALS => {}
            _ => r.stats.malformed += 1,
        }
        let last = self.journal.last_appended();
        let Some(r) = self.ha.as_deref_mut() else { return };
        r.unreported.push_back((index, last));
        if r.leading && index <= r.flag_index {
            for d in self.durables.values_mut() {
                d.flag_through(last);
            }
            for q in self.queues.values_mut() {
                q.flag_through(last);
            }
        }
    }

    /// Takes a durable subscription's or queue's replicated state (a
    /// follower's, or a leader's from its predecessor).
    pub(super) fn adopt(&mut self, s: DurableState) {
        self.saved.insert(s.name.clone(), s.clone());
        self.dirty = true;
        if s.queue {
            if let Some(q) = DurableQueue::restore(s, &self.journal) {
                self.queues.insert(q.name.clone(), q);
            }
        } else if let Some(d) = Durable::restore(s, &self.journal) {
            self.durables.insert(d.name.clone(), d);
        }
    }

    /// This router no longer leads (or left its group): nothing in flight
    /// will be acknowledged here; the sessions waiting for it, and every
    /// durable subscriber and queue consumer, go to `lost`.
    fn demote(&mut self, lost: &mut Vec<Pending>) {
        let Some(r) = self.ha.as_deref_mut() else { return };
        r.stats.demotions += 1;
        r.leading = false;
        lost.append(&mut r.batch_from);
        r.batch.clear();
        lost.extend(r.proposed.drain().flat_map(|(_, v)| v));
        lost.extend(self.awaiting.drain(..).map(|(_, id, serial, seq)| (id, serial, seq)));
        lost.extend(self.drop_held().into_iter().map(|(id, serial)| (id, serial, 0)));
        lost.extend(self.durables.values().filter_map(|d| d.bound.map(|(id, serial, _)| (id, serial, 0))));
        lost.extend(
            self.queues.values().flat_map(|q| q.consumers.iter().map(|((id, serial, _), _)| (*id, *serial, 0))),
        );
    }

    /// The durable states now (what the leader replicates).
    pub(super) fn states(&self) -> BTreeMap<String, DurableState> {
        let mut all: BTreeMap<String, DurableState> =
            self.durables.values().map(|d| (d.name.clone(), d.state())).collect();
        all.extend(self.queues.values().map(|q| (q.name.clone(), q.state())));
        all
    }

    /// This member now leads: what its durable subscriptions and queues
    /// deliver again is flagged as redelivered up to the journal's end
    /// (the old leader may have delivered any of it).
    fn lead(&mut self) {
        let states: Vec<DurableState> = self.states().into_values().collect();
        for mut s in states {
            s.delivered_limit = 0;
            self.adopt(s);
        }
        // Restoring flags what the journal has written; what was applied
        // and not yet written is flagged too.
        let last = self.journal.last_appended();
        for d in self.durables.values_mut() {
            d.flag_through(last);
        }
        for q in self.queues.values_mut() {
            q.flag_through(last);
        }
        if let Some(r) = self.ha.as_deref_mut() {
            r.positions = BTreeMap::new();
        }
    }
}

impl Router {
    /// Joins a high-availability group: guaranteed publishes go through
    /// it ([`Replication`]). Call after [`Router::set_guaranteed`].
    pub fn set_replication(&mut self, r: Replication) {
        if let Some(g) = self.guaranteed.as_deref_mut() {
            g.ha = Some(Box::new(r));
        }
    }

    /// The group, if this router is a member.
    pub fn ha_status(&self) -> Option<HaGroupStatus> {
        Some(self.guaranteed.as_deref()?.ha.as_deref()?.status())
    }

    /// Proposes what the duty cycle batched, and applies what the group
    /// committed; returns the work done.
    pub(super) fn poll_replication(&mut self) -> usize {
        let Some(g) = self.guaranteed.as_deref_mut() else { return 0 };
        let Some(r) = g.ha.as_deref_mut() else { return 0 };
        r.propose_batch();
        let mut work = 0;
        let mut lost: Vec<Pending> = Vec::new();
        let mut answers = Vec::new();
        while let Some(ev) = g.ha.as_deref().and_then(|r| r.ha.try_event()) {
            work += 1;
            match ev {
                Event::Committed { index, data, .. } => g.apply(index, &data),
                Event::Leader { id, me, last, .. } => {
                    let Some(r) = g.ha.as_deref_mut() else { break };
                    r.leader = id;
                    if me {
                        r.flag_index = last;
                    }
                    let was = std::mem::replace(&mut r.leading, me);
                    if was && !me && id == 0 {
                        tracing::warn!(
                            member = r.me,
                            "ha: this router no longer leads its group: cut off from its majority, it refuses \
                             guaranteed publishes and durable subscriptions (NotLeader); direct messages still flow \
                             between its own clients"
                        );
                        g.demote(&mut lost);
                    } else if was && !me {
                        tracing::warn!(member = r.me, leader = id, "ha: this router no longer leads its group");
                        g.demote(&mut lost);
                    } else if me && !was {
                        tracing::info!(member = r.me, "ha: this router leads its group");
                        g.lead();
                    }
                }
                Event::Refused { token, leader } => {
                    if let Some(r) = g.ha.as_deref_mut() {
                        match r.change_refused(token, leader) {
                            Some(answer) => answers.push(answer),
                            None => lost.extend(r.proposed.remove(&token).unwrap_or_default()),
                        }
                    }
                }
                Event::Members { voters, change, .. } => {
                    if let Some(r) = g.ha.as_deref_mut() {
                        tracing::info!(member = r.me, ?voters, ?change, "ha: the group's members changed");
                        r.voters.clone_from(&voters);
                        r.voters.sort_unstable();
                        answers.extend(r.change_committed(&voters, change));
                    }
                }
                Event::SnapshotWanted => g.checkpoint(),
                Event::Installed { index, dir, files } => g.install(index, &dir, &files),
                Event::Failed(why) => {
                    g.fail(&tickwire_journal::JournalError::Io {
                        path: g.journal.config().dir.join("raft"),
                        source: std::io::Error::other(why),
                    });
                }
            }
        }
        // The journal failed, or the member's thread is gone (a log it
        // could not write, a panic): this router leaves its group, as if
        // it had crashed, and sends its clients to the others.
        let gone = g.ha.as_deref().is_some_and(|r| !r.ha.is_running());
        if (g.failed().is_some() || gone) && g.ha.as_deref().is_some_and(|r| !r.left) {
            if let Some(r) = g.ha.as_deref_mut() {
                tracing::error!(member = r.me, "ha: this router leaves its group (its journal or its Raft log failed)");
                r.left = true;
                r.ha.stop();
                r.leader = 0;
            }
            g.demote(&mut lost);
        }
        // What the journal holds durably is applied for good: the log may
        // drop it.
        let failed = g.failed().is_some();
        if let Some(r) = g.ha.as_deref_mut().filter(|_| !failed) {
            let durable = g.journal.durable();
            while r.unreported.front().is_some_and(|&(_, seq)| seq <= durable) {
                if let Some((i, _)) = r.unreported.pop_front() {
                    r.durably_applied = i;
                }
            }
        }
        if !answers.is_empty() {
            self.answer_member_requests(answers);
        }
        if !lost.is_empty() {
            lost.sort_unstable();
            lost.dedup_by_key(|p| (p.0, p.1));
            let Some(r) = self.guaranteed.as_deref_mut().and_then(|g| g.ha.as_deref_mut()) else { return work };
            for (id, serial, _) in lost {
                if matches!(self.sessions.get(id as usize), Some(Some(s)) if s.serial == serial) {
                    let why = r.not_leader();
                    r.ended.push((id, why));
                }
            }
        }
        work
    }

    /// Replicates the durable positions that moved (leader, from
    /// housekeeping).
    pub(super) fn replicate_positions(&mut self) {
        let Some(g) = self.guaranteed.as_deref_mut() else { return };
        if let Some(r) = g.ha.as_deref_mut().filter(|r| !r.left && r.durably_applied > 0) {
            // Saved first: the log compacts only what a restart skips.
            match save_applied(&r.dir, r.durably_applied) {
                Ok(()) => r.ha.applied(r.durably_applied),
                Err(e) => tracing::warn!(error = %e, "ha: the applied index not saved (the log keeps its entries)"),
            }
        }
        if !g.ha.as_deref().is_some_and(Replication::is_leader) {
            return;
        }
        let now = g.states();
        if let Some(r) = g.ha.as_deref_mut() {
            r.propose_positions(now);
        }
    }

    /// Sessions a group member ends with `NotLeader`, each once.
    pub fn take_not_leader(&mut self) -> Vec<(u32, Disconnect)> {
        match self.guaranteed.as_deref_mut().and_then(|g| g.ha.as_deref_mut()) {
            Some(r) => r.take_ended(),
            None => Vec::new(),
        }
    }
}
