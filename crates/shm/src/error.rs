//! Error types. Hot-path errors are small `Copy` enums; set-up errors carry
//! paths and reasons.

use std::path::PathBuf;

/// Why a subscriber cannot go on reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PollError {
    /// The log contains a frame that breaks the protocol (a foreign writer or
    /// memory corruption). The subscriber stops at `position`.
    #[error("corrupt log at position {position}: {reason}")]
    Corrupt {
        /// Where the bad frame starts.
        position: u64,
        /// What is wrong.
        reason: &'static str,
    },
}

/// Errors opening, creating or inspecting tickwire files.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// An I/O error on a path.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file does not start with a tickwire magic: not ours, left alone.
    #[error("{path}: not a tickwire file (bad magic); refusing to touch it")]
    Foreign {
        /// The file.
        path: PathBuf,
    },
    /// A tickwire file of another layout version.
    #[error("{path}: layout version {found}, this build reads {expected}")]
    VersionMismatch {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        expected: u32,
    },
    /// The file is shorter than its header says, or its header is inconsistent.
    #[error("{path}: corrupt or truncated file: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Another live process publishes on this stream.
    #[error("{path}: stream already published by live pid {pid}")]
    InUse {
        /// The file.
        path: PathBuf,
        /// The publisher's pid.
        pid: u32,
    },
    /// The stream's publisher is dead (the file is stale).
    #[error("{path}: publisher pid {pid} is dead; the file is stale (run `tickwire clean`)")]
    Stale {
        /// The file.
        path: PathBuf,
        /// The dead publisher's pid.
        pid: u32,
    },
    /// No publisher has created the stream (yet).
    #[error("{path}: no such stream (is the publisher running?)")]
    NoPublisher {
        /// The file that was looked for.
        path: PathBuf,
    },
    /// Every subscriber slot is taken.
    #[error("{path}: all {max} subscriber slots are in use")]
    NoFreeSlot {
        /// The file.
        path: PathBuf,
        /// Slot count.
        max: usize,
    },
    /// Timed out waiting for the log's coordination lock.
    #[error("{path}: timed out waiting for the log lock held by pid {holder}")]
    LockTimeout {
        /// The file.
        path: PathBuf,
        /// Holder pid.
        holder: u64,
    },
    /// The filesystem cannot hold a new file (a full tmpfs). Nothing was left
    /// behind.
    #[error("no space left in {} for {} (needs {needs} bytes)", dir.display(), file.display())]
    NoSpace {
        /// The directory.
        dir: PathBuf,
        /// The file's name.
        file: PathBuf,
        /// Bytes the file needs.
        needs: u64,
    },
    /// The directory belongs to another user: it is not used (that user
    /// could replace or read every file in it).
    #[error("{path}: owned by {owner} (mode {mode:04o}), not by this process's user {user}: a tickwire directory must be its user's own")]
    DirNotOwn {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: String,
        /// Its mode bits.
        mode: u32,
        /// This process's user.
        user: String,
    },
    /// Other users may write to the directory and no sticky bit keeps them
    /// to their own files: it is not used.
    #[error("{path}: writable by other users without the sticky bit (owner {owner}, mode {mode:04o}): anyone could replace its files; chmod go-w it")]
    DirOpen {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: String,
        /// Its mode bits.
        mode: u32,
    },
    /// An invalid configuration or name.
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl ShmError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Self::Io { path: path.to_owned(), source }
    }
}
