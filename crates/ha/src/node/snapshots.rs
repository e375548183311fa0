//! The snapshot side of a member: a leader's snapshot offered and sent
//! (and given up on without progress), a follower's held while its files
//! are fetched, then installed in the log.

use super::{Event, HaError, Node, SNAPSHOT_DEADLINE};
use crate::snapshot::{self, Manifest};
use raft::prelude::Message;
use raft::SnapshotStatus;

impl Node {
    /// A snapshot from the leader: stepped at once if its files are staged
    /// already, else held while they are fetched (one at a time: a second
    /// one while the first is fetched is dropped; the leader offers again).
    pub(super) fn hold_snapshot(&mut self, m: Message) -> Result<(), String> {
        let manifest = Manifest::parse(m.get_snapshot().get_data()).map_err(|e| e.to_string())?;
        if manifest.index != m.get_snapshot().get_metadata().index {
            return Err(format!(
                "a snapshot for {} whose manifest says {}",
                m.get_snapshot().get_metadata().index,
                manifest.index
            ));
        }
        // Staged already, or nothing this member lacks (raft-rs answers a
        // stale one): no fetch.
        let committed = self.raw.raft.raft_log.committed;
        // (The same files: the leader's address book may have changed
        // since, and is taken from this message.)
        let same = |s: &Manifest| s.index == manifest.index && s.files == manifest.files;
        if manifest.index < committed || snapshot::staged(&self.snapshot_dir, manifest.index).is_some_and(|s| same(&s))
        {
            return self.step(m);
        }
        if self.held_snapshot.is_none() {
            self.fetches.push_back((m.from, manifest));
            self.held_snapshot = Some((m.from, m));
        }
        Ok(())
    }

    /// The next snapshot to fetch: (leader, manifest).
    pub fn poll_fetch(&mut self) -> Option<(u64, Manifest)> {
        self.fetches.pop_front()
    }

    /// The fetch of the snapshot for `index` ended: staged (`ok`), the held
    /// message is stepped; else it is dropped (the leader sends it again).
    pub fn handle_fetched(&mut self, index: u64, ok: bool) {
        let Some((_, m)) = self.held_snapshot.take_if(|(_, m)| m.get_snapshot().get_metadata().index == index) else {
            return;
        };
        if ok {
            if let Err(why) = self.step(m) {
                self.stats.messages_refused += 1;
                tracing::warn!(member = self.id, index, why, "Raft: a fetched snapshot refused");
            }
        }
    }

    /// A snapshot being sent to member `to` moved bytes: the leader waits
    /// for it another [`SNAPSHOT_DEADLINE`].
    pub fn snapshot_progress(&mut self, to: u64) {
        if let Some(t) = self.sending.get_mut(&to) {
            *t = self.clock;
        }
    }

    /// The application's snapshot ([`Event::SnapshotWanted`]); false if it
    /// no longer covers the log's start (another is wanted).
    pub fn set_offer(&mut self, m: &Manifest) -> bool {
        // A want raised before this offer arrived is answered by it.
        let _ = self.raw.store().take_wanted();
        self.asked = Some(self.clock);
        let ok = self.raw.mut_store().set_offer(m);
        if ok {
            self.stats.snapshots_offered += 1;
            tracing::info!(member = self.id, index = m.index, bytes = m.bytes(), "Raft: a snapshot offered");
        }
        ok
    }

    /// Gives up on snapshots sent that made no progress for
    /// [`SNAPSHOT_DEADLINE`] (raft-rs then probes the member, and offers
    /// one again), and forgets those the member caught up from.
    pub(super) fn watch_snapshots(&mut self) {
        let deadline = SNAPSHOT_DEADLINE.as_nanos() as u64;
        let now = self.clock;
        let mut failed = Vec::new();
        let prs = self.raw.raft.prs();
        self.sending.retain(|&to, &mut t| {
            let pending = prs.get(to).is_some_and(|p| p.state == raft::ProgressState::Snapshot);
            if pending && now.saturating_sub(t) > deadline {
                failed.push(to);
            }
            pending && now.saturating_sub(t) <= deadline
        });
        for to in failed {
            self.stats.snapshots_abandoned += 1;
            tracing::warn!(member = self.id, peer = to, "Raft: a snapshot sent made no progress: offered again");
            self.raw.report_snapshot(to, SnapshotStatus::Failure);
        }
    }

    /// Installs a snapshot raft-rs restored in the log (its files staged)
    /// and tells the application.
    pub(super) fn install(&mut self, snap: &raft::prelude::Snapshot) -> Result<(), HaError> {
        let meta = snap.get_metadata();
        let m = Manifest::parse(snap.get_data()).map_err(|e| HaError::Config(e.to_string()))?;
        self.raw.mut_store().apply_snapshot(meta)?;
        self.last_handed = meta.index;
        self.committed_through = meta.index;
        self.stats.snapshots_installed += 1;
        tracing::info!(member = self.id, index = meta.index, term = meta.term, "Raft: a snapshot installed in the log");
        self.events.push_back(installed(&self.snapshot_dir, &m));
        let voters = self.raw.store().members().voters.clone();
        self.events.push_back(Event::Members { voters, change: None, addresses: m.addresses });
        Ok(())
    }
}

/// The event that hands a staged snapshot to the application.
pub(super) fn installed(dir: &std::path::Path, m: &Manifest) -> Event {
    Event::Installed {
        index: m.index,
        dir: snapshot::staging(dir, m.index),
        files: m.files.iter().map(|f| f.0.clone()).collect(),
    }
}
