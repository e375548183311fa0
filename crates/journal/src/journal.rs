//! The journal: a directory of segments, appended by one thread in
//! batches (one `pwrite` per batch), made durable by its
//! [`SyncPolicy`](crate::SyncPolicy), trimmed by retention, and read from
//! any sequence ([`crate::Reader`]).

use crate::record::{RecordError, RecordRepr};
use crate::segment::{self, Damage, SegmentHeader, SEGMENT_HEADER};
use crate::sync::{SyncPolicy, Syncer};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tickwire_latency::SharedLatencies;

/// How a journal is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalConfig {
    /// Its directory (created if missing).
    pub dir: PathBuf,
    /// A segment is rolled once it holds this many bytes.
    pub segment_bytes: u64,
    /// Whole segments are removed, oldest first, while the journal holds
    /// more than this (`None`: no limit).
    pub retain_bytes: Option<u64>,
    /// … or once their newest record is older than this.
    pub retain_age: Option<Duration>,
    /// When a record is durable.
    pub sync: SyncPolicy,
    /// Start despite damage before the tail (the damaged records are
    /// skipped and reported) instead of refusing to.
    pub skip_corrupt: bool,
    /// The CPU the sync thread runs on (`None`: anywhere). Without a spare
    /// core, the writer's own: a writer that yields while it awaits an
    /// fsync then hands its CPU straight to the sync thread.
    pub sync_cpu: Option<usize>,
}

impl JournalConfig {
    /// A journal in `dir` with the defaults: 64 MiB segments, 1 GiB kept,
    /// no age limit, group commit.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            segment_bytes: 64 << 20,
            retain_bytes: Some(1 << 30),
            retain_age: None,
            sync: SyncPolicy::group(),
            skip_corrupt: false,
            sync_cpu: None,
        }
    }
}

/// Why a journal cannot be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// A file could not be read, written or created.
    #[error("journal {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Another process has this journal open.
    #[error("journal {0}: in use by another process (its lock is held)")]
    Locked(PathBuf),
    /// Damage before the tail, and `skip_corrupt` was not given.
    #[error(
        "journal segment {segment}: damaged record at offset {offset} ({why}); valid records follow it, so this is \
         not a torn tail: start with skip_corrupt (--journal-skip-corrupt) to skip the damaged records and go on"
    )]
    Corrupt {
        /// The segment file.
        segment: PathBuf,
        /// Where the damage starts.
        offset: u64,
        /// What is wrong.
        why: String,
    },
    /// A record that cannot be stored.
    #[error("journal: record refused: {0}")]
    Record(#[from] RecordError),
    /// An fsync failed: nothing more is acknowledged.
    #[error("journal: {0}")]
    Sync(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    move |source| JournalError::Io { path: path.to_path_buf(), source }
}

/// What opening found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Segments found.
    pub segments: usize,
    /// Valid records.
    pub records: u64,
    /// The first and last sequence held (`first > last`: empty).
    pub first: u64,
    /// See `first`.
    pub last: u64,
    /// A torn or damaged tail that was cut: (segment, offset, bytes).
    pub cut: Option<(PathBuf, u64, u64)>,
    /// Damage skipped (with `skip_corrupt`): (segment, offset, why,
    /// sequences lost as `from..=to`).
    pub skipped: Vec<(PathBuf, u64, String, u64, u64)>,
    /// Each publisher's highest sequence stored.
    pub publishers: HashMap<u64, u64>,
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "recovered {} records in {} segment(s)", self.records, self.segments)?;
        if self.records > 0 {
            write!(f, " (sequences {} to {})", self.first, self.last)?;
        }
        if let Some((seg, offset, bytes)) = &self.cut {
            write!(f, ", cut {bytes} bytes at {offset} of {}", seg.display())?;
        }
        for (seg, offset, why, from, to) in &self.skipped {
            write!(f, "; skipped damage at {offset} of {} ({why}): sequences {from} to {to} lost", seg.display())?;
        }
        Ok(())
    }
}

/// One segment as the journal tracks it.
#[derive(Debug)]
pub(crate) struct Segment {
    pub(crate) base: u64,
    pub(crate) path: PathBuf,
    pub(crate) file: Arc<File>,
    pub(crate) len: u64,
    /// Its last sequence (`base - 1` while empty).
    pub(crate) last: u64,
    pub(crate) created: u64,
    /// (sequence, offset) samples.
    pub(crate) index: Vec<(u64, u64)>,
    /// Damage skipped at open: (first lost, last lost, offset of the
    /// record after it).
    pub(crate) holes: Vec<(u64, u64, u64)>,
}

impl Segment {
    /// The offset to start reading at for `seq` (a record at or before it).
    pub(crate) fn offset_for(&self, seq: u64) -> u64 {
        match self.index.partition_point(|&(s, _)| s <= seq) {
            0 => SEGMENT_HEADER as u64,
            i => self.index[i - 1].1,
        }
    }
}

/// The journal (see the module docs). One writer; readers borrow it.
#[derive(Debug)]
pub struct Journal {
    cfg: JournalConfig,
    pub(crate) segments: Vec<Segment>,
    /// Records appended and not yet written, padded.
    pending: Vec<u8>,
    pending_records: u64,
    /// The next sequence to give.
    next: u64,
    /// The last sequence written.
    written: u64,
    syncer: Option<Syncer>,
    append: Arc<SharedLatencies>,
    /// Held while the journal is open (`None` once released for an
    /// install, [`crate::snapshot`]).
    lock: Option<File>,
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

impl Journal {
    /// Opens (or creates) the journal in `cfg.dir`, checking every record:
    /// a torn or damaged tail is cut off; damage before it stops the open
    /// unless `skip_corrupt`.
    ///
    /// # Errors
    /// [`JournalError`] naming the file, offset and what is wrong.
    pub fn open(cfg: JournalConfig) -> Result<(Self, Recovery), JournalError> {
        let dir = cfg.dir.clone();
        // Guaranteed messages are orders: a directory created here is the
        // router's user's alone (an existing one keeps its mode).
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(&dir)
            .map_err(io(&dir))?;
        let lock_path = dir.join("journal.lock");
        // The owner's alone whatever the umask, and never through a link
        // someone planted in the directory.
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock_path)
            .map_err(io(&lock_path))?;
        if lock.try_lock().is_err() {
            return Err(JournalError::Locked(dir));
        }
        let mut rec = Recovery::default();
        let mut segments = Vec::new();
        let listed = segment::list(&dir).map_err(io(&dir))?;
        let count = listed.len();
        let mut last = 0u64;
        for (i, (name_base, path)) in listed.into_iter().enumerate() {
            let is_last = i + 1 == count;
            // Never through a link planted in the directory.
            let file = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(&path);
            let file = file.map_err(io(&path))?;
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut &file, &mut bytes).map_err(io(&path))?;
            let header = match SegmentHeader::parse(&bytes) {
                Ok(h) if h.base == name_base => h,
                // A segment being created when the router died.
                Err(_) if is_last && bytes.len() <= SEGMENT_HEADER => {
                    std::fs::remove_file(&path).map_err(io(&path))?;
                    rec.cut = Some((path, 0, bytes.len() as u64));
                    continue;
                }
                Ok(h) => {
                    let why = format!("header says base {} but the name says {name_base}", h.base);
                    return Err(JournalError::Corrupt { segment: path, offset: 0, why });
                }
                Err(why) => return Err(JournalError::Corrupt { segment: path, offset: 0, why }),
            };
            if segments.is_empty() {
                rec.first = header.base;
            } else if header.base != last + 1 {
                let why = format!("starts at sequence {} but the one before ends at {last}", header.base);
                if !cfg.skip_corrupt {
                    return Err(JournalError::Corrupt { segment: path, offset: 0, why });
                }
                rec.skipped.push((path.clone(), 0, why, last + 1, header.base - 1));
            }
            let mut at = SEGMENT_HEADER;
            let mut seg_last = header.base - 1;
            let mut index = Vec::new();
            let mut holes = Vec::new();
            let end = loop {
                let s = segment::scan(&bytes, at, seg_last, |r, _| {
                    let p = rec.publishers.entry(r.publisher()).or_insert(0);
                    *p = (*p).max(r.publisher_sequence());
                });
                rec.records += s.records;
                seg_last = s.last;
                index.extend(s.index);
                let Some(Damage { offset, why, resumes }) = s.damage else { break s.end };
                match resumes {
                    None if is_last => {
                        rec.cut = Some((path.clone(), offset, bytes.len() as u64 - offset));
                        break offset;
                    }
                    _ if !cfg.skip_corrupt => return Err(JournalError::Corrupt { segment: path, offset, why }),
                    Some((next_at, next_seq)) => {
                        rec.skipped.push((path.clone(), offset, why, seg_last + 1, next_seq - 1));
                        holes.push((seg_last + 1, next_seq - 1, next_at));
                        index.push((next_seq, next_at));
                        seg_last = next_seq - 1;
                        at = next_at as usize;
                    }
                    None => {
                        // Nothing valid follows in this segment: cut it
                        // here; the next segment's start says what is lost.
                        rec.skipped.push((path.clone(), offset, why, seg_last + 1, seg_last));
                        break offset;
                    }
                }
            };
            if end < bytes.len() as u64 {
                file.set_len(end).map_err(io(&path))?;
                file.sync_all().map_err(io(&path))?;
                bytes.truncate(end as usize);
            }
            last = seg_last;
            segments.push(Segment {
                base: header.base,
                path,
                file: Arc::new(file),
                len: end,
                last: seg_last,
                created: header.created,
                index,
                holes,
            });
        }
        rec.segments = segments.len();
        if segments.is_empty() {
            rec.first = last + 1;
        }
        rec.last = last;
        let mut j = Self {
            syncer: None,
            cfg,
            segments,
            pending: Vec::with_capacity(1 << 20),
            pending_records: 0,
            next: last + 1,
            written: last,
            append: Arc::new(SharedLatencies::default()),
            lock: Some(lock),
        };
        if j.segments.is_empty() {
            j.roll(last + 1)?;
        }
        if j.cfg.sync != SyncPolicy::Os {
            let s = Syncer::start(j.cfg.sync, last, j.cfg.sync_cpu).map_err(io(&j.cfg.dir))?;
            j.syncer = Some(s);
        }
        Ok((j, rec))
    }

    /// Lets go of its files, its sync thread and its lock, so another
    /// journal may open the directory; this one must not be used again
    /// (it is replaced, [`Journal::install`]).
    pub(crate) fn release(&mut self) {
        self.syncer = None;
        self.segments.clear();
        self.pending.clear();
        self.pending_records = 0;
        self.lock = None;
    }

    /// Starts a segment whose first record will be `base`.
    fn roll(&mut self, base: u64) -> Result<(), JournalError> {
        let path = self.cfg.dir.join(segment::file_name(base));
        // Guaranteed orders: readable by the router's user alone, whatever
        // the umask.
        let file =
            OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&path).map_err(io(&path))?;
        let created = now_ns();
        file.write_all_at(&SegmentHeader { base, created }.emit(), 0).map_err(io(&path))?;
        if self.cfg.sync != SyncPolicy::Os {
            // The new file's header and its name in the directory.
            file.sync_all().map_err(io(&path))?;
            File::open(&self.cfg.dir).and_then(|d| d.sync_all()).map_err(io(&self.cfg.dir))?;
        }
        tracing::debug!(segment = %path.display(), "journal: new segment");
        self.segments.push(Segment {
            base,
            path,
            file: Arc::new(file),
            len: SEGMENT_HEADER as u64,
            last: base - 1,
            created,
            index: Vec::new(),
            holes: Vec::new(),
        });
        Ok(())
    }

    /// Appends a record (to memory; [`Journal::write`] writes it) and
    /// returns its sequence.
    ///
    /// # Errors
    /// [`JournalError::Record`] for a record too large.
    pub fn append(
        &mut self,
        publisher: u64,
        publisher_sequence: u64,
        topic: &str,
        payload: &[u8],
    ) -> Result<u64, JournalError> {
        let sequence = self.next;
        let r = RecordRepr { sequence, timestamp: now_ns(), publisher, publisher_sequence, topic, payload };
        r.emit(&mut self.pending)?;
        self.next += 1;
        self.pending_records += 1;
        Ok(sequence)
    }

    /// Whether records wait for [`Journal::write`].
    pub fn has_pending(&self) -> bool {
        self.pending_records > 0
    }

    /// Writes the records appended since the last call, in one `pwrite`
    /// (rolling to a new segment first if the batch would pass
    /// `segment_bytes`), and hands them to the syncer.
    ///
    /// # Errors
    /// [`JournalError::Io`] from the write; [`JournalError::Sync`] once an
    /// fsync has failed.
    pub fn write(&mut self) -> Result<(), JournalError> {
        self.check_sync()?;
        if self.pending_records == 0 {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let first = self.written + 1;
        let needs_roll = self
            .segments
            .last()
            .is_none_or(|s| s.last >= s.base && s.len + self.pending.len() as u64 > self.cfg.segment_bytes);
        if needs_roll {
            self.roll(first)?;
        }
        let Some(seg) = self.segments.last_mut() else { unreachable!("rolled above") };
        seg.file.write_all_at(&self.pending, seg.len).map_err(io(&seg.path))?;
        // One index entry per batch at most (batches are the write unit).
        if seg.index.last().is_none_or(|&(_, at)| seg.len - at >= 64 << 10) {
            seg.index.push((first, seg.len));
        }
        seg.len += self.pending.len() as u64;
        seg.last = self.next - 1;
        self.written = self.next - 1;
        let n = self.pending_records;
        self.pending.clear();
        self.pending_records = 0;
        self.append.record(started.elapsed().as_nanos() as u64);
        if let Some(s) = &self.syncer {
            s.written(self.written, n, &seg.file);
        }
        Ok(())
    }

    fn check_sync(&self) -> Result<(), JournalError> {
        if let Some(s) = &self.syncer {
            if let Some(why) = s.shared.failed.lock().ok().and_then(|f| f.clone()) {
                return Err(JournalError::Sync(why));
            }
        }
        Ok(())
    }

    /// The last sequence durable by the sync policy (what may be
    /// acknowledged and delivered).
    pub fn durable(&self) -> u64 {
        match &self.syncer {
            Some(s) => s.shared.durable.load(Ordering::Acquire),
            None => self.written,
        }
    }

    /// The last sequence appended (written or not).
    pub fn last_appended(&self) -> u64 {
        self.next - 1
    }

    /// The last sequence written.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The first sequence still held (after retention).
    pub fn first(&self) -> u64 {
        self.segments.first().map_or(self.next, |s| s.base)
    }

    /// Bytes in its segments.
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.len).sum()
    }

    /// Segments held.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Its configuration.
    pub fn config(&self) -> &JournalConfig {
        &self.cfg
    }

    /// How long each batch write took, readable from any thread (the
    /// writer never waits for a reader: see [`SharedLatencies`]).
    pub fn append_latencies(&self) -> Arc<SharedLatencies> {
        Arc::clone(&self.append)
    }

    /// How long each fsync took (none under [`SyncPolicy::Os`]).
    pub fn fsync_latencies(&self) -> Option<Arc<SharedLatencies>> {
        self.syncer.as_ref().map(|s| Arc::clone(&s.shared.fsync))
    }

    /// Removes whole segments, oldest first, while the journal is over
    /// `retain_bytes` or a segment's newest record is older than
    /// `retain_age` (never the segment being written); returns how many.
    ///
    /// # Errors
    /// [`JournalError::Io`] if one cannot be removed.
    pub fn enforce_retention(&mut self) -> Result<usize, JournalError> {
        let now = now_ns();
        let mut removed = 0;
        while self.segments.len() > 1 {
            let over_size = self.cfg.retain_bytes.is_some_and(|max| self.bytes() > max);
            // A segment's newest record is no younger than the next one's start.
            let ended = self.segments[1].created;
            let over_age = self.cfg.retain_age.is_some_and(|age| now.saturating_sub(ended) > age.as_nanos() as u64);
            if !over_size && !over_age {
                break;
            }
            let s = self.segments.remove(0);
            std::fs::remove_file(&s.path).map_err(io(&s.path))?;
            tracing::info!(segment = %s.path.display(), last = s.last, "journal: segment removed by retention");
            removed += 1;
        }
        Ok(removed)
    }
}
