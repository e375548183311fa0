//! # tickwire-shm: shared-memory log buffers, counters and the IPC transport
//!
//! The data path on one host:
//!
//! ```text
//!  LogAppender::offer / try_claim+commit        LogReader::poll(handler)
//!        |                                              ^
//!        v                                              |
//!  [ log file in /dev/shm/tickwire: descriptor | publisher line |
//!    subscriber slots | ring of 32-byte-aligned DATA/PAD frames ] -----+
//! ```
//!
//! * [`log`]: the log buffer protocol (claim, commit, back-pressure, lossy
//!   eviction with `Lost` notices, stuck-claim pad-out, futex parking).
//! * [`counters`]: per-stream counters in a shared file read by `tickwire stat`.
//! * [`floor`]: the raw cache-line and ring probes the lab measures against.
//! * `sys` (private): everything OS-specific (mmap, futex, membarrier,
//!   /proc, clock); [`os`] re-exports the safe parts other crates need.
//!
//! This crate is one of the few allowed `unsafe` code; every block carries a
//! `// SAFETY:` comment (enforced by `clippy::undocumented_unsafe_blocks`).
//! The frames themselves are `tickwire-wire` frames, so a network sender can
//! transmit straight from a log. Applications normally go through
//! `tickwire_driver::{Publication, Subscription}`, which wrap a log's
//! [`LogAppender`] and [`LogReader`] for `ipc:` channels.
//!
//! # Examples
//!
//! ```
//! use tickwire_shm::{Context, Event, LogConfig, ReaderOptions};
//! let dir = std::env::temp_dir().join(format!("tw-shm-doc-{}", std::process::id()));
//! let ctx = Context::new(&dir)?;
//! let mut appender = ctx.appender("ipc:md", 10, &LogConfig::default())?;
//! let mut reader = ctx.reader("ipc:md", 10, ReaderOptions::default())?;
//! let mut claim = appender.try_claim(5).unwrap();
//! claim.buffer().copy_from_slice(b"hello");
//! claim.commit();
//! let mut got = Vec::new();
//! reader.poll(|ev| if let Event::Message(m) = ev { got.push(m.payload.to_vec()) }, 10)?;
//! assert_eq!(got, [b"hello"]);
//! # drop((appender, reader, ctx)); std::fs::remove_dir_all(&dir).unwrap();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod config;
pub mod counters;
mod error;
pub mod floor;
pub mod log;
mod mapped;
mod sys;

/// The operating-system services other crates need, as safe functions:
/// the system-wide monotonic clock, process identity and liveness, and the
/// signal dispositions the command line and lab workers set.
pub mod os {
    pub use crate::sys::{default_sigpipe, ignore_sigint, monotonic_ns, ProcessId};
}

pub use config::{LogConfig, DEFAULT_DIR};
pub use counters::{CounterSet, CountersFile, CountersReader};
pub use error::{PollError, ShmError};
pub use log::file::{inspect, log_path, status, Descriptor, FileStatus, LogStatus};
pub use log::{Claim, LogAppender, LogReader, Mode, ReaderOptions};
pub use tickwire_wire::{Event, Message, OfferError};

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A process's handle on a tickwire directory: creates publishers and
/// subscribers there and owns the process's counters file.
#[derive(Debug, Clone)]
pub struct Context {
    dir: PathBuf,
    counters: Arc<CountersFile>,
}

impl Context {
    /// Opens (creating if needed) `dir` and this process's counters file.
    /// Stale files of dead processes in `dir` are removed.
    ///
    /// # Errors
    /// [`ShmError::Io`] if the directory or counters file cannot be created.
    pub fn new(dir: impl AsRef<Path>) -> Result<Self, ShmError> {
        let dir = dir.as_ref().to_owned();
        std::fs::create_dir_all(&dir).map_err(|e| ShmError::io(&dir, e))?;
        let _ = clean(&dir);
        Ok(Self { counters: CountersFile::create(&dir)?, dir })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// This process's counters.
    pub fn counters(&self) -> &Arc<CountersFile> {
        &self.counters
    }

    /// Creates the log of `channel`/`stream_id` and its appender.
    ///
    /// # Errors
    /// See [`LogAppender::create`].
    pub fn appender(&self, channel: &str, stream_id: u32, cfg: &LogConfig) -> Result<LogAppender, ShmError> {
        LogAppender::create(&self.dir, channel, stream_id, cfg, &self.counters)
    }

    /// Attaches a reader to the log of `channel`/`stream_id`.
    ///
    /// # Errors
    /// See [`LogReader::open`].
    pub fn reader(&self, channel: &str, stream_id: u32, opts: ReaderOptions) -> Result<LogReader, ShmError> {
        LogReader::open(&self.dir, channel, stream_id, opts, &self.counters)
    }
}

/// What [`clean`] did with one file.
#[derive(Debug)]
pub struct CleanReport {
    /// The file.
    pub path: PathBuf,
    /// Removed (stale), or kept with the reason.
    pub removed: bool,
    /// Why.
    pub reason: String,
}

/// Removes log and counters files in `dir` whose owning process is dead.
/// Foreign or corrupt files are reported and left alone.
///
/// # Errors
/// [`ShmError::Io`] if the directory cannot be read.
pub fn clean(dir: &Path) -> Result<Vec<CleanReport>, ShmError> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(dir).map_err(|e| ShmError::io(dir, e))?;
    for entry in rd.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let (stale, reason) = if name.ends_with(".log") {
            match inspect(&path) {
                FileStatus::Live(d) => (false, format!("live publisher pid {}", d.publisher.pid)),
                FileStatus::Stale { pid } => (true, format!("publisher pid {pid} is dead")),
                FileStatus::Bad(e) => (false, e.to_string()),
            }
        } else if name.starts_with("counters-") && name.ends_with(".twc") {
            match CountersReader::open(&path) {
                Ok(r) if r.owner.is_alive() => (false, format!("live process {}", r.owner.pid)),
                Ok(r) => (true, format!("process {} is dead", r.owner.pid)),
                Err(e) => (false, e.to_string()),
            }
        } else if name.starts_with('.') && name.ends_with(".tmp") {
            let pid = name.rsplit('.').nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
            let alive = sys::ProcessId { pid, start_time: 0 }.is_alive();
            (!alive, format!("temporary file of pid {pid}"))
        } else {
            continue;
        };
        let removed = stale && std::fs::remove_file(&path).is_ok();
        out.push(CleanReport { path, removed, reason });
    }
    Ok(out)
}
