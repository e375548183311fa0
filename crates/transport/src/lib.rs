//! # tickwire-transport: datagrams in and out, behind one trait
//!
//! ```text
//!   driver (Publication / Subscription)
//!        │ send_batch / recv_batch          ▲
//!        ▼                                  │
//!   [ Impaired<T> ]  seeded loss, fixed-range loss, reorder, duplication,
//!        │           per direction and per frame class (data / control)
//!        ▼
//!   [ UdpTransport ] non-blocking socket, sendmmsg / recvmmsg batches,
//!                    unicast or multicast (IP_ADD_MEMBERSHIP on an interface)
//!   [ TcpTransport ] each datagram a length-prefixed frame on a connection,
//!                    made again when it breaks, under one identity
//!   [ XdpTransport ] (crate tickwire-xdp) AF_XDP: tickwire's UDP flows
//!                    in user space, beside a kernel socket on the same port
//! ```
//!
//! * [`Transport`]: what every transport provides: batched send to an
//!   address, batched non-blocking receive with source addresses, and a
//!   wait for readability (for idle strategies that park).
//! * [`UdpTransport`]: the kernel UDP implementation. All `unsafe` (the
//!   `*mmsg` system calls) is in one private module, `sys`, each block with a `// SAFETY:` note.
//! * [`TcpTransport`]: TCP (`tcp://` channels): the reliable protocol
//!   runs unchanged over it, and repairs what a broken connection lost.
//! * [`Impaired`]: wraps any transport with [`tickwire_impair`].
//! * [`framing`]: length-prefixed frames on a byte stream (TCP).
//! * [`tls`]: that byte stream plain or TLS (`rustls`), for the router's
//!   clients.

//!
//! # Examples
//!
//! ```
//! use std::net::{Ipv4Addr, SocketAddrV4};
//! use tickwire_transport::{RecvBatch, Transport, UdpConfig, UdpTransport};
//! let any = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
//! let cfg = UdpConfig { bind: any, multicast: None, buffer_bytes: 1 << 20 };
//! let (mut a, mut b) = (UdpTransport::open(&cfg)?, UdpTransport::open(&cfg)?);
//! assert_eq!(a.send_batch(b.local_addr(), &[b"one", b"two"])?, 2);
//! let mut batch = RecvBatch::new(8, 2048);
//! let mut got = Vec::new();
//! while got.len() < 2 {
//!     b.wait(std::time::Duration::from_millis(100))?;
//!     for i in 0..b.recv_batch(&mut batch)? {
//!         got.push(batch.get(i).0.to_vec());
//!     }
//! }
//! assert_eq!(got, [b"one", b"two"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod framing;
mod impaired;
pub mod link;
mod sys;
pub mod tcp;
pub mod tls;
mod udp;

pub use impaired::{ImpairSettings, Impaired};
pub use sys::MAX_BATCH;
pub use tcp::TcpTransport;
pub use udp::{UdpConfig, UdpTransport};

/// Sets a socket's receive and send buffers to `bytes`, past
/// `rmem_max`/`wmem_max` when privileged, as [`UdpTransport`] does with its
/// own (best effort): a plain socket measured beside it gets the same room.
pub fn set_socket_buffers(socket: &impl std::os::fd::AsRawFd, bytes: usize) {
    sys::force_buffers(socket.as_raw_fd(), bytes);
}

use std::net::SocketAddrV4;
use std::time::Duration;

/// Why a transport operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// A system call failed.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

impl TransportError {
    pub(crate) fn io(op: &'static str, source: std::io::Error) -> Self {
        Self::Io { op, source }
    }
}

/// A set of receive buffers filled by one `recv_batch` call.
#[derive(Debug)]
pub struct RecvBatch {
    data: Vec<u8>,
    slot: usize,
    lens: Vec<usize>,
    addrs: Vec<SocketAddrV4>,
    count: usize,
}

impl RecvBatch {
    /// `n` buffers of `slot` bytes each (slot at least the largest datagram
    /// expected; longer ones are truncated by the kernel and then rejected by
    /// the frame checks).
    pub fn new(n: usize, slot: usize) -> Self {
        Self {
            data: vec![0; n * slot],
            slot,
            lens: vec![0; n],
            addrs: vec![SocketAddrV4::new(0.into(), 0); n],
            count: 0,
        }
    }
    /// How many buffers.
    pub fn capacity(&self) -> usize {
        self.lens.len()
    }
    /// Datagrams received by the last call.
    pub fn len(&self) -> usize {
        self.count
    }
    /// No datagram was received.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// Every buffer holds a datagram: [`RecvBatch::push`] would refuse.
    pub fn is_full(&self) -> bool {
        self.count == self.lens.len()
    }
    /// Datagram `i` and its source.
    pub fn get(&self, i: usize) -> (&[u8], SocketAddrV4) {
        (&self.data[i * self.slot..i * self.slot + self.lens[i]], self.addrs[i])
    }
    /// Empties the batch (a transport's `recv_batch` starts with it).
    pub fn clear(&mut self) {
        self.count = 0;
    }
    /// Appends a datagram copy (used by wrappers); false if full.
    pub fn push(&mut self, d: &[u8], from: SocketAddrV4) -> bool {
        if self.count == self.lens.len() {
            return false;
        }
        let i = self.count;
        let n = d.len().min(self.slot);
        self.data[i * self.slot..i * self.slot + n].copy_from_slice(&d[..n]);
        self.lens[i] = n;
        self.addrs[i] = from;
        self.count += 1;
        true
    }
}

/// What every transport provides. Sending and receiving never block.
pub trait Transport: Send {
    /// Sends each datagram to `to`, in order; returns how many were sent
    /// before the socket would block (the caller retries the rest).
    ///
    /// # Errors
    /// [`TransportError`] for anything but would-block.
    fn send_batch(&mut self, to: SocketAddrV4, datagrams: &[&[u8]]) -> Result<usize, TransportError>;

    /// Receives what is waiting, up to the batch's capacity, replacing the
    /// batch's contents; returns how many.
    ///
    /// # Errors
    /// [`TransportError`] for anything but would-block.
    fn recv_batch(&mut self, batch: &mut RecvBatch) -> Result<usize, TransportError>;

    /// Blocks until a datagram may be waiting or `timeout` passes.
    ///
    /// # Errors
    /// [`TransportError`] if the wait itself fails.
    fn wait(&mut self, timeout: Duration) -> Result<(), TransportError>;

    /// The local address.
    fn local_addr(&self) -> SocketAddrV4;

    /// What a built-in impairment did (send data, send control, receive
    /// data, receive control), if this transport impairs.
    fn impairment(&self) -> Option<[tickwire_impair::ImpairStats; 4]> {
        None
    }

    /// What the AF_XDP path did, if this transport is `tickwire-xdp`'s.
    fn xdp_stats(&self) -> Option<XdpStats> {
        None
    }
}

/// What an AF_XDP transport (`tickwire-xdp`) did: `tickwire stat` shows
/// these, in this order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpStats {
    /// Datagrams received through the AF_XDP socket.
    pub rx_packets: u64,
    /// Their UDP payload bytes.
    pub rx_bytes: u64,
    /// Datagrams sent through the AF_XDP socket.
    pub tx_packets: u64,
    /// Their UDP payload bytes.
    pub tx_bytes: u64,
    /// Packets the kernel dropped because the RX ring was full.
    pub rx_ring_full: u64,
    /// Times the kernel found the fill ring empty.
    pub fill_empty: u64,
    /// Sends that found no free frame or no room on the TX ring.
    pub tx_ring_full: u64,
    /// `sendto` kicks of the TX ring (copy mode needs one per batch).
    pub tx_kicks: u64,
    /// Datagrams of our flows that reached us through the kernel socket
    /// (passed by the program: another queue, or before the socket was in).
    pub kernel_rx: u64,
    /// Datagrams sent through the kernel socket (next hop unresolved,
    /// another interface, or larger than a frame).
    pub kernel_tx: u64,
    /// Frames dropped for a wrong IPv4 or UDP checksum.
    pub checksum_failures: u64,
    /// Frames accepted with a partial UDP checksum (a veth peer's offload).
    pub checksum_partial: u64,
    /// Frames dropped as not IPv4/UDP or with lengths that do not add up.
    pub malformed: u64,
    /// Packets the program passed to the kernel on this interface (not
    /// tickwire's: ARP, ICMP, other ports), all processes.
    pub passed: u64,
    /// Times the kernel's routes or neighbours changed under us.
    pub route_changes: u64,
    /// 1 if this channel asked for AF_XDP and fell back to kernel UDP.
    pub fallbacks: u64,
}

impl XdpStats {
    /// Adds every counter of `other` (several channels' totals, or a
    /// delta into a running total).
    pub fn merge(&mut self, other: &XdpStats) {
        let XdpStats {
            rx_packets,
            rx_bytes,
            tx_packets,
            tx_bytes,
            rx_ring_full,
            fill_empty,
            tx_ring_full,
            tx_kicks,
            kernel_rx,
            kernel_tx,
            checksum_failures,
            checksum_partial,
            malformed,
            passed,
            route_changes,
            fallbacks,
        } = *other;
        self.rx_packets += rx_packets;
        self.rx_bytes += rx_bytes;
        self.tx_packets += tx_packets;
        self.tx_bytes += tx_bytes;
        self.rx_ring_full += rx_ring_full;
        self.fill_empty += fill_empty;
        self.tx_ring_full += tx_ring_full;
        self.tx_kicks += tx_kicks;
        self.kernel_rx += kernel_rx;
        self.kernel_tx += kernel_tx;
        self.checksum_failures += checksum_failures;
        self.checksum_partial += checksum_partial;
        self.malformed += malformed;
        self.passed += passed;
        self.route_changes += route_changes;
        self.fallbacks += fallbacks;
    }

    /// The counters, in the order `tickwire stat` names them
    /// (`tickwire_shm::counters::XDP_NAMES`).
    pub fn values(&self) -> [u64; 16] {
        [
            self.rx_packets,
            self.rx_bytes,
            self.tx_packets,
            self.tx_bytes,
            self.rx_ring_full,
            self.fill_empty,
            self.tx_ring_full,
            self.tx_kicks,
            self.kernel_rx,
            self.kernel_tx,
            self.checksum_failures,
            self.checksum_partial,
            self.malformed,
            self.passed,
            self.route_changes,
            self.fallbacks,
        ]
    }
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn send_batch(&mut self, to: SocketAddrV4, datagrams: &[&[u8]]) -> Result<usize, TransportError> {
        (**self).send_batch(to, datagrams)
    }
    fn recv_batch(&mut self, batch: &mut RecvBatch) -> Result<usize, TransportError> {
        (**self).recv_batch(batch)
    }
    fn wait(&mut self, timeout: Duration) -> Result<(), TransportError> {
        (**self).wait(timeout)
    }
    fn local_addr(&self) -> SocketAddrV4 {
        (**self).local_addr()
    }
    fn impairment(&self) -> Option<[tickwire_impair::ImpairStats; 4]> {
        (**self).impairment()
    }
    fn xdp_stats(&self) -> Option<XdpStats> {
        (**self).xdp_stats()
    }
}
