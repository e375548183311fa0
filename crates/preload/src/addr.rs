//! IPv4 socket addresses to and from the C structures a program passes.

use libc::{sockaddr, sockaddr_in, socklen_t};
use std::net::{Ipv4Addr, SocketAddrV4};

/// The IPv4 address at `addr` (None: null, too short or another family).
///
/// # Safety
/// `addr`, if not null, points to `len` readable bytes.
pub(crate) unsafe fn read(addr: *const sockaddr, len: socklen_t) -> Option<SocketAddrV4> {
    if addr.is_null() || (len as usize) < std::mem::size_of::<sockaddr_in>() {
        return None;
    }
    // SAFETY: at least a sockaddr_in's bytes are readable (the caller's
    // promise, the length checked); read unaligned, as a program may pass
    // any buffer.
    let sin = unsafe { std::ptr::read_unaligned(addr.cast::<sockaddr_in>()) };
    if i32::from(sin.sin_family) != libc::AF_INET {
        return None;
    }
    Some(SocketAddrV4::new(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)), u16::from_be(sin.sin_port)))
}

/// Writes `a` to `addr` (as much as `*len` allows) and its full length to
/// `*len`, as the kernel does; nothing if `addr` or `len` is null.
///
/// # Safety
/// If not null, `len` points to a `socklen_t` and `addr` to `*len`
/// writable bytes.
pub(crate) unsafe fn write(a: SocketAddrV4, addr: *mut sockaddr, len: *mut socklen_t) {
    if addr.is_null() || len.is_null() {
        return;
    }
    // SAFETY: the zeroed C structure is valid.
    let mut sin: sockaddr_in = unsafe { std::mem::zeroed() };
    sin.sin_family = libc::AF_INET as libc::sa_family_t;
    sin.sin_port = a.port().to_be();
    sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
    let full = std::mem::size_of::<sockaddr_in>();
    // SAFETY: `len` is valid (the caller's promise).
    let room = unsafe { *len } as usize;
    // SAFETY: `room` bytes at `addr` are writable; `sin` has `full` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping((&sin as *const sockaddr_in).cast::<u8>(), addr.cast::<u8>(), room.min(full))
    };
    // SAFETY: as above.
    unsafe { *len = full as socklen_t };
}

/// This socket's bound address (the kernel's word), if IPv4.
pub(crate) fn local(fd: libc::c_int) -> Option<SocketAddrV4> {
    // SAFETY: zeroed sockaddr_in storage and its length.
    let mut sin: sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<sockaddr_in>() as socklen_t;
    // SAFETY: valid out-pointers of the sizes given.
    let r = unsafe { libc::getsockname(fd, (&mut sin as *mut sockaddr_in).cast(), &mut len) };
    if r != 0 {
        return None;
    }
    // SAFETY: the kernel wrote `len` bytes of an address there.
    unsafe { read((&sin as *const sockaddr_in).cast(), len) }
}
