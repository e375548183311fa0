//! The program's counters, in a counters file of its own in tickwire's
//! directory (`TICKWIRE_ACCEL_DIR`, else this user's default), so `tickwire
//! stat` shows them while it runs: sockets accelerated and open, fallbacks,
//! datagrams and bytes each way. Any thread adds (atomically); the file is
//! removed when the program exits (`tickwire clean` removes that of one
//! that was killed).

use std::sync::{Arc, Mutex, OnceLock};
use tickwire_shm::counters::{CountersFile, Kind, SharedCounterSet};

/// Which value (`tickwire_shm::counters::ACCEL_NAMES` order).
#[derive(Debug, Clone, Copy)]
pub(crate) enum C {
    Accelerated = 0,
    Open = 1,
    Fallbacks = 2,
    FallbacksMulticast = 3,
    TxPackets = 4,
    TxBytes = 5,
    RxPackets = 6,
    RxBytes = 7,
    RxDropped = 8,
    /// Datagrams an accelerated socket sent or received through the kernel
    /// (a neighbour not resolved, too large for a frame, another path).
    KernelPath = 9,
}

/// The directory (`tickwire accel` sets it from `--dir`).
pub(crate) const DIR: &str = "TICKWIRE_ACCEL_DIR";

static SET: OnceLock<Option<SharedCounterSet>> = OnceLock::new();
/// The file, removed at exit.
static FILE: Mutex<Option<Arc<CountersFile>>> = Mutex::new(None);

/// Removes the file this process made (its set keeps the mapping: the
/// values are still added to, unseen, by threads that outlive `exit`).
extern "C" fn at_exit() {
    let _in = crate::table::Inside::enter();
    if let Some(path) = FILE.lock().ok().and_then(|f| f.as_ref().and_then(|f| f.path().map(|p| p.to_path_buf()))) {
        let _ = std::fs::remove_file(path);
    }
}

fn open() -> Option<SharedCounterSet> {
    let dir = std::env::var_os(DIR).map_or_else(tickwire_shm::default_dir, std::path::PathBuf::from);
    let file = match CountersFile::create(&dir) {
        Ok(f) => f,
        Err(e) => {
            crate::config::note(&format!("no counters for tickwire stat: {e}"));
            return None;
        }
    };
    let program = std::env::args().next().unwrap_or_default();
    let iface = crate::config::get().iface.as_ref().map(|(n, _)| n.clone()).unwrap_or_default();
    let set = file.allocate(Kind::Accel, 0, 0, &format!("{program} on {iface}")).ok()?;
    if let Ok(mut f) = FILE.lock() {
        *f = Some(file);
        // SAFETY: a handler with C linkage, registered once.
        unsafe { libc::atexit(at_exit) };
    }
    Some(set.into_shared())
}

/// Adds `n` to `c` (the file made the first time).
pub(crate) fn add(c: C, n: u64) {
    if n == 0 {
        return;
    }
    if let Some(s) = SET.get_or_init(open) {
        s.add(c as usize, n);
    }
}

/// Takes `n` from `c` (a gauge).
pub(crate) fn sub(c: C, n: u64) {
    if let Some(Some(s)) = SET.get() {
        s.sub(c as usize, n);
    }
}
