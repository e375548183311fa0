//! `ppoll`, `select` and `pselect` over lists holding accelerated sockets,
//! made of the readiness loop of `poll` ([`crate::ready::poll_list`]); lists
//! without one go to libc unchanged. A signal mask is set around the wait
//! (not atomically with it, as the kernel's call does).

use crate::ready;
use crate::real::libc as real;
use crate::table::{Inside, ACCELERATED};
use libc::{c_int, fd_set, nfds_t, pollfd, sigset_t, timespec, timeval};

/// Milliseconds of a timeout (negative: none).
fn millis(secs: i64, nanos: i64) -> c_int {
    let ms = secs.saturating_mul(1000).saturating_add((nanos.max(0) + 999_999) / 1_000_000);
    c_int::try_from(ms.max(0)).unwrap_or(c_int::MAX)
}

/// Runs `f` with `mask` as the thread's signal mask (none: as it is).
pub(crate) fn masked<R>(mask: *const sigset_t, f: impl FnOnce() -> R) -> R {
    if mask.is_null() {
        return f();
    }
    // SAFETY: an empty set to receive the old mask.
    let mut old: sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: the program's mask and our out-pointer.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, &mut old) };
    let r = f();
    // SAFETY: the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    r
}

/// # Safety
/// As libc's `ppoll`.
#[no_mangle]
pub unsafe extern "C" fn ppoll(fds: *mut pollfd, n: nfds_t, timeout: *const timespec, mask: *const sigset_t) -> c_int {
    // SAFETY: the program's array of `n` entries.
    let list = unsafe { ready::list(fds, n) };
    if list.iter().any(|p| ACCELERATED.has(p.fd)) {
        if let Some(_in) = Inside::enter() {
            // SAFETY: the program's timeout, if any.
            let ms = unsafe { timespec_ms(timeout) };
            return masked(mask, || ready::poll_list(list, ms));
        }
    }
    // SAFETY: the program's arguments, passed on.
    unsafe { (real().ppoll)(fds, n, timeout, mask) }
}

/// The descriptors below `n` in the three sets, as a poll list; None if
/// none is accelerated.
///
/// # Safety
/// Each set, if not null, is a valid `fd_set`.
unsafe fn as_poll(n: c_int, sets: [*mut fd_set; 3]) -> Option<Vec<pollfd>> {
    let n = n.clamp(0, libc::FD_SETSIZE as c_int);
    let mut list = Vec::new();
    let mut ours = false;
    for fd in 0..n {
        let mut events = 0;
        for (set, ev) in sets.iter().zip([libc::POLLIN, libc::POLLOUT, libc::POLLPRI]) {
            // SAFETY: a valid set (the caller's promise), fd < FD_SETSIZE.
            if !set.is_null() && unsafe { libc::FD_ISSET(fd, *set) } {
                events |= ev;
            }
        }
        if events != 0 {
            ours |= ACCELERATED.has(fd);
            list.push(pollfd { fd, events, revents: 0 });
        }
    }
    ours.then_some(list)
}

/// Writes a poll's result back into the three sets; the count of bits set,
/// or -1 (with errno) for a descriptor that is not open.
///
/// # Safety
/// As [`as_poll`].
unsafe fn from_poll(list: &[pollfd], sets: [*mut fd_set; 3]) -> c_int {
    for set in sets.iter().filter(|s| !s.is_null()) {
        // SAFETY: a valid set.
        unsafe { libc::FD_ZERO(*set) };
    }
    let mut count = 0;
    for p in list {
        if p.revents & libc::POLLNVAL != 0 {
            // SAFETY: this thread's errno.
            unsafe { *libc::__errno_location() = libc::EBADF };
            return -1;
        }
        let ready = [
            p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0,
            p.revents & (libc::POLLOUT | libc::POLLERR) != 0,
            p.revents & libc::POLLPRI != 0,
        ];
        for ((set, asked), yes) in sets.iter().zip([libc::POLLIN, libc::POLLOUT, libc::POLLPRI]).zip(ready) {
            if yes && !set.is_null() && p.events & asked != 0 {
                // SAFETY: a valid set, fd < FD_SETSIZE.
                unsafe { libc::FD_SET(p.fd, *set) };
                count += 1;
            }
        }
    }
    count
}

/// `select` and `pselect` over sets holding an accelerated socket; None:
/// libc's call.
///
/// # Safety
/// As [`as_poll`].
unsafe fn select_ours(n: c_int, sets: [*mut fd_set; 3], ms: c_int, mask: *const sigset_t) -> Option<c_int> {
    if !crate::table::any() {
        return None;
    }
    let _in = Inside::enter()?;
    // SAFETY: the program's sets.
    let mut list = unsafe { as_poll(n, sets) }?;
    let r = masked(mask, || ready::poll_list(&mut list, ms));
    // SAFETY: the program's sets.
    Some(if r < 0 { r } else { unsafe { from_poll(&list, sets) } })
}

/// Milliseconds of a `timespec` (null: none, -1).
///
/// # Safety
/// `t`, if not null, is a valid `timespec`.
unsafe fn timespec_ms(t: *const timespec) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { t.as_ref() }.map_or(-1, |t| millis(t.tv_sec, t.tv_nsec))
}

/// # Safety
/// As libc's `select`.
#[no_mangle]
pub unsafe extern "C" fn select(
    n: c_int,
    read: *mut fd_set,
    write: *mut fd_set,
    except: *mut fd_set,
    timeout: *mut timeval,
) -> c_int {
    // SAFETY: the program's timeout, if any.
    let ms = unsafe { timeout.as_ref() }.map_or(-1, |t| millis(t.tv_sec, t.tv_usec.saturating_mul(1000)));
    // SAFETY: the program's sets.
    if let Some(r) = unsafe { select_ours(n, [read, write, except], ms, std::ptr::null()) } {
        return r;
    }
    // SAFETY: the program's arguments, passed on.
    unsafe { (real().select)(n, read, write, except, timeout) }
}

/// # Safety
/// As libc's `pselect`.
#[no_mangle]
pub unsafe extern "C" fn pselect(
    n: c_int,
    read: *mut fd_set,
    write: *mut fd_set,
    except: *mut fd_set,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the program's timeout, if any.
    let ms = unsafe { timespec_ms(timeout) };
    // SAFETY: the program's sets.
    if let Some(r) = unsafe { select_ours(n, [read, write, except], ms, mask) } {
        return r;
    }
    // SAFETY: the program's arguments, passed on.
    unsafe { (real().pselect)(n, read, write, except, timeout, mask) }
}
