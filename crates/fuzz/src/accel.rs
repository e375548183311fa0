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

/// The flows a sequence may make: two addresses and ports, and a third.
const FLOWS: [SocketAddrV4; 3] = [A, B, SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 7000)];
/// Groups on the flows' ports.
const GROUPS: [SocketAddrV4; 3] = [G, H, SocketAddrV4::new(Ipv4Addr::new(239, 1, 1, 3), 7000)];

/// What the demultiplexer should hold: flows and what waits for each
/// (payload numbers, in order), and each joined group's owner.
#[derive(Default)]
struct Model {
    waiting: std::collections::BTreeMap<SocketAddrV4, std::collections::VecDeque<u32>>,
    joined: std::collections::BTreeMap<SocketAddrV4, SocketAddrV4>,
}

/// Each pair of bytes an operation on one demultiplexer, as
/// [`Port`](tickwire_xdp) makes them: add or remove a flow, join or leave
/// a group (a group one transport at a time, as the port checks), and a
/// receive by one flow (its inbox first, then frames for any flow, group
/// or address, off the ring, into a batch of two). After each: every
/// datagram is where a model says, in order, and `steers` agrees.
pub fn accel_demux(data: &[u8]) {
    let mut d = Demux::default();
    let mut m = Model::default();
    let mut next = 0u32;
    for op in data.chunks(2) {
        let (a, b) = (op[0], op.get(1).copied().unwrap_or(0));
        let flow = FLOWS[usize::from(a >> 4) % 3];
        match a & 7 {
            0 if !m.waiting.contains_key(&flow) => {
                d.add(flow, Checksum::Skip);
                m.waiting.insert(flow, Default::default());
            }
            1 if m.waiting.contains_key(&flow) => {
                let mut gone = d.remove(flow);
                gone.sort();
                m.waiting.remove(&flow);
                let mine: Vec<SocketAddrV4> = m.joined.iter().filter(|(_, o)| **o == flow).map(|(g, _)| *g).collect();
                m.joined.retain(|_, o| *o != flow);
                assert_eq!(gone, mine, "remove {flow}: its groups go with it");
            }
            2 => {
                let group = GROUPS[usize::from(b) % 3];
                if m.waiting.contains_key(&flow) && !d.steers(group) {
                    d.join(group, flow);
                    m.joined.insert(group, flow);
                }
            }
            3 => {
                let group = GROUPS[usize::from(b) % 3];
                assert_eq!(d.unjoin(group), m.joined.remove(&group).is_some(), "unjoin {group}");
            }
            4.. if m.waiting.contains_key(&flow) => receive(&mut d, &mut m, flow, b, &mut next),
            _ => {}
        }
        for x in FLOWS.iter().chain(&GROUPS) {
            assert_eq!(d.steers(*x), m.waiting.contains_key(x) || m.joined.contains_key(x), "steers {x}");
        }
        for (f, q) in &m.waiting {
            assert_eq!(d.waiting(*f), q.len(), "what waits for {f}");
        }
    }
}

/// `reader` receives: its inbox, then up to 3 frames (to the low bits
/// of `how`, in turn: a flow, a group, an address nobody has).
fn receive(d: &mut Demux, m: &mut Model, reader: SocketAddrV4, how: u8, next: &mut u32) {
    let mut batch = RecvBatch::new(2, 64);
    let mut want = Vec::new();
    d.take_inbox(reader, &mut batch);
    let q = m.waiting.get_mut(&reader).expect("a reader is a flow");
    while want.len() < 2 {
        let Some(n) = q.pop_front() else { break };
        want.push(n);
    }
    for i in 0..usize::from(how & 3) {
        let pick = usize::from(how >> (2 + 2 * i)) & 3;
        let to = [FLOWS[i % 3], GROUPS[i % 3], FLOWS[(i + 1) % 3], NOBODY][pick];
        *next += 1;
        let mut f = [0u8; 64];
        let route = packet::Route { dst_mac: [1; 6], src_mac: [2; 6], src: NOBODY, dst: to };
        let len = packet::write(&mut f, &route, 0, &next.to_le_bytes()).expect("a small frame fits");
        d.deliver(reader, &mut batch, &f[..len]);
        let owner = m.joined.get(&to).copied().unwrap_or(to);
        match m.waiting.get_mut(&owner) {
            Some(_) if owner == reader && want.len() < 2 => want.push(*next),
            Some(q) => q.push_back(*next),
            None => {}
        }
    }
    let got: Vec<u32> =
        (0..batch.len()).map(|i| u32::from_le_bytes(batch.get(i).0.try_into().expect("four bytes each"))).collect();
    assert_eq!(got, want, "{reader} receives its inbox first, then its frames, in order");
}
