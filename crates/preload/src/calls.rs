//! The socket calls this library stands in front of. Each passes straight
//! to libc unless its descriptor is an accelerated socket (or a UDP
//! socket being decided), and always when the thread is inside this
//! library already.

use crate::addr;
use crate::config;
use crate::counters::{self, C};
use crate::group;
use crate::real::libc as real;
use crate::sock::{self, lock};
use crate::table::{self, Inside, ACCELERATED, CANDIDATES, WATCHED_EPOLLS};
use libc::{c_int, c_ulong, c_void, msghdr, size_t, sockaddr, socklen_t, ssize_t};
use std::net::{Ipv4Addr, SocketAddrV4};

fn set_errno(e: c_int) {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// -1 with errno `e`, or the value.
fn ret(r: Result<usize, c_int>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// Whether `fd` may need this library (an accelerated socket or one being
/// decided).
pub(crate) fn ours(fd: c_int) -> bool {
    ACCELERATED.has(fd) || CANDIDATES.has(fd)
}

/// The source address the kernel picks towards `to`.
pub(crate) fn source_towards(to: Ipv4Addr) -> Option<Ipv4Addr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect((to, 9)).ok()?;
    match s.local_addr() {
        Ok(std::net::SocketAddr::V4(a)) => Some(*a.ip()),
        _ => None,
    }
}

/// Decides a candidate: accelerated if bound on the interface's address
/// (or on 0.0.0.0: the flow is the interface's address and the port),
/// else left to the kernel. `to`: where its first datagram goes, when it
/// is not bound yet (then bound to 0.0.0.0:0 first, as the kernel would,
/// if that goes by the interface).
fn decide(fd: c_int, to: Option<SocketAddrV4>) {
    decide_now(fd, to);
    if !ours(fd) {
        match addr::local(fd) {
            Some(l) if l.port() != 0 => group::settle_kernel(fd, l.port()),
            _ => group::forget(fd),
        }
    }
}

fn decide_now(fd: c_int, to: Option<SocketAddrV4>) {
    let cfg = config::get();
    let Some((_, iface)) = cfg.iface.clone() else {
        CANDIDATES.set(fd, false);
        return;
    };
    let Some(mut local) = addr::local(fd) else { return };
    if local.port() == 0 {
        let Some(to) = to else { return };
        // To a group: by the interface the socket names, else the route.
        let via = to.ip().is_multicast().then(|| group::multicast_if(fd)).flatten();
        if via.or_else(|| source_towards(*to.ip())) != Some(iface) {
            CANDIDATES.set(fd, false);
            return;
        }
        let any = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
        // The address the kernel's implicit bind would have taken.
        let sin = addr_in(any);
        // SAFETY: a valid sockaddr_in and its length.
        let r = unsafe { (real().bind)(fd, (&sin as *const libc::sockaddr_in).cast(), SIN_LEN) };
        match (r, addr::local(fd)) {
            (0, Some(l)) => local = l,
            _ => return,
        }
    }
    let ip = *local.ip();
    // Bound to a group: its flow is the group's on the interface.
    if ip != iface && !ip.is_unspecified() && !ip.is_multicast() {
        CANDIDATES.set(fd, false);
        return;
    }
    match sock::accelerate(fd, local, cfg) {
        Ok(s) => table::insert(fd, s),
        Err(why) => {
            CANDIDATES.set(fd, false);
            counters::add(C::Fallbacks, 1);
            config::note(&format!("fd {fd} ({local}) stays a kernel socket: {why}"));
        }
    }
}

pub(crate) const SIN_LEN: socklen_t = std::mem::size_of::<libc::sockaddr_in>() as socklen_t;

pub(crate) fn addr_in(a: SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: the zeroed C structure is valid.
    let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sin.sin_family = libc::AF_INET as libc::sa_family_t;
    sin.sin_port = a.port().to_be();
    sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
    sin
}

/// # Safety
/// As libc's `socket`.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: the program's arguments, passed on.
    let fd = unsafe { (real().socket)(domain, ty, protocol) };
    let udp =
        domain == libc::AF_INET && ty & 0xf == libc::SOCK_DGRAM && (protocol == 0 || protocol == libc::IPPROTO_UDP);
    if fd >= 0 && udp && !table::FORKED.load(std::sync::atomic::Ordering::Relaxed) {
        if let Some(_in) = Inside::enter() {
            if config::get().iface.is_none() {
                // Nothing to accelerate.
            } else if fd as usize >= table::MAX_FD {
                counters::add(C::Fallbacks, 1);
                config::note(&format!(
                    "fd {fd} stays a kernel socket: descriptors of {} or more are not accelerated",
                    table::MAX_FD
                ));
            } else {
                CANDIDATES.set(fd, true);
            }
        }
    }
    fd
}

/// # Safety
/// As libc's `bind`.
#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the program's arguments, passed on.
    let r = unsafe { (real().bind)(fd, addr, len) };
    if r == 0 && CANDIDATES.has(fd) {
        if let Some(_in) = Inside::enter() {
            decide(fd, None);
        }
    }
    r
}

/// # Safety
/// As libc's `connect`.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the program's arguments, passed on.
    let r = unsafe { (real().connect)(fd, addr, len) };
    if r != 0 || !ours(fd) {
        return r;
    }
    let Some(_in) = Inside::enter() else { return r };
    // SAFETY: the program's address and length.
    let to = unsafe { addr::read(addr, len) };
    if CANDIDATES.has(fd) {
        decide(fd, to);
    }
    if let Some(s) = table::sock(fd) {
        // AF_UNSPEC (or another family): disconnected.
        lock(&s).peer = to;
    }
    r
}

/// Send flags the ring path has (MSG_CONFIRM: the neighbour is known
/// anyway); others (MSG_MORE's corking) are the kernel's call.
const SEND_FLAGS: c_int = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL | libc::MSG_CONFIRM;

/// Sends for an accelerated socket; None: the kernel's call.
fn send_ours(fd: c_int, data: &[u8], flags: c_int, to: Option<SocketAddrV4>) -> Option<ssize_t> {
    if !ours(fd) {
        return None;
    }
    let _in = Inside::enter()?;
    if CANDIDATES.has(fd) {
        decide(fd, to);
    }
    let s = table::sock(fd)?;
    let r = lock(&s).send(to, data, flags & libc::MSG_DONTWAIT != 0);
    Some(ret(r))
}

/// # Safety
/// As libc's `sendto`.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> ssize_t {
    if ours(fd) && !buf.is_null() {
        // SAFETY: the program's address and length.
        let to = unsafe { addr::read(addr, len) };
        // Another family, or flags the ring path does not have: the kernel's.
        let plain = flags & !SEND_FLAGS == 0 && (addr.is_null() || to.is_some());
        if plain {
            // SAFETY: the program's buffer of `n` bytes.
            let data = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), n) };
            if let Some(r) = send_ours(fd, data, flags, to) {
                return r;
            }
        }
    }
    // SAFETY: the program's arguments, passed on.
    unsafe { (real().sendto)(fd, buf, n, flags, addr, len) }
}

/// # Safety
/// As libc's `send`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: as sendto with no address.
    unsafe { sendto(fd, buf, n, flags, std::ptr::null(), 0) }
}

/// # Safety
/// As libc's `write`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    if ACCELERATED.has(fd) {
        // SAFETY: as sendto with no address and no flags.
        return unsafe { sendto(fd, buf, n, 0, std::ptr::null(), 0) };
    }
    // SAFETY: the program's arguments, passed on.
    unsafe { (real().write)(fd, buf, n) }
}

/// # Safety
/// As libc's `sendmsg`.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    if ours(fd) && !msg.is_null() {
        // SAFETY: the program's message header.
        let m = unsafe { &*msg };
        if m.msg_controllen == 0 && flags & !SEND_FLAGS == 0 {
            // SAFETY: the program's name and its length.
            let to = unsafe { addr::read(m.msg_name.cast(), m.msg_namelen) };
            if m.msg_name.is_null() || to.is_some() {
                // SAFETY: the program's iovecs.
                let data = unsafe { gather(m) };
                if let Some(r) = send_ours(fd, &data, flags, to) {
                    return r;
                }
            }
        }
    }
    // SAFETY: the program's arguments, passed on.
    unsafe { (real().sendmsg)(fd, msg, flags) }
}

/// The bytes of a message's iovecs, in order.
///
/// # Safety
/// `m`'s iovecs are valid.
unsafe fn gather(m: &msghdr) -> Vec<u8> {
    let mut out = Vec::new();
    if m.msg_iov.is_null() {
        return out;
    }
    for i in 0..m.msg_iovlen {
        // SAFETY: the caller's promise: msg_iovlen valid iovecs.
        let v = unsafe { &*m.msg_iov.add(i) };
        if !v.iov_base.is_null() {
            // SAFETY: an iovec's base and length.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len) });
        }
    }
    out
}

/// Receives for an accelerated socket; None: the kernel's call.
fn recv_ours(fd: c_int, flags: c_int, take: impl FnOnce(&[u8], SocketAddrV4) -> usize) -> Option<ssize_t> {
    // No meaning for a datagram read from the ring: MSG_NOSIGNAL,
    // MSG_WAITALL (one datagram is whole), MSG_CMSG_CLOEXEC (no ancillary
    // data). Anything else (MSG_ERRQUEUE, MSG_OOB): the kernel's call.
    let known = libc::MSG_DONTWAIT
        | libc::MSG_PEEK
        | libc::MSG_TRUNC
        | libc::MSG_NOSIGNAL
        | libc::MSG_WAITALL
        | libc::MSG_CMSG_CLOEXEC;
    if !ACCELERATED.has(fd) || flags & !known != 0 {
        return None;
    }
    let _in = Inside::enter()?;
    let s = table::sock(fd)?;
    Some(ret(sock::recv(&s, flags, take)))
}

/// # Safety
/// As libc's `recvfrom`.
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    let took = recv_ours(fd, flags, |d, from| {
        let k = d.len().min(n);
        if k > 0 {
            // SAFETY: the program's buffer of `n` bytes (k <= n).
            unsafe { std::ptr::copy_nonoverlapping(d.as_ptr(), buf.cast::<u8>(), k) };
        }
        // SAFETY: the program's address buffer and length.
        unsafe { addr::write(from, addr, len) };
        if flags & libc::MSG_TRUNC != 0 {
            d.len()
        } else {
            k
        }
    });
    if let Some(r) = took {
        return r;
    }
    // SAFETY: the program's arguments, passed on.
    unsafe { (real().recvfrom)(fd, buf, n, flags, addr, len) }
}

/// # Safety
/// As libc's `recv`.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: as recvfrom with no address.
    unsafe { recvfrom(fd, buf, n, flags, std::ptr::null_mut(), std::ptr::null_mut()) }
}

/// # Safety
/// As libc's `read`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    if ACCELERATED.has(fd) {
        // SAFETY: as recvfrom with no address and no flags.
        return unsafe { recvfrom(fd, buf, n, 0, std::ptr::null_mut(), std::ptr::null_mut()) };
    }
    // SAFETY: the program's arguments, passed on.
    unsafe { (real().read)(fd, buf, n) }
}

/// # Safety
/// As libc's `recvmsg`.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the program's header, if not null.
    let bad = msg.is_null() || unsafe { (*msg).msg_iov.is_null() && (*msg).msg_iovlen > 0 };
    if !bad {
        let took = recv_ours(fd, flags, |d, from| {
            // SAFETY: the program's message header, its iovecs and name.
            let m = unsafe { &mut *msg };
            let mut at = 0;
            for i in 0..m.msg_iovlen {
                // SAFETY: msg_iovlen valid iovecs.
                let v = unsafe { &*m.msg_iov.add(i) };
                let k = if v.iov_base.is_null() { 0 } else { (d.len() - at).min(v.iov_len) };
                if k > 0 {
                    // SAFETY: an iovec's base with room for iov_len bytes.
                    unsafe { std::ptr::copy_nonoverlapping(d[at..].as_ptr(), v.iov_base.cast::<u8>(), k) };
                }
                at += k;
            }
            let mut namelen = m.msg_namelen;
            // SAFETY: the name buffer and its length.
            unsafe { addr::write(from, m.msg_name.cast(), &mut namelen) };
            m.msg_namelen = namelen;
            // No ancillary data on this path (IP_PKTINFO, timestamps).
            m.msg_controllen = 0;
            m.msg_flags = if at < d.len() { libc::MSG_TRUNC } else { 0 };
            if flags & libc::MSG_TRUNC != 0 {
                d.len()
            } else {
                at
            }
        });
        if let Some(r) = took {
            return r;
        }
    }
    // SAFETY: the program's arguments, passed on.
    unsafe { (real().recvmsg)(fd, msg, flags) }
}

/// # Safety
/// As libc's `close`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if ours(fd) || WATCHED_EPOLLS.has(fd) {
        if let Some(_in) = Inside::enter() {
            table::remove(fd);
        }
    }
    // SAFETY: the program's argument, passed on.
    unsafe { (real().close)(fd) }
}

/// `new` is a copy of `old`: the same socket, or the same candidate.
fn copied(old: c_int, new: c_int) {
    if new < 0 || !ours(old) {
        return;
    }
    let Some(_in) = Inside::enter() else { return };
    if let Some(s) = table::sock(old) {
        table::insert(new, s);
    } else if CANDIDATES.has(old) {
        CANDIDATES.set(new, true);
        group::copy_waiting(old, new);
    }
}

/// `fd` was replaced by `dup2`/`dup3` (what it was is gone).
fn replaced(fd: c_int) {
    if ours(fd) || WATCHED_EPOLLS.has(fd) {
        if let Some(_in) = Inside::enter() {
            table::remove(fd);
        }
    }
}

/// # Safety
/// As libc's `dup`.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: the program's argument, passed on.
    let r = unsafe { (real().dup)(fd) };
    copied(fd, r);
    r
}

/// # Safety
/// As libc's `dup2`.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: the program's arguments, passed on.
    let r = unsafe { (real().dup2)(old, new) };
    if r >= 0 && old != new {
        replaced(new);
        copied(old, r);
    }
    r
}

/// # Safety
/// As libc's `dup3`.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: the program's arguments, passed on.
    let r = unsafe { (real().dup3)(old, new, flags) };
    if r >= 0 {
        replaced(new);
        copied(old, r);
    }
    r
}

/// libc's `fcntl` is variadic; its third argument, when there is one, is
/// an integer or a pointer, passed in a register as a fixed one would be
/// (x86-64 and aarch64 Linux).
///
/// # Safety
/// As libc's `fcntl`.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: the program's arguments, passed on.
    let r = unsafe { (real().fcntl)(fd, cmd, arg) };
    if r >= 0 && ours(fd) {
        match cmd {
            libc::F_SETFL => {
                if let Some(s) = table::sock(fd) {
                    lock(&s).nonblocking = arg as c_int & libc::O_NONBLOCK != 0;
                }
            }
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => copied(fd, r),
            _ => {}
        }
    }
    r
}

/// # Safety
/// As libc's `fcntl64`.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    // SAFETY: the same call.
    unsafe { fcntl(fd, cmd, arg) }
}

/// `FIONBIO` sets the blocking mode; `FIONREAD` says the next datagram's
/// length, as the kernel does for UDP.
///
/// # Safety
/// As libc's `ioctl`.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: c_ulong) -> c_int {
    if ACCELERATED.has(fd) && request == libc::FIONREAD && arg != 0 {
        if let Some(_in) = Inside::enter() {
            if let Some(s) = table::sock(fd) {
                let next = lock(&s).next_len();
                // SAFETY: FIONREAD's argument is an int to write.
                unsafe { *(arg as *mut c_int) = c_int::try_from(next).unwrap_or(c_int::MAX) };
                return 0;
            }
        }
    }
    // SAFETY: the program's arguments, passed on.
    let r = unsafe { (real().ioctl)(fd, request, arg) };
    if r == 0 && request == libc::FIONBIO && arg != 0 && ACCELERATED.has(fd) {
        if let Some(s) = table::sock(fd) {
            // SAFETY: FIONBIO's argument is an int to read.
            lock(&s).nonblocking = unsafe { *(arg as *const c_int) } != 0;
        }
    }
    r
}

/// `SO_RCVTIMEO` bounds a blocking receive.
///
/// # Safety
/// As libc's `setsockopt`.
#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    value: *const c_void,
    len: socklen_t,
) -> c_int {
    // SAFETY: the program's arguments, passed on.
    let r = unsafe { (real().setsockopt)(fd, level, name, value, len) };
    if r == 0 && level == libc::IPPROTO_IP && (ours(fd) || name == libc::IP_ADD_MEMBERSHIP) {
        if let Some(_in) = Inside::enter() {
            group::setsockopt(fd, name, value, len);
        }
    }
    let tv = std::mem::size_of::<libc::timeval>();
    if r == 0 && level == libc::SOL_SOCKET && name == libc::SO_RCVTIMEO && ACCELERATED.has(fd) && len as usize >= tv {
        // SAFETY: a timeval of the program's (length checked), read unaligned.
        let t = unsafe { std::ptr::read_unaligned(value.cast::<libc::timeval>()) };
        let d = std::time::Duration::from_secs(t.tv_sec.max(0) as u64)
            + std::time::Duration::from_micros(t.tv_usec.max(0) as u64);
        if let Some(s) = table::sock(fd) {
            lock(&s).rcvtimeo = (!d.is_zero()).then_some(d);
        }
    }
    r
}
