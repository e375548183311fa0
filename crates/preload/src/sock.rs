//! An accelerated socket: its AF_XDP transport (the program's kernel
//! socket under it, as a second descriptor), what the program set on it
//! (blocking, receive timeout, connected peer), datagrams taken off the
//! rings and not yet read; sending and receiving with the kernel's
//! semantics, blocking after a spin.

use crate::config::{self, Config};
use crate::counters::{self, C};
use crate::table::Shared;
use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{FromRawFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tickwire_transport::{RecvBatch, Transport, TransportError, UdpConfig, UdpTransport};
use tickwire_xdp::{XdpConfig, XdpTransport};

/// Datagrams kept per socket between reads (more are dropped and counted,
/// as a full receive buffer drops).
const PENDING_MAX: usize = 4096;
/// A blocked receive looks again at least this often.
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(100);

/// An accelerated socket.
pub(crate) struct Sock {
    xdp: XdpTransport,
    /// What the program asked: `O_NONBLOCK`, `SO_RCVTIMEO`, `connect`.
    pub nonblocking: bool,
    pub rcvtimeo: Option<Duration>,
    pub peer: Option<SocketAddrV4>,
    pending: VecDeque<(Vec<u8>, SocketAddrV4)>,
    batch: RecvBatch,
    /// Multicast groups steered to the rings for this socket, which is
    /// bound to the wildcard address if `wildcard`.
    groups: Vec<Ipv4Addr>,
    wildcard: bool,
    /// The interface's address, and the one the program sends multicast
    /// from (`IP_MULTICAST_IF`) if it names one: another interface's
    /// sends go through the kernel.
    iface: Ipv4Addr,
    pub multicast_if: Option<Ipv4Addr>,
    /// The transport's kernel-path and dropped counts, as last added to
    /// the counters.
    kernel_seen: u64,
    dropped_seen: u64,
}

pub(crate) fn lock(s: &Mutex<Sock>) -> MutexGuard<'_, Sock> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The errno of a transport's error.
fn errno(e: &TransportError) -> libc::c_int {
    let TransportError::Io { source, .. } = e;
    source.raw_os_error().unwrap_or(libc::EIO)
}

/// Puts `fd` (an IPv4 UDP socket bound to `bound`, on the configured
/// interface) on AF_XDP; the reason if it stays the kernel's.
pub(crate) fn accelerate(fd: RawFd, bound: SocketAddrV4, cfg: &Config) -> Result<Shared, String> {
    let Some((ifname, addr)) = &cfg.iface else { return Err("no interface to accelerate".into()) };
    let l = crate::real::libc();
    // SAFETY: fcntl on a descriptor the program holds; F_GETFL takes no argument.
    let flags = unsafe { (l.fcntl)(fd, libc::F_GETFL) };
    // SAFETY: F_DUPFD_CLOEXEC with a lowest number: a new descriptor of
    // the same socket, owned by the transport from here.
    let dup = unsafe { (l.fcntl)(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if dup < 0 || flags < 0 {
        return Err(format!("dup: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `dup` is a new descriptor nothing else owns.
    let socket = unsafe { socket2::Socket::from_raw_fd(dup) };
    let kernel = UdpTransport::from_socket(socket).map_err(|e| e.to_string())?;
    // Bound to a group: the flow is the group's, sources our address.
    let multicast = bound.ip().is_multicast().then_some((*bound.ip(), *addr));
    let xcfg = XdpConfig {
        udp: UdpConfig { bind: bound, multicast, buffer_bytes: 0 },
        // Bound to 0.0.0.0: the interface's address, the route to which
        // is the interface's own.
        peer: Some(*addr),
        mode: cfg.mode,
        checksum: tickwire_xdp::Checksum::default(),
    };
    let xdp = XdpTransport::over(kernel, &xcfg).map_err(|e| format!("{ifname}: {e}"))?;
    if cfg.verbose {
        config::note(&format!("fd {fd} ({bound}): {}", xdp.describe()));
    }
    counters::add(C::Accelerated, 1);
    counters::add(C::Open, 1);
    tickwire_xdp::on_group_handed_back(handed_back);
    let mut s = Sock {
        xdp,
        nonblocking: flags & libc::O_NONBLOCK != 0,
        // Set before the socket was accelerated (bind comes after it, as a
        // rule): read back from the kernel.
        rcvtimeo: rcvtimeo(fd),
        peer: None,
        pending: VecDeque::new(),
        batch: RecvBatch::new(16, 65_536),
        groups: Vec::new(),
        wildcard: bound.ip().is_unspecified(),
        iface: *addr,
        multicast_if: crate::group::multicast_if(fd),
        kernel_seen: 0,
        dropped_seen: 0,
    };
    // Joins steer a group to a socket bound to the wildcard address only
    // (the kernel gives a socket bound to an address or a group nothing
    // else).
    for g in crate::group::take_waiting(fd) {
        s.join(fd, g);
    }
    Ok(Arc::new(Mutex::new(s)))
}

/// A steered group went back to the kernel after its join (another
/// socket of this host receives it: `handed`, counted), or that failed:
/// said once.
fn handed_back(handed: bool, text: &str) {
    if handed {
        counters::add(C::FallbacksMulticast, 1);
    }
    config::note(text);
}

/// The socket's `SO_RCVTIMEO` (None: none).
fn rcvtimeo(fd: RawFd) -> Option<Duration> {
    // SAFETY: a zeroed timeval is valid.
    let mut t: libc::timeval = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
    // SAFETY: getsockopt into a timeval of its size.
    let r = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, (&mut t as *mut libc::timeval).cast(), &mut len)
    };
    if r != 0 {
        return None;
    }
    let d = Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64);
    (!d.is_zero()).then_some(d)
}

impl Sock {
    /// Takes what the rings hold for this socket.
    fn fill(&mut self) -> Result<(), libc::c_int> {
        let n = self.xdp.recv_batch(&mut self.batch).map_err(|e| errno(&e))?;
        self.count_kernel_path();
        for i in 0..n {
            let (d, from) = self.batch.get(i);
            if self.peer.is_some_and(|p| p != from) {
                // A connected socket receives from its peer only.
                continue;
            }
            if self.pending.len() >= PENDING_MAX {
                counters::add(C::RxDropped, 1);
                continue;
            }
            self.pending.push_back((d.to_vec(), from));
        }
        Ok(())
    }

    /// Adds what went by the kernel, and what the rings dropped (full),
    /// since last time.
    fn count_kernel_path(&mut self) {
        let st = self.xdp.stats();
        let now = st.kernel_rx + st.kernel_tx;
        counters::add(C::KernelPath, now - self.kernel_seen.min(now));
        self.kernel_seen = now;
        counters::add(C::RxDropped, st.rx_ring_full - self.dropped_seen.min(st.rx_ring_full));
        self.dropped_seen = st.rx_ring_full;
    }

    /// Steers `group` (joined by the kernel socket, on the interface) to
    /// the rings too; else it stays the kernel's, said once.
    pub(crate) fn join(&mut self, fd: RawFd, group: Ipv4Addr) {
        if self.groups.contains(&group) || !self.wildcard {
            return;
        }
        match self.xdp.join(group) {
            Ok(()) => self.groups.push(group),
            Err(e) => {
                counters::add(C::FallbacksMulticast, 1);
                let port = self.xdp.flow().port();
                config::note(&format!("fd {fd}: group {group} port {port} stays the kernel's: {e}"));
            }
        }
    }

    /// No longer steers `group` to the rings.
    pub(crate) fn leave(&mut self, group: Ipv4Addr) {
        if let Some(at) = self.groups.iter().position(|g| *g == group) {
            self.groups.swap_remove(at);
            self.xdp.leave(group);
        }
    }

    /// Every joined group is the kernel's from here.
    pub(crate) fn leave_all(&mut self) {
        for g in std::mem::take(&mut self.groups) {
            self.xdp.leave(g);
        }
    }

    /// Whether a read would find a datagram now.
    pub(crate) fn readable(&mut self) -> bool {
        if self.pending.is_empty() {
            let _ = self.fill();
        }
        !self.pending.is_empty()
    }

    /// The length of the next datagram (0: none), as `FIONREAD` says.
    pub(crate) fn next_len(&mut self) -> usize {
        self.readable();
        self.pending.front().map_or(0, |(d, _)| d.len())
    }

    /// The descriptors a blocked call waits on: the rings and the kernel
    /// socket.
    pub(crate) fn wait_fds(&self) -> [RawFd; 2] {
        [self.xdp.ring_fd(), self.xdp.kernel_fd()]
    }

    /// A readiness call found the kernel socket readable.
    pub(crate) fn kernel_readable(&mut self) {
        self.xdp.kernel_readable();
    }

    /// Sends one datagram to `to` (or the connected peer).
    pub(crate) fn send(&mut self, to: Option<SocketAddrV4>, data: &[u8], dontwait: bool) -> Result<usize, libc::c_int> {
        let to = to.or(self.peer).ok_or(libc::EDESTADDRREQ)?;
        if to.ip().is_multicast() && self.multicast_if.is_some_and(|a| a != self.iface) {
            return self.send_by_kernel(to, data, dontwait);
        }
        // The clock is read only when the ring is full.
        let mut start = None;
        loop {
            match self.xdp.send_batch(to, &[data]) {
                Ok(1) => {
                    counters::add(C::TxPackets, 1);
                    counters::add(C::TxBytes, data.len() as u64);
                    self.count_kernel_path();
                    return Ok(data.len());
                }
                Ok(_)
                    if self.nonblocking
                        || dontwait
                        || start.get_or_insert_with(Instant::now).elapsed() > Duration::from_secs(1) =>
                {
                    return Err(libc::EAGAIN)
                }
                // The TX ring is full for a moment: the kernel drains it.
                Ok(_) => std::hint::spin_loop(),
                Err(e) => return Err(errno(&e)),
            }
        }
    }
}

impl Sock {
    /// Sends through the kernel socket (a group on another interface).
    fn send_by_kernel(&mut self, to: SocketAddrV4, data: &[u8], dontwait: bool) -> Result<usize, libc::c_int> {
        let sin = crate::calls::addr_in(to);
        let flags = libc::MSG_NOSIGNAL | if dontwait { libc::MSG_DONTWAIT } else { 0 };
        // SAFETY: the program's buffer and its length; a valid sockaddr_in.
        let r = unsafe {
            (crate::real::libc().sendto)(
                self.xdp.kernel_fd(),
                data.as_ptr().cast(),
                data.len(),
                flags,
                (&sin as *const libc::sockaddr_in).cast(),
                crate::calls::SIN_LEN,
            )
        };
        if r < 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
        }
        counters::add(C::KernelPath, 1);
        Ok(r as usize)
    }
}

/// Receives one datagram from `s` and gives it to `take` (data, source);
/// blocks (spinning first) unless the socket or `flags` say not to.
pub(crate) fn recv<R>(
    s: &Shared,
    flags: libc::c_int,
    take: impl FnOnce(&[u8], SocketAddrV4) -> R,
) -> Result<R, libc::c_int> {
    let peek = flags & libc::MSG_PEEK != 0;
    let dontwait = flags & libc::MSG_DONTWAIT != 0;
    let spin = config::get().spin;
    // The clock is read once nothing waits and the call may block: a
    // program polling a non-blocking socket never reads it.
    let mut start = None;
    loop {
        let (fds, timeout) = {
            let mut g = lock(s);
            if g.pending.is_empty() {
                g.fill()?;
            }
            let got = if peek { g.pending.front().cloned() } else { g.pending.pop_front() };
            if let Some((d, from)) = got {
                if !peek {
                    counters::add(C::RxPackets, 1);
                    counters::add(C::RxBytes, d.len() as u64);
                }
                return Ok(take(&d, from));
            }
            if g.nonblocking || dontwait {
                return Err(libc::EAGAIN);
            }
            (g.wait_fds(), g.rcvtimeo)
        };
        let waited = start.get_or_insert_with(Instant::now).elapsed();
        if timeout.is_some_and(|t| waited >= t) {
            return Err(libc::EAGAIN);
        }
        if waited < spin {
            std::hint::spin_loop();
            continue;
        }
        let slice = timeout.map_or(WAIT_SLICE, |t| t.saturating_sub(waited).min(WAIT_SLICE));
        if wait(&fds, slice)? {
            lock(s).kernel_readable();
        }
    }
}

/// Waits until one of `fds` is readable or `timeout` passes; whether the
/// second (the kernel socket) is.
pub(crate) fn wait(fds: &[RawFd; 2], timeout: Duration) -> Result<bool, libc::c_int> {
    let mut p = fds.map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
    let ms = libc::c_int::try_from(timeout.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: two valid pollfd entries.
    let r = unsafe { (crate::real::libc().poll)(p.as_mut_ptr(), 2, ms) };
    if r < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINTR));
    }
    Ok(p[1].revents & libc::POLLIN != 0)
}

impl Drop for Sock {
    fn drop(&mut self) {
        counters::sub(C::Open, 1);
        if config::get().verbose {
            let local = self.xdp.local_addr();
            config::note(&format!("{local} closed: {:?}", self.xdp.stats()));
        }
    }
}
