//! # tickwire-xdp: tickwire's UDP flows over AF_XDP, everything else left to the kernel
//!
//! ```text
//!   driver (reliable UDP, lab)           one Transport trait
//!        │ send_batch / recv_batch
//!        ▼
//!   [ XdpTransport ] ── kernel UDP socket on the same address and port:
//!        │              reserves the port, joins multicast groups (IGMP),
//!        │              carries what the XDP path cannot (next hop not yet
//!        │              resolved, another interface, another queue)
//!        ├── packet   Ethernet/IPv4/UDP headers written and checked
//!        ├── demux    which flow of this process a frame is for
//!        ├── receivers  other sockets of this host that could receive a
//!        │            steered group (it then goes back to the kernel)
//!        ├── hops     routes and neighbours from the kernel (rtnetlink),
//!        │            following changes
//!        ├── xsk      AF_XDP socket: UMEM, fill/completion/RX/TX rings
//!        │            (libxdp's ring code via xsk-rs)
//!        └── program  the XDP program (bpf/tickwire_xdp.c, libbpf): one per
//!                     interface, shared by every tickwire process there;
//!                     redirects only flows in its map (destination address
//!                     and port) and passes every other packet to the kernel
//! ```
//!
//! Why these libraries: **xsk-rs** wraps libxdp's `xsk.c`, the ring code the
//! kernel's AF_XDP developers maintain, vendored and built by `libxdp-sys`
//! (no system libxdp version to match); **libbpf** (`libbpf-sys`, which
//! libxdp-sys already builds) loads the program and creates the link, so the
//! binary has one BPF library. aya would have been a second BPF loader for
//! the same job; libxdp's multi-program dispatcher needs bpffs pins, which
//! `ip netns exec` hides from each process (it remounts /sys), whereas one
//! program with a map of flows, held by bpf_link fds, needs no file at all.
//!
//! Set-up failures are [`XdpError`]s that say exactly what failed (missing
//! capability, no XDP driver, another program on the interface, every queue
//! taken). The caller (`tickwire-driver`) falls back to kernel UDP with that
//! reason, or stops with it under `xdp=required`.

pub mod demux;
mod hops;
pub mod packet;
mod port;
mod program;
pub mod receivers;
mod xsk;

pub use packet::Checksum;
pub use program::{Attach, XdpMode};

use hops::Hop;
use packet::Route;
use port::Port;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tickwire_transport::{RecvBatch, Transport, TransportError, UdpConfig, UdpTransport, XdpStats};

/// Why AF_XDP could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum XdpError {
    /// A BPF step failed (EPERM: not permitted).
    #[error("{step}: {source}{}", hint(source))]
    Bpf {
        /// The step.
        step: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// This process lacks capabilities AF_XDP needs.
    #[error(
        "not permitted: AF_XDP needs CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF (or root); this process lacks {missing}"
    )]
    NotPermitted {
        /// The missing capabilities.
        missing: String,
    },
    /// Another XDP program is attached to the interface.
    #[error("the interface already runs another XDP program (id {id}, {name:?}); tickwire leaves it alone")]
    Foreign {
        /// Its id.
        id: u32,
        /// Its name.
        name: String,
    },
    /// No AF_XDP socket could be bound.
    #[error("AF_XDP socket on {ifname} ({queues} queue(s)): {why}")]
    Socket {
        /// The interface.
        ifname: String,
        /// Its queues.
        queues: u32,
        /// The last error.
        why: String,
    },
    /// The flow belongs to another live tickwire process on this interface.
    #[error("this address and port are steered to tickwire process {pid} over XDP already")]
    FlowTaken {
        /// Its pid.
        pid: u32,
    },
    /// A multicast group two processes of this host receive: its
    /// datagrams go through the kernel, which gives each a copy.
    #[error("this group and port are received by more than one process here: they go through the kernel")]
    FlowShared,
    /// Anything else in set-up.
    #[error("{0}")]
    Setup(String),
    /// The kernel UDP socket beside it.
    #[error(transparent)]
    Kernel(#[from] TransportError),
}

fn hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => {
            " (not permitted: AF_XDP needs CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF, or root)"
        }
        Some(libc::EOPNOTSUPP) => " (the driver has no XDP support in this mode)",
        _ => "",
    }
}

/// How to open an AF_XDP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpConfig {
    /// The kernel socket beside it (address, port, multicast group).
    pub udp: UdpConfig,
    /// When `udp.bind` has no address: the peer whose route picks the
    /// interface (a publication's endpoint).
    pub peer: Option<Ipv4Addr>,
    /// Native, generic or whichever the driver has.
    pub mode: XdpMode,
    /// What received UDP checksums must be.
    pub checksum: Checksum,
}

/// The interface an address belongs to: name, index, MAC, MTU, queues.
#[derive(Debug, Clone)]
pub(crate) struct Interface {
    name: String,
    index: u32,
    mac: [u8; 6],
    mtu: usize,
    queues: u32,
}

fn interface_of(addr: Ipv4Addr) -> Result<Interface, XdpError> {
    let addrs: Vec<_> = nix::ifaddrs::getifaddrs().map_err(|e| XdpError::Setup(format!("getifaddrs: {e}")))?.collect();
    let name = addrs
        .iter()
        .find(|a| a.address.as_ref().and_then(|s| s.as_sockaddr_in()).is_some_and(|s| s.ip() == addr))
        .map(|a| a.interface_name.clone())
        .ok_or_else(|| XdpError::Setup(format!("no interface has the address {addr}")))?;
    let mac = addrs
        .iter()
        .filter(|a| a.interface_name == name)
        .find_map(|a| a.address.as_ref().and_then(|s| s.as_link_addr()).and_then(|l| l.addr()))
        .ok_or_else(|| XdpError::Setup(format!("{name} has no Ethernet address (AF_XDP needs an Ethernet device)")))?;
    if name == "lo" {
        return Err(XdpError::Setup("loopback has no XDP path to another process (use a veth or a NIC)".into()));
    }
    let index = nix::net::if_::if_nametoindex(name.as_str()).map_err(|e| XdpError::Setup(format!("{name}: {e}")))?;
    let sys = |f: &str| std::fs::read_to_string(format!("/sys/class/net/{name}/{f}")).ok();
    let mtu = sys("mtu").and_then(|m| m.trim().parse().ok()).unwrap_or(1500);
    let queues = std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
        .map(|d| d.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().starts_with("rx-")).count())
        .unwrap_or(1)
        .max(1) as u32;
    Ok(Interface { name, index, mac, mtu, queues })
}

/// How often a transport does its slow work: a look at its kernel socket
/// (when nothing says to) and at the kernel's counters.
const SLOW_EVERY: Duration = Duration::from_millis(10);

/// Capabilities AF_XDP needs: load and attach the program (CAP_BPF or
/// CAP_SYS_ADMIN, and CAP_NET_ADMIN) and open the socket (CAP_NET_RAW).
const NEEDED: [(u32, &str); 3] = [(12, "CAP_NET_ADMIN"), (13, "CAP_NET_RAW"), (39, "CAP_BPF")];
const CAP_SYS_ADMIN: u32 = 21;
const CAP_BPF: u32 = 39;

/// Fails with [`XdpError::NotPermitted`] naming the capabilities missing
/// from this process's effective set (`/proc/self/status`).
fn check_capabilities() -> Result<(), XdpError> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let Some(eff) =
        status.lines().find_map(|l| l.strip_prefix("CapEff:")).and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
    else {
        return Ok(()); // cannot tell: let the kernel say
    };
    let has = |bit: u32| eff & (1u64 << bit) != 0;
    let missing: Vec<&str> = NEEDED
        .iter()
        .filter(|(bit, _)| !(has(*bit) || *bit == CAP_BPF && has(CAP_SYS_ADMIN)))
        .map(|(_, name)| *name)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(XdpError::NotPermitted { missing: missing.join(", ") })
    }
}

/// The source address the kernel would use towards `peer`.
fn source_towards(peer: Ipv4Addr) -> Result<Ipv4Addr, XdpError> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").map_err(|e| XdpError::Setup(format!("route probe: {e}")))?;
    s.connect((peer, 9)).map_err(|e| XdpError::Setup(format!("no route to {peer}: {e}")))?;
    match s.local_addr() {
        Ok(std::net::SocketAddr::V4(a)) => Ok(*a.ip()),
        _ => Err(XdpError::Setup(format!("no IPv4 route to {peer}"))),
    }
}

/// Hands `group` (a multicast group and port) on the interface of `addr`
/// back to the kernel for every process: a kernel socket of this process
/// receives it, which a flow steered to another process would starve (and
/// no process takes it later).
///
/// # Errors
/// [`XdpError`]: no capabilities, no such interface, no program.
pub fn share_group(addr: Ipv4Addr, group: SocketAddrV4, mode: XdpMode) -> Result<(), XdpError> {
    check_capabilities()?;
    let iface = interface_of(addr)?;
    if let Some(port) = Port::existing(&iface) {
        return port::lock(&port).share(group);
    }
    // No program there: nothing steers the group (and none is attached
    // just to mark it).
    if !program::attached(iface.index) {
        return Ok(());
    }
    // No socket of ours there (every queue may be another process's): the
    // program alone, attached by another process; it stays when this
    // handle goes.
    let mut program = program::Program::open(iface.index, mode)?;
    program.share_flow(program::FlowKey::of(group))
}

/// Where lines go when a steered group is handed back to the kernel
/// because another socket of this host could receive it (see
/// [`receivers`]), the flag true, or when that or the watching failed,
/// false; stderr if never set. The first call wins.
pub fn on_group_handed_back(say: fn(bool, &str)) {
    port::set_say(say);
}

/// tickwire's UDP datagrams through an AF_XDP socket, with a kernel UDP
/// socket on the same address and port beside it. Implements [`Transport`].
///
/// Every transport of a process on one interface shares one AF_XDP socket
/// (see the `port` module); each has its own flow in the program.
pub struct XdpTransport {
    kernel: UdpTransport,
    kbatch: RecvBatch,
    port: Arc<Mutex<Port>>,
    /// Where datagrams for us are addressed (our address, or the group).
    flow: SocketAddrV4,
    /// Our address as sources say it (interface address, our port).
    local: SocketAddrV4,
    polls: u64,
    /// Poll the kernel socket on every call while this is non-zero.
    kernel_hot: u32,
    /// The program's count of flow packets passed to the kernel, as last seen.
    passed_seen: u64,
    /// When the slow work (kernel socket, kernel counters) is next due.
    next_slow: std::time::Instant,
    /// Datagrams dropped because this transport's inbox was full.
    inbox_full: u64,
    stats: XdpStats,
    description: String,
}

impl std::fmt::Debug for XdpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpTransport").field("local", &self.local).field("flow", &self.flow).finish()
    }
}

impl XdpTransport {
    /// Opens the kernel socket, then this process's AF_XDP socket on the
    /// interface (loading or joining the program the first time), and
    /// steers this socket's address and port to it.
    ///
    /// # Errors
    /// [`XdpError`], saying which step failed and why.
    pub fn open(cfg: &XdpConfig) -> Result<Self, XdpError> {
        check_capabilities()?;
        let kernel = UdpTransport::open(&cfg.udp)?;
        Self::over(kernel, cfg)
    }

    /// [`XdpTransport::open`] beside a kernel socket opened and bound
    /// already (`cfg.udp` says how it was: its address, its group); its
    /// port is the flow's.
    ///
    /// # Errors
    /// [`XdpError`], saying which step failed and why.
    pub fn over(kernel: UdpTransport, cfg: &XdpConfig) -> Result<Self, XdpError> {
        check_capabilities()?;
        let port_no = kernel.local_addr().port();
        let addr = match cfg.udp.multicast {
            Some((_, interface)) if !interface.is_unspecified() => interface,
            _ if !cfg.udp.bind.ip().is_unspecified() && !cfg.udp.bind.ip().is_multicast() => *cfg.udp.bind.ip(),
            _ => source_towards(cfg.peer.ok_or_else(|| {
                XdpError::Setup("no local address: AF_XDP needs the interface (interface=ADDR)".into())
            })?)?,
        };
        let iface = interface_of(addr)?;
        let port = Port::get(&iface, cfg.mode)?;
        let flow = SocketAddrV4::new(cfg.udp.multicast.map_or(addr, |(group, _)| group), port_no);
        // A group's other receivers here, read before the port is locked.
        let receivers =
            flow.ip().is_multicast().then(|| (receivers::inode_of(kernel.as_raw_fd()), receivers::bound_now()));
        let description = {
            let mut p = port::lock(&port);
            p.add(flow, cfg.checksum, receivers.as_ref().map(|(own, bound)| (*own, &bound[..])))?;
            describe(&p)
        };
        Ok(Self {
            kernel,
            kbatch: RecvBatch::new(32, 65_536),
            port,
            flow,
            local: SocketAddrV4::new(addr, port_no),
            polls: 0,
            // Datagrams that came before the flow was in the map are in the
            // kernel socket: look there first.
            kernel_hot: 64,
            passed_seen: 0,
            next_slow: std::time::Instant::now(),
            inbox_full: 0,
            stats: XdpStats::default(),
            description,
        })
    }

    /// One line for start-up: interface, queue, mode, copy or zero-copy
    /// and why, and how the program was found.
    pub fn describe(&self) -> &str {
        &self.description
    }

    /// The counters.
    pub fn stats(&self) -> XdpStats {
        self.stats
    }

    /// The kernel socket has datagrams (a readiness call said so): the
    /// next receives read it.
    pub fn kernel_readable(&mut self) {
        self.kernel_hot = self.kernel_hot.max(1);
    }

    /// Receives `group` (joined on the kernel socket by the caller) on
    /// this transport's port through the ring as well: for a transport
    /// bound to the wildcard address. [`XdpError::FlowShared`]: another
    /// process here receives it too; both get it through the kernel.
    ///
    /// # Errors
    /// [`XdpError`], and the group stays the kernel socket's.
    pub fn join(&mut self, group: Ipv4Addr) -> Result<(), XdpError> {
        let g = SocketAddrV4::new(group, self.flow.port());
        let own = receivers::inode_of(self.kernel.as_raw_fd());
        let bound = receivers::bound_now();
        port::lock(&self.port).join(self.flow, g, (own, &bound))
    }

    /// Where datagrams for this transport are addressed: its address (or
    /// group) and port.
    pub fn flow(&self) -> SocketAddrV4 {
        self.flow
    }

    /// Stops receiving `group` through the ring.
    pub fn leave(&mut self, group: Ipv4Addr) {
        port::lock(&self.port).leave(SocketAddrV4::new(group, self.flow.port()));
    }

    /// The kernel socket's descriptor.
    pub fn kernel_fd(&self) -> std::os::fd::RawFd {
        self.kernel.as_raw_fd()
    }

    /// The AF_XDP socket's descriptor, readable when a datagram for any
    /// flow of this process on the interface waits in its ring.
    pub fn ring_fd(&self) -> std::os::fd::RawFd {
        port::lock(&self.port).xsk.fd()
    }
}

fn describe(p: &Port) -> String {
    let copy = match (p.xsk.zero_copy, p.program.mode) {
        (true, _) => "zero-copy",
        (false, XdpMode::Generic) => "copy mode (generic XDP has no zero-copy)",
        (false, _) => "copy mode (the driver has no zero-copy AF_XDP)",
    };
    let how = match &p.program.attach {
        Attach::Loaded => "program loaded".to_string(),
        Attach::Shared => "program shared with other tickwire processes".to_string(),
        Attach::ReplacedStale(id) => format!("replaced a stale tickwire program (id {id})"),
    };
    let stale = match p.program.stale_flows {
        0 => String::new(),
        n => format!(", removed {n} stale flow(s) of dead processes"),
    };
    format!("AF_XDP on {} queue {}: {} mode, {copy}, {how}{stale}", p.iface.name, p.xsk.queue, p.program.mode)
}

impl Transport for XdpTransport {
    fn send_batch(&mut self, to: SocketAddrV4, datagrams: &[&[u8]]) -> Result<usize, TransportError> {
        let largest = datagrams.iter().map(|d| d.len()).max().unwrap_or(0);
        let mut p = port::lock(&self.port);
        if p.hops.follow() {
            self.stats.route_changes += 1;
        }
        let fits = packet::HEADERS + largest <= (xsk::FRAME_SIZE as usize).min(p.iface.mtu + 14);
        let hop = p.hops.lookup(*to.ip());
        let (Hop::Mac(dst_mac), true) = (hop, fits) else {
            drop(p);
            let n = self.kernel.send_batch(to, datagrams)?;
            self.stats.kernel_tx += n as u64;
            return Ok(n);
        };
        let route = Route { dst_mac, src_mac: p.iface.mac, src: self.local, dst: to };
        let mut id = p.ip_id;
        let (n, kicks, full) = p
            .xsk
            .send(datagrams.len(), |i, buf| {
                id = id.wrapping_add(1);
                packet::write(buf, &route, id, datagrams[i])
            })
            .map_err(|e| TransportError::Io { op: "AF_XDP sendto (TX kick)", source: e })?;
        p.ip_id = id;
        drop(p);
        self.stats.tx_packets += n as u64;
        self.stats.tx_bytes += datagrams[..n].iter().map(|d| d.len() as u64).sum::<u64>();
        self.stats.tx_kicks += u64::from(kicks);
        self.stats.tx_ring_full += u64::from(full);
        Ok(n)
    }

    fn recv_batch(&mut self, batch: &mut RecvBatch) -> Result<usize, TransportError> {
        batch.clear();
        self.polls += 1;
        let (mut d, passed) = {
            let mut p = port::lock(&self.port);
            (p.receive(self.flow, batch), p.program.passed_to_kernel())
        };
        // Inbox drops go into rx_ring_full with the kernel's own count at
        // the next slow refresh.
        self.inbox_full += std::mem::take(&mut d.rx_ring_full);
        self.stats.merge(&d);
        // The kernel socket costs a system call: read it when the program
        // says it passed a flow's packet to the kernel, while it has been
        // delivering, and now and then (datagrams the kernel sent itself
        // before the neighbour was known never pass through the program).
        if passed != self.passed_seen {
            self.passed_seen = passed;
            self.kernel_hot = self.kernel_hot.max(64);
        }
        // Slow work (system calls) at most every 10 ms, checked every 1024
        // polls: a spinning loop should not meet a system call in one round
        // trip in a hundred.
        let slow = self.polls % 1024 == 0 && {
            let now = std::time::Instant::now();
            let due = now >= self.next_slow;
            if due {
                self.next_slow = now + SLOW_EVERY;
            }
            due
        };
        if self.kernel_hot > 0 || slow {
            self.kernel_hot = self.kernel_hot.saturating_sub(1);
            let k = match self.kernel.recv_batch(&mut self.kbatch) {
                Ok(k) => k,
                // The ring's datagrams are in the batch already: they are
                // given, and the error (an ICMP's, reported once) dropped.
                Err(_) if !batch.is_empty() => 0,
                Err(e) => return Err(e),
            };
            let mut p = None;
            for i in 0..k {
                let (d, from) = self.kbatch.get(i);
                self.stats.kernel_rx += 1;
                // What does not fit this batch waits in the inbox for the next.
                if !batch.push(d, from) && !p.get_or_insert_with(|| port::lock(&self.port)).stash(self.flow, d, from) {
                    self.inbox_full += 1;
                }
            }
            if k > 0 {
                self.kernel_hot = 4096;
            }
        }
        if slow {
            let p = port::lock(&self.port);
            let (full, empty) = p.xsk.kernel_stats();
            self.stats.rx_ring_full = self.inbox_full + full;
            self.stats.fill_empty = empty;
            self.stats.passed = p.program.stat(program::STAT_PASSED) + p.program.stat(program::STAT_OTHER_QUEUE);
        }
        Ok(batch.len())
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), TransportError> {
        let xsk = port::lock(&self.port).xsk.fd();
        let kernel_ready = xsk::poll_two(xsk, self.kernel.as_raw_fd(), timeout)
            .map_err(|e| TransportError::Io { op: "poll", source: e })?;
        if kernel_ready {
            self.kernel_hot = self.kernel_hot.max(1);
        }
        Ok(())
    }

    fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    fn xdp_stats(&self) -> Option<XdpStats> {
        Some(self.stats)
    }
}

impl Drop for XdpTransport {
    fn drop(&mut self) {
        port::lock(&self.port).remove(self.flow);
    }
}
