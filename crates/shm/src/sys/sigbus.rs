//! SIGBUS on a mapped file: a message naming the file instead of a core
//! dump, or, for a file another process owns, the mapping replaced and the
//! owner's session ended.
//!
//! Touching a page of a shared file mapping past the file's end raises
//! SIGBUS. That happens when another process truncates or replaces a log or
//! counters file this process has mapped (an operator's `truncate`, a full
//! filesystem, a client that shrinks its own log under the router).
//!
//! * A mapping made inside [`untrusted`] (the router's mappings of its
//!   clients' logs) survives it, as a Wayland compositor survives a client
//!   truncating its `wl_shm` pool: the handler maps zero pages over the
//!   whole mapping (`MAP_FIXED`, private and anonymous), marks it broken
//!   and returns, so the faulting access runs again on a zero page. Its
//!   owner sees [`is_broken`] and ends that one session; the process and
//!   its other clients go on.
//! * Any other registered mapping cannot be gone on from, so, as Aeron
//!   and Chronicle Queue do, the handler writes `tickwire: FILE was
//!   truncated ...` to stderr and exits with status [`EXIT_CODE`].
//! * A fault outside every registered mapping goes to the handler that was
//!   installed before ours (the default: the process dies with SIGBUS as
//!   it would have).
//!
//! The registry is a fixed array of atomics, so the handler allocates
//! nothing and takes no lock (only async-signal-safe calls: `mmap`,
//! `write`, `_exit`, `sigaction`).

use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Once;

/// Exit status of a process whose mapped file was truncated under it.
pub const EXIT_CODE: i32 = 74; // EX_IOERR

const SLOTS: usize = 256;
const PATH_BYTES: usize = 240;
const FREE: u8 = 0;
const WRITING: u8 = 1;
const LIVE: u8 = 2;

struct Slot {
    state: AtomicU8,
    /// Made inside [`untrusted`]: a fault replaces it with zero pages.
    recover: AtomicU8,
    /// A fault replaced it ([`is_broken`]).
    broken: AtomicU8,
    start: AtomicUsize,
    len: AtomicUsize,
    path_len: AtomicUsize,
    path: [AtomicU8; PATH_BYTES],
}

impl Slot {
    const fn new() -> Self {
        Self {
            state: AtomicU8::new(FREE),
            recover: AtomicU8::new(0),
            broken: AtomicU8::new(0),
            start: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            path_len: AtomicUsize::new(0),
            path: [const { AtomicU8::new(0) }; PATH_BYTES],
        }
    }
}

static REGISTRY: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];
static INSTALL: Once = Once::new();
/// The action installed before ours: handler address and `sa_flags`.
static PREVIOUS: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PREVIOUS_FLAGS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Inside [`untrusted`] on this thread.
    static UNTRUSTED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with every file mapping it makes on this thread surviving the
/// file's truncation (`is_broken` then says so): for the files of other
/// processes, whose shrinking must end their session, not this process.
pub fn untrusted<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            UNTRUSTED.with(|u| u.set(self.0));
        }
    }
    let _restore = Restore(UNTRUSTED.with(|u| u.replace(true)));
    f()
}

/// Whether a fault replaced the mapping in slot `i` with zero pages (its
/// file was truncated or replaced under us).
pub(crate) fn is_broken(i: usize) -> bool {
    REGISTRY[i].broken.load(Ordering::Acquire) != 0
}

/// Registers `[start, start + len)` as a mapping of `path`; returns the slot
/// to pass to [`unregister`] (`None` when all slots are taken: a fault there
/// then kills the process with a plain SIGBUS).
pub(crate) fn register(start: usize, len: usize, path: &Path) -> Option<usize> {
    INSTALL.call_once(install);
    let i = REGISTRY
        .iter()
        .position(|s| s.state.compare_exchange(FREE, WRITING, Ordering::Acquire, Ordering::Relaxed).is_ok())?;
    let s = &REGISTRY[i];
    let bytes = path.as_os_str().as_encoded_bytes();
    let n = bytes.len().min(PATH_BYTES);
    for (dst, &b) in s.path.iter().zip(&bytes[bytes.len() - n..]) {
        dst.store(b, Ordering::Relaxed);
    }
    s.path_len.store(n, Ordering::Relaxed);
    s.recover.store(u8::from(UNTRUSTED.with(Cell::get)), Ordering::Relaxed);
    s.broken.store(0, Ordering::Relaxed);
    s.start.store(start, Ordering::Relaxed);
    s.len.store(len, Ordering::Relaxed);
    s.state.store(LIVE, Ordering::Release);
    Some(i)
}

/// Forgets slot `i` (the mapping is being unmapped).
pub(crate) fn unregister(i: usize) {
    REGISTRY[i].state.store(FREE, Ordering::Release);
}

fn install() {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value;
    // the handler has the SA_SIGINFO signature; `old` is a valid out-pointer.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &act, &mut old) == 0 {
            PREVIOUS.store(old.sa_sigaction, Ordering::Relaxed);
            PREVIOUS_FLAGS.store(old.sa_flags as usize, Ordering::Relaxed);
        }
    }
}

/// A message built on the stack (no allocation in a signal handler).
struct Line {
    buf: [u8; 512],
    n: usize,
}

impl Line {
    fn put(&mut self, b: &[u8]) {
        let k = b.len().min(self.buf.len() - self.n);
        self.buf[self.n..self.n + k].copy_from_slice(&b[..k]);
        self.n += k;
    }
    fn num(&mut self, mut v: usize) {
        let mut d = [0u8; 20];
        let mut i = d.len();
        loop {
            i -= 1;
            d[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.put(&d[i..]);
    }
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for s in &REGISTRY {
        if s.state.load(Ordering::Acquire) != LIVE {
            continue;
        }
        let (start, len) = (s.start.load(Ordering::Relaxed), s.len.load(Ordering::Relaxed));
        if addr < start || addr >= start + len {
            continue;
        }
        if s.recover.load(Ordering::Relaxed) != 0 && s.broken.load(Ordering::Relaxed) == 0 {
            // SAFETY: [start, start + len) is a live mapping of ours (the
            // slot is LIVE until its owner unmaps it, and unregisters
            // first); MAP_FIXED replaces its pages with private zero pages
            // at the same addresses, which the owner unmaps as before.
            // mmap is a plain system call, safe in a signal handler.
            let p = unsafe {
                libc::mmap(
                    start as *mut libc::c_void,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                    -1,
                    0,
                )
            };
            if p as usize == start {
                s.broken.store(1, Ordering::Release);
                // The faulting access runs again, on a zero page.
                return;
            }
        }
        let mut line = Line { buf: [0; 512], n: 0 };
        line.put(b"tickwire: ");
        for b in &s.path[..s.path_len.load(Ordering::Relaxed)] {
            line.put(&[b.load(Ordering::Relaxed)]);
        }
        line.put(b" was truncated or replaced while this process had it mapped (SIGBUS at byte ");
        line.num(addr - start);
        line.put(b" of ");
        line.num(len);
        line.put(b"); exiting\n");
        // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffer is
        // valid for `line.n` bytes.
        unsafe {
            libc::write(2, line.buf.as_ptr().cast(), line.n);
            libc::_exit(EXIT_CODE);
        }
    }
    // Not one of ours: hand the fault to whoever handled SIGBUS before us.
    let prev = PREVIOUS.load(Ordering::Relaxed);
    if prev == libc::SIG_DFL || prev == libc::SIG_IGN {
        // SAFETY: restoring the default action; returning re-executes the
        // faulting access, which now kills the process as SIGBUS would have.
        unsafe {
            libc::signal(libc::SIGBUS, libc::SIG_DFL);
        }
    } else if PREVIOUS_FLAGS.load(Ordering::Relaxed) & libc::SA_SIGINFO as usize != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it
        // has this signature; it gets the arguments the kernel gave us.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(prev) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a plain handler takes the signal number only.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev) };
        f(sig);
    }
}
