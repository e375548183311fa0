//! The checked entry points a program built with `_FORTIFY_SOURCE` calls
//! instead of `recvfrom`, `recv`, `read`, `poll` and `ppoll` (glibc's own
//! call the internal functions, which this library could not stand in
//! front of): the buffer's size checked as glibc checks it, then the
//! call as this library makes it.

use libc::{c_int, c_void, nfds_t, pollfd, sigset_t, size_t, sockaddr, socklen_t, ssize_t, timespec};

/// A buffer smaller than the call says: glibc's `__chk_fail` stops the
/// program; so does this.
fn overflow() -> ! {
    let msg = b"*** buffer overflow detected ***: terminated\n";
    // SAFETY: a valid buffer and length; a raw system call.
    unsafe { libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len()) };
    std::process::abort()
}

/// # Safety
/// As glibc's `__recvfrom_chk`.
#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    if n > buflen {
        overflow();
    }
    // SAFETY: the program's arguments, the length checked.
    unsafe { crate::calls::recvfrom(fd, buf, n, flags, addr, len) }
}

/// # Safety
/// As glibc's `__recv_chk`.
#[no_mangle]
pub unsafe extern "C" fn __recv_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int) -> ssize_t {
    if n > buflen {
        overflow();
    }
    // SAFETY: the program's arguments, the length checked.
    unsafe { crate::calls::recv(fd, buf, n, flags) }
}

/// # Safety
/// As glibc's `__read_chk`.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t {
    if n > buflen {
        overflow();
    }
    // SAFETY: the program's arguments, the length checked.
    unsafe { crate::calls::read(fd, buf, n) }
}

/// # Safety
/// As glibc's `__poll_chk`.
#[no_mangle]
pub unsafe extern "C" fn __poll_chk(fds: *mut pollfd, n: nfds_t, timeout: c_int, fdslen: size_t) -> c_int {
    if fdslen / std::mem::size_of::<pollfd>() < n as usize {
        overflow();
    }
    // SAFETY: the program's arguments, the length checked.
    unsafe { crate::ready::poll(fds, n, timeout) }
}

/// # Safety
/// As glibc's `__ppoll_chk`.
#[no_mangle]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    timeout: *const timespec,
    mask: *const sigset_t,
    fdslen: size_t,
) -> c_int {
    if fdslen / std::mem::size_of::<pollfd>() < n as usize {
        overflow();
    }
    // SAFETY: the program's arguments, the length checked.
    unsafe { crate::select::ppoll(fds, n, timeout, mask) }
}
