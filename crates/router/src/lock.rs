//! The router's own directory and its lock: one router serves a directory.
//!
//! The directory must be the router's user's own ([`tickwire_shm::Dir`]):
//! made `0700`, or `02750` with `[router] group`; another user's, or one
//! others may write to without the sticky bit, is refused naming its owner
//! and mode. The lock is `DIR/router.lock`, opened relative to the
//! directory's handle (never through a link, only a regular file of this
//! user's), held with an exclusive `flock` that the kernel releases when the
//! process dies, so a router killed with kill -9 never blocks the next start.

use crate::config::RouterConfig;
use crate::server::StartError;
use std::fs::File;
use std::io::{Read, Write};
use tickwire_shm::Dir;

/// The router's lock in its directory.
pub const LOCK_FILE: &str = "router.lock";

/// Opens (making it if needed) and checks the directory, then takes its
/// lock and writes this process's pid into it.
///
/// # Errors
/// [`StartError::Shm`] for a directory that is not this user's own,
/// [`StartError::Locked`] when another live router holds it,
/// [`StartError::Io`] naming the lock file otherwise.
pub(crate) fn take(cfg: &RouterConfig) -> Result<File, StartError> {
    let group = cfg.group.as_deref().map(tickwire_shm::group_id).transpose()?;
    let dir = Dir::create(&cfg.dir, group)?;
    let want = if group.is_some() { tickwire_shm::dir::GROUP_DIR_MODE } else { tickwire_shm::dir::DIR_MODE };
    if dir.mode() != want {
        tracing::warn!("{}: mode {:04o}, not the {want:04o} the router creates it with", cfg.dir.display(), dir.mode());
    }
    let path = cfg.dir.join(LOCK_FILE);
    let io = |source| StartError::Io { what: path.display().to_string(), source };
    let mut lock = dir.open_file(LOCK_FILE, true, true).map_err(io)?;
    if let Err(e) = lock.try_lock() {
        let mut holder = String::new();
        let _ = (&lock).take(32).read_to_string(&mut holder);
        let holder = Some(holder.trim()).filter(|h| !h.is_empty()).map(|p| format!(", by pid {p}")).unwrap_or_default();
        return match e {
            std::fs::TryLockError::WouldBlock => Err(StartError::Locked { dir: cfg.dir.clone(), lock: path, holder }),
            std::fs::TryLockError::Error(e) => Err(io(e)),
        };
    }
    lock.set_len(0).and_then(|()| write!(lock, "{}", std::process::id())).map_err(io)?;
    Ok(lock)
}
