//! Which descriptors are what: the process's UDP sockets not yet decided
//! (candidates), the accelerated ones and their state, the epoll sets that
//! hold accelerated sockets, and whether a thread is inside this library
//! (its own calls to libc pass straight through).

use crate::sock::Sock;
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Descriptors below this are looked at; a socket at or above it stays a
/// kernel socket (the fallback counter says so).
pub(crate) const MAX_FD: usize = 1 << 16;

/// One bit per descriptor.
pub(crate) struct FdSet([AtomicU64; MAX_FD / 64]);

impl FdSet {
    const fn new() -> Self {
        Self([const { AtomicU64::new(0) }; MAX_FD / 64])
    }
    pub(crate) fn has(&self, fd: libc::c_int) -> bool {
        usize::try_from(fd).is_ok_and(|f| f < MAX_FD && self.0[f / 64].load(Ordering::Acquire) & (1 << (f % 64)) != 0)
    }
    pub(crate) fn set(&self, fd: libc::c_int, on: bool) {
        let Ok(f) = usize::try_from(fd) else { return };
        if f >= MAX_FD {
            return;
        }
        if on {
            self.0[f / 64].fetch_or(1 << (f % 64), Ordering::AcqRel);
        } else {
            self.0[f / 64].fetch_and(!(1 << (f % 64)), Ordering::AcqRel);
        }
    }
    pub(crate) fn clear_all(&self) {
        for w in &self.0 {
            w.store(0, Ordering::Release);
        }
    }
}

/// IPv4 UDP sockets made in this process, not yet accelerated or left to
/// the kernel (decided at bind, connect or the first send).
pub(crate) static CANDIDATES: FdSet = FdSet::new();
/// Accelerated sockets (their state in [`SOCKS`]).
pub(crate) static ACCELERATED: FdSet = FdSet::new();
/// In the child of a `fork`: nothing more is accelerated (the AF_XDP
/// socket of the interface is the parent's).
pub(crate) static FORKED: AtomicBool = AtomicBool::new(false);
/// How many descriptors [`ACCELERATED`] holds (0: every call is libc's).
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Whether any descriptor is accelerated.
pub(crate) fn any() -> bool {
    HELD.load(Ordering::Relaxed) > 0
}
/// Epoll sets holding an accelerated socket or a candidate (see
/// [`EPOLLS`]).
pub(crate) static WATCHED_EPOLLS: FdSet = FdSet::new();

/// An accelerated socket shared by every descriptor of it (`dup`).
pub(crate) type Shared = Arc<Mutex<Sock>>;

static SOCKS: Mutex<Option<HashMap<libc::c_int, Shared>>> = Mutex::new(None);

/// What an epoll set holds of candidates and accelerated sockets: the
/// descriptor, the events asked for and the caller's data.
pub(crate) type Watches = Vec<(libc::c_int, u32, u64)>;
static EPOLLS: Mutex<Option<HashMap<libc::c_int, Watches>>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Bumped by every change to [`SOCKS`]: a thread's [`LAST`] is good
/// while it matches.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// A thread's last socket: its descriptor, the generation it was found
/// in, the socket.
type Cached = (libc::c_int, u64, std::sync::Weak<Mutex<Sock>>);

thread_local! {
    /// The socket this thread found last: a program's loop on one socket
    /// takes no lock to find it. Weak: a closed socket goes with its last
    /// descriptor (its port freed), whatever threads looked at it.
    static LAST: std::cell::RefCell<Option<Cached>> = const { std::cell::RefCell::new(None) };
}

/// The accelerated socket behind `fd`.
pub(crate) fn sock(fd: libc::c_int) -> Option<Shared> {
    if !ACCELERATED.has(fd) {
        return None;
    }
    let generation = GENERATION.load(Ordering::Acquire);
    // try_with: a call from a thread-local destructor (the cache may be
    // gone already) takes the lock instead of panicking.
    let hit = LAST
        .try_with(|l| match l.try_borrow().as_deref() {
            Ok(Some((f, g, s))) if *f == fd && *g == generation => s.upgrade(),
            _ => None,
        })
        .ok()
        .flatten();
    if hit.is_some() {
        return hit;
    }
    let s = {
        let socks = lock(&SOCKS);
        // Read under the lock: a change after this is a new generation.
        let generation = GENERATION.load(Ordering::Acquire);
        socks.as_ref()?.get(&fd).cloned().map(|s| (generation, s))
    };
    let (generation, s) = s?;
    let _ = LAST.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            *l = Some((fd, generation, Arc::downgrade(&s)));
        }
    });
    Some(s)
}

/// `fd` is (another descriptor of) `s`.
pub(crate) fn insert(fd: libc::c_int, s: Shared) {
    let mut socks = lock(&SOCKS);
    if socks.get_or_insert_with(HashMap::new).insert(fd, s).is_none() {
        HELD.fetch_add(1, Ordering::Relaxed);
    }
    GENERATION.fetch_add(1, Ordering::AcqRel);
    CANDIDATES.set(fd, false);
    ACCELERATED.set(fd, true);
}

/// `fd` is closed (or replaced): its socket, if this was its last
/// descriptor, is dropped (its flow removed from the program) after the
/// lock is let go.
pub(crate) fn remove(fd: libc::c_int) {
    crate::group::forget(fd);
    CANDIDATES.set(fd, false);
    WATCHED_EPOLLS.set(fd, false);
    let was = ACCELERATED.has(fd);
    ACCELERATED.set(fd, false);
    if was {
        let s = {
            let mut socks = lock(&SOCKS);
            GENERATION.fetch_add(1, Ordering::AcqRel);
            socks.as_mut().and_then(|m| m.remove(&fd))
        };
        if s.is_some() {
            HELD.fetch_sub(1, Ordering::Relaxed);
        }
        drop(s);
    }
    if let Some(m) = lock(&EPOLLS).as_mut() {
        // As an epoll set, and as a socket in any set (a number reused by
        // another socket must not be reported with this one's data).
        m.remove(&fd);
        for w in m.values_mut() {
            w.retain(|(f, _, _)| *f != fd);
        }
    }
}

/// After `fork`, in the child: every socket is the kernel's again (the
/// AF_XDP socket and its flows stay the parent's; nothing of them is
/// dropped here, which would remove the parent's flows).
pub(crate) fn forget_all() {
    FORKED.store(true, Ordering::Relaxed);
    GENERATION.fetch_add(1, Ordering::AcqRel);
    ACCELERATED.clear_all();
    HELD.store(0, Ordering::Relaxed);
    CANDIDATES.clear_all();
    WATCHED_EPOLLS.clear_all();
    if let Ok(mut m) = SOCKS.try_lock() {
        if let Some(all) = m.take() {
            std::mem::forget(all);
        }
    }
}

/// Records what `epfd` watches of `fd` (`events` None: no longer).
pub(crate) fn watch(epfd: libc::c_int, fd: libc::c_int, events: Option<(u32, u64)>) {
    let mut g = lock(&EPOLLS);
    let m = g.get_or_insert_with(HashMap::new);
    let w = m.entry(epfd).or_default();
    w.retain(|(f, _, _)| *f != fd);
    if let Some((ev, data)) = events {
        w.push((fd, ev, data));
    }
    let any = !w.is_empty();
    if !any {
        m.remove(&epfd);
    }
    WATCHED_EPOLLS.set(epfd, any);
}

/// What `epfd` watches of candidates and accelerated sockets.
pub(crate) fn watches(epfd: libc::c_int) -> Watches {
    lock(&EPOLLS).as_ref().and_then(|m| m.get(&epfd).cloned()).unwrap_or_default()
}

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

/// While held, this thread is inside the library: the socket calls it
/// makes (std's, the AF_XDP code's) go straight to libc.
pub(crate) struct Inside(());

impl Inside {
    /// None if this thread is inside already.
    pub(crate) fn enter() -> Option<Self> {
        INSIDE.with(|i| if i.replace(true) { None } else { Some(Self(())) })
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.with(|i| i.set(false));
    }
}
