//! One member's consensus, sans I/O: raft-rs's `RawNode` over the
//! [`LogStore`], driven by [`Node::handle_message`] (a peer's message),
//! [`Node::handle_timeout`] (time passed in) and [`Node::propose`], and
//! drained by [`Node::poll_transmit`] (messages for peers, encoded) and
//! [`Node::poll_event`] (entries committed, leadership seen).
//!
//! [`Node::poll`] runs raft-rs's ready loop: a leader's appends go out at
//! once (its own write runs beside them), entries and the hard state are
//! written ahead (and synced) before any answer that depends on them, and
//! committed entries are handed over in index order, on every member.
//!
//! Snapshots ([`crate::snapshot`]): a leader whose log no longer holds
//! what a member lacks asks its application for one
//! ([`Event::SnapshotWanted`]) and sends the one offered. A follower holds
//! the snapshot message back until its files are fetched and staged
//! ([`Node::poll_fetch`], [`Node::handle_fetched`]), then steps it: the
//! log starts after it, and the application installs the staged files
//! ([`Event::Installed`]) before it applies anything after.
//!
//! Members ([`Node::propose_member`]): added and removed by raft-rs's
//! configuration change, one at a time, an added member's address in it
//! ([`Event::Members`]). Files: `events` (what a member says), `snapshots`.

use crate::snapshot::{self, Manifest};
use crate::stats::NodeStats;
use crate::store::LogStore;
use crate::wal::Wal;
use crate::HaConfig;
use protobuf::Message as _;
use raft::prelude::{ConfChange, ConfChangeV2, Entry, EntryType, Message, MessageType};
use raft::{RawNode, StateRole};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;

mod events;
mod snapshots;
pub use events::{Event, HaError, MemberChange, Refused};
use snapshots::installed;

/// A leader gives up on a snapshot sent to a member after this long
/// without progress (the member's fetch moving bytes), and offers it
/// again.
pub const SNAPSHOT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// One member.
pub struct Node {
    raw: RawNode<LogStore>,
    id: u64,
    tick_ns: u64,
    next_tick: Option<u64>,
    keep_bytes: u64,
    max_log_bytes: u64,
    outbox: VecDeque<(u64, Vec<u8>)>,
    events: VecDeque<Event>,
    /// What the application has applied durably.
    applied: u64,
    leader: (u64, u64),
    stats: NodeStats,
    /// The time last passed in (ns).
    clock: u64,
    /// The last leader known, and its term.
    last_leader: Option<(u64, u64)>,
    /// When it was last heard (another member: this one's own leadership
    /// ending is no fail-over it measures).
    heard_leader: Option<u64>,
    /// The last entry handed to the application, and the last committed:
    /// entries it is not handed (a new leader's empty one, membership
    /// changes) count as applied once it applied every one before them.
    last_handed: u64,
    committed_through: u64,
    /// A snapshot message held until its files are staged, and fetches to
    /// start: (leader, manifest).
    held_snapshot: Option<(u64, Message)>,
    fetches: VecDeque<(u64, Manifest)>,
    /// Snapshots sent, by member: when they last made progress (ns).
    sending: BTreeMap<u64, u64>,
    /// When a snapshot was last asked of the application (not offered
    /// since): asked again after [`SNAPSHOT_DEADLINE`].
    asked: Option<u64>,
    snapshot_dir: PathBuf,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("id", &self.id).field("leader", &self.leader).finish_non_exhaustive()
    }
}

/// raft-rs logs through slog: its warnings and errors go to `tracing`.
struct ToTracing;

impl slog::Drain for ToTracing {
    type Ok = ();
    type Err = slog::Never;
    fn log(&self, r: &slog::Record<'_>, _: &slog::OwnedKVList) -> Result<(), slog::Never> {
        match r.level() {
            slog::Level::Critical | slog::Level::Error => tracing::error!(target: "raft", "{}", r.msg()),
            slog::Level::Warning => tracing::warn!(target: "raft", "{}", r.msg()),
            slog::Level::Info => tracing::debug!(target: "raft", "{}", r.msg()),
            _ => tracing::trace!(target: "raft", "{}", r.msg()),
        }
        Ok(())
    }
}

impl Node {
    /// Opens the member's log (replaying it) and its raft-rs node.
    ///
    /// # Errors
    /// [`HaError::Config`] for a bad configuration or an application that
    /// applied less than the log has compacted; [`HaError::Wal`];
    /// [`HaError::Raft`].
    pub fn open(cfg: &HaConfig) -> Result<Self, HaError> {
        cfg.validate().map_err(HaError::Config)?;
        let (wal, replayed) = Wal::open(&cfg.dir, cfg.sync)?;
        // A member joining a running group starts with none: it learns
        // them from the leader's snapshot.
        let members: Vec<u64> = if cfg.join { Vec::new() } else { cfg.members.keys().copied().collect() };
        let mut store = LogStore::new(wal, replayed, &members);
        store.persist()?;
        let mut events = VecDeque::new();
        let applied = match cfg.applied {
            // (Entry 1 is the first leader's empty one, never handed over:
            // a log that dropped only it, before an add, needs no snapshot.)
            Some(a) if a.max(1) < store.compacted() => {
                // Installed in the log, and not yet in the application
                // (it stopped in between): the staged files again.
                let c = store.compacted();
                let Some(m) = snapshot::staged(&cfg.snapshot_dir(), c) else {
                    return Err(HaError::Config(format!(
                        "the application applied up to {a}, but the Raft log in {} starts after {c}, and no \
                         snapshot for {c} is staged in {}",
                        cfg.dir.display(),
                        cfg.snapshot_dir().display()
                    )));
                };
                events.push_back(installed(&cfg.snapshot_dir(), &m));
                c
            }
            Some(a) => a.min(store.hard_state().commit),
            None => store.compacted(),
        };
        let rc = raft::Config {
            id: cfg.id,
            election_tick: cfg.election_ticks,
            heartbeat_tick: cfg.heartbeat_ticks,
            applied,
            max_size_per_msg: cfg.max_append,
            max_inflight_msgs: cfg.max_inflight,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        rc.validate()?;
        let logger = slog::Logger::root(ToTracing, slog::o!("member" => cfg.id));
        let raw = RawNode::new(&rc, store, &logger)?;
        Ok(Self {
            raw,
            id: cfg.id,
            tick_ns: cfg.tick.as_nanos() as u64,
            next_tick: None,
            keep_bytes: cfg.keep_bytes,
            max_log_bytes: cfg.max_log_bytes,
            outbox: VecDeque::new(),
            events,
            applied,
            leader: (0, 0),
            stats: NodeStats::default(),
            clock: 0,
            last_leader: None,
            heard_leader: None,
            last_handed: applied,
            committed_through: applied,
            held_snapshot: None,
            fetches: VecDeque::new(),
            sending: BTreeMap::new(),
            asked: None,
            snapshot_dir: cfg.snapshot_dir(),
        })
    }

    /// This member's id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A message from member `from` (its encoded bytes).
    ///
    /// # Errors
    /// [`HaError::Message`] (counted) if it does not decode, is not from
    /// `from` or not for this member, or raft-rs refuses it.
    pub fn handle_message(&mut self, from: u64, bytes: &[u8]) -> Result<(), HaError> {
        let refuse = |s: &mut Self, why: String| {
            s.stats.messages_refused += 1;
            Err(HaError::Message { from, why })
        };
        let m = match Message::parse_from_bytes(bytes) {
            Ok(m) => m,
            Err(e) => return refuse(self, format!("undecodable Raft message: {e}")),
        };
        if m.from != from || m.to != self.id {
            return refuse(self, format!("a message from {} to {} on member {from}'s link", m.from, m.to));
        }
        let leader = self.raw.raft.leader_id;
        if leader != 0 && m.from == leader {
            self.heard_leader = Some(self.clock);
        }
        if m.get_msg_type() == MessageType::MsgSnapshot {
            return self.hold_snapshot(m).or_else(|why| refuse(self, why));
        }
        self.step(m).or_else(|why| refuse(self, why))
    }

    fn step(&mut self, m: Message) -> Result<(), String> {
        match self.raw.step(m) {
            Ok(()) => {
                self.stats.messages_in += 1;
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Ticks raft-rs for the time passed (`now` in ns, monotonic).
    pub fn handle_timeout(&mut self, now: u64) {
        self.clock = self.clock.max(now);
        let next = *self.next_tick.get_or_insert(now + self.tick_ns);
        if now < next {
            return;
        }
        // One tick per tick interval passed, at most a few after a pause
        // (a paused member's silence is what the others measure).
        let behind = ((now - next) / self.tick_ns + 1).min(4);
        for _ in 0..behind {
            self.raw.tick();
        }
        self.next_tick = Some(now.max(next) + self.tick_ns);
        if !self.sending.is_empty() {
            self.watch_snapshots();
        }
    }

    /// When [`Node::handle_timeout`] next has work (ns).
    pub fn poll_timeout(&self) -> Option<u64> {
        self.next_tick
    }

    /// Proposes `data` as the next entry.
    ///
    /// # Errors
    /// [`Refused::NotLeader`] on a follower or candidate.
    pub fn propose(&mut self, data: Vec<u8>) -> Result<(), Refused> {
        if self.raw.raft.state != StateRole::Leader {
            self.stats.proposals_refused += 1;
            return Err(Refused::NotLeader { leader: self.raw.raft.leader_id });
        }
        match self.raw.propose(Vec::new(), data) {
            Ok(()) => {
                self.stats.proposals += 1;
                Ok(())
            }
            Err(_) => {
                self.stats.proposals_refused += 1;
                Err(Refused::NotLeader { leader: self.raw.raft.leader_id })
            }
        }
    }

    /// Proposes adding member `id` at peer address `addr` (`Some`) or
    /// removing it (`None`): a configuration change through raft-rs, one
    /// at a time. The address travels in the change, so every member
    /// learns where to reach the new one when the change commits.
    ///
    /// A new member starts with an empty log and no members
    /// ([`HaConfig::join`]): it learns the group from a snapshot, never
    /// from the log's first entries (which predate the members the group
    /// was created with). So every member drops its log's first entry
    /// (always the first leader's empty one) when it applies an add: a
    /// leader does so before it makes the new member's progress, so
    /// before anything goes to it.
    ///
    /// # Errors
    /// [`Refused::NotLeader`]; [`Refused::Busy`] while a change is not yet
    /// applied (raft-rs would turn a second one into an empty entry), or
    /// for removing the leader itself (another must lead first).
    pub fn propose_member(&mut self, id: u64, addr: Option<SocketAddr>) -> Result<(), Refused> {
        let leader = self.raw.raft.leader_id;
        if self.raw.raft.state != StateRole::Leader {
            return Err(Refused::NotLeader { leader });
        }
        if id == 0 || self.raw.raft.has_pending_conf() || (addr.is_none() && id == self.id) {
            return Err(Refused::Busy);
        }
        let mut cc = ConfChange { node_id: id, ..Default::default() };
        match addr {
            Some(a) => {
                cc.set_change_type(raft::prelude::ConfChangeType::AddNode);
                cc.context = a.to_string().into_bytes().into();
            }
            None => cc.set_change_type(raft::prelude::ConfChangeType::RemoveNode),
        }
        self.raw.propose_conf_change(Vec::new(), cc).map_err(|_| Refused::Busy)
    }

    /// The members' peer addresses, as the agent's book has them: sent in
    /// every snapshot.
    pub fn set_addresses(&mut self, book: &BTreeMap<u64, SocketAddr>) {
        self.raw.mut_store().set_addresses(book.iter().map(|(&i, &a)| (i, a)).collect());
    }

    /// Drops the log's first entry if it is still held, committed and
    /// empty (see [`Node::propose_member`]).
    fn drop_first_entry(&mut self) -> Result<(), HaError> {
        let store = self.raw.store();
        if store.compacted() == 0 && self.raw.raft.raft_log.committed >= 1 && store.first_is_empty() {
            self.raw.mut_store().compact(1)?;
        }
        Ok(())
    }

    /// The application has applied, durably, every entry up to `index`:
    /// the log may drop what every member has up to there.
    pub fn set_applied(&mut self, index: u64) {
        self.applied = self.applied.max(index);
    }

    /// What is applied, as the status shows it: what the application
    /// applied, and past it the entries it is never handed once it applied
    /// all it was (so a group at rest shows applied = commit).
    fn applied(&self) -> u64 {
        if self.applied >= self.last_handed {
            self.applied.max(self.committed_through)
        } else {
            self.applied
        }
    }

    /// Runs raft-rs's ready loop until it has nothing: writes ahead, queues
    /// messages and events.
    ///
    /// # Errors
    /// [`HaError::Wal`]: the log could not be written; the member must
    /// stop (its answers would promise what it may not hold).
    pub fn poll(&mut self) -> Result<(), HaError> {
        while self.raw.has_ready() {
            let mut ready = self.raw.ready();
            if let Some(ss) = ready.ss() {
                let (id, me) = (ss.leader_id, ss.raft_state == StateRole::Leader);
                self.note_leader(id, me);
            }
            self.send(ready.take_messages());
            if !ready.snapshot().is_empty() {
                self.install(ready.snapshot())?;
            }
            let committed = ready.take_committed_entries();
            self.commit(committed)?;
            let store = self.raw.mut_store();
            store.append(ready.entries());
            if let Some(hs) = ready.hs() {
                store.set_hard_state(hs);
            }
            store.persist()?;
            self.send(ready.take_persisted_messages());
            let mut light = self.raw.advance(ready);
            if let Some(commit) = light.commit_index() {
                self.raw.mut_store().set_commit(commit);
            }
            self.send(light.take_messages());
            let committed = light.take_committed_entries();
            self.commit(committed)?;
            self.raw.advance_apply();
        }
        let again = self.asked.map_or(true, |t| self.clock.saturating_sub(t) > SNAPSHOT_DEADLINE.as_nanos() as u64);
        if self.raw.store().take_wanted() && again {
            self.asked = Some(self.clock);
            self.events.push_back(Event::SnapshotWanted);
        }
        Ok(())
    }

    fn note_leader(&mut self, id: u64, me: bool) {
        let term = self.raw.raft.term;
        if (id, term) != self.leader {
            if id != self.leader.0 {
                // A fail-over: a new leader, in a later term than the last
                // one known, which was not this member (a deposed leader's
                // wait is its partition's length, not a fail-over). The
                // same leader found again in its own term (after a
                // pre-vote that came to nothing) is none.
                if let (Some((was, was_term)), Some(heard)) = (self.last_leader, self.heard_leader) {
                    if id != 0 && term > was_term && was != self.id {
                        self.stats.failover(self.clock.saturating_sub(heard));
                    }
                }
                if id != 0 {
                    self.last_leader = Some((id, term));
                    self.heard_leader = Some(self.clock);
                }
                self.stats.leader_changes += 1;
                if me {
                    self.stats.elections_won += 1;
                }
                tracing::info!(member = self.id, leader = id, term, "Raft: leader");
            }
            self.leader = (id, term);
            let last = self.raw.raft.raft_log.last_index();
            self.events.push_back(Event::Leader { id, term, me, last });
        }
    }

    fn send(&mut self, msgs: Vec<Message>) {
        for m in msgs {
            if m.get_msg_type() == MessageType::MsgSnapshot {
                self.sending.insert(m.to, self.clock);
            }
            match m.write_to_bytes() {
                Ok(b) => {
                    self.stats.messages_out += 1;
                    self.outbox.push_back((m.to, b));
                }
                Err(e) => tracing::error!(error = %e, "Raft message not encoded"),
            }
        }
    }

    fn commit(&mut self, entries: Vec<Entry>) -> Result<(), HaError> {
        for mut e in entries {
            self.committed_through = self.committed_through.max(e.index);
            match e.get_entry_type() {
                EntryType::EntryNormal if !e.data.is_empty() => {
                    self.last_handed = e.index;
                    self.stats.committed += 1;
                    self.events.push_back(Event::Committed {
                        index: e.index,
                        term: e.term,
                        data: e.take_data().to_vec(),
                    });
                }
                EntryType::EntryNormal => {}
                EntryType::EntryConfChange => {
                    let cc = ConfChange::parse_from_bytes(&e.data).map_err(|e| HaError::Config(e.to_string()))?;
                    let held = self.raw.store().members();
                    if held.voters.is_empty() && held.learners.is_empty() {
                        // A joining member handed the log instead of a
                        // snapshot: its configuration would be the change
                        // alone (a group of one). It stops instead.
                        return Err(HaError::Config(format!(
                            "member {}: a membership change at index {} reached a member that knows no group yet \
                             (it joins, and must start from the leader's snapshot): stopped rather than form a \
                             group of its own",
                            self.id, e.index
                        )));
                    }
                    let cs = self.raw.apply_conf_change(&cc)?;
                    self.raw.mut_store().set_members(&cs);
                    let added = cc.get_change_type() == raft::prelude::ConfChangeType::AddNode;
                    // The address an add carries, checked: a change whose
                    // address does not parse still changes the voters (the
                    // log is the log), and the member is reached once its
                    // address is configured.
                    let addr = std::str::from_utf8(&cc.context).ok().and_then(|a| a.parse::<SocketAddr>().ok());
                    if added && addr.is_none() {
                        tracing::warn!(
                            member = self.id,
                            added = cc.node_id,
                            "Raft: a member added without a peer address"
                        );
                    }
                    tracing::info!(member = self.id, voters = ?cs.voters, node = cc.node_id, added, "Raft: members changed");
                    let change = Some(if added {
                        MemberChange::Added(cc.node_id, addr)
                    } else {
                        MemberChange::Removed(cc.node_id)
                    });
                    if added {
                        // Before any append to the new member goes out.
                        self.drop_first_entry()?;
                    }
                    self.events.push_back(Event::Members { voters: cs.voters.clone(), change, addresses: Vec::new() });
                }
                EntryType::EntryConfChangeV2 => {
                    let cc = ConfChangeV2::parse_from_bytes(&e.data).map_err(|e| HaError::Config(e.to_string()))?;
                    let cs = self.raw.apply_conf_change(&cc)?;
                    self.raw.mut_store().set_members(&cs);
                }
            }
        }
        Ok(())
    }

    /// The next message for a peer: (member id, encoded message).
    pub fn poll_transmit(&mut self) -> Option<(u64, Vec<u8>)> {
        self.outbox.pop_front()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// A peer could not be reached: raft-rs probes it again rather than
    /// streaming appends into the void.
    pub fn report_unreachable(&mut self, id: u64) {
        self.raw.report_unreachable(id);
    }

    /// Drops log entries no longer needed: up to what the application has
    /// applied and (on a leader) every member has; a follower keeps
    /// `keep_bytes` behind that; past `max_log_bytes`, what was applied
    /// goes even if a member lacks it. Returns entries dropped.
    ///
    /// # Errors
    /// [`HaError::Wal`] from the file's rewrite.
    pub fn compact(&mut self) -> Result<u64, HaError> {
        // What the application applied itself: a restart resumes after
        // what it saved, so entries it was never handed past that stay.
        let applied = self.applied.min(self.raw.raft.raft_log.committed);
        let store = self.raw.store();
        let mut to = if self.raw.raft.state == StateRole::Leader {
            let least = self.raw.raft.prs().iter().map(|(_, p)| p.matched).min().unwrap_or(0);
            applied.min(least)
        } else {
            applied.min(store.index_keeping(self.keep_bytes))
        };
        if store.held().1 > self.max_log_bytes {
            let bound = applied.min(store.index_keeping(self.max_log_bytes));
            if bound > to {
                tracing::warn!(
                    member = self.id,
                    to = bound,
                    "Raft log over its bound: dropping entries a member still lacks"
                );
                to = bound;
            }
        }
        let before = store.compacted();
        if to <= before {
            return Ok(0);
        }
        self.raw.mut_store().compact(to)?;
        self.stats.compactions += 1;
        Ok(to - before)
    }

    /// Counts since start.
    pub fn stats(&self) -> NodeStats {
        self.stats
    }

    /// The member's view of its group, for `tickwire router status`.
    pub fn status(&self) -> crate::HaStatus {
        let r = &self.raw.raft;
        let leader = r.state == StateRole::Leader;
        let store = self.raw.store();
        let mut voters = store.members().voters.clone();
        voters.sort_unstable();
        let members = voters
            .into_iter()
            .map(|id| {
                let matched = if leader { r.prs().get(id).map(|p| p.matched) } else { None };
                crate::MemberStatus { id, matched, lag: matched.map(|m| r.raft_log.last_index().saturating_sub(m)) }
            })
            .collect();
        let (entries, entry_bytes) = store.held();
        crate::HaStatus {
            id: self.id,
            role: format!("{:?}", r.state).to_lowercase(),
            leader: r.leader_id,
            term: r.term,
            commit: r.raft_log.committed,
            last: r.raft_log.last_index(),
            applied: self.applied(),
            compacted: store.compacted(),
            log_entries: entries as u64,
            log_bytes: entry_bytes,
            wal_bytes: store.wal().bytes(),
            wal_syncs: store.wal().syncs(),
            snapshots_refused: store.snapshots_refused(),
            snapshot_index: store.offer().map_or(0, |m| m.index),
            snapshot_bytes: store.offer().map_or(0, crate::snapshot::Manifest::bytes),
            members,
            stats: self.stats,
            links: crate::PeerStats::default(),
        }
    }
}
