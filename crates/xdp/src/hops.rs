//! The control plane, from the kernel: where a datagram for an address goes
//! (the route: interface and next hop) and the next hop's MAC address (the
//! neighbour table), over rtnetlink.
//!
//! * Lookups are cached per destination address.
//! * A second netlink socket subscribes to neighbour and IPv4 route changes;
//!   [`NextHops::follow`] drains it and forgets the cache when anything
//!   changed, so the next send looks again.
//! * A destination whose next hop has no MAC yet (or whose route leaves by
//!   another interface) is [`Hop::Kernel`]: the caller sends that datagram
//!   through its kernel socket, which makes the kernel resolve the neighbour
//!   (ARP) as it would for any socket; the change event that follows lets
//!   the next datagram take the XDP path.

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST};
use netlink_packet_route::neighbour::{NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState};
use netlink_packet_route::route::{RouteAddress, RouteAttribute, RouteMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};
use rustc_hash::FxHashMap as HashMap;
use std::io;
use std::net::Ipv4Addr;

/// Where a datagram for one destination goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    /// Out of our interface, to this MAC address.
    Mac([u8; 6]),
    /// Through the kernel: why.
    Kernel(KernelWhy),
}

/// Why a destination is sent through the kernel socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelWhy {
    /// The next hop has no MAC address yet (the kernel resolves it).
    Unresolved,
    /// The route leaves by another interface (or is local, or has none).
    OtherInterface,
}

/// rtnetlink lookups for one interface, cached, following changes.
pub struct NextHops {
    query: Socket,
    events: Socket,
    ifindex: u32,
    cache: HashMap<Ipv4Addr, Hop>,
    buf: Vec<u8>,
    checked: std::time::Instant,
    /// Lookups made (cache misses).
    pub lookups: u64,
    /// Times a change in the kernel's tables emptied the cache.
    pub changes: u64,
}

impl std::fmt::Debug for NextHops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NextHops").field("ifindex", &self.ifindex).field("cache", &self.cache).finish()
    }
}

const RTNLGRP_NEIGH: u32 = 3;
const RTNLGRP_IPV4_ROUTE: u32 = 7;

impl NextHops {
    /// Opens the query socket and the change subscription for `ifindex`.
    ///
    /// # Errors
    /// The netlink socket calls' errors.
    pub fn new(ifindex: u32) -> io::Result<Self> {
        let mut query = Socket::new(NETLINK_ROUTE)?;
        query.bind_auto()?;
        query.connect(&SocketAddr::new(0, 0))?;
        let mut events = Socket::new(NETLINK_ROUTE)?;
        events.bind_auto()?;
        events.add_membership(RTNLGRP_NEIGH)?;
        events.add_membership(RTNLGRP_IPV4_ROUTE)?;
        events.set_non_blocking(true)?;
        Ok(Self {
            query,
            events,
            ifindex,
            cache: HashMap::default(),
            buf: vec![0; 1 << 16],
            checked: std::time::Instant::now(),
            lookups: 0,
            changes: 0,
        })
    }

    /// Where a datagram for `dst` goes (cached). While the next hop is
    /// unresolved, every lookup drains the change notifications first (the
    /// datagram goes through the kernel anyway, a system call already), so
    /// the XDP path resumes with the first datagram after the kernel has
    /// the neighbour's address.
    pub fn lookup(&mut self, dst: Ipv4Addr) -> Hop {
        if let Some(&h) = self.cache.get(&dst) {
            if h != Hop::Kernel(KernelWhy::Unresolved) || !self.drain() {
                return h;
            }
        }
        self.lookups += 1;
        let hop = self.resolve(dst).unwrap_or(Hop::Kernel(KernelWhy::Unresolved));
        self.cache.insert(dst, hop);
        hop
    }

    /// Drains change notifications at most every 10 ms (it is a system
    /// call); forgets every cached lookup if the kernel's neighbours or
    /// routes changed. Returns whether they did.
    pub fn follow(&mut self) -> bool {
        let now = std::time::Instant::now();
        if now.duration_since(self.checked) < std::time::Duration::from_millis(10) {
            return false;
        }
        self.checked = now;
        self.drain()
    }

    /// Drains change notifications now; empties the cache if any came.
    fn drain(&mut self) -> bool {
        let mut changed = false;
        loop {
            match self.events.recv(&mut &mut self.buf[..], libc::MSG_DONTWAIT) {
                Ok(0) => break,
                Ok(_) => changed = true,
                // Notifications were lost: assume anything changed.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => changed = true,
                Err(_) => break,
            }
        }
        if changed {
            self.cache.clear();
            self.changes += 1;
        }
        changed
    }

    fn resolve(&mut self, dst: Ipv4Addr) -> io::Result<Hop> {
        if dst.is_multicast() {
            return Ok(Hop::Mac(crate::packet::multicast_mac(dst)));
        }
        let Some((oif, gateway)) = self.route(dst)? else {
            return Ok(Hop::Kernel(KernelWhy::OtherInterface));
        };
        if oif != self.ifindex {
            return Ok(Hop::Kernel(KernelWhy::OtherInterface));
        }
        let next = gateway.unwrap_or(dst);
        Ok(self.neighbour(next)?.map_or(Hop::Kernel(KernelWhy::Unresolved), Hop::Mac))
    }

    /// Sends a request; calls `each` with every reply message until the
    /// kernel says done (dump) or the one answer came (get).
    fn ask(
        &mut self,
        flags: u16,
        msg: RouteNetlinkMessage,
        mut each: impl FnMut(RouteNetlinkMessage),
    ) -> io::Result<()> {
        let mut hdr = NetlinkHeader::default();
        hdr.flags = flags;
        let mut req = NetlinkMessage::new(hdr, NetlinkPayload::from(msg));
        req.finalize();
        let mut out = vec![0; req.header.length as usize];
        req.serialize(&mut out[..]);
        self.query.send(&out, 0)?;
        let dump = flags & NLM_F_DUMP == NLM_F_DUMP;
        loop {
            let size = self.query.recv(&mut &mut self.buf[..], 0)?;
            let mut at = 0;
            while at < size {
                let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&self.buf[at..size])
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("rtnetlink: {e}")))?;
                let len = msg.header.length as usize;
                match msg.payload {
                    NetlinkPayload::Done(_) => return Ok(()),
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            Some(code) => Err(io::Error::from_raw_os_error(-code.get())),
                            None => Ok(()),
                        }
                    }
                    NetlinkPayload::InnerMessage(m) => {
                        each(m);
                        if !dump {
                            return Ok(());
                        }
                    }
                    _ => {}
                }
                if len == 0 {
                    break;
                }
                at += len;
            }
        }
    }

    /// The route to `dst`: its interface and gateway, if any.
    fn route(&mut self, dst: Ipv4Addr) -> io::Result<Option<(u32, Option<Ipv4Addr>)>> {
        let mut req = RouteMessage::default();
        req.header.address_family = AddressFamily::Inet;
        req.header.destination_prefix_length = 32;
        req.attributes.push(RouteAttribute::Destination(RouteAddress::Inet(dst)));
        let mut found = None;
        let r = self.ask(NLM_F_REQUEST, RouteNetlinkMessage::GetRoute(req), |m| {
            if let RouteNetlinkMessage::NewRoute(r) = m {
                let oif =
                    r.attributes.iter().find_map(|a| if let RouteAttribute::Oif(i) = a { Some(*i) } else { None });
                let gw = r.attributes.iter().find_map(|a| match a {
                    RouteAttribute::Gateway(RouteAddress::Inet(g)) => Some(*g),
                    _ => None,
                });
                if r.header.kind == netlink_packet_route::route::RouteType::Unicast {
                    found = oif.map(|o| (o, gw));
                }
            }
        });
        match r {
            // No route at all (ENETUNREACH) is an answer, not a failure.
            Err(e) if e.raw_os_error() == Some(libc::ENETUNREACH) => Ok(None),
            Err(e) => Err(e),
            Ok(()) => Ok(found),
        }
    }

    /// The MAC address of `ip` on our interface, if the kernel has a usable
    /// one (reachable, stale, delayed, probing, permanent).
    fn neighbour(&mut self, ip: Ipv4Addr) -> io::Result<Option<[u8; 6]>> {
        let mut req = NeighbourMessage::default();
        req.header.family = AddressFamily::Inet;
        let ifindex = self.ifindex;
        let mut mac = None;
        self.ask(NLM_F_DUMP | NLM_F_REQUEST, RouteNetlinkMessage::GetNeighbour(req), |m| {
            let RouteNetlinkMessage::NewNeighbour(n) = m else { return };
            let usable = matches!(
                n.header.state,
                NeighbourState::Reachable
                    | NeighbourState::Stale
                    | NeighbourState::Delay
                    | NeighbourState::Probe
                    | NeighbourState::Permanent
            );
            let dst = n.attributes.iter().any(|a| a == &NeighbourAttribute::Destination(NeighbourAddress::Inet(ip)));
            if n.header.ifindex != ifindex || !usable || !dst {
                return;
            }
            for a in &n.attributes {
                if let NeighbourAttribute::LinkLayerAddress(l) = a {
                    if let Ok(m) = <[u8; 6]>::try_from(l.as_slice()) {
                        mac = Some(m);
                    }
                }
            }
        })?;
        Ok(mac)
    }
}
