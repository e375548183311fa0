//! Per-stream counters in a shared-memory file that other processes read live.
//!
//! Each process that publishes or subscribes owns one file,
//! `<dir>/counters-<pid>.twc`:
//!
//! ```text
//!  0     +-----------------------------------------------------------+
//!        | magic "TWCNT\0v1", layout version, max sets, pid,          |
//!        | process start time                                        |
//!  128   +-----------------------------------------------------------+
//!        | set 0: values line  (8 x u64, written by one thread only)  |  +0
//!        |        padding line (keeps prefetch pairs apart)          |  +64
//!        |        metadata: state, kind, stream_id, session_id, label |  +128
//!  384   | set 1 ...                                                 |
//!        +-----------------------------------------------------------+
//! ```
//! A set is written by the single thread that owns its stream side, with
//! plain (non-RMW) relaxed stores; readers such as `tickwire stat` load the
//! values without ever writing, so the hot path sees no contention.

use crate::dir::Dir;
use crate::error::ShmError;
use crate::mapped::MappedFile;
use crate::sys::ProcessId;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// File magic.
pub const MAGIC: [u8; 8] = *b"TWCNT\0v1";
/// Header offsets of the owner's pid and start time (u64 each).
pub(crate) const OWNER_PID_OFFSET: usize = 16;
pub(crate) const OWNER_START_OFFSET: usize = 24;
const LAYOUT_VERSION: u32 = 2;
const HEADER: usize = 128;
const SET_LEN: usize = 256;
const META: usize = 128;
const LABEL_MAX: usize = 112;
/// Sets per file (a process with many subscribers needs one per subscriber).
pub const MAX_SETS: usize = 1024;
/// Values per set.
pub const VALUES: usize = 16;
const _: () = assert!(VALUES * 8 <= META, "a set's values must end before its meta word");

mod kinds;
pub use kinds::*;

/// A process's counters file (or a private anonymous block).
#[derive(Debug)]
#[must_use = "the counters file is removed when this is dropped"]
pub struct CountersFile {
    map: MappedFile,
    alloc: Mutex<()>,
}

impl CountersFile {
    /// Creates `<dir>/counters-<pid>.twc`, replacing a stale one of a dead
    /// process with the same pid; or, if this process has it open already
    /// (a second `Context` on the same directory), shares that one: the
    /// file is the process's, removed when its last user drops it.
    ///
    /// # Errors
    /// [`ShmError::Io`] if the directory or file cannot be created.
    pub fn create(dir: &Path) -> Result<Arc<Self>, ShmError> {
        static OPEN: Mutex<Vec<(PathBuf, std::sync::Weak<CountersFile>)>> = Mutex::new(Vec::new());
        Dir::open(dir)?;
        let key = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|(_, w)| w.strong_count() > 0);
        if let Some(c) = open.iter().find(|(d, _)| *d == key).and_then(|(_, w)| w.upgrade()) {
            return Ok(c);
        }
        let c = Self::create_file(dir)?;
        open.push((key, Arc::downgrade(&c)));
        Ok(c)
    }

    fn create_file(dir: &Path) -> Result<Arc<Self>, ShmError> {
        let me = ProcessId::current();
        let path = counters_path(dir, me.pid);
        let d = Dir::open(dir)?;
        // Made whole under a temporary name, then renamed into place: no
        // reader ever sees a half-made file. Our pid: an old file at `path`
        // is a dead process's, and the rename replaces it.
        let (map, tmp) = MappedFile::create_new(&d, &format!("counters-{}", me.pid), file_len(), &path)?;
        let counters = Self::init(map, me);
        let name = format!("counters-{}.twc", me.pid);
        d.remove_foreign(&name);
        if let Err(e) = d.rename(&tmp, &name) {
            let _ = d.remove(&tmp);
            return Err(ShmError::io(&path, e));
        }
        Ok(Arc::new(counters))
    }

    /// Counters nobody else can see (for embedded use without a directory).
    ///
    /// # Errors
    /// [`ShmError::Io`] if the anonymous mapping fails.
    pub fn private() -> Result<Arc<Self>, ShmError> {
        let map = MappedFile::anonymous(file_len()).map_err(|e| ShmError::io(Path::new("<anonymous>"), e))?;
        Ok(Arc::new(Self::init(map, ProcessId::current())))
    }

    fn init(map: MappedFile, me: ProcessId) -> Self {
        let mut head = [0u8; 32];
        head[..8].copy_from_slice(&MAGIC);
        head[8..12].copy_from_slice(&LAYOUT_VERSION.to_le_bytes());
        head[12..16].copy_from_slice(&(MAX_SETS as u32).to_le_bytes());
        head[OWNER_PID_OFFSET..OWNER_START_OFFSET].copy_from_slice(&u64::from(me.pid).to_le_bytes());
        head[OWNER_START_OFFSET..OWNER_START_OFFSET + 8].copy_from_slice(&me.start_time.to_le_bytes());
        // SAFETY: the file was just created by this process (create_new) and is
        // read by others only after this header is complete.
        unsafe { map.write_bytes(0, &head) };
        Self { map, alloc: Mutex::new(()) }
    }

    /// Registers a counter set for one side of a stream.
    ///
    /// # Errors
    /// [`ShmError::Config`] when all [`MAX_SETS`] sets are in use.
    pub fn allocate(
        self: &Arc<Self>,
        kind: Kind,
        stream_id: u32,
        session_id: u32,
        label: &str,
    ) -> Result<CounterSet, ShmError> {
        let _g = self.alloc.lock().unwrap_or_else(|p| p.into_inner());
        for i in 0..MAX_SETS {
            let base = HEADER + i * SET_LEN;
            let state = self.map.atomic_u32(base + META);
            if state.load(Ordering::Acquire) != 0 {
                continue;
            }
            for v in 0..VALUES {
                self.map.atomic_u64(base + v * 8).store(0, Ordering::Relaxed);
            }
            let mut meta = [0u8; SET_LEN - META - 4];
            meta[0..4].copy_from_slice(&(kind as u32).to_le_bytes());
            meta[4..8].copy_from_slice(&stream_id.to_le_bytes());
            meta[8..12].copy_from_slice(&session_id.to_le_bytes());
            let l = label.as_bytes();
            let n = l.len().min(LABEL_MAX - 1);
            meta[12..12 + n].copy_from_slice(&l[..n]);
            // SAFETY: the set is free (state 0) and we hold the allocation lock,
            // so this process is its only writer; readers skip it until the
            // release store of its state below.
            unsafe { self.map.write_bytes(base + META + 4, &meta) };
            state.store(1, Ordering::Release);
            let values = std::ptr::NonNull::from(self.map.atomic_u64(base));
            return Ok(CounterSet { file: Arc::clone(self), base, values });
        }
        Err(ShmError::Config(format!("all {MAX_SETS} counter sets are in use")))
    }

    /// The file's path, if it has one.
    pub fn path(&self) -> Option<&Path> {
        self.map.path()
    }

    /// The sets registered now (this process's own, read in place).
    pub fn sets(&self) -> Vec<SetSnapshot> {
        read_sets(&self.map)
    }
}

impl Drop for CountersFile {
    fn drop(&mut self) {
        self.map.remove_created();
    }
}

fn file_len() -> usize {
    (HEADER + MAX_SETS * SET_LEN + 4095) & !4095
}

/// `<dir>/counters-<pid>.twc`.
pub fn counters_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("counters-{pid}.twc"))
}

/// One stream side's counters. Single writer: the owning thread.
#[derive(Debug)]
pub struct CounterSet {
    file: Arc<CountersFile>,
    base: usize,
    values: std::ptr::NonNull<AtomicU64>,
}

// SAFETY: `values` points into the mapping kept alive by `file`; the values
// are atomics, so moving the set to another thread is sound.
unsafe impl Send for CounterSet {}

impl CounterSet {
    #[inline]
    fn value(&self, idx: usize) -> &AtomicU64 {
        // SAFETY: `values` is the first of VALUES consecutive AtomicU64s of
        // this set inside the mapping, which `self.file` keeps mapped; the
        // index is reduced modulo VALUES.
        unsafe { &*self.values.as_ptr().add(idx % VALUES) }
    }
    /// Adds `n` to value `idx` (single-writer: a load and a store, no RMW).
    #[inline]
    pub fn add(&self, idx: usize, n: u64) {
        let a = self.value(idx);
        a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
    /// Sets value `idx` (single writer), for owners that keep their own
    /// running totals and publish them.
    #[inline]
    pub fn set(&self, idx: usize, v: u64) {
        self.value(idx).store(v, Ordering::Relaxed);
    }
    /// Sets values `0..values.len()` (a snapshot of stats kept elsewhere).
    pub fn set_all(&self, values: &[u64]) {
        for (i, &v) in values.iter().enumerate() {
            self.set(i, v);
        }
    }
    /// Reads value `idx`.
    pub fn get(&self, idx: usize) -> u64 {
        self.value(idx).load(Ordering::Relaxed)
    }
}

impl CounterSet {
    /// This set, for several threads to write (atomic additions only).
    pub fn into_shared(self) -> SharedCounterSet {
        SharedCounterSet(self)
    }
}

/// A counter set several threads write, by atomic additions.
#[derive(Debug)]
pub struct SharedCounterSet(CounterSet);

// SAFETY: through `&SharedCounterSet` the values are only read or changed
// by atomic read-modify-write operations, which any thread may do at once.
unsafe impl Sync for SharedCounterSet {}

impl SharedCounterSet {
    /// Adds `n` to value `idx`.
    #[inline]
    pub fn add(&self, idx: usize, n: u64) {
        self.0.value(idx).fetch_add(n, Ordering::Relaxed);
    }
    /// Takes `n` from value `idx` (a gauge).
    #[inline]
    pub fn sub(&self, idx: usize, n: u64) {
        self.0.value(idx).fetch_sub(n, Ordering::Relaxed);
    }
    /// Reads value `idx`.
    pub fn get(&self, idx: usize) -> u64 {
        self.0.get(idx)
    }
}

impl Drop for CounterSet {
    fn drop(&mut self) {
        self.file.map.atomic_u32(self.base + META).store(0, Ordering::Release);
    }
}

/// A snapshot of one set, read from another process's file.
#[derive(Debug, Clone)]
pub struct SetSnapshot {
    /// Side.
    pub kind: Kind,
    /// Stream.
    pub stream_id: u32,
    /// Session.
    pub session_id: u32,
    /// Label (channel name).
    pub label: String,
    /// Values, named by `kind.names()`.
    pub values: [u64; VALUES],
}

/// A counters file opened read-only by a monitoring tool.
#[derive(Debug)]
pub struct CountersReader {
    map: MappedFile,
    /// Owner process.
    pub owner: ProcessId,
}

impl CountersReader {
    /// Opens and validates a counters file.
    ///
    /// # Errors
    /// [`ShmError::Foreign`] for files without the magic,
    /// [`ShmError::Corrupt`] for short or inconsistent ones.
    pub fn open(path: &Path) -> Result<Self, ShmError> {
        let head = MappedFile::peek(path, 32).map_err(|e| ShmError::io(path, e))?;
        if head.len() < 32 || head[..8] != MAGIC {
            return Err(ShmError::Foreign { path: path.into() });
        }
        let version = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        if version != LAYOUT_VERSION {
            return Err(ShmError::VersionMismatch { path: path.into(), found: version, expected: LAYOUT_VERSION });
        }
        let len = std::fs::metadata(path).map_err(|e| ShmError::io(path, e))?.len() as usize;
        if len < file_len() {
            return Err(ShmError::Corrupt { path: path.into(), reason: format!("{len} bytes, need {}", file_len()) });
        }
        let map = MappedFile::open(path).map_err(|e| ShmError::io(path, e))?;
        let mut id = [0u8; 16];
        // SAFETY: the owner pid and start time are written once, before the
        // file is visible under its name, and never again.
        unsafe { map.read_bytes(OWNER_PID_OFFSET, &mut id) };
        let owner = ProcessId {
            pid: u64::from_le_bytes(id[..8].try_into().unwrap_or([0; 8])) as u32,
            start_time: u64::from_le_bytes(id[8..].try_into().unwrap_or([0; 8])),
        };
        Ok(Self { map, owner })
    }

    /// The sets currently registered.
    pub fn sets(&self) -> Vec<SetSnapshot> {
        read_sets(&self.map)
    }
}

/// The sets registered in a counters file's mapping.
fn read_sets(map: &MappedFile) -> Vec<SetSnapshot> {
    let mut out = Vec::new();
    for i in 0..MAX_SETS {
        let base = HEADER + i * SET_LEN;
        if map.atomic_u32(base + META).load(Ordering::Acquire) != 1 {
            continue;
        }
        let mut meta = [0u8; SET_LEN - META - 4];
        // SAFETY: a registered set's metadata is written before its state
        // (acquired above) and not again while it stays registered; a set
        // freed and re-registered mid-copy gives a stale label, which the
        // kind check and `stat` treat as display-only data.
        unsafe { map.read_bytes(base + META + 4, &mut meta) };
        let Some(kind) = Kind::from_u32(u32::from_le_bytes([meta[0], meta[1], meta[2], meta[3]])) else {
            continue;
        };
        let label_bytes = &meta[12..12 + LABEL_MAX];
        let n = label_bytes.iter().position(|&b| b == 0).unwrap_or(LABEL_MAX);
        let mut values = [0u64; VALUES];
        for (v, slot) in values.iter_mut().enumerate() {
            *slot = map.atomic_u64(base + v * 8).load(Ordering::Relaxed);
        }
        out.push(SetSnapshot {
            kind,
            stream_id: u32::from_le_bytes([meta[4], meta[5], meta[6], meta[7]]),
            session_id: u32::from_le_bytes([meta[8], meta[9], meta[10], meta[11]]),
            label: String::from_utf8_lossy(&label_bytes[..n]).into_owned(),
            values,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_sees_what_a_writer_counts_and_freed_sets_disappear() {
        let dir = std::env::temp_dir().join(format!("tw-cnt-{}", std::process::id()));
        let f = CountersFile::create(&dir).unwrap();
        let a = f.allocate(Kind::Publisher, 7, 99, "md").unwrap();
        a.add(publisher::MESSAGES, 3);
        a.add(publisher::BYTES, 96);
        let r = CountersReader::open(f.path().unwrap()).unwrap();
        let sets = r.sets();
        assert_eq!(sets.len(), 1);
        assert_eq!((sets[0].stream_id, sets[0].label.as_str()), (7, "md"));
        assert_eq!(&sets[0].values[..2], &[3, 96]);
        drop(a);
        assert!(r.sets().is_empty());
        drop(f);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn foreign_files_are_refused() {
        let dir = std::env::temp_dir().join(format!("tw-cntf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("counters-1.twc");
        std::fs::write(&p, b"definitely not ours, but long enough to read a header").unwrap();
        assert!(matches!(CountersReader::open(&p), Err(ShmError::Foreign { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
