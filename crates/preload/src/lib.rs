//! # tickwire-preload: UDP sockets of unmodified programs over AF_XDP
//!
//! `libtickwire_preload.so`, loaded with `LD_PRELOAD` by `tickwire accel
//! [--interface IF] -- PROGRAM ARGS...`, stands in front of libc's socket
//! calls. An IPv4 UDP socket bound on the interface's address (or on
//! 0.0.0.0, or sending first to a destination routed by the interface) is
//! *accelerated*: its datagrams go and come through the process's AF_XDP
//! socket on the interface and tickwire's XDP program, which steers that
//! socket's address and port to it and passes every other packet to the
//! kernel. The kernel socket stays open underneath: it holds the port,
//! answers `getsockname` and socket options, and carries what the AF_XDP
//! path does not (a neighbour not yet resolved, a datagram too large for
//! one frame, a packet that came by another interface). Every other
//! descriptor, and every call from inside this library, goes straight to
//! libc.
//!
//! ```text
//!   program ── socket, bind, connect, sendto, recvfrom, read, write, poll,
//!       │      epoll_wait, close, dup, fcntl, ioctl, setsockopt ...
//!       ▼
//!   calls     the calls; is this descriptor accelerated (table)?
//!       ├── no ──────────────────────────────► libc (real: dlsym RTLD_NEXT)
//!       ▼ yes
//!   sock      one socket: its XdpTransport (tickwire-xdp) over the kernel
//!       │     socket, what the program set (blocking, SO_RCVTIMEO, peer),
//!       │     datagrams taken off the ring and not yet read
//!   ready     poll and epoll_wait over accelerated and kernel descriptors:
//!             spin on the rings (TICKWIRE_ACCEL_SPIN_US), then block on both;
//!             select: ppoll, select, pselect on that loop
//!   vectored  readv, writev, recvmmsg, sendmmsg made of the single calls
//!   group     multicast joins on the interface steered to the rings too; a
//!             group two sockets here receive handed back to the kernel
//! ```
//!
//! Falling back is safe: a socket that cannot be accelerated (no
//! capability, no XDP on the interface, every queue taken, a descriptor
//! above 65535) stays a kernel socket, and one line on standard error says
//! why, once. After `fork`, the child's sockets are the kernel's (the
//! AF_XDP socket and its flows stay the parent's).

mod addr;
mod calls;
mod config;
mod counters;
mod fortify;
mod group;
mod ready;
mod real;
mod select;
mod sock;
mod table;
mod vectored;

/// In the child of a `fork`: every socket is the kernel's.
extern "C" fn in_child() {
    table::forget_all();
}

/// Run when the library is loaded: libc's calls found before any is made,
/// and the fork handler registered.
extern "C" fn on_load() {
    let _ = real::libc();
    // SAFETY: a handler with C linkage that does not return an error.
    unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
