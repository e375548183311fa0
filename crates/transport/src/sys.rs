//! The system calls the UDP transport needs beyond what `socket2` wraps:
//! `sendmmsg`, `recvmmsg`, `poll`, and `SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`.
//! This is the only `unsafe` in the crate.

use crate::RecvBatch;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::RawFd;
use std::time::Duration;

/// Datagrams per `sendmmsg`/`recvmmsg` call.
pub const MAX_BATCH: usize = 64;

// Empty values of the C structs, written as constants so that building a
// batch costs a copy of what is used, not a `memset` of 64 entries per call
// (the spin loop calls this every turn).
const EMPTY_IOVEC: libc::iovec = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 };
// SAFETY: all-zero bytes are a valid (empty) mmsghdr: null pointers, zero
// lengths and flags.
const EMPTY_MMSGHDR: libc::mmsghdr = unsafe { std::mem::zeroed() };
// SAFETY: all-zero bytes are a valid sockaddr_in.
const EMPTY_SOCKADDR: libc::sockaddr_in = unsafe { std::mem::zeroed() };

/// One datagram with `sendto` (cheaper than a one-entry `sendmmsg`).
fn sendto(fd: RawFd, addr: &libc::sockaddr_in, d: &[u8]) -> io::Result<usize> {
    // SAFETY: `d` is a live slice the kernel only reads; `addr` is a valid
    // sockaddr_in whose size is passed.
    let r = unsafe {
        libc::sendto(
            fd,
            d.as_ptr().cast(),
            d.len(),
            0,
            std::ptr::from_ref(addr).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock { Ok(0) } else { Err(e) };
    }
    Ok(1)
}

/// Receives one datagram into the batch's first slot without blocking
/// (`recvfrom`: on an empty socket, cheaper than `recvmmsg`, which copies
/// its header array in first); returns 1, or 0 if none is waiting.
pub fn recv_one(fd: RawFd, batch: &mut RecvBatch) -> io::Result<usize> {
    batch.clear();
    if batch.capacity() == 0 {
        return Ok(0);
    }
    let mut name = EMPTY_SOCKADDR;
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let slot = batch.slot;
    // SAFETY: the first `slot` bytes of `batch.data` are a live, exclusive
    // buffer (capacity >= 1); `name` and `len` outlive the call.
    let r = unsafe {
        libc::recvfrom(
            fd,
            batch.data.as_mut_ptr().cast(),
            slot,
            libc::MSG_DONTWAIT,
            std::ptr::addr_of_mut!(name).cast(),
            &mut len,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        };
    }
    batch.lens[0] = (r as usize).min(slot);
    batch.addrs[0] = SocketAddrV4::new(Ipv4Addr::from(u32::from_be(name.sin_addr.s_addr)), u16::from_be(name.sin_port));
    batch.count = 1;
    Ok(1)
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
        sin_zero: [0; 8],
    }
}

/// Sends up to [`MAX_BATCH`] datagrams to `to` in one call; returns how many
/// were sent (0 if the socket would block).
pub fn sendmmsg(fd: RawFd, to: SocketAddrV4, datagrams: &[&[u8]]) -> io::Result<usize> {
    let n = datagrams.len().min(MAX_BATCH);
    if n == 0 {
        return Ok(0);
    }
    let mut addr = sockaddr(to);
    if n == 1 {
        return sendto(fd, &addr, datagrams[0]);
    }
    let mut iov = [EMPTY_IOVEC; MAX_BATCH];
    let mut msgs = [EMPTY_MMSGHDR; MAX_BATCH];
    for i in 0..n {
        iov[i] = libc::iovec { iov_base: datagrams[i].as_ptr() as *mut libc::c_void, iov_len: datagrams[i].len() };
        msgs[i].msg_hdr.msg_name = std::ptr::addr_of_mut!(addr).cast();
        msgs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        msgs[i].msg_hdr.msg_iov = std::ptr::addr_of_mut!(iov[i]);
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `msgs[..n]` point at `iov` entries and `addr`, all alive for
    // the call; each iovec covers a live borrowed slice that the kernel only
    // reads.
    let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), n as libc::c_uint, 0) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock { Ok(0) } else { Err(e) };
    }
    Ok(r as usize)
}

/// Receives up to the batch's capacity (at most [`MAX_BATCH`]) without
/// blocking; returns how many (0 if none is waiting).
pub fn recvmmsg(fd: RawFd, batch: &mut RecvBatch) -> io::Result<usize> {
    batch.clear();
    let n = batch.capacity().min(MAX_BATCH);
    let mut iov = [EMPTY_IOVEC; MAX_BATCH];
    let mut msgs = [EMPTY_MMSGHDR; MAX_BATCH];
    let mut names = [EMPTY_SOCKADDR; MAX_BATCH];
    let slot = batch.slot;
    let base = batch.data.as_mut_ptr();
    for i in 0..n {
        // SAFETY: `i * slot + slot <= data.len()` because `data` holds
        // `capacity()` slots of `slot` bytes and `i < capacity()`.
        let p = unsafe { base.add(i * slot) };
        iov[i] = libc::iovec { iov_base: p.cast(), iov_len: slot };
        msgs[i].msg_hdr.msg_name = std::ptr::addr_of_mut!(names[i]).cast();
        msgs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        msgs[i].msg_hdr.msg_iov = std::ptr::addr_of_mut!(iov[i]);
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: each iovec covers a distinct slot of `batch.data`, which is
    // exclusively borrowed for the call; names and headers live on this stack
    // frame. MSG_DONTWAIT: never blocks.
    let r =
        unsafe { libc::recvmmsg(fd, msgs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
            _ => Err(e),
        };
    }
    let r = r as usize;
    for i in 0..r {
        batch.lens[i] = msgs[i].msg_len as usize;
        let a = names[i];
        batch.addrs[i] = SocketAddrV4::new(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)), u16::from_be(a.sin_port));
    }
    batch.count = r;
    Ok(r)
}

/// Waits until `fd` is readable or `timeout` passes.
pub fn poll_readable(fd: RawFd, timeout: Duration) -> io::Result<bool> {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: one valid pollfd and a timespec on the stack; no signal mask.
    let r = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(e) };
    }
    Ok(r > 0)
}

/// Sets SO_RCVBUF and SO_SNDBUF, past `rmem_max`/`wmem_max` if privileged
/// (the `*FORCE` options); best effort.
pub fn force_buffers(fd: RawFd, bytes: usize) {
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    for (force, plain) in [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)] {
        for opt in [force, plain] {
            // SAFETY: `v` is a c_int that outlives the call, and its size is
            // passed.
            let r = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    opt,
                    std::ptr::addr_of!(v).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            if r == 0 {
                break;
            }
        }
    }
}
