//! Creating, validating and opening log files; the coordination lock.

use super::layout::*;
use super::order;
use crate::config::LogConfig;
use crate::dir::Dir;
use crate::error::ShmError;
use crate::mapped::MappedFile;
use crate::sys::{self, ProcessId};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Checks a channel name: 1 to 48 of `[A-Za-z0-9_.-]`. An `ipc:` prefix is
/// accepted and stripped.
///
/// # Errors
/// [`ShmError::Config`] for any other name.
pub fn channel_name(channel: &str) -> Result<&str, ShmError> {
    let name = channel.strip_prefix("ipc:").unwrap_or(channel);
    let ok = !name.is_empty()
        && name.len() <= CHANNEL_MAX
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
        && !name.starts_with('.');
    if ok {
        Ok(name)
    } else {
        Err(ShmError::Config(format!("channel {channel:?}: use 1-48 of [A-Za-z0-9_.-], optionally after ipc:")))
    }
}

/// The path of a stream's log file.
pub fn log_path(dir: &Path, channel: &str, stream_id: u32) -> Result<PathBuf, ShmError> {
    Ok(dir.join(format!("{}-{stream_id}.log", channel_name(channel)?)))
}

/// The fixed facts in a log's descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// Ring bytes.
    pub capacity: usize,
    /// Largest frame.
    pub mtu: usize,
    /// Largest message.
    pub max_message: usize,
    /// Stream identifier.
    pub stream_id: u32,
    /// Session identifier of this publisher incarnation.
    pub session_id: u32,
    /// Subscriber slots.
    pub max_subscribers: usize,
    /// Header length (ring offset in the file).
    pub header_len: usize,
    /// The publisher process.
    pub publisher: ProcessId,
    /// Unblock timeout.
    pub unblock_timeout_ns: u64,
    /// Channel name.
    pub channel: String,
    /// Descriptor flags ([`FLAG_ASYMMETRIC_FENCE`]).
    pub flags: u32,
}

/// An open log file.
#[derive(Debug)]
pub(crate) struct LogFile {
    pub(crate) map: MappedFile,
    pub(crate) desc: Descriptor,
    pub(crate) path: PathBuf,
}

fn u32_of(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_of(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Reads and validates the descriptor of a log file from its first bytes.
pub(crate) fn read_descriptor(path: &Path, head: &[u8], file_len: usize) -> Result<Descriptor, ShmError> {
    if head.len() < 8 || head[..8] != MAGIC {
        if head.len() >= 5 && &head[..5] == b"TWLOG" {
            return Err(ShmError::VersionMismatch { path: path.into(), found: 0, expected: LAYOUT_VERSION });
        }
        return Err(ShmError::Foreign { path: path.into() });
    }
    let corrupt = |reason: String| ShmError::Corrupt { path: path.into(), reason };
    if head.len() < 128 {
        return Err(corrupt(format!("file is {} bytes, shorter than the descriptor", head.len())));
    }
    let version = u32_of(head, LAYOUT_VERSION_OFFSET);
    if version != LAYOUT_VERSION {
        return Err(ShmError::VersionMismatch { path: path.into(), found: version, expected: LAYOUT_VERSION });
    }
    let name_bytes = &head[CHANNEL_OFFSET..CHANNEL_OFFSET + CHANNEL_MAX];
    let name_len = name_bytes.iter().position(|&b| b == 0).unwrap_or(CHANNEL_MAX);
    let d = Descriptor {
        header_len: u32_of(head, HEADER_LEN_OFFSET) as usize,
        capacity: u64_of(head, CAPACITY_OFFSET) as usize,
        mtu: u32_of(head, MTU_OFFSET) as usize,
        max_message: u32_of(head, MAX_MESSAGE_OFFSET) as usize,
        stream_id: u32_of(head, STREAM_ID_OFFSET),
        session_id: u32_of(head, SESSION_ID_OFFSET),
        max_subscribers: u32_of(head, MAX_SUBSCRIBERS_OFFSET) as usize,
        publisher: ProcessId {
            pid: u64_of(head, PUBLISHER_PID_OFFSET) as u32,
            start_time: u64_of(head, PUBLISHER_START_OFFSET),
        },
        unblock_timeout_ns: u64_of(head, UNBLOCK_TIMEOUT_OFFSET),
        channel: String::from_utf8_lossy(&name_bytes[..name_len]).into_owned(),
        flags: u32_of(head, FLAGS_OFFSET),
    };
    let cfg = LogConfig {
        capacity: d.capacity,
        mtu: d.mtu,
        max_message: d.max_message,
        max_subscribers: d.max_subscribers,
        unblock_timeout: Duration::from_nanos(d.unblock_timeout_ns),
    };
    cfg.validate().map_err(|e| corrupt(format!("descriptor: {e}")))?;
    if d.header_len != header_len(d.max_subscribers) {
        return Err(corrupt(format!("header_len {} does not match {} slots", d.header_len, d.max_subscribers)));
    }
    let need = d.header_len + d.capacity;
    if file_len < need {
        return Err(corrupt(format!("file is {file_len} bytes, layout needs {need}")));
    }
    Ok(d)
}

impl LogFile {
    /// Creates the log for a new publisher. A stale file of a dead publisher
    /// is replaced; a live publisher's file is [`ShmError::InUse`]; a foreign
    /// file is never touched.
    pub(crate) fn create(
        dir: &Path,
        channel: &str,
        stream_id: u32,
        cfg: &LogConfig,
        flags: u32,
    ) -> Result<Self, ShmError> {
        cfg.validate()?;
        let name = channel_name(channel)?;
        let path = log_path(dir, channel, stream_id)?;
        let file_name = format!("{name}-{stream_id}.log");
        let d = Dir::open(dir)?;
        let hlen = header_len(cfg.max_subscribers);
        let (map, tmp) = MappedFile::create_new(&d, &format!("{name}-{stream_id}"), hlen + cfg.capacity, &path)?;
        // The file is new, under a temporary name only this process knows:
        // nobody else maps it until it is linked into place below.
        let head = write_header(&map, name, stream_id, cfg, flags);

        // Publish the finished file under its real name atomically: link(2)
        // fails if the name exists, so a live publisher's file is never
        // clobbered and readers never see a half-written header.
        let result = loop {
            match d.link(&tmp, &file_name) {
                Ok(()) => break Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    if let Err(e) = remove_if_stale(&d, &path, &file_name) {
                        break Err(e);
                    }
                }
                Err(e) => break Err(ShmError::io(&path, e)),
            }
        };
        let _ = d.remove(&tmp);
        result?;
        let desc = read_descriptor(&path, &head, hlen + cfg.capacity)?;
        Ok(Self { map, desc, path })
    }

    /// Creates a log for a new publisher in a sealed anonymous file
    /// ([`crate::handover`]), to hand over a Unix socket: no name in any
    /// directory, and a size nobody can change. Returns it and its file.
    pub(crate) fn create_sealed(
        channel: &str,
        stream_id: u32,
        cfg: &LogConfig,
        flags: u32,
    ) -> Result<(Self, std::fs::File), ShmError> {
        cfg.validate()?;
        let name = channel_name(channel)?;
        let path = PathBuf::from(format!("memfd:{name}-{stream_id}"));
        let hlen = header_len(cfg.max_subscribers);
        let (map, file) =
            MappedFile::create_sealed(hlen + cfg.capacity, &path).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOSPC) => {
                    ShmError::NoSpace { dir: "memfd:".into(), file: path.clone(), needs: (hlen + cfg.capacity) as u64 }
                }
                _ => ShmError::io(&path, e),
            })?;
        // No other process has the file until it is handed over.
        let head = write_header(&map, name, stream_id, cfg, flags);
        let desc = read_descriptor(&path, &head, hlen + cfg.capacity)?;
        Ok((Self { map, desc, path }, file))
    }

    /// Opens an existing log and validates it.
    pub(crate) fn open(dir: &Path, channel: &str, stream_id: u32) -> Result<Self, ShmError> {
        let path = log_path(dir, channel, stream_id)?;
        let no_publisher = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
        let d = match Dir::existing(dir) {
            Ok(d) => d,
            Err(ShmError::Io { source, .. }) if no_publisher(&source) => return Err(ShmError::NoPublisher { path }),
            Err(e) => return Err(e),
        };
        let name = format!("{}-{stream_id}.log", channel_name(channel)?);
        let file = match d.open_file(&name, true, false) {
            Ok(f) => f,
            Err(e) if no_publisher(&e) => return Err(ShmError::NoPublisher { path }),
            Err(e) => return Err(ShmError::io(&path, e)),
        };
        let log = Self::from_file(&file, path, false)?;
        if log.desc.stream_id != stream_id {
            return Err(ShmError::Corrupt { path: log.path, reason: format!("holds stream {}", log.desc.stream_id) });
        }
        Ok(log)
    }

    /// Opens a log handed over by another process, which must be sealed
    /// against shrinking ([`crate::handover::check_sealed`]); `label` names
    /// it in errors.
    pub(crate) fn open_fd(file: &std::fs::File, label: &Path) -> Result<Self, ShmError> {
        crate::handover::check_sealed(file).map_err(|e| ShmError::io(label, e))?;
        Self::from_file(file, label.to_owned(), true)
    }

    /// Validates the descriptor at the start of `file`, then maps what its
    /// layout needs (`handed`: a file from another process, which must be
    /// reserved, not sparse, as far as that: [`crate::handover::check_reserved`]).
    fn from_file(file: &std::fs::File, path: PathBuf, handed: bool) -> Result<Self, ShmError> {
        use std::os::unix::fs::FileExt;
        let mut head = [0u8; 128];
        let mut got = 0;
        while got < head.len() {
            match file.read_at(&mut head[got..], got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ShmError::io(&path, e)),
            }
        }
        let file_len = file.metadata().map_err(|e| ShmError::io(&path, e))?.len() as usize;
        let desc = read_descriptor(&path, &head[..got], file_len)?;
        let need = desc.header_len + desc.capacity;
        if handed {
            crate::handover::check_reserved(file, need).map_err(|e| ShmError::io(&path, e))?;
        }
        // Map only after the size check above, so no access can fault;
        // what a handed-over file has beyond its layout is never mapped.
        let len = if handed { need } else { file_len };
        let map = MappedFile::from_file(file, len, &path).map_err(|e| ShmError::io(&path, e))?;
        if map.len() < desc.header_len + desc.capacity {
            return Err(ShmError::Corrupt { path, reason: "file shrank while opening".into() });
        }
        Ok(Self { map, desc, path })
    }

    pub(crate) fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.map.atomic_u64(off)
    }
    pub(crate) fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.map.atomic_u32(off)
    }
    pub(crate) fn ring(&self) -> *mut u8 {
        // SAFETY: header_len + capacity <= mapping length (validated).
        unsafe { self.map.base().add(self.desc.header_len) }
    }

    /// Takes the coordination lock if free. Serializes joins with the
    /// publisher's limit rescans. The lock word names its holder: pid in the
    /// low half, the low 32 bits of its start time in the high half.
    pub(crate) fn try_lock(&self, owner: ProcessId) -> Option<LockGuard<'_>> {
        let lock = self.u64_at(LOCK_OFFSET);
        lock.compare_exchange(0, lock_word(owner), order::LOCK_ACQUIRE, Ordering::Relaxed)
            .ok()
            .map(|_| LockGuard { lock })
    }

    /// Takes the lock over if its holder is dead (killed while holding it:
    /// a subscriber killed during its join). Returns the guard and the dead
    /// holder's pid, or `None` if the lock is free, or held by a live process.
    pub(crate) fn take_over_lock(&self, owner: ProcessId) -> Option<(LockGuard<'_>, u32)> {
        let lock = self.u64_at(LOCK_OFFSET);
        let holder = lock.load(Ordering::Relaxed);
        if holder == 0 || lock_holder_alive(holder) {
            return None;
        }
        lock.compare_exchange(holder, lock_word(owner), order::LOCK_ACQUIRE, Ordering::Relaxed)
            .ok()
            .map(|_| (LockGuard { lock }, holder as u32))
    }

    /// Takes the lock, waiting up to `timeout`; a lock held by a dead process
    /// is taken over at once.
    pub(crate) fn lock(&self, owner: ProcessId, timeout: Duration) -> Result<LockGuard<'_>, ShmError> {
        let start = Instant::now();
        let mut polls = 0u32;
        loop {
            if let Some(g) = self.try_lock(owner) {
                return Ok(g);
            }
            polls = polls.wrapping_add(1);
            if polls % 1024 == 0 {
                if let Some((g, _dead)) = self.take_over_lock(owner) {
                    return Ok(g);
                }
            }
            if start.elapsed() > timeout {
                let holder = self.u64_at(LOCK_OFFSET).load(Ordering::Relaxed) & u64::from(u32::MAX);
                return Err(ShmError::LockTimeout { path: self.path.clone(), holder });
            }
            std::thread::yield_now();
        }
    }
}

fn lock_word(p: ProcessId) -> u64 {
    u64::from(p.pid) | (p.start_time & u64::from(u32::MAX)) << 32
}

/// Whether the process a lock word names still runs (the same process: a
/// reused pid has another start time).
fn lock_holder_alive(word: u64) -> bool {
    let pid = word as u32;
    match ProcessId::of(pid) {
        Some(p) => word >> 32 == 0 || p.start_time & u64::from(u32::MAX) == word >> 32,
        None => false,
    }
}

/// Releases the coordination lock on drop.
pub(crate) struct LockGuard<'a> {
    lock: &'a AtomicU64,
}

impl Drop for LockGuard<'_> {
    fn drop(&mut self) {
        self.lock.store(0, order::LOCK_RELEASE);
    }
}

/// Writes a new log's descriptor and first heartbeat into `map`, which no
/// other process maps yet; returns the descriptor's bytes.
fn write_header(map: &MappedFile, name: &str, stream_id: u32, cfg: &LogConfig, flags: u32) -> Vec<u8> {
    let me = ProcessId::current();
    let hlen = header_len(cfg.max_subscribers);
    let session_id = session_id(me, stream_id);
    let mut head = vec![0u8; 128];
    head[..8].copy_from_slice(&MAGIC);
    head[LAYOUT_VERSION_OFFSET..][..4].copy_from_slice(&LAYOUT_VERSION.to_le_bytes());
    head[HEADER_LEN_OFFSET..][..4].copy_from_slice(&(hlen as u32).to_le_bytes());
    head[CAPACITY_OFFSET..][..8].copy_from_slice(&(cfg.capacity as u64).to_le_bytes());
    head[MTU_OFFSET..][..4].copy_from_slice(&(cfg.mtu as u32).to_le_bytes());
    head[MAX_MESSAGE_OFFSET..][..4].copy_from_slice(&(cfg.max_message as u32).to_le_bytes());
    head[STREAM_ID_OFFSET..][..4].copy_from_slice(&stream_id.to_le_bytes());
    head[SESSION_ID_OFFSET..][..4].copy_from_slice(&session_id.to_le_bytes());
    head[MAX_SUBSCRIBERS_OFFSET..][..4].copy_from_slice(&(cfg.max_subscribers as u32).to_le_bytes());
    head[FLAGS_OFFSET..][..4].copy_from_slice(&flags.to_le_bytes());
    head[PUBLISHER_PID_OFFSET..][..8].copy_from_slice(&u64::from(me.pid).to_le_bytes());
    head[PUBLISHER_START_OFFSET..][..8].copy_from_slice(&me.start_time.to_le_bytes());
    head[CREATED_NS_OFFSET..][..8].copy_from_slice(&sys::monotonic_ns().to_le_bytes());
    let unblock = cfg.unblock_timeout.as_nanos().min(u128::from(u64::MAX)) as u64;
    head[UNBLOCK_TIMEOUT_OFFSET..][..8].copy_from_slice(&unblock.to_le_bytes());
    head[CHANNEL_OFFSET..][..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: the caller's file is new and mapped by this process alone:
    // nobody else reads these bytes until it is linked into a directory
    // or handed over.
    unsafe { map.write_bytes(0, &head) };
    map.atomic_u64(PUB_HEARTBEAT_OFFSET).store(sys::monotonic_ns(), Ordering::Release);
    head
}

/// A session id that differs between publisher incarnations.
fn session_id(me: ProcessId, stream_id: u32) -> u32 {
    let x = sys::monotonic_ns() ^ (u64::from(me.pid) << 32) ^ me.start_time ^ u64::from(stream_id);
    // splitmix64 finaliser
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) as u32).max(1)
}

/// What [`inspect`] found about a file in the tickwire directory.
#[derive(Debug)]
pub enum FileStatus {
    /// A log whose publisher is alive.
    Live(Descriptor),
    /// A log or counters file whose owner is dead.
    Stale {
        /// Owner pid.
        pid: u32,
    },
    /// Not a tickwire file, or unreadable/corrupt: reported, never removed.
    Bad(ShmError),
}

/// Inspects a log file without mapping it.
pub fn inspect(path: &Path) -> FileStatus {
    let head = match MappedFile::peek(path, 128) {
        Ok(h) => h,
        Err(e) => return FileStatus::Bad(ShmError::io(path, e)),
    };
    let len = std::fs::metadata(path).map(|m| m.len() as usize).unwrap_or(0);
    match read_descriptor(path, &head, len) {
        Ok(d) if d.publisher.is_alive() => FileStatus::Live(d),
        Ok(d) => FileStatus::Stale { pid: d.publisher.pid },
        Err(e) => FileStatus::Bad(e),
    }
}

/// Removes `path` if it is a tickwire log whose publisher is dead.
fn remove_if_stale(dir: &Dir, path: &Path, name: &str) -> Result<(), ShmError> {
    if dir.remove_foreign(name) {
        return Ok(());
    }
    match inspect(path) {
        FileStatus::Live(d) => Err(ShmError::InUse { path: path.into(), pid: d.publisher.pid }),
        FileStatus::Stale { .. } => match dir.remove(name) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ShmError::io(path, e)),
        },
        FileStatus::Bad(ShmError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(()),
        FileStatus::Bad(e) => Err(e),
    }
}

/// A live view of a log for monitoring (`tickwire stat`): read-only loads.
#[derive(Debug, Clone)]
pub struct LogStatus {
    /// Fixed parameters.
    pub desc: Descriptor,
    /// End of the newest claim.
    pub tail: u64,
    /// The publisher's last computed limit.
    pub limit: u64,
    /// Milliseconds since the publisher's last heartbeat.
    pub heartbeat_age_ms: u64,
    /// Attached subscribers: (pid, position, lossy, alive).
    pub subscribers: Vec<(u32, u64, bool, bool)>,
    /// Whether the publisher process is alive.
    pub publisher_alive: bool,
}

/// Reads a log's live status.
///
/// # Errors
/// As opening a log: [`ShmError::Foreign`], [`ShmError::Corrupt`], I/O.
pub fn status(path: &Path) -> Result<LogStatus, ShmError> {
    let head = MappedFile::peek(path, 128).map_err(|e| ShmError::io(path, e))?;
    let len = std::fs::metadata(path).map_err(|e| ShmError::io(path, e))?.len() as usize;
    let desc = read_descriptor(path, &head, len)?;
    let map = MappedFile::open(path).map_err(|e| ShmError::io(path, e))?;
    let mut subscribers = Vec::new();
    for i in 0..desc.max_subscribers {
        let s = slot(i);
        if map.atomic_u32(s + SLOT_STATE).load(Ordering::Acquire) != SLOT_ACTIVE {
            continue;
        }
        let pid = ProcessId {
            pid: map.atomic_u64(s + SLOT_PID).load(Ordering::Relaxed) as u32,
            start_time: map.atomic_u64(s + SLOT_START).load(Ordering::Relaxed),
        };
        subscribers.push((
            pid.pid,
            map.atomic_u64(s + SLOT_POSITION).load(Ordering::Relaxed) & !READING,
            map.atomic_u32(s + SLOT_MODE).load(Ordering::Relaxed) == 1,
            pid.is_alive(),
        ));
    }
    let hb = map.atomic_u64(PUB_HEARTBEAT_OFFSET).load(Ordering::Relaxed);
    Ok(LogStatus {
        publisher_alive: desc.publisher.is_alive(),
        tail: map.atomic_u64(TAIL_OFFSET).load(Ordering::Relaxed),
        limit: map.atomic_u64(PUB_LIMIT_OFFSET).load(Ordering::Relaxed),
        heartbeat_age_ms: sys::monotonic_ns().saturating_sub(hb) / 1_000_000,
        subscribers,
        desc,
    })
}
