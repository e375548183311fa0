//! The Raft log's write-ahead file: what a node must not forget (its
//! entries, its hard state: term, vote and commit, its members) written
//! before it answers a peer.
//!
//! One file, `raft.log` in the group's directory:
//!
//! ```text
//! header   "TWRAFT" 0x00 0x01                       8 bytes
//! record   len: u32 LE | crc32(kind, body): u32 LE | kind: u8 | body (len bytes)
//! kinds    1 entry (protobuf Entry)   2 hard state (protobuf HardState)
//!          3 members (protobuf ConfState)   4 compacted: index u64 LE, term u64 LE
//! ```
//!
//! Replay keeps the last hard state and members, and the entries in index
//! order: an entry at an index already held replaces it and every entry
//! after it (Raft's conflict rule, written as it happened). A torn or
//! damaged tail is cut: what follows the last whole record was never
//! acknowledged to a peer, because a node answers only after its write
//! returned (and its sync, under `fsync`). A record whose body does not
//! parse, or an entry out of order, is damage in the middle: refused with
//! its offset.
//!
//! Compaction rewrites the file (`raft.log.new`, synced, renamed over,
//! directory synced) with only what is kept.

use protobuf::Message as _;
use raft::prelude::{ConfState, Entry, HardState};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"TWRAFT\x00\x01";
const RECORD_HEADER: usize = 9;
/// The longest record replay accepts (an entry carries one batch of
/// publishes; the proposer keeps batches far below this).
pub const MAX_RECORD: usize = 64 << 20;

const ENTRY: u8 = 1;
const HARD_STATE: u8 = 2;
const MEMBERS: u8 = 3;
const COMPACTED: u8 = 4;

/// Why the write-ahead file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// A read, write, sync or rename failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// Damage before the tail: a record that parses as a record but not
    /// as what its kind says, or an entry out of order.
    #[error("{path}: damaged at byte {offset}: {why}")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// Where the record starts.
        offset: u64,
        /// What is wrong.
        why: String,
    },
}

/// What replay found.
#[derive(Debug, Default, Clone)]
pub struct Replayed {
    /// Entries after the compaction point, in index order.
    pub entries: Vec<Entry>,
    /// The last hard state written.
    pub hard: HardState,
    /// The last members written.
    pub members: ConfState,
    /// The last index compacted away and its term (0, 0: none).
    pub compacted: (u64, u64),
    /// Bytes cut from a torn tail.
    pub cut: u64,
}

/// The open write-ahead file: records are buffered by [`Wal::put_*`] and
/// written (and synced) by [`Wal::flush`].
#[derive(Debug)]
pub struct Wal {
    path: PathBuf,
    file: File,
    buf: Vec<u8>,
    bytes: u64,
    sync: bool,
    syncs: u64,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WalError + '_ {
    move |source| WalError::Io { path: path.to_owned(), source }
}

impl Wal {
    /// Opens (or creates) `dir/raft.log` and replays it; `sync` makes
    /// every [`Wal::flush`] an `fdatasync`.
    ///
    /// # Errors
    /// [`WalError::Io`] if the directory or file cannot be read or
    /// written; [`WalError::Damaged`] for damage before the tail.
    pub fn open(dir: &Path, sync: bool) -> Result<(Self, Replayed), WalError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let path = dir.join("raft.log");
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io(&path))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io(&path))?;
        let mut replayed = Replayed::default();
        let good = if bytes.len() < MAGIC.len() {
            // New, or torn before its header was whole.
            file.set_len(0).map_err(io(&path))?;
            file.write_all(MAGIC).map_err(io(&path))?;
            file.sync_all().map_err(io(&path))?;
            MAGIC.len()
        } else if &bytes[..MAGIC.len()] != MAGIC {
            return Err(WalError::Damaged { path, offset: 0, why: "not a tickwire Raft log (bad magic)".into() });
        } else {
            let good = replay(&bytes, &mut replayed).map_err(|(offset, why)| WalError::Damaged {
                path: path.clone(),
                offset,
                why,
            })?;
            if good < bytes.len() {
                replayed.cut = (bytes.len() - good) as u64;
                tracing::warn!(file = %path.display(), cut = replayed.cut, "Raft log: torn tail cut");
                file.set_len(good as u64).map_err(io(&path))?;
                file.sync_all().map_err(io(&path))?;
            }
            good
        };
        use std::io::{Seek, SeekFrom};
        file.seek(SeekFrom::Start(good as u64)).map_err(io(&path))?;
        Ok((Self { path, file, buf: Vec::with_capacity(64 << 10), bytes: good as u64, sync, syncs: 0 }, replayed))
    }

    fn put(&mut self, kind: u8, body: &[u8]) {
        let mut crc = crc32fast::Hasher::new();
        crc.update(&[kind]);
        crc.update(body);
        self.buf.extend_from_slice(&(body.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(&crc.finalize().to_le_bytes());
        self.buf.push(kind);
        self.buf.extend_from_slice(body);
    }

    /// Buffers an entry.
    pub fn put_entry(&mut self, e: &Entry) {
        let body = e.write_to_bytes().unwrap_or_default();
        self.put(ENTRY, &body);
    }

    /// Buffers a hard state.
    pub fn put_hard_state(&mut self, hs: &HardState) {
        let body = hs.write_to_bytes().unwrap_or_default();
        self.put(HARD_STATE, &body);
    }

    /// Buffers the members.
    pub fn put_members(&mut self, cs: &ConfState) {
        let body = cs.write_to_bytes().unwrap_or_default();
        self.put(MEMBERS, &body);
    }

    /// Buffers the compaction point: replay drops the entries up to
    /// `index` (whose term is `term`).
    pub fn put_compacted(&mut self, index: u64, term: u64) {
        let mut at = [0u8; 16];
        at[..8].copy_from_slice(&index.to_le_bytes());
        at[8..].copy_from_slice(&term.to_le_bytes());
        self.put(COMPACTED, &at);
    }

    /// Whether records wait for [`Wal::flush`].
    pub fn has_pending(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Writes what was buffered (one `write`) and syncs it under `fsync`.
    ///
    /// # Errors
    /// [`WalError::Io`]: the node must stop answering peers.
    pub fn flush(&mut self) -> Result<(), WalError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.file.write_all(&self.buf) {
            // Part of it may be in the file: cut back to the last whole
            // record, so a retry does not leave garbage before it.
            use std::io::{Seek, SeekFrom};
            let _ = self.file.set_len(self.bytes);
            let _ = self.file.seek(SeekFrom::Start(self.bytes));
            return Err(io(&self.path)(e));
        }
        self.bytes += self.buf.len() as u64;
        self.buf.clear();
        if self.sync {
            self.file.sync_data().map_err(io(&self.path))?;
            self.syncs += 1;
        }
        Ok(())
    }

    /// The file's size, bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// `fdatasync`s done.
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    /// Replaces the file with one holding only `compacted`, `hard`,
    /// `members` and `entries` (synced, renamed over, directory synced).
    ///
    /// # Errors
    /// [`WalError::Io`]; the old file stays whole if the new one could not
    /// be written.
    pub fn rewrite(
        &mut self,
        compacted: (u64, u64),
        hard: &HardState,
        members: &ConfState,
        entries: &[Entry],
    ) -> Result<(), WalError> {
        self.flush()?;
        let new = self.path.with_extension("log.new");
        let mut w = Self {
            path: new.clone(),
            file: File::create(&new).map_err(io(&new))?,
            buf: Vec::new(),
            bytes: 0,
            sync: true,
            syncs: 0,
        };
        w.buf.extend_from_slice(MAGIC);
        w.put_compacted(compacted.0, compacted.1);
        w.put_members(members);
        w.put_hard_state(hard);
        for e in entries {
            w.put_entry(e);
        }
        w.flush()?;
        std::fs::rename(&new, &self.path).map_err(io(&self.path))?;
        if let Some(dir) = self.path.parent() {
            File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))?;
        }
        w.path = self.path.clone();
        w.sync = self.sync;
        w.syncs = self.syncs + 1;
        *self = w;
        Ok(())
    }
}

/// Replays records into `out`; returns the length of the whole records,
/// or the offset and reason of damage before the tail.
fn replay(bytes: &[u8], out: &mut Replayed) -> Result<usize, (u64, String)> {
    let mut at = MAGIC.len();
    while bytes.len() - at >= RECORD_HEADER {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default()) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap_or_default());
        let kind = bytes[at + 8];
        if len > MAX_RECORD || bytes.len() - at - RECORD_HEADER < len {
            break; // torn (or a length that was never written whole)
        }
        let body = &bytes[at + RECORD_HEADER..at + RECORD_HEADER + len];
        let mut h = crc32fast::Hasher::new();
        h.update(&[kind]);
        h.update(body);
        if h.finalize() != crc {
            // Torn if it is the last: a record is written whole or cut
            // here. A whole record after it means damage in the middle,
            // which would lose records a peer was told were written.
            let next = at + RECORD_HEADER + len;
            if record_at(bytes, next) {
                return Err((at as u64, "CRC mismatch before whole records".into()));
            }
            break;
        }
        let damaged = |why: String| (at as u64, why);
        match kind {
            ENTRY => {
                let e = Entry::parse_from_bytes(body).map_err(|e| damaged(format!("entry: {e}")))?;
                push_entry(out, e).map_err(damaged)?;
            }
            HARD_STATE => {
                out.hard = HardState::parse_from_bytes(body).map_err(|e| damaged(format!("hard state: {e}")))?
            }
            MEMBERS => out.members = ConfState::parse_from_bytes(body).map_err(|e| damaged(format!("members: {e}")))?,
            COMPACTED if len == 16 => {
                let index = u64::from_le_bytes(body[..8].try_into().unwrap_or_default());
                let term = u64::from_le_bytes(body[8..].try_into().unwrap_or_default());
                out.compacted = (index, term);
                out.entries.retain(|e| e.index > index);
            }
            k => return Err(damaged(format!("record kind {k} (length {len}) unknown"))),
        }
        at += RECORD_HEADER + len;
    }
    Ok(at)
}

/// Whether a whole record with a matching CRC starts at `at`.
fn record_at(bytes: &[u8], at: usize) -> bool {
    if at >= bytes.len() || bytes.len() - at < RECORD_HEADER {
        return false;
    }
    let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default()) as usize;
    if len > MAX_RECORD || bytes.len() - at - RECORD_HEADER < len {
        return false;
    }
    let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap_or_default());
    let mut h = crc32fast::Hasher::new();
    h.update(&bytes[at + 8..at + RECORD_HEADER + len]);
    h.finalize() == crc
}

/// Raft's conflict rule on replay: an entry at an index held replaces it
/// and what follows.
fn push_entry(out: &mut Replayed, e: Entry) -> Result<(), String> {
    if e.index <= out.compacted.0 {
        return Ok(());
    }
    let next = out.entries.last().map_or(out.compacted.0 + 1, |l| l.index + 1);
    if e.index > next {
        return Err(format!("entry {} after {}: a gap", e.index, next - 1));
    }
    let first = out.entries.first().map_or(next, |f| f.index);
    out.entries.truncate((e.index - first) as usize);
    out.entries.push(e);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
        Entry { index, term, data: data.to_vec().into(), ..Default::default() }
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tw-wal-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn replay_keeps_the_last_state_and_applies_the_conflict_rule() {
        let d = dir("conflict");
        let (mut w, r) = Wal::open(&d, true).unwrap();
        assert!(r.entries.is_empty());
        for i in 1..=5 {
            w.put_entry(&entry(i, 1, b"a"));
        }
        w.put_hard_state(&HardState { term: 1, vote: 2, commit: 3, ..Default::default() });
        // A new leader overwrote 4 and 5 with its own 4.
        w.put_entry(&entry(4, 2, b"b"));
        w.put_hard_state(&HardState { term: 2, vote: 3, commit: 4, ..Default::default() });
        w.flush().unwrap();
        drop(w);
        let (_, r) = Wal::open(&d, true).unwrap();
        let got: Vec<(u64, u64)> = r.entries.iter().map(|e| (e.index, e.term)).collect();
        assert_eq!(got, [(1, 1), (2, 1), (3, 1), (4, 2)]);
        assert_eq!((r.hard.term, r.hard.vote, r.hard.commit), (2, 3, 4));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_torn_tail_is_cut_and_damage_before_it_refused() {
        let d = dir("torn");
        let (mut w, _) = Wal::open(&d, false).unwrap();
        w.put_entry(&entry(1, 1, b"one"));
        w.put_entry(&entry(2, 1, b"two"));
        w.flush().unwrap();
        let whole = w.bytes();
        drop(w);
        let path = d.join("raft.log");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&[40, 0, 0, 0, 1, 2]).unwrap(); // a record's header, torn
        drop(f);
        let (w, r) = Wal::open(&d, false).unwrap();
        assert_eq!((r.entries.len(), r.cut, w.bytes()), (2, 6, whole));
        drop(w);
        // A gap (entry 2 rewritten as 4): a record that checks, out of order.
        let mut bytes = std::fs::read(&path).unwrap();
        let (mut w2, _) = Wal::open(&dir("gap-src"), false).unwrap();
        w2.put_entry(&entry(4, 1, b"four"));
        let rec = w2.buf.clone();
        bytes.extend_from_slice(&rec);
        std::fs::write(&path, &bytes).unwrap();
        let err = Wal::open(&d, false).unwrap_err().to_string();
        assert!(err.contains("raft.log: damaged at byte") && err.contains("a gap"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
        std::fs::remove_dir_all(dir("gap-src")).ok();
    }

    #[test]
    fn a_crc_mismatch_before_whole_records_is_damage_not_a_torn_tail() {
        let d = dir("bitrot");
        let (mut w, _) = Wal::open(&d, false).unwrap();
        for i in 1..=3 {
            w.put_entry(&entry(i, 1, b"payload"));
        }
        w.flush().unwrap();
        drop(w);
        let path = d.join("raft.log");
        let mut bytes = std::fs::read(&path).unwrap();
        // A bit flipped in the first record's body.
        bytes[MAGIC.len() + RECORD_HEADER + 2] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let err = Wal::open(&d, false).unwrap_err().to_string();
        assert!(err.contains("damaged at byte 8") && err.contains("CRC mismatch before whole records"), "{err}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_rewrite_keeps_only_what_follows_the_compaction_point() {
        let d = dir("rewrite");
        let (mut w, _) = Wal::open(&d, true).unwrap();
        let entries: Vec<Entry> = (1..=100).map(|i| entry(i, 3, &[7; 100])).collect();
        for e in &entries {
            w.put_entry(e);
        }
        w.flush().unwrap();
        let before = w.bytes();
        let hs = HardState { term: 3, vote: 1, commit: 100, ..Default::default() };
        let cs = ConfState { voters: vec![1, 2, 3], ..Default::default() };
        w.rewrite((90, 3), &hs, &cs, &entries[90..]).unwrap();
        assert!(w.bytes() < before / 5, "{} of {before}", w.bytes());
        w.put_entry(&entry(101, 4, b"after"));
        w.flush().unwrap();
        drop(w);
        let (_, r) = Wal::open(&d, true).unwrap();
        assert_eq!(r.compacted, (90, 3));
        assert_eq!(r.entries.first().map(|e| e.index), Some(91));
        assert_eq!(r.entries.last().map(|e| (e.index, e.term)), Some((101, 4)));
        assert_eq!(r.members.voters, [1, 2, 3]);
        assert!(!d.join("raft.log.new").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
