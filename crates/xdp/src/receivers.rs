//! Other receivers of a multicast group on this host.
//!
//! The program gives a datagram to one socket; the kernel gives each
//! receiver of a group its copy. So a group steered to a ring must go back
//! to the kernel as soon as any other socket here could receive it,
//! whatever process holds it and however it joined (`IP_ADD_MEMBERSHIP`,
//! `MCAST_JOIN_GROUP`, a source filter, a forked child, a program not
//! under `tickwire accel`). The kernel does not list who joined a group,
//! but it lists (`/proc/net/udp`, `/proc/net/udp6`) every socket bound to
//! a port: one bound to the group's port on the wildcard address or on
//! the group itself could receive it. [`Port`](crate::port) checks when a
//! group is joined, and its watcher every [`WATCH_EVERY`] while one is
//! steered.
//!
//! The files are the kernel's, still read as untrusted text: a line that
//! does not parse is skipped.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::RawFd;
use std::time::Duration;

/// How often steered groups are checked for new receivers: the longest a
/// receiver that joins later misses the group's datagrams.
pub const WATCH_EVERY: Duration = Duration::from_millis(50);

/// A UDP socket bound on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// Its IPv4 address (the wildcard for an IPv6 socket bound to `::`,
    /// the mapped address for `::ffff:a.b.c.d`); None for other IPv6.
    pub addr: Option<Ipv4Addr>,
    pub port: u16,
    /// The socket's inode (`fstat` of any descriptor of it says the same).
    pub inode: u64,
}

/// The sockets listed in the text of `/proc/net/udp` (`v6`: `udp6`).
pub fn parse(text: &str, v6: bool) -> impl Iterator<Item = Bound> + '_ {
    text.lines().skip(1).filter_map(move |line| {
        let mut f = line.split_ascii_whitespace();
        let local = f.nth(1)?;
        let inode = f.nth(7)?.parse().ok()?;
        let (addr, port) = local.split_once(':')?;
        let port = u16::from_str_radix(port, 16).ok()?;
        let addr = if v6 { v6_as_v4(addr)? } else { Some(word(addr)?) };
        Some(Bound { addr, port, inode })
    })
}

/// An address word as the kernel prints it (`%08X` of the network-order
/// value in host order).
fn word(hex: &str) -> Option<Ipv4Addr> {
    (hex.len() == 8).then_some(())?;
    let v = u32::from_str_radix(hex, 16).ok()?;
    Some(Ipv4Addr::from(v.to_ne_bytes()))
}

/// An IPv6 address of four words: Some(None) when it is neither the
/// wildcard nor IPv4-mapped.
fn v6_as_v4(hex: &str) -> Option<Option<Ipv4Addr>> {
    if hex.len() != 32 {
        return None;
    }
    let w: Vec<Ipv4Addr> = (0..4).map(|i| word(&hex[i * 8..i * 8 + 8])).collect::<Option<_>>()?;
    let zero = Ipv4Addr::UNSPECIFIED;
    let mapped = Ipv4Addr::from(0x0000_ffffu32.to_be_bytes());
    Some(match (w[0], w[1], w[2]) {
        (a, b, c) if a == zero && b == zero && c == zero && w[3] == zero => Some(zero),
        (a, b, c) if a == zero && b == zero && c == mapped => Some(w[3]),
        _ => None,
    })
}

/// Whether a socket other than `own` (an inode) could receive `group`.
pub fn others(bound: &[Bound], group: SocketAddrV4, own: u64) -> bool {
    bound.iter().any(|b| {
        b.inode != own && b.port == group.port() && b.addr.is_some_and(|a| a.is_unspecified() || a == *group.ip())
    })
}

/// The UDP sockets bound now in this thread's network namespace.
pub(crate) fn bound_now() -> Vec<Bound> {
    let mut all = Vec::new();
    for (file, v6) in [("udp", false), ("udp6", true)] {
        // An unreadable file (no IPv6) lists nothing.
        if let Ok(text) = std::fs::read_to_string(format!("/proc/thread-self/net/{file}")) {
            all.extend(parse(&text, v6));
        }
    }
    all
}

/// The inode of the socket `fd` (0 if it cannot be told).
pub(crate) fn inode_of(fd: RawFd) -> u64 {
    // SAFETY: a zeroed stat is valid; fstat writes it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a stat of its size.
    if unsafe { libc::fstat(fd, &mut st) } == 0 {
        st.st_ino
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UDP: &str = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  123: 00000000:2EE2 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0
  124: 050312EF:2EE2 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4343 2 0000000000000000 0
  125: 0100007F:2EE2 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4444 2 0000000000000000 0
  126: garbage
  127: 00000000:ZZZZ 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4545 2 0000000000000000 0
";

    #[test]
    fn the_kernels_udp_lines_give_address_port_and_inode_and_bad_lines_are_skipped() {
        let b: Vec<Bound> = parse(UDP, false).collect();
        assert_eq!(b.len(), 3);
        assert_eq!(b[0], Bound { addr: Some(Ipv4Addr::UNSPECIFIED), port: 12002, inode: 4242 });
        assert_eq!(b[1].addr, Some(Ipv4Addr::new(239, 18, 3, 5)));
        assert_eq!(b[2].addr, Some(Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn only_another_socket_on_the_port_bound_to_the_wildcard_or_the_group_could_receive_it() {
        let b: Vec<Bound> = parse(UDP, false).collect();
        let g = SocketAddrV4::new(Ipv4Addr::new(239, 18, 3, 5), 12002);
        // 4242 (wildcard) and 4343 (the group) each could; 4444 (127.0.0.1) not.
        assert!(others(&b, g, 4242));
        assert!(others(&b, g, 4343));
        assert!(!others(&b[..1], g, 4242));
        assert!(!others(&b[2..], g, 0));
        let elsewhere = SocketAddrV4::new(Ipv4Addr::new(239, 1, 1, 1), 12002);
        assert!(!others(&b[1..], elsewhere, 0));
        assert!(!others(&b, SocketAddrV4::new(*g.ip(), 12003), 0));
    }

    #[test]
    fn udp6_wildcard_and_mapped_sockets_count_as_ipv4_receivers() {
        let text = "header
   1: 00000000000000000000000000000000:2EE2 00000000000000000000000000000000:0000 07 0:0 0:0 0 0 0 77 2 0 0
   2: 0000000000000000FFFF0000050312EF:2EE2 00000000000000000000000000000000:0000 07 0:0 0:0 0 0 0 78 2 0 0
   3: 000080FE00000000FF005452120054FE:2EE2 00000000000000000000000000000000:0000 07 0:0 0:0 0 0 0 79 2 0 0
";
        let b: Vec<Bound> = parse(text, true).collect();
        assert_eq!(
            b.iter().map(|b| b.addr).collect::<Vec<_>>(),
            [Some(Ipv4Addr::UNSPECIFIED), Some(Ipv4Addr::new(239, 18, 3, 5)), None]
        );
    }

    #[test]
    fn this_threads_own_bound_socket_is_listed_under_its_inode() {
        let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        let port = s.local_addr().unwrap().port();
        let inode = inode_of(std::os::fd::AsRawFd::as_raw_fd(&s));
        let b = bound_now();
        assert!(b.iter().any(|b| b.port == port && b.inode == inode), "{port} {inode} {b:?}");
        let g = SocketAddrV4::new(Ipv4Addr::new(239, 9, 9, 9), port);
        assert!(others(&b, g, 0));
        assert!(!others(&b, g, inode));
    }
}
