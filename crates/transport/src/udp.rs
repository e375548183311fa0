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
    /// The last receive found the socket empty: the next one tries a
    /// single `recvfrom` (the cheap call for a spinning, mostly idle
    /// poller); after one that found data, `recvmmsg` drains in batches.
    idle: bool,
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
        Self::from_socket(socket)
    }

    /// Wraps a socket bound already (another program's, as a preload
    /// library finds it), its `O_NONBLOCK` left as it is: the flag belongs
    /// to the open file, which the program shares. Receives never block
    /// (`MSG_DONTWAIT`); sends block if the socket does.
    ///
    /// # Errors
    /// [`TransportError::Io`]: not IPv4, or not bound.
    pub fn from_socket(socket: Socket) -> Result<Self, TransportError> {
        let io = TransportError::io;
        let local = socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket_ipv4())
            .ok_or_else(|| io("local address", std::io::Error::other("not IPv4")))?;
        Ok(Self { socket, local, idle: true })
    }
}

impl std::os::fd::AsRawFd for UdpTransport {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.socket.as_raw_fd()
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
        let fd = self.socket.as_raw_fd();
        let n = if self.idle {
            sys::recv_one(fd, batch).map_err(|e| TransportError::io("recvfrom", e))?
        } else {
            sys::recvmmsg(fd, batch).map_err(|e| TransportError::io("recvmmsg", e))?
        };
        self.idle = n == 0;
        Ok(n)
    }

    fn wait(&mut self, timeout: Duration) -> Result<(), TransportError> {
        sys::poll_readable(self.socket.as_raw_fd(), timeout).map(|_| ()).map_err(|e| TransportError::io("poll", e))
    }

    fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> UdpTransport {
        let any = SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0);
        UdpTransport::open(&UdpConfig { bind: any, multicast: None, buffer_bytes: 1 << 20 }).unwrap()
    }

    fn recv_until(b: &mut UdpTransport, batch: &mut RecvBatch) -> usize {
        for _ in 0..10_000 {
            let n = b.recv_batch(batch).unwrap();
            if n > 0 {
                return n;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        0
    }

    /// An idle socket is polled with one `recvfrom` (one datagram); after a
    /// hit, `recvmmsg` takes the rest in one call; sources and contents are
    /// right on both paths, and a one-datagram send goes by `sendto`.
    #[test]
    fn idle_polls_take_one_then_a_batch_drains_the_rest() {
        let (mut a, mut b) = (open(), open());
        let msgs: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
        let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        assert_eq!(a.send_batch(b.local_addr(), &refs).unwrap(), 5);
        let mut batch = RecvBatch::new(8, 2048);
        assert_eq!(recv_until(&mut b, &mut batch), 1, "an idle socket takes one");
        assert_eq!(batch.get(0), (&msgs[0][..], a.local_addr()));
        assert_eq!(b.recv_batch(&mut batch).unwrap(), 4, "after a hit, the rest in one batch");
        for i in 0..4 {
            assert_eq!(batch.get(i), (&msgs[i + 1][..], a.local_addr()));
        }
        assert_eq!(b.recv_batch(&mut batch).unwrap(), 0);
        assert_eq!(a.send_batch(b.local_addr(), &[b"single"]).unwrap(), 1);
        assert_eq!(recv_until(&mut b, &mut batch), 1);
        assert_eq!(batch.get(0), (&b"single"[..], a.local_addr()));
    }
}
