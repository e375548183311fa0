//! `tickwire clean`: removing the files of dead processes, and nothing else.
//!
//! A file is removed only when its name *and* its header say it is a
//! tickwire file and the process named in the header is dead (pid and start
//! time, so a reused pid does not count as alive). Foreign files, corrupt
//! files, files that are not regular (a FIFO named like a log) and temporary
//! files that cannot be identified are reported and left alone.

use crate::counters::{self, CountersReader};
use crate::error::ShmError;
use crate::log::file::{inspect, FileStatus};
use crate::log::layout;
use crate::mapped::MappedFile;
use crate::sys::ProcessId;
use std::path::{Path, PathBuf};

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

/// Removes log, counters and temporary files in `dir` whose owning process
/// is dead. Foreign, corrupt and unidentifiable files are reported and left
/// alone; names that are not tickwire's are not even reported.
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
        } else if let Some(pid) = temporary_pid(&name) {
            temporary(&path, pid)
        } else {
            continue;
        };
        let removed = stale && std::fs::remove_file(&path).is_ok();
        out.push(CleanReport { path, removed, reason });
    }
    Ok(out)
}

/// The pid in a name of the form tickwire gives its temporary files:
/// `.CHANNEL-STREAM.PID.RANDOM.tmp` (a log being made) or
/// `.counters-PID.PID.RANDOM.tmp` (RANDOM: 16 hex digits); the older form
/// without RANDOM is recognised too.
fn temporary_pid(name: &str) -> Option<u32> {
    let mut inner = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    if let Some((rest, random)) = inner.rsplit_once('.') {
        if random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit()) {
            inner = rest;
        }
    }
    let (stem, pid) = inner.rsplit_once('.')?;
    let pid: u32 = pid.parse().ok().filter(|&p| p > 0)?;
    let (base, number) = stem.rsplit_once('-')?;
    let base_ok = !base.is_empty() && base.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    (base_ok && number.parse::<u32>().is_ok()).then_some(pid)
}

/// A temporary file is removed only if its header is a tickwire header
/// naming the same pid as its name, and that process is dead.
fn temporary(path: &Path, name_pid: u32) -> (bool, String) {
    let head = match MappedFile::peek(path, 128) {
        Ok(h) => h,
        Err(e) => return (false, e.to_string()),
    };
    let field = |at: usize| head.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let owner = if head.starts_with(&layout::MAGIC) {
        field(layout::PUBLISHER_PID_OFFSET).zip(field(layout::PUBLISHER_START_OFFSET))
    } else if head.starts_with(&counters::MAGIC) {
        field(counters::OWNER_PID_OFFSET).zip(field(counters::OWNER_START_OFFSET))
    } else {
        None
    };
    match owner {
        Some((pid, start_time)) if pid == u64::from(name_pid) => {
            let owner = ProcessId { pid: name_pid, start_time };
            if owner.is_alive() {
                (false, format!("temporary file of live pid {name_pid}"))
            } else {
                (true, format!("temporary file of dead pid {name_pid}"))
            }
        }
        _ => (false, "named like a tickwire temporary file, but its header is not one: left alone".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::temporary_pid;

    #[test]
    fn only_tickwire_temporary_names_carry_a_pid() {
        assert_eq!(temporary_pid(".md-10.4242.tmp"), Some(4242));
        assert_eq!(temporary_pid(".counters-77.77.tmp"), Some(77));
        assert_eq!(temporary_pid(".md-10.4242.0123456789abcdef.tmp"), Some(4242));
        assert_eq!(temporary_pid(".counters-77.77.fedcba9876543210.tmp"), Some(77));
        for foreign in [".notes.x.tmp", ".foo.tmp", ".md-10.0.tmp", ".md-x.12.tmp", "md-10.12.tmp", ".-10.12.tmp"] {
            assert_eq!(temporary_pid(foreign), None, "{foreign}");
        }
    }
}
