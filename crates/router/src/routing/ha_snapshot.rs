//! Snapshots of guaranteed delivery's state, for a member of a
//! high-availability group whose leader's Raft log no longer holds what
//! it lacks ([`tickwire_ha::snapshot`]).
//!
//! A leader asked for one ([`tickwire_ha::Event::SnapshotWanted`])
//! checkpoints, in `raft/snapshots/out-INDEX/` beside its journal: the
//! journal's segments as they stand (sealed ones hard linked, the last one
//! copied up to what was written) and each publisher's highest sequence
//! stored (`publishers.json`), reflecting every entry it applied up to
//! INDEX and nothing after, and the durable subscriptions' and queues'
//! states as the leader holds them then (`durables.json`: positions are
//! the leader's own, as the positions it replicates are). A follower that fetched one
//! ([`tickwire_ha::Event::Installed`]) puts the segments in place of its
//! journal's, takes the states and the publishers, saves INDEX as applied,
//! and goes on applying from there. Publishers' sequences travel with it
//! because retention may have removed a publisher's records from the
//! journal: exactly-once holds across the install.

use super::durable::DurableState;
use super::guaranteed::{Guaranteed, DURABLES_FILE};
use super::replicated::save_applied;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use tickwire_journal::snapshot::is_segment;
use tickwire_journal::JournalError;

/// The file of a snapshot holding each publisher's highest sequence stored.
pub const PUBLISHERS_FILE: &str = "publishers.json";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    move |source| JournalError::Io { path: path.to_path_buf(), source }
}

/// Writes `bytes` to a new file `path` (the owner's alone; not synced: a
/// checkpoint serves this run only).
fn write_new(path: &Path, bytes: &[u8]) -> Result<u64, JournalError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(io(path))?;
    f.write_all(bytes).map_err(io(path))?;
    Ok(bytes.len() as u64)
}

/// Removes the checkpoints (`out-N`) this router made under `root`.
pub(super) fn remove_checkpoints(root: &Path) {
    remove_checkpoints_but(root, Path::new(""));
}

/// Removes the checkpoints under `root` but `keep`.
fn remove_checkpoints_but(root: &Path, keep: &Path) {
    let Ok(list) = std::fs::read_dir(root) else { return };
    for e in list.flatten() {
        if e.file_name().to_str().is_some_and(|n| n.starts_with("out-")) && e.path() != keep {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Guaranteed {
    /// The leader checkpoints what it applied and offers it to its group.
    pub(super) fn checkpoint(&mut self) {
        if self.failed().is_some() {
            return;
        }
        let Some(r) = self.ha.as_deref() else { return };
        // Nothing applied yet: the empty state, as of what the log
        // committed without handing anything over (a member added to a
        // group that has stored nothing still starts from a snapshot).
        let index = match r.last_applied {
            0 => r.ha.status().applied,
            i => i,
        };
        let root = r.dir.join("snapshots");
        if index == 0 {
            return;
        }
        // Nothing applied since the one offered: offered again, as it is
        // (its files are never rewritten while offered).
        if let Some((i, dir, files)) = r.offered.clone().filter(|o| o.0 == index) {
            r.ha.snapshot_ready(i, dir, files);
            return;
        }
        let out = root.join(format!("out-{index}"));
        let _ = std::fs::remove_dir_all(&out);
        match self.write_checkpoint(&out) {
            Ok(files) => {
                let bytes: u64 = files.iter().map(|f| f.1).sum();
                tracing::info!(index, bytes, dir = %out.display(), "ha: a snapshot checkpointed for a member that lags");
                // Older checkpoints go once this one is whole (a transfer
                // under way opened its files).
                remove_checkpoints_but(&root, &out);
                if let Some(r) = self.ha.as_deref_mut() {
                    r.offered = Some((index, out.clone(), files.clone()));
                    r.ha.snapshot_ready(index, out, files);
                }
            }
            Err(e) => {
                // The one offered before (if any) stays offered, whole.
                tracing::warn!(index, error = %e, "ha: no snapshot checkpointed (asked again when a member needs one)");
                let _ = std::fs::remove_dir_all(&out);
            }
        }
    }

    fn write_checkpoint(&mut self, out: &Path) -> Result<Vec<(String, u64)>, JournalError> {
        let mut files = self.journal.checkpoint(out)?;
        let states: BTreeMap<String, DurableState> = self.states();
        let json = serde_json::to_vec(&states.values().collect::<Vec<_>>()).map_err(|e| io(out)(e.into()))?;
        files.push((DURABLES_FILE.into(), write_new(&out.join(DURABLES_FILE), &json)?));
        let json = serde_json::to_vec(&self.stored).map_err(|e| io(out)(e.into()))?;
        files.push((PUBLISHERS_FILE.into(), write_new(&out.join(PUBLISHERS_FILE), &json)?));
        Ok(files)
    }

    /// A follower installs the snapshot staged in `dir` for `index`: its
    /// journal, durable states and publishers become the snapshot's.
    pub(super) fn install(&mut self, index: u64, dir: &Path, files: &[String]) {
        if self.failed().is_some() {
            return;
        }
        let loaded = DurableState::load(&dir.join(DURABLES_FILE)).and_then(|states| {
            let path = dir.join(PUBLISHERS_FILE);
            let b = std::fs::read(&path).map_err(io(&path))?;
            let publishers: HashMap<u64, u64> =
                serde_json::from_slice(&b).map_err(|e| io(&path)(std::io::Error::other(e.to_string())))?;
            Ok((states, publishers))
        });
        let segments: Vec<String> = files.iter().filter(|f| is_segment(f)).cloned().collect();
        let installed = loaded.and_then(|l| Ok((l, self.journal.install(dir, &segments)?)));
        let ((states, publishers), rec) = match installed {
            Ok(x) => x,
            Err(e) => {
                // Its journal is not the group's: it leaves the group.
                tracing::error!(index, dir = %dir.display(), error = %e, "ha: a snapshot not installed");
                self.fail(&e);
                return;
            }
        };
        let mut stored = rec.publishers;
        for (p, s) in publishers {
            let e = stored.entry(p).or_insert(0);
            *e = (*e).max(s);
        }
        self.acked = stored.clone();
        self.stored = stored;
        self.awaiting.clear();
        self.durables.clear();
        self.queues.clear();
        self.saved.clear();
        for s in states {
            self.adopt(s);
        }
        self.dirty = true;
        self.save();
        let Some(r) = self.ha.as_deref_mut() else { return };
        r.unreported.clear();
        r.last_applied = index;
        r.durably_applied = index;
        tracing::info!(
            index,
            first = rec.first,
            last = rec.last,
            durables = self.durables.len() + self.queues.len(),
            "ha: a snapshot installed: the journal is the leader's"
        );
        match save_applied(&r.dir, index) {
            Ok(()) => {
                r.ha.applied(index);
                tickwire_ha::snapshot::remove_staged(&r.dir.join("snapshots"), index);
            }
            // Installed again at the next start (the staged files stay).
            Err(e) => tracing::warn!(error = %e, "ha: the applied index not saved after a snapshot"),
        }
    }
}
