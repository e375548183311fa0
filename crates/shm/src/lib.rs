//! # tickwire-shm: shared-memory log buffers, counters and the IPC transport
//!
//! The data path on one host:
//!
//! ```text
//!  LogAppender::offer / try_claim+commit        LogReader::poll(handler)
//!        |                                              ^
//!        v                                              |
//!  [ log file in /dev/shm/tickwire-USER: descriptor | publisher line |
//!    subscriber slots | ring of 32-byte-aligned DATA/PAD frames ] -----+
//! ```
//!
//! * [`log`]: the log buffer protocol (claim, commit, back-pressure, lossy
//!   eviction with `Lost` notices, stuck-claim pad-out, futex parking).
//! * [`dir`]: the directory, this user's own, and every file in it
//!   opened relative to its handle without following links.
//! * [`handover`]: logs in sealed anonymous files (`memfd`) handed over a
//!   Unix socket, for a reader that must not trust the publisher's file.
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

mod clean;
pub mod config;
mod copy;
pub mod counters;
pub mod dir;
mod error;
pub mod floor;
pub mod handover;
pub mod log;
mod mapped;
mod sys;

/// The operating-system services other crates need, as safe functions:
/// the system-wide monotonic clock, process identity and liveness, and the
/// signal dispositions the command line and lab workers set, and the
/// allocator's free memory handed back to the OS; and the files of other
/// processes mapped so that their truncation ends a session, not this
/// process ([`os::untrusted`]).
pub mod os {
    pub use crate::sys::sigbus::untrusted;
    pub use crate::sys::{default_sigpipe, ignore_sigint, monotonic_ns, release_free_memory, ProcessId};
}

pub use clean::{clean, CleanReport};
pub use config::LogConfig;
pub use counters::{CounterSet, CountersFile, CountersReader};
pub use dir::{default_dir, describe_user, group_id, Dir};
pub use error::{PollError, ShmError};
pub use log::file::{inspect, log_path, status, Descriptor, FileStatus, LogStatus};
pub use log::{Claim, LogAppender, LogReader, Mode, ReaderOptions};
pub use tickwire_wire::{Event, GoneReason, Message, OfferError};

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
    /// Opens (creating it `0700` if needed) `dir`, which must be this
    /// user's own ([`Dir`]), and this process's counters file. Stale files
    /// of dead processes in `dir` are removed.
    ///
    /// # Errors
    /// [`ShmError::DirNotOwn`] or [`ShmError::DirOpen`] for a directory
    /// another user owns or may write to; [`ShmError::Io`] if the directory
    /// or counters file cannot be created.
    pub fn new(dir: impl AsRef<Path>) -> Result<Self, ShmError> {
        let dir = dir.as_ref().to_owned();
        Dir::open(&dir)?;
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

    /// Creates the log of `channel`/`stream_id` in a sealed anonymous file,
    /// and its appender; returns them and the file to hand over.
    ///
    /// # Errors
    /// See [`LogAppender::create_sealed`].
    pub fn appender_sealed(
        &self,
        channel: &str,
        stream_id: u32,
        cfg: &LogConfig,
    ) -> Result<(LogAppender, std::fs::File), ShmError> {
        LogAppender::create_sealed(channel, stream_id, cfg, &self.counters)
    }

    /// Attaches a reader to a log handed over as `file` ([`handover`]).
    ///
    /// # Errors
    /// See [`LogReader::open_fd`].
    pub fn reader_fd(&self, file: &std::fs::File, label: &Path, opts: ReaderOptions) -> Result<LogReader, ShmError> {
        LogReader::open_fd(file, label, opts, &self.counters)
    }

    /// Attaches a reader to the log of `channel`/`stream_id`.
    ///
    /// # Errors
    /// See [`LogReader::open`].
    pub fn reader(&self, channel: &str, stream_id: u32, opts: ReaderOptions) -> Result<LogReader, ShmError> {
        LogReader::open(&self.dir, channel, stream_id, opts, &self.counters)
    }
}
