//! Kernel UDP: one non-blocking socket, batched with sendmmsg/recvmmsg.

use crate::{sys, RecvBatch, Transport, TransportError};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// How to open a UDP socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpConfig {
    /// Address to bind (port 0 for an ephemeral port).
    pub bind: SocketAddrV4,
    /// Join this group on this interface address (and send multicast out of
    /// it). The socket is then bound to the group's address and port with
    /// SO_REUSEADDR, so several processes on a host can share the group.
    pub multicast: Option<(Ipv4Addr, Ipv4Addr)>,
    /// Socket send and receive buffer size.
    pub buffer_bytes: usize,
}

/// A UDP socket behind the [`Transport`] trait.
#[derive(Debug)]
pub struct UdpTransport {
    socket: Socket,
    local: SocketAddrV4,
}

impl UdpTransport {
    /// Opens and binds the socket.
    ///
    /// # Errors
    /// [`TransportError::Io`] naming the step that failed (socket, bind,
    /// join).
    pub fn open(cfg: &UdpConfig) -> Result<Self, TransportError> {
        let io = TransportError::io;
        let socket = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(|e| io("socket", e))?;
        socket.set_nonblocking(true).map_err(|e| io("set non-blocking", e))?;
        sys::force_buffers(socket.as_raw_fd(), cfg.buffer_bytes);
        if let Some((group, interface)) = cfg.multicast {
            socket.set_reuse_address(true).map_err(|e| io("SO_REUSEADDR", e))?;
            socket.join_multicast_v4(&group, &interface).map_err(|e| io("join multicast group", e))?;
            socket.set_multicast_if_v4(&interface).map_err(|e| io("IP_MULTICAST_IF", e))?;
            socket.set_multicast_loop_v4(true).map_err(|e| io("IP_MULTICAST_LOOP", e))?;
            socket.set_multicast_ttl_v4(1).map_err(|e| io("IP_MULTICAST_TTL", e))?;
        }
        socket.bind(&SockAddr::from(cfg.bind)).map_err(|e| io("bind", e))?;
        let local = socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket_ipv4())
            .ok_or_else(|| io("local address", std::io::Error::other("not IPv4")))?;
        Ok(Self { socket, local })
    }
}

impl Transport for UdpTransport {
    fn send_batch(&mut self, to: SocketAddrV4, datagrams: &[&[u8]]) -> Result<usize, TransportError> {
        let mut sent = 0;
        while sent < datagrams.len() {
            let n = sys::sendmmsg(self.socket.as_raw_fd(), to, &datagrams[sent..])
                .map_err(|e| TransportError::io("sendmmsg", e))?;
            if n == 0 {
                break;
            }
            sent += n;
        }
        Ok(sent)
    }

    fn recv_batch(&mut self, batch: &mut RecvBatch) -> Result<usize, TransportError> {
        sys::recvmmsg(self.socket.as_raw_fd(), batch).map_err(|e| TransportError::io("recvmmsg", e))
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), TransportError> {
        sys::poll_readable(self.socket.as_raw_fd(), timeout).map(|_| ()).map_err(|e| TransportError::io("poll", e))
    }

    fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }
}
