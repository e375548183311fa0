//! A journal's segments as a snapshot: [`Journal::checkpoint`] puts what
//! the journal holds into a directory of its own (sealed segments hard
//! linked, the segment being written copied up to what was written), and
//! [`Journal::install`] puts such a set in place of the journal's own
//! segments and opens it again.
//!
//! A member of a high-availability group whose next Raft entries were
//! compacted away on its leader catches up this way: the leader's
//! checkpoint is fetched, staged beside the journal (on its file system,
//! so the install is renames), and installed.
//!
//! The install is idempotent, and a crash in the middle leaves a journal
//! that opens (a prefix of the new segments) and an install that the next
//! start finishes: first the journal's own segments go (but those already
//! moved in from the staged set), then the staged ones are renamed in, in
//! order.

use crate::journal::{Journal, JournalError, Recovery};
use crate::segment::{self, SEGMENT_SUFFIX};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    move |source| JournalError::Io { path: path.to_path_buf(), source }
}

/// One file of a checkpoint: its name and length.
pub type SnapshotFile = (String, u64);

/// Whether `name` names a segment file.
pub fn is_segment(name: &str) -> bool {
    name.strip_suffix(SEGMENT_SUFFIX).is_some_and(|b| !b.is_empty() && b.bytes().all(|c| c.is_ascii_digit()))
}

impl Journal {
    /// Writes what was appended, then puts every segment into `dir`
    /// (created, the owner's alone): the sealed ones as hard links, the
    /// one being written as a copy of what was written. Returns the files,
    /// by name and length. Nothing is synced: a checkpoint serves the
    /// running process (a restart makes a new one), and syncing a
    /// journal's worth of dirty pages would stall the disk for everyone
    /// else; whoever installs it syncs its own copy.
    ///
    /// # Errors
    /// [`JournalError`] from the write, or naming the file that could not
    /// be linked or copied.
    pub fn checkpoint(&mut self, dir: &Path) -> Result<Vec<SnapshotFile>, JournalError> {
        self.write()?;
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(dir)
            .map_err(io(dir))?;
        let mut files = Vec::with_capacity(self.segments.len());
        let last = self.segments.len().saturating_sub(1);
        for (i, s) in self.segments.iter().enumerate() {
            let name = segment::file_name(s.base);
            let to = dir.join(&name);
            if i < last {
                // Sealed: never written again (retention may unlink it;
                // the link keeps it).
                std::fs::hard_link(&s.path, &to).map_err(io(&to))?;
            } else {
                copy_prefix(&s.file, &s.path, s.len, &to)?;
            }
            files.push((name, s.len));
        }
        Ok(files)
    }

    /// Puts the segments `files` (names) staged in `staged` in place of
    /// this journal's own, and opens the journal again over them. A name
    /// already moved by an earlier install that stopped halfway is found
    /// in the journal's directory. The journal's own segments not in
    /// `files` are removed.
    ///
    /// On an error the journal is left released: it must not be used
    /// again (its owner stops taking guaranteed publishes).
    ///
    /// # Errors
    /// [`JournalError`] naming the file; a staged segment missing from
    /// both places is [`JournalError::Io`] `NotFound`.
    pub fn install(&mut self, staged: &Path, files: &[String]) -> Result<Recovery, JournalError> {
        self.write()?;
        let cfg = self.config().clone();
        self.release();
        install_segments(&cfg.dir, staged, files)?;
        let (j, rec) = Journal::open(cfg)?;
        *self = j;
        Ok(rec)
    }
}

/// The file part of [`Journal::install`], for a journal not open: moves
/// the staged segments `files` into `dir` and removes the other segments
/// there.
///
/// # Errors
/// [`JournalError::Io`] naming the file.
pub fn install_segments(dir: &Path, staged: &Path, files: &[String]) -> Result<(), JournalError> {
    if let Some(name) = files.iter().find(|n| !is_segment(n)) {
        let e = std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a segment's name");
        return Err(JournalError::Io { path: staged.join(name), source: e });
    }
    // The journal's own, but those moved in by an install that stopped.
    for (_, path) in segment::list(dir).map_err(io(dir))? {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !files.iter().any(|f| f == name) || staged.join(name).exists() {
            std::fs::remove_file(&path).map_err(io(&path))?;
        }
    }
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))?;
    // In order (names are zero-padded bases), so the directory always
    // holds a prefix of the set.
    let mut names: Vec<&String> = files.iter().collect();
    names.sort();
    for name in names {
        let (from, to) = (staged.join(name), dir.join(name));
        match std::fs::rename(&from, &to) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && to.exists() => {}
            Err(e) => return Err(JournalError::Io { path: from, source: e }),
        }
    }
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

/// Copies the first `len` bytes of `file` (at `path`) to a new file `to`.
fn copy_prefix(file: &File, path: &Path, len: u64, to: &Path) -> Result<(), JournalError> {
    let out = OpenOptions::new().write(true).create_new(true).mode(0o600).open(to).map_err(io(to))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let n = buf.len().min((len - at) as usize);
        file.read_exact_at(&mut buf[..n], at).map_err(io(path))?;
        out.write_all_at(&buf[..n], at).map_err(io(to))?;
        at += n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{JournalConfig, Read, Reader, SyncPolicy};

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tw-journal-snap-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn cfg(dir: &Path) -> JournalConfig {
        JournalConfig { sync: SyncPolicy::Os, segment_bytes: 4096, ..JournalConfig::new(dir) }
    }

    fn records(j: &Journal) -> Vec<(u64, String)> {
        let mut r = Reader::new(j.first());
        let mut out = Vec::new();
        while let Ok(Read::Record(rec)) = r.next(j, j.durable()) {
            out.push((rec.sequence(), String::from_utf8_lossy(rec.payload()).into_owned()));
        }
        out
    }

    #[test]
    fn a_checkpoint_installed_elsewhere_holds_the_same_records_and_goes_on_from_them() {
        let root = scratch("install");
        let (mut a, _) = Journal::open(cfg(&root.join("a"))).unwrap();
        for i in 0..200u64 {
            a.append(1, i + 1, "t", format!("m{i}").as_bytes()).unwrap();
            if i % 7 == 0 {
                a.write().unwrap();
            }
        }
        let files = a.checkpoint(&root.join("out")).unwrap();
        assert!(files.len() > 2, "{files:?}");
        // Written after the checkpoint: not in it.
        a.append(1, 201, "t", b"later").unwrap();
        a.write().unwrap();
        let (mut b, _) = Journal::open(cfg(&root.join("b"))).unwrap();
        b.append(9, 1, "t", b"b's own").unwrap();
        b.write().unwrap();
        let names: Vec<String> = files.iter().map(|f| f.0.clone()).collect();
        let rec = b.install(&root.join("out"), &names).unwrap();
        assert_eq!((rec.first, rec.last), (1, 200));
        assert_eq!(rec.publishers.get(&1), Some(&200));
        let got = records(&b);
        assert_eq!(got.len(), 200);
        assert_eq!(got[199], (200, "m199".into()));
        assert_eq!(b.append(1, 201, "t", b"next").unwrap(), 201);
        // Again, as after a crash halfway: the moved files are found.
        drop(b);
        install_segments(&root.join("b"), &root.join("out"), &names).unwrap();
        let (b, _) = Journal::open(cfg(&root.join("b"))).unwrap();
        assert_eq!(records(&b).len(), 200);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_name_that_is_not_a_segment_is_refused() {
        let root = scratch("names");
        std::fs::create_dir_all(&root).unwrap();
        let e = install_segments(&root, &root, &["../journal.lock".into()]).unwrap_err();
        assert!(e.to_string().contains("not a segment"), "{e}");
        assert!(is_segment(&segment::file_name(7)) && !is_segment(SEGMENT_SUFFIX));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
