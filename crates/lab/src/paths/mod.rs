//! What the lab can drive: each module opens one kind of path between the
//! two pinned CPUs and times it, with the far side run as a worker process.
//!
//! * [`ipc`]: tickwire's shared-memory log (ping-pong and streaming).
//! * [`sockets`]: plain kernel UDP and TCP sockets, spinning on non-blocking
//!   sockets or blocking; the baseline of every network transport.
//! * [`rudp`]: tickwire's reliable UDP.
//! * [`stream`]: both ends of an open-loop stream over UDP, TCP or reliable
//!   UDP (one-way and rate sweep over the network).
//! * [`xdp`]: datagrams over AF_XDP (`tickwire-xdp`) across a veth pair,
//!   ping-pong and throughput, beside kernel UDP on the same kind of pair.

pub mod ipc;
pub mod rudp;
pub mod sockets;
pub mod stream;
pub mod xdp;

/// What carries the lab's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// tickwire shared-memory IPC.
    Ipc,
    /// Kernel UDP sockets on loopback.
    Udp,
    /// Kernel TCP sockets (TCP_NODELAY) on loopback.
    Tcp,
    /// Reliable UDP (tickwire's protocol over kernel UDP); its baseline is
    /// kernel UDP ping-pong instead of the raw ring.
    Rudp,
    /// Datagrams over AF_XDP across a veth pair (needs --netns); its
    /// baseline is kernel UDP across the same kind of pair.
    Xdp,
}

impl Transport {
    /// Parses `ipc`, `udp`, `tcp`, `rudp` or `xdp`.
    ///
    /// # Errors
    /// A message naming what is available.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "ipc" => Ok(Self::Ipc),
            "udp" => Ok(Self::Udp),
            "tcp" => Ok(Self::Tcp),
            "rudp" => Ok(Self::Rudp),
            "xdp" => Ok(Self::Xdp),
            other => Err(format!("transport {other:?} is not one of ipc, udp, tcp, rudp, xdp")),
        }
    }
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ipc => "ipc",
            Self::Udp => "udp",
            Self::Tcp => "tcp",
            Self::Rudp => "rudp",
            Self::Xdp => "xdp",
        }
    }
}
