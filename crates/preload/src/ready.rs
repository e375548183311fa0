//! Readiness calls over accelerated and kernel descriptors together: the
//! accelerated sockets' rings and queues are looked at, the kernel's
//! descriptors asked without waiting, for up to the spin time; then the
//! call blocks on the kernel's descriptors and the AF_XDP sockets'
//! together, and looks again.

use crate::config;
use crate::real::libc as real;
use crate::sock::{lock, WAIT_SLICE};
use crate::table::{self, Inside, Shared, ACCELERATED, WATCHED_EPOLLS};
use libc::{c_int, epoll_event, nfds_t, pollfd};
use std::time::{Duration, Instant};

thread_local! {
    /// Whose turn it is when `epoll_wait` has room for one event.
    static KERNEL_FIRST: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How long is left of `timeout` ms (negative: for ever) after `waited`;
/// None: it is over.
fn left(timeout: c_int, waited: Duration) -> Option<Duration> {
    if timeout < 0 {
        return Some(Duration::MAX);
    }
    Duration::from_millis(timeout as u64).checked_sub(waited).filter(|d| !d.is_zero())
}

fn ms(d: Duration) -> c_int {
    c_int::try_from(d.min(WAIT_SLICE).as_millis().max(1)).unwrap_or(1)
}

/// Blocks on `extra` (the program's descriptors, as it gave them) and the
/// rings of `socks` for up to `d`; -1 with errno on an error (EINTR).
fn block(extra: &[pollfd], socks: &[Shared], d: Duration) -> c_int {
    let mut all: Vec<pollfd> = extra.iter().map(|p| pollfd { revents: 0, ..*p }).collect();
    for s in socks {
        let [ring, _] = lock(s).wait_fds();
        if !all.iter().any(|p| p.fd == ring) {
            all.push(pollfd { fd: ring, events: libc::POLLIN, revents: 0 });
        }
    }
    // SAFETY: a valid array of its length.
    let r = unsafe { (real().poll)(all.as_mut_ptr(), all.len() as libc::nfds_t, ms(d)) };
    r.min(0)
}

/// The program's poll list.
///
/// # Safety
/// `fds`, if not null, points to `n` entries the caller may change.
pub(crate) unsafe fn list<'a>(fds: *mut pollfd, n: libc::nfds_t) -> &'a mut [pollfd] {
    if fds.is_null() || n == 0 {
        return &mut [];
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts_mut(fds, n as usize) }
}

/// `poll` over a list holding accelerated sockets.
pub(crate) fn poll_list(list: &mut [pollfd], timeout: c_int) -> c_int {
    let socks: Vec<(usize, Shared)> =
        list.iter().enumerate().filter_map(|(i, p)| Some((i, table::sock(p.fd)?))).collect();
    let spin = config::get().spin;
    let start = Instant::now();
    loop {
        // SAFETY: the program's array, its length.
        let r = unsafe { (real().poll)(list.as_mut_ptr(), list.len() as libc::nfds_t, 0) };
        if r < 0 {
            return r;
        }
        for (i, s) in &socks {
            let p = &mut list[*i];
            let mut g = lock(s);
            if p.revents & libc::POLLIN != 0 {
                // The kernel socket under it has datagrams: read them too.
                g.kernel_readable();
            }
            let ours = p.events & libc::POLLIN != 0 && g.readable();
            p.revents = (p.revents & !libc::POLLIN) | if ours { libc::POLLIN } else { 0 };
        }
        let ready = list.iter().filter(|p| p.revents != 0).count() as c_int;
        if ready > 0 || timeout == 0 {
            return ready;
        }
        let waited = start.elapsed();
        let Some(rest) = left(timeout, waited) else { return 0 };
        if waited < spin {
            std::hint::spin_loop();
            continue;
        }
        let all: Vec<Shared> = socks.iter().map(|(_, s)| s.clone()).collect();
        if block(list, &all, rest) < 0 {
            return -1;
        }
    }
}

/// `epoll_wait` on a set holding accelerated sockets.
pub(crate) fn epoll_events(epfd: c_int, out: &mut [epoll_event], timeout: c_int) -> c_int {
    let spin = config::get().spin;
    let start = Instant::now();
    loop {
        let watched: Vec<(c_int, u32, u64, Shared)> = table::watches(epfd)
            .into_iter()
            .filter_map(|(fd, ev, data)| Some((fd, ev, data, table::sock(fd)?)))
            .collect();
        // Room is left for the kernel's events, so that its descriptors are
        // not starved by a busy ring (with room for one event, the two
        // take turns).
        let limit = match out.len() {
            1 => usize::from(KERNEL_FIRST.with(|k| !k.replace(!k.get()))),
            m => m - 1,
        };
        let mut n = 0;
        for (_, ev, data, s) in &watched {
            if n < limit && ev & libc::EPOLLIN as u32 != 0 && lock(s).readable() {
                out[n] = epoll_event { events: libc::EPOLLIN as u32, u64: *data };
                n += 1;
            }
        }
        // The kernel's, without waiting (its events for accelerated
        // sockets merged into those above, or dropped).
        let room = (out.len() - n) as c_int;
        let k = if room > 0 {
            // SAFETY: `room` events of the program's array from `n`.
            unsafe { (real().epoll_wait)(epfd, out[n..].as_mut_ptr(), room, 0) }
        } else {
            0
        };
        if k < 0 {
            return k;
        }
        let mut kept = n;
        for i in n..n + k as usize {
            let e = out[i];
            let (events, data) = (e.events, e.u64);
            let ours = watched.iter().find(|w| w.2 == data);
            let events = match ours {
                None => events,
                Some((_, _, _, s)) => {
                    if events & libc::EPOLLIN as u32 != 0 {
                        lock(s).kernel_readable();
                    }
                    let rest = events & !(libc::EPOLLIN as u32);
                    if let Some(j) = (0..n).find(|&j| out[j].u64 == data) {
                        out[j].events |= rest;
                        0
                    } else if lock(s).readable() {
                        rest | libc::EPOLLIN as u32
                    } else {
                        rest
                    }
                }
            };
            if events != 0 {
                out[kept] = epoll_event { events, u64: data };
                kept += 1;
            }
        }
        if kept > 0 || timeout == 0 {
            return kept as c_int;
        }
        let waited = start.elapsed();
        let Some(rest) = left(timeout, waited) else { return 0 };
        if waited < spin {
            std::hint::spin_loop();
            continue;
        }
        let set = [pollfd { fd: epfd, events: libc::POLLIN, revents: 0 }];
        let socks: Vec<Shared> = watched.into_iter().map(|w| w.3).collect();
        if block(&set, &socks, rest) < 0 {
            return -1;
        }
    }
}

/// # Safety
/// As libc's `poll`.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the program's array of `n` entries.
    let list = unsafe { list(fds, n) };
    if list.iter().any(|p| ACCELERATED.has(p.fd)) {
        if let Some(_in) = Inside::enter() {
            return poll_list(list, timeout);
        }
    }
    // SAFETY: the program's arguments, passed on.
    unsafe { (real().poll)(fds, n, timeout) }
}

/// # Safety
/// As libc's `epoll_ctl`.
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut epoll_event) -> c_int {
    // SAFETY: the program's arguments, passed on.
    let r = unsafe { (real().epoll_ctl)(epfd, op, fd, event) };
    if r == 0 && crate::calls::ours(fd) {
        if let Some(_in) = Inside::enter() {
            let watch = match op {
                libc::EPOLL_CTL_DEL => None,
                // SAFETY: ADD and MOD take the program's event (the kernel read it).
                _ if !event.is_null() => Some(unsafe { ((*event).events, (*event).u64) }),
                _ => None,
            };
            table::watch(epfd, fd, watch);
        }
    }
    r
}

/// # Safety
/// As libc's `epoll_wait`.
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(epfd: c_int, events: *mut epoll_event, max: c_int, timeout: c_int) -> c_int {
    if WATCHED_EPOLLS.has(epfd) && max > 0 && !events.is_null() {
        if let Some(_in) = Inside::enter() {
            // SAFETY: the program's array of `max` events.
            let out = unsafe { std::slice::from_raw_parts_mut(events, max as usize) };
            return epoll_events(epfd, out, timeout);
        }
    }
    // SAFETY: the program's arguments, passed on.
    unsafe { (real().epoll_wait)(epfd, events, max, timeout) }
}

/// With a signal mask: set around the wait when an accelerated socket is
/// watched (not atomically with it, as the kernel's call does).
///
/// # Safety
/// As libc's `epoll_pwait`.
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    events: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const libc::sigset_t,
) -> c_int {
    if WATCHED_EPOLLS.has(epfd) && max > 0 && !events.is_null() {
        if let Some(_in) = Inside::enter() {
            // SAFETY: the program's array of `max` events.
            let out = unsafe { std::slice::from_raw_parts_mut(events, max as usize) };
            return crate::select::masked(mask, || epoll_events(epfd, out, timeout));
        }
    }
    // SAFETY: the program's arguments, passed on.
    unsafe { (real().epoll_pwait)(epfd, events, max, timeout, mask) }
}
