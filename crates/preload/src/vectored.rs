//! The vectored and batched calls over accelerated sockets, made of the
//! single ones: `readv`/`writev` (a message of iovecs), `recvmmsg`
//! (the first as the socket and flags say, the rest without waiting),
//! `sendmmsg` (each in turn, up to the first refused).

use crate::calls::{recvmsg, sendmsg};
use crate::real::libc as real;
use crate::table::ACCELERATED;
use libc::{c_int, c_uint, iovec, mmsghdr, msghdr, ssize_t};

fn message(iov: *const iovec, n: c_int) -> msghdr {
    // SAFETY: the zeroed C structure is valid.
    let mut m: msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = iov.cast_mut();
    m.msg_iovlen = usize::try_from(n).unwrap_or(0);
    m
}

/// # Safety
/// As libc's `readv`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    if ACCELERATED.has(fd) {
        let mut m = message(iov, n);
        // SAFETY: a message over the program's iovecs.
        return unsafe { recvmsg(fd, &mut m, 0) };
    }
    // SAFETY: the program's arguments, passed on.
    unsafe { (real().readv)(fd, iov, n) }
}

/// # Safety
/// As libc's `writev`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    if ACCELERATED.has(fd) {
        let m = message(iov, n);
        // SAFETY: a message over the program's iovecs.
        return unsafe { sendmsg(fd, &m, 0) };
    }
    // SAFETY: the program's arguments, passed on.
    unsafe { (real().writev)(fd, iov, n) }
}

/// The timeout is not honoured on an accelerated socket (nor, for
/// the kernel, is it more than a check between datagrams).
///
/// # Safety
/// As libc's `recvmmsg`.
#[no_mangle]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    msgs: *mut mmsghdr,
    n: c_uint,
    flags: c_int,
    timeout: *mut libc::timespec,
) -> c_int {
    if !ACCELERATED.has(fd) || msgs.is_null() {
        // SAFETY: the program's arguments, passed on.
        return unsafe { (real().recvmmsg)(fd, msgs, n, flags, timeout) };
    }
    let mut got: c_uint = 0;
    // Without MSG_WAITFORONE a blocking socket waits for all `n`, as the
    // kernel's does; with it, only for the first.
    let wait_for_one = flags & libc::MSG_WAITFORONE != 0;
    let mut flags = flags & !libc::MSG_WAITFORONE;
    while got < n {
        // SAFETY: the program's array of `n` messages.
        let m = unsafe { &mut *msgs.add(got as usize) };
        // SAFETY: one of the program's messages.
        let r = unsafe { recvmsg(fd, &mut m.msg_hdr, flags) };
        if r < 0 {
            return if got > 0 { got as c_int } else { -1 };
        }
        m.msg_len = r as c_uint;
        got += 1;
        if wait_for_one {
            flags |= libc::MSG_DONTWAIT;
        }
    }
    got as c_int
}

/// # Safety
/// As libc's `sendmmsg`.
#[no_mangle]
pub unsafe extern "C" fn sendmmsg(fd: c_int, msgs: *mut mmsghdr, n: c_uint, flags: c_int) -> c_int {
    if !ACCELERATED.has(fd) || msgs.is_null() {
        // SAFETY: the program's arguments, passed on.
        return unsafe { (real().sendmmsg)(fd, msgs, n, flags) };
    }
    let mut sent: c_uint = 0;
    while sent < n {
        // SAFETY: the program's array of `n` messages.
        let m = unsafe { &mut *msgs.add(sent as usize) };
        // SAFETY: one of the program's messages.
        let r = unsafe { sendmsg(fd, &m.msg_hdr, flags) };
        if r < 0 {
            return if sent > 0 { sent as c_int } else { -1 };
        }
        m.msg_len = r as c_uint;
        sent += 1;
    }
    sent as c_int
}
