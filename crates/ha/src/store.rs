//! The node's Raft log: entries in memory from the compaction point on,
//! every change written ahead to the [`Wal`] before the node answers.
//! It is raft-rs's [`Storage`], so the library reads the log from here.
//!
//! A peer whose next entry was compacted away needs a snapshot: this
//! store answers with the one its application offered
//! ([`LogStore::set_offer`]) while that covers every compacted entry, and
//! otherwise answers `SnapshotTemporarilyUnavailable`, counts it, and
//! says a snapshot is wanted ([`LogStore::take_wanted`]). The node
//! compacts only what every member has (see [`crate::node`]), so that
//! happens only past the log's bound.

use crate::wal::{Replayed, Wal, WalError};
use raft::prelude::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};
use std::cell::Cell;

/// The Raft log of one node.
#[derive(Debug)]
pub struct LogStore {
    wal: Wal,
    entries: Vec<Entry>,
    hard: HardState,
    members: ConfState,
    compacted: (u64, u64),
    entry_bytes: u64,
    /// Snapshots asked for and not given.
    snapshots_refused: Cell<u64>,
    /// A snapshot was asked for and none covers the log's start.
    wanted: Cell<bool>,
    /// The application's snapshot: its manifest, and the term at its index.
    offer: Option<(crate::snapshot::Manifest, u64)>,
    /// The members' peer addresses, sent in every snapshot.
    addresses: Vec<(u64, std::net::SocketAddr)>,
}

impl LogStore {
    /// The store over an opened write-ahead file and what it replayed;
    /// `members` seeds a new group's membership (ignored when the file
    /// names its members).
    pub fn new(wal: Wal, r: Replayed, members: &[u64]) -> Self {
        let mut s = Self {
            wal,
            entry_bytes: r.entries.iter().map(|e| e.data.len() as u64).sum(),
            entries: r.entries,
            hard: r.hard,
            members: r.members,
            compacted: r.compacted,
            snapshots_refused: Cell::new(0),
            wanted: Cell::new(false),
            offer: None,
            addresses: Vec::new(),
        };
        if s.members.voters.is_empty() {
            s.members = ConfState { voters: members.to_vec(), ..Default::default() };
            s.wal.put_members(&s.members);
        }
        s
    }

    /// Appends `entries` (Raft's conflict rule: the first replaces what is
    /// at its index and after), to the write-ahead file too.
    pub fn append(&mut self, entries: &[Entry]) {
        let Some(first) = entries.first() else { return };
        let start = self.entries.first().map_or(first.index, |e| e.index);
        let keep = first.index.saturating_sub(start) as usize;
        for e in self.entries.drain(keep.min(self.entries.len())..) {
            self.entry_bytes -= e.data.len() as u64;
        }
        for e in entries {
            self.wal.put_entry(e);
            self.entry_bytes += e.data.len() as u64;
        }
        self.entries.extend_from_slice(entries);
    }

    /// Records a new hard state.
    pub fn set_hard_state(&mut self, hs: &HardState) {
        self.hard = hs.clone();
        self.wal.put_hard_state(hs);
    }

    /// Records a new commit index.
    pub fn set_commit(&mut self, commit: u64) {
        if commit > self.hard.commit {
            let mut hs = self.hard.clone();
            hs.commit = commit;
            self.set_hard_state(&hs);
        }
    }

    /// Records new members.
    pub fn set_members(&mut self, cs: &ConfState) {
        self.members = cs.clone();
        self.wal.put_members(cs);
    }

    /// Writes (and syncs) what changed.
    ///
    /// # Errors
    /// [`WalError`]: the node stops answering peers.
    pub fn persist(&mut self) -> Result<(), WalError> {
        self.wal.flush()
    }

    /// Drops the entries up to `index` (which every member has and the
    /// application has applied), rewriting the file when most of it is
    /// dead. Returns whether the file was rewritten.
    ///
    /// # Errors
    /// [`WalError`] from the rewrite.
    pub fn compact(&mut self, index: u64) -> Result<bool, WalError> {
        let Some(first) = self.entries.first().map(|e| e.index) else { return Ok(false) };
        let last = self.entries.last().map_or(0, |e| e.index);
        let index = index.min(last);
        if index < first {
            return Ok(false);
        }
        let n = (index - first + 1) as usize;
        let term = self.entries[n - 1].term;
        for e in self.entries.drain(..n) {
            self.entry_bytes -= e.data.len() as u64;
        }
        self.compacted = (index, term);
        // Rewrite when the file is mostly what was dropped; else say where
        // the log now starts, so a restart does not hold the rest again.
        if self.wal.bytes() > 4 * (self.entry_bytes + (1 << 20)) {
            self.wal.rewrite(self.compacted, &self.hard, &self.members, &self.entries)?;
            return Ok(true);
        }
        self.wal.put_compacted(index, term);
        self.wal.flush()?;
        Ok(false)
    }

    /// The highest index whose dropping (with everything before it) leaves
    /// at most `bytes` of entry payload held (the compaction point itself
    /// when the log already holds no more).
    pub fn index_keeping(&self, bytes: u64) -> u64 {
        let mut kept = 0u64;
        for e in self.entries.iter().rev() {
            kept += e.data.len() as u64;
            if kept > bytes {
                return e.index;
            }
        }
        self.compacted.0
    }

    /// Takes the application's snapshot for members that need one; false
    /// (and wanted again) when the log no longer knows its index's term
    /// or was compacted past it.
    pub fn set_offer(&mut self, m: &crate::snapshot::Manifest) -> bool {
        match self.term(m.index) {
            Ok(term) if m.index > 0 && m.index >= self.compacted.0 => {
                self.offer = Some((m.clone(), term));
                true
            }
            _ => {
                self.wanted.set(true);
                false
            }
        }
    }

    /// The snapshot offered, if any.
    pub fn offer(&self) -> Option<&crate::snapshot::Manifest> {
        self.offer.as_ref().map(|o| &o.0)
    }

    /// Whether a snapshot was wanted since the last call.
    pub fn take_wanted(&self) -> bool {
        self.wanted.replace(false)
    }

    /// Installs a snapshot raft-rs restored (its files staged already):
    /// the log starts after it, holding nothing, and the file is rewritten
    /// so (synced) before the node answers its leader.
    ///
    /// # Errors
    /// [`WalError`] from the rewrite.
    pub fn apply_snapshot(&mut self, meta: &SnapshotMetadata) -> Result<(), WalError> {
        self.entries.clear();
        self.entry_bytes = 0;
        self.compacted = (meta.index, meta.term);
        self.hard.commit = self.hard.commit.max(meta.index);
        self.hard.term = self.hard.term.max(meta.term);
        self.members = meta.get_conf_state().clone();
        self.wal.rewrite(self.compacted, &self.hard, &self.members, &[])
    }

    /// The hard state.
    pub fn hard_state(&self) -> &HardState {
        &self.hard
    }

    /// The members.
    pub fn members(&self) -> &ConfState {
        &self.members
    }

    /// The last index compacted away.
    pub fn compacted(&self) -> u64 {
        self.compacted.0
    }

    /// The members' peer addresses, for the snapshots sent from now on.
    pub fn set_addresses(&mut self, addresses: Vec<(u64, std::net::SocketAddr)>) {
        self.addresses = addresses;
    }

    /// Whether the first entry held carries no data (a new leader's).
    pub fn first_is_empty(&self) -> bool {
        self.entries.first().is_some_and(|e| e.data.is_empty())
    }

    /// Entries held and their payload bytes.
    pub fn held(&self) -> (usize, u64) {
        (self.entries.len(), self.entry_bytes)
    }

    /// The write-ahead file.
    pub fn wal(&self) -> &Wal {
        &self.wal
    }

    /// Snapshots a peer needed and did not get.
    pub fn snapshots_refused(&self) -> u64 {
        self.snapshots_refused.get()
    }

    fn last(&self) -> u64 {
        self.entries.last().map_or(self.compacted.0, |e| e.index)
    }
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(self.hard.clone(), self.members.clone()))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low <= self.compacted.0 {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let first = self.compacted.0 + 1;
        let slice = &self.entries[(low - first) as usize..(high - first) as usize];
        let max = max_size.into().unwrap_or(u64::MAX);
        let mut size = 0u64;
        let mut out = Vec::with_capacity(slice.len());
        for e in slice {
            size += e.data.len() as u64 + 32;
            // At least one entry, as raft-rs's own stores do.
            if !out.is_empty() && size > max {
                break;
            }
            out.push(e.clone());
        }
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.compacted.0 {
            return Ok(self.compacted.1);
        }
        if idx < self.compacted.0 {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        match self.entries.get((idx - self.compacted.0 - 1) as usize) {
            Some(e) => Ok(e.term),
            None => Err(raft::Error::Store(StorageError::Unavailable)),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.compacted.0 + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        if let Some((m, term)) = &self.offer {
            if m.index >= self.compacted.0 && m.index >= request_index {
                let mut s = Snapshot::default();
                let mut m = m.clone();
                m.addresses.clone_from(&self.addresses);
                s.set_data(m.emit().into());
                let meta = s.mut_metadata();
                meta.index = m.index;
                meta.term = *term;
                // The members now, not as of the snapshot's index: a
                // joining member, added by the latest change, must find
                // itself here. The changes after the index are applied
                // again on the member that installs it: the same add or
                // remove again is a no-op in raft-rs, and an add then a
                // remove of one member leave it a voter only between the
                // two.
                meta.set_conf_state(self.members.clone());
                return Ok(s);
            }
        }
        self.wanted.set(true);
        self.snapshots_refused.set(self.snapshots_refused.get() + 1);
        // Counted (`router status`), and said once in a thousand asks.
        if self.snapshots_refused.get() % 1000 == 1 {
            tracing::info!(
                peer = to,
                compacted = self.compacted.0,
                "Raft: a member needs a snapshot; the application is asked for one"
            );
        }
        Err(raft::Error::Store(StorageError::SnapshotTemporarilyUnavailable))
    }
}
