//! The safety net under write batching and heartbeats: one thread per
//! process that writes what a TCP link has held past its batching window
//! when the application did not come back to write it (a burst published,
//! then no `publish`, `poll`, `flush_due` or `flush` on that client), and
//! sends a quiet link's heartbeats (every [`KEEPALIVE_EVERY`] it looks), so
//! a client whose application is busy elsewhere is not taken for dead.
//!
//! The hot path does not need it: a busy application's own next call
//! writes what is due. The thread sleeps on a condition variable until a
//! link holds something (the first hold of a quiet spell arms it: one
//! wake-up); armed, it looks every [`PERIOD`] at each link it can lock
//! without waiting (a link in use is its application's, which will write
//! it) and writes what is due; with nothing held anywhere it disarms and
//! sleeps again. So a held message waits at most about [`PERIOD`] for a
//! silent application, and a busy stream costs the process about one
//! wake-up per [`PERIOD`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, OnceLock, PoisonError, TryLockError, Weak};
use std::time::Duration;
use tickwire_shm::os::monotonic_ns;
use tickwire_transport::link::StreamLink;

/// How often an armed flusher looks at the links.
pub(crate) const PERIOD: Duration = Duration::from_millis(1);
/// How often, at most, it looks when nothing is held (heartbeats; more
/// often for a link whose interval is under four times this).
pub(crate) const KEEPALIVE_EVERY: Duration = Duration::from_millis(250);

struct Flusher {
    links: Mutex<Vec<Weak<Mutex<StreamLink>>>>,
    armed: AtomicBool,
    idle: Mutex<()>,
    wake: Condvar,
}

static FLUSHER: OnceLock<Flusher> = OnceLock::new();

fn flusher() -> &'static Flusher {
    FLUSHER.get_or_init(|| {
        let started = std::thread::Builder::new().name("tickwire-flush".into()).spawn(|| run(flusher()));
        if let Err(e) = started {
            // Held messages then wait for the application's next call.
            eprintln!("tickwire-client: no flusher thread ({e}): held messages wait for the next call");
        }
        Flusher {
            links: Mutex::new(Vec::new()),
            armed: AtomicBool::new(false),
            idle: Mutex::new(()),
            wake: Condvar::new(),
        }
    })
}

/// Has the flusher look after `link` (while it lives).
pub(crate) fn register(link: Weak<Mutex<StreamLink>>) {
    let f = flusher();
    f.links.lock().unwrap_or_else(PoisonError::into_inner).push(link);
}

/// Says a link holds frames: wakes the flusher if it sleeps (one
/// wake-up per quiet spell; a load and nothing more while it is armed).
#[inline]
pub(crate) fn arm() {
    let Some(f) = FLUSHER.get() else { return };
    if !f.armed.load(Ordering::Relaxed) && !f.armed.swap(true, Ordering::AcqRel) {
        let _g = f.idle.lock().unwrap_or_else(PoisonError::into_inner);
        f.wake.notify_one();
    }
}

fn run(f: &'static Flusher) {
    let mut every = KEEPALIVE_EVERY;
    loop {
        {
            let g = f.idle.lock().unwrap_or_else(PoisonError::into_inner);
            if !f.armed.load(Ordering::Acquire) {
                let _ = f.wake.wait_timeout(g, every).unwrap_or_else(PoisonError::into_inner);
            }
        }
        if !f.armed.load(Ordering::Acquire) {
            // Woken by the heartbeat clock, not a hold.
            (_, every) = sweep(f);
            continue;
        }
        loop {
            std::thread::sleep(PERIOD);
            if sweep(f).0 {
                continue;
            }
            f.armed.store(false, Ordering::Release);
            // A link that held between the sweep and the store found the
            // flag still set and did not wake us: look once more.
            if !sweep(f).0 {
                break;
            }
            f.armed.store(true, Ordering::Release);
        }
    }
}

/// Writes what is due on every link free to lock, and heartbeats; whether
/// any link still holds something (or was busy), and how soon to look
/// again for heartbeats (a quarter of the shortest interval, at most
/// [`KEEPALIVE_EVERY`]).
fn sweep(f: &Flusher) -> (bool, Duration) {
    let mut held = false;
    let mut every = KEEPALIVE_EVERY;
    let mut links = f.links.lock().unwrap_or_else(PoisonError::into_inner);
    links.retain(|w| w.strong_count() > 0);
    let now = monotonic_ns();
    for w in links.iter() {
        let Some(link) = w.upgrade() else { continue };
        let mut l = match link.try_lock() {
            Ok(l) => l,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                held = true;
                continue;
            }
        };
        // A failure stays in the writer: its application sees it next.
        // It does not read: the application's poll judges the router's
        // silence.
        let _ = crate::conn::keep_alive(&mut l, now, false);
        let interval = l.liveness.interval();
        if !interval.is_zero() {
            every = every.min(interval / 4);
        }
        let (wire, _, writer) = l.parts();
        let _ = writer.flush_due(wire, now);
        held |= writer.held() > 0;
    }
    (held, every)
}
