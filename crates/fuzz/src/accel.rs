//! The receive path of `tickwire accel` (and of every AF_XDP transport):
//! a frame off the shared ring, demultiplexed to the transport whose flow
//! (or joined multicast group) it is for.

use std::net::{Ipv4Addr, SocketAddrV4};
use tickwire_transport::RecvBatch;
use tickwire_xdp::demux::Demux;
use tickwire_xdp::packet::{self, Checksum};

const A: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5000);
const B: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 6000);
/// Joined by A and by B.
const G: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 1, 1, 1), 5000);
const H: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(239, 1, 1, 2), 6000);
const NOBODY: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 7000);

/// First byte: where the frame is sent (its destination rewritten, low 3
/// bits: as is, A, B, G, H, a flow no longer here) and whether the
/// receiver's batch is full (bit 7); the rest, the frame (its IPv4 header
/// checksum fixed up). Transport A reads it. The datagram lands with its
/// owner (A's batch, else A's inbox; B's inbox), checked by and counted on
/// the flow it claims (a bad one too), or nowhere
/// and counted on A; nothing else moves.
pub fn accel_frame(data: &[u8]) {
    let Some((&how, frame)) = data.split_first() else { return };
    let mut frame = frame.to_vec();
    let to = [None, Some(A), Some(B), Some(G), Some(H), Some(NOBODY)].get(usize::from(how & 7)).copied().flatten();
    if let (Some(to), true) = (to, frame.len() >= 38) {
        frame[30..34].copy_from_slice(&to.ip().octets());
        frame[36..38].copy_from_slice(&to.port().to_be_bytes());
    }
    if frame.len() >= 34 {
        packet::set_ipv4_checksum(&mut frame[14..34]);
    }
    let mut d = Demux::default();
    d.add(A, Checksum::Skip);
    d.add(B, Checksum::Verify);
    d.join(G, A);
    d.join(H, B);
    let mut batch = RecvBatch::new(2, 2048);
    let full = how & 0x80 != 0;
    if full {
        assert!(batch.push(b"x", A) && batch.push(b"y", B));
    }
    d.deliver(A, &mut batch, &frame);
    let (in_batch, a_waits, b_waits) = (batch.len() - if full { 2 } else { 0 }, d.waiting(A), d.waiting(B));
    let (sa, sb) = (d.take_stats(A), d.take_stats(B));
    // The policy of the flow the frame claims to be for (B's for B and
    // H, A's otherwise), and a rejected frame is counted there.
    let claimed_b = packet::destination(&frame).is_some_and(|t| t == B || t == H);
    let policy = if claimed_b { Checksum::Verify } else { Checksum::Skip };
    let Ok(r) = packet::read(&frame, policy) else {
        assert_eq!((in_batch, a_waits, b_waits), (0, 0, 0), "a rejected frame goes nowhere");
        let (on, off) = if claimed_b { (sb, sa) } else { (sa, sb) };
        assert_eq!(on.malformed + on.checksum_failures, 1, "a rejected frame is counted on the flow it claims");
        assert_eq!(off.malformed + off.checksum_failures, 0, "and on no other");
        return;
    };
    let owner = match r.to {
        t if t == G => A,
        t if t == H => B,
        t => t,
    };
    let given = |at: usize| {
        let (p, from) = batch.get(at);
        assert_eq!((p, from), (&r.payload[..r.payload.len().min(2048)], r.from), "the datagram as read");
    };
    match owner {
        o if o == A => {
            assert_eq!((in_batch + a_waits, b_waits, sa.rx_packets, sb.rx_packets), (1, 0, 1, 0), "to A: {r:?}");
            if full {
                assert_eq!(a_waits, 1, "a full batch: A's inbox keeps it");
            } else {
                given(0);
            }
        }
        o if o == B => {
            assert_eq!((in_batch, a_waits, b_waits, sa.rx_packets, sb.rx_packets), (0, 0, 1, 0, 1), "to B: {r:?}");
        }
        _ => {
            assert_eq!((in_batch, a_waits, b_waits), (0, 0, 0), "not ours: nowhere");
            assert_eq!(sa.malformed, 1, "not ours: counted on the reader");
        }
    }
}
