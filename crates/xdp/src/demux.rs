//! Which local address a received frame is for: the flows of one
//! process's transports on an interface, the multicast groups they joined,
//! and an inbox per flow for the datagrams another transport took off the
//! shared ring. No I/O: [`Port`](crate::port) drains the ring into it; the
//! fuzz target `accel_frame` drives it with arbitrary frames.

use crate::packet::{self, Checksum, Received, Reject};
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::net::SocketAddrV4;
use tickwire_transport::{RecvBatch, XdpStats};

/// Datagrams kept per local address while its transport is not polling.
pub const INBOX_MAX: usize = 4096;

#[derive(Default)]
struct Inbox {
    queue: VecDeque<(Vec<u8>, SocketAddrV4)>,
    stats: XdpStats,
    checksum: Checksum,
}

/// The flows and groups of one process on one interface.
#[derive(Default)]
pub struct Demux {
    /// Per flow (local address or group, and port): what waits for it, and
    /// its counters.
    inboxes: HashMap<SocketAddrV4, Inbox>,
    /// Groups joined by a transport bound to the wildcard address: the
    /// group's flow, and the flow whose inbox its datagrams go to.
    joined: HashMap<SocketAddrV4, SocketAddrV4>,
}

impl Demux {
    /// Whether `flow` is steered here (a transport's flow or a joined group).
    pub fn steers(&self, flow: SocketAddrV4) -> bool {
        self.inboxes.contains_key(&flow) || self.joined.contains_key(&flow)
    }

    /// A transport's flow, its datagrams' checksums checked by `checksum`.
    pub fn add(&mut self, flow: SocketAddrV4, checksum: Checksum) {
        self.inboxes.insert(flow, Inbox { checksum, ..Inbox::default() });
    }

    /// Removes a transport's flow; returns the groups it had joined (gone
    /// too).
    pub fn remove(&mut self, flow: SocketAddrV4) -> Vec<SocketAddrV4> {
        self.inboxes.remove(&flow);
        let groups: Vec<SocketAddrV4> = self.joined.iter().filter(|(_, o)| **o == flow).map(|(g, _)| *g).collect();
        for g in &groups {
            self.joined.remove(g);
        }
        groups
    }

    /// `group`'s datagrams go to `owner`'s inbox.
    pub fn join(&mut self, group: SocketAddrV4, owner: SocketAddrV4) {
        self.joined.insert(group, owner);
    }

    /// `group` is no longer joined here; whether it was.
    pub fn unjoin(&mut self, group: SocketAddrV4) -> bool {
        self.joined.remove(&group).is_some()
    }

    /// Keeps a datagram for `flow` until its next receive; false if its
    /// inbox is full or gone (the datagram is dropped, counted by the caller).
    pub fn stash(&mut self, flow: SocketAddrV4, d: &[u8], from: SocketAddrV4) -> bool {
        match self.inboxes.get_mut(&flow) {
            Some(inbox) if inbox.queue.len() < INBOX_MAX => {
                inbox.queue.push_back((d.to_vec(), from));
                true
            }
            _ => false,
        }
    }

    /// Moves what waits for `flow` into `batch`, as much as fits.
    pub fn take_inbox(&mut self, flow: SocketAddrV4, batch: &mut RecvBatch) {
        if let Some(inbox) = self.inboxes.get_mut(&flow) {
            while batch.len() < batch.capacity() {
                let Some((d, from)) = inbox.queue.pop_front() else { break };
                batch.push(&d, from);
            }
        }
    }

    /// How many datagrams wait for `flow`.
    pub fn waiting(&self, flow: SocketAddrV4) -> usize {
        self.inboxes.get(&flow).map_or(0, |i| i.queue.len())
    }

    /// `flow`'s counters since last taken.
    pub fn take_stats(&mut self, flow: SocketAddrV4) -> XdpStats {
        self.inboxes.get_mut(&flow).map(|i| std::mem::take(&mut i.stats)).unwrap_or_default()
    }

    /// One frame off the ring, read by `receiver` (a transport's flow):
    /// its datagram into `batch` if it is the receiver's (or a group it
    /// joined), into another flow's inbox if that one's, else dropped.
    /// The checks are those of the flow the frame claims to be for, and a
    /// frame dropped (malformed, a bad checksum, no longer ours) is
    /// counted on that flow, or on the receiver when it is none here.
    pub fn deliver(&mut self, receiver: SocketAddrV4, batch: &mut RecvBatch, frame: &[u8]) {
        let claimed = packet::destination(frame)
            .map(|to| self.joined.get(&to).copied().unwrap_or(to))
            .filter(|o| self.inboxes.contains_key(o))
            .unwrap_or(receiver);
        let checksum = self.inboxes.get(&claimed).map_or(Checksum::Verify, |i| i.checksum);
        match packet::read(frame, checksum) {
            Ok(Received { from, to, payload, partial_checksum }) => {
                let to = self.joined.get(&to).copied().unwrap_or(to);
                let Some(inbox) = self.inboxes.get_mut(&to) else {
                    // Steered here but no longer ours (a flow being removed).
                    if let Some(i) = self.inboxes.get_mut(&receiver) {
                        i.stats.malformed += 1;
                    }
                    return;
                };
                inbox.stats.rx_packets += 1;
                inbox.stats.rx_bytes += payload.len() as u64;
                inbox.stats.checksum_partial += u64::from(partial_checksum);
                if to == receiver && batch.push(payload, from) {
                    // Given.
                } else if inbox.queue.len() < INBOX_MAX {
                    inbox.queue.push_back((payload.to_vec(), from));
                } else {
                    inbox.stats.rx_ring_full += 1;
                }
            }
            Err(reject) => {
                if let Some(i) = self.inboxes.get_mut(&claimed) {
                    match reject {
                        Reject::Malformed => i.stats.malformed += 1,
                        Reject::Checksum => i.stats.checksum_failures += 1,
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Route;

    const A: SocketAddrV4 = SocketAddrV4::new(std::net::Ipv4Addr::new(10, 0, 0, 1), 5000);
    const B: SocketAddrV4 = SocketAddrV4::new(std::net::Ipv4Addr::new(10, 0, 0, 1), 6000);

    /// A frame to `to` whose UDP checksum is wrong.
    fn bad_frame(to: SocketAddrV4) -> Vec<u8> {
        let mut f = vec![0u8; 128];
        let route = Route { dst_mac: [2; 6], src_mac: [4; 6], src: "10.0.0.2:7000".parse().unwrap(), dst: to };
        let n = packet::write(&mut f, &route, 1, b"hello").unwrap();
        f.truncate(n);
        f[40] ^= 0x55;
        f
    }

    #[test]
    fn a_frame_is_checked_by_and_counted_on_the_flow_it_is_for_whoever_reads_the_ring() {
        let mut d = Demux::default();
        d.add(A, Checksum::Skip);
        d.add(B, Checksum::Verify);
        let mut batch = RecvBatch::new(4, 2048);
        // A reads B's bad frame: B's checks drop it, on B's count.
        d.deliver(A, &mut batch, &bad_frame(B));
        assert_eq!((batch.len(), d.waiting(B)), (0, 0));
        assert_eq!((d.take_stats(A).checksum_failures, d.take_stats(B).checksum_failures), (0, 1));
        // B reads A's: A skips checksums, so A gets it.
        d.deliver(B, &mut batch, &bad_frame(A));
        assert_eq!((batch.len(), d.waiting(A)), (0, 1));
        assert_eq!(d.take_stats(A).rx_packets, 1);
    }

    #[test]
    fn a_flow_not_reading_keeps_inbox_max_datagrams_then_counts_each_one_more_as_dropped() {
        let mut d = Demux::default();
        d.add(A, Checksum::Skip);
        d.add(B, Checksum::Skip);
        let mut good = bad_frame(B);
        good[40..42].fill(0); // no checksum: skipped anyway
        let mut batch = RecvBatch::new(1, 2048);
        for _ in 0..INBOX_MAX + 3 {
            d.deliver(A, &mut batch, &good);
        }
        assert_eq!(d.waiting(B), INBOX_MAX);
        let s = d.take_stats(B);
        assert_eq!((s.rx_packets, s.rx_ring_full), (INBOX_MAX as u64 + 3, 3));
        assert!(!d.stash(B, b"x", A), "a full inbox takes no more");
        assert_eq!(batch.len(), 0, "none of B's went to A");
    }
}
