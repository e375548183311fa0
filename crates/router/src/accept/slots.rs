//! Counting connections where they are opened and closed: a [`Slot`] is
//! taken when a connection is accepted and given back when the routing
//! agent serving it (possibly on another thread) closes its socket, so
//! `limits.max_connections` and `limits.max_connections_per_address` are
//! exact, whatever thread a session ends on.

use rustc_hash::FxHashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `limits.max_connections` connections were open.
    MaxConnections,
    /// `limits.max_connections_per_address` connections were open from
    /// its address.
    PerAddress,
    /// `accept` failed for lack of descriptors (EMFILE, ENFILE); refused
    /// with the spare descriptor.
    NoDescriptors,
    /// `accept` failed otherwise (ENOBUFS, ENOMEM, ...): no connection to
    /// refuse, counted all the same.
    AcceptFailed,
}

impl Refusal {
    /// Every kind, in the order of their counters.
    pub const ALL: [Refusal; 4] =
        [Refusal::MaxConnections, Refusal::PerAddress, Refusal::NoDescriptors, Refusal::AcceptFailed];

    /// Its place in [`Refusal::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The connections open, router-wide and per IP address, and their
/// limits. Shared by the thread that accepts and the routing agents.
#[derive(Debug)]
pub struct Connections {
    open: AtomicUsize,
    max: usize,
    /// 0: not counted per address.
    per_address: usize,
    /// Connections open per address, while any is (so at most `max`
    /// entries: the map is bounded by the limit).
    by_address: Mutex<FxHashMap<IpAddr, usize>>,
}

impl Connections {
    /// Counts against `max` connections, and `per_address` from one IP
    /// address (0: no such limit).
    pub fn new(max: usize, per_address: usize) -> Arc<Self> {
        Arc::new(Self { open: AtomicUsize::new(0), max, per_address, by_address: Mutex::default() })
    }

    /// Connections open now (accepted, their socket not yet closed).
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// `limits.max_connections` in force.
    pub fn max(&self) -> usize {
        self.max
    }

    /// `limits.max_connections_per_address` (0: none).
    pub fn per_address(&self) -> usize {
        self.per_address
    }

    /// Addresses with connections open (0 when not counted per address).
    pub fn addresses(&self) -> usize {
        self.by_address.lock().map_or(0, |m| m.len())
    }

    /// A slot for a connection from `ip`, given back when dropped.
    ///
    /// # Errors
    /// [`Refusal::MaxConnections`] or [`Refusal::PerAddress`] at a limit
    /// (nothing taken).
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Refusal> {
        let max = self.max;
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| (n < max).then_some(n + 1))
            .map_err(|_| Refusal::MaxConnections)?;
        if self.per_address == 0 {
            return Ok(Slot { of: Arc::clone(self), ip: None });
        }
        // An IPv4 peer on a dual-stack listener is one address either way.
        let ip = ip.to_canonical();
        let mut map = self.by_address.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(ip).or_insert(0);
        if *n >= self.per_address {
            if *n == 0 {
                map.remove(&ip);
            }
            drop(map);
            self.open.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::PerAddress);
        }
        *n += 1;
        Ok(Slot { of: Arc::clone(self), ip: Some(ip) })
    }
}

/// One connection's place in [`Connections`], given back when dropped
/// (kept beside the connection's socket, dropped after it).
#[derive(Debug)]
pub struct Slot {
    of: Arc<Connections>,
    /// Its address, when counted per address.
    ip: Option<IpAddr>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(ip) = self.ip {
            let mut map = self.of.by_address.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(n) = map.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&ip);
                }
            }
        }
        self.of.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_limit_is_exact_and_a_slot_given_back_makes_room() {
        let c = Connections::new(3, 0);
        let mut held: Vec<Slot> = (0..3).map(|_| c.take(ip("127.0.0.1")).unwrap()).collect();
        assert_eq!(c.open(), 3);
        assert_eq!(c.take(ip("10.0.0.1")).unwrap_err(), Refusal::MaxConnections);
        assert_eq!(c.open(), 3, "a refusal takes nothing");
        held.pop();
        assert_eq!(c.open(), 2);
        held.push(c.take(ip("10.0.0.1")).unwrap());
        drop(held);
        assert_eq!((c.open(), c.addresses()), (0, 0), "nothing counted per address without its limit");
    }

    #[test]
    fn the_per_address_limit_counts_each_address_and_forgets_it_at_zero() {
        let c = Connections::new(10, 2);
        let a: Vec<Slot> = (0..2).map(|_| c.take(ip("10.0.0.1")).unwrap()).collect();
        assert_eq!(c.take(ip("10.0.0.1")).unwrap_err(), Refusal::PerAddress);
        assert_eq!(c.take(ip("::ffff:10.0.0.1")).unwrap_err(), Refusal::PerAddress, "the same address over IPv6");
        let b = c.take(ip("10.0.0.2")).unwrap();
        assert_eq!((c.open(), c.addresses()), (3, 2));
        drop(a);
        assert_eq!((c.open(), c.addresses()), (1, 1), "an address with nothing open is forgotten");
        let again = c.take(ip("10.0.0.1")).unwrap();
        drop((b, again));
        assert_eq!((c.open(), c.addresses()), (0, 0));
    }

    #[test]
    fn the_router_wide_limit_comes_first_and_slots_go_back_from_other_threads() {
        let c = Connections::new(4, 4);
        let slots: Vec<Slot> = (0..4).map(|k| c.take(ip(&format!("10.0.0.{k}"))).unwrap()).collect();
        assert_eq!(c.take(ip("10.0.0.9")).unwrap_err(), Refusal::MaxConnections);
        let threads: Vec<_> = slots.into_iter().map(|s| std::thread::spawn(move || drop(s))).collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!((c.open(), c.addresses()), (0, 0));
    }
}
