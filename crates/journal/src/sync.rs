//! When an appended record counts as durable ([`SyncPolicy`]), and the
//! thread that makes it so ([`Syncer`]): the routing thread never waits
//! for the disk.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tickwire_latency::SharedLatencies;

/// When the journal acknowledges a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Once written to the page cache: survives the router's crash (even
    /// `kill -9`), not the machine's (a power cut loses what the kernel had
    /// not written yet).
    Os,
    /// Group commit: an `fdatasync` at most every `interval`, or sooner once
    /// `messages` records wait; each acknowledges every record written
    /// before it began.
    Group {
        /// The longest a record waits for its fsync.
        interval: Duration,
        /// Records that start an fsync before `interval` has passed.
        messages: u64,
    },
    /// Every record is acknowledged only after an `fdatasync` that began
    /// after it was written; fsyncs run back to back (records written
    /// during one wait for the next).
    Fsync,
}

impl SyncPolicy {
    /// Its name: `os`, `group` or `fsync`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Os => "os",
            Self::Group { .. } => "group",
            Self::Fsync => "fsync",
        }
    }

    /// The group-commit defaults: at most every 200 µs, or 1,000 records.
    pub fn group() -> Self {
        Self::Group { interval: Duration::from_micros(200), messages: 1000 }
    }
}

impl std::str::FromStr for SyncPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "os" => Ok(Self::Os),
            "group" => Ok(Self::group()),
            "fsync" => Ok(Self::Fsync),
            _ => Err(format!("{s:?}: one of os, group, fsync")),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// The last sequence written to the files.
    written: u64,
    /// Records written since the last fsync began.
    waiting: u64,
    /// Files written since the last fsync began.
    files: Vec<Arc<File>>,
    stop: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    /// The last sequence made durable.
    pub(crate) durable: AtomicU64,
    /// The first fsync error, for good: a journal that could not sync
    /// must not acknowledge again.
    pub(crate) failed: Mutex<Option<String>>,
    /// How long each fdatasync took.
    pub(crate) fsync: Arc<SharedLatencies>,
}

/// The thread that fsyncs for [`SyncPolicy::Group`] and
/// [`SyncPolicy::Fsync`].
#[derive(Debug)]
pub(crate) struct Syncer {
    pub(crate) shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Syncer {
    pub(crate) fn start(policy: SyncPolicy, durable: u64, cpu: Option<usize>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        shared.durable.store(durable, Ordering::Release);
        shared.state.lock().map_err(|_| std::io::Error::other("poisoned"))?.written = durable;
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new().name("tw-journal-sync".into()).spawn(move || {
            if let Some(cpu) = cpu {
                if let Err(e) = tickwire_agent::pin_current_thread(cpu) {
                    tracing::warn!(cpu, error = %e, "journal sync thread not pinned");
                }
            }
            run(&s, policy)
        })?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// Records up to `last` (`n` of them) are in `file` (and earlier ones
    /// in files handed before).
    pub(crate) fn written(&self, last: u64, n: u64, file: &Arc<File>) {
        if let Ok(mut st) = self.shared.state.lock() {
            st.written = last;
            st.waiting += n;
            if !st.files.iter().any(|f| Arc::ptr_eq(f, file)) {
                st.files.push(Arc::clone(file));
            }
        }
        self.shared.wake.notify_one();
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        if let Ok(mut st) = self.shared.state.lock() {
            st.stop = true;
        }
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared, policy: SyncPolicy) {
    let mut last_sync = Instant::now();
    loop {
        let Ok(mut st) = shared.state.lock() else { return };
        let durable = shared.durable.load(Ordering::Acquire);
        while st.written <= durable && !st.stop {
            st = match shared.wake.wait(st) {
                Ok(s) => s,
                Err(_) => return,
            };
        }
        if st.written <= durable {
            return; // stopping, nothing left
        }
        if let SyncPolicy::Group { interval, messages } = policy {
            let due = last_sync + interval;
            while st.waiting < messages && !st.stop {
                let now = Instant::now();
                if now >= due {
                    break;
                }
                st = match shared.wake.wait_timeout(st, due - now) {
                    Ok((s, _)) => s,
                    Err(_) => return,
                };
            }
        }
        let target = st.written;
        let files = std::mem::take(&mut st.files);
        st.waiting = 0;
        drop(st);
        last_sync = Instant::now();
        for f in &files {
            if let Err(e) = f.sync_data() {
                tracing::error!(error = %e, "journal: fdatasync failed; no more acknowledgements");
                if let Ok(mut failed) = shared.failed.lock() {
                    failed.get_or_insert_with(|| format!("fdatasync failed: {e}"));
                }
                return;
            }
        }
        shared.fsync.record(last_sync.elapsed().as_nanos() as u64);
        shared.durable.store(target, Ordering::Release);
    }
}
