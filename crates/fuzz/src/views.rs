//! The wire views: parse anything, and what parses round-trips.

use tickwire_journal::{Record, RecordRepr};
use tickwire_wire::{ClientFrame, ClientRepr, FrameRepr};

/// Reliable UDP's frames: every frame type's view through [`FrameRepr`],
/// each frame of the bytes read as a datagram.
pub fn wire(data: &[u8]) {
    if let Ok(repr) = FrameRepr::parse(data) {
        let mut out = vec![0u8; repr.buffer_len().max(64)];
        let n = repr.emit(&mut out).expect("a parsed frame emits");
        assert_eq!(FrameRepr::parse(&out[..n]).expect("an emitted frame parses"), repr);
    }
    for frame in tickwire_proto::frames(data).take(64) {
        let Ok((_, bytes)) = frame else { break };
        let _ = FrameRepr::parse(bytes);
    }
}

/// The router's client frames (read from untrusted shared-memory logs and
/// TCP connections).
pub fn client(data: &[u8]) {
    if let Ok(f) = ClientFrame::new_checked(data) {
        let repr = ClientRepr::parse(&f);
        let mut out = vec![0u8; repr.buffer_len()];
        let n = repr.emit(&mut out).expect("a parsed frame emits");
        let again = ClientFrame::new_checked(&out[..n]).expect("an emitted frame parses");
        assert_eq!(ClientRepr::parse(&again), repr);
        let _ = tickwire_wire::client::credentials::parse(f.body());
        // A headed payload: what splits puts back the same, and every
        // header reads.
        if let Ok((h, body)) = tickwire_wire::headers::split(f.body()) {
            let _ = (h.status(), h.iter().count(), h.get("k"));
            let mut again = Vec::new();
            tickwire_wire::headers::put_block(&mut again, &h, body);
            assert_eq!(again, f.body(), "a split payload puts back the same");
        }
    }
}

/// A router cluster's frame (read from another router: untrusted until
/// its proof, and checked after).
pub fn cluster(data: &[u8]) {
    use tickwire_wire::cluster::ClusterFrame;
    if let Ok(f) = ClusterFrame::parse(data) {
        let mut out = Vec::new();
        f.emit(&mut out).expect("a parsed cluster frame emits");
        assert_eq!(out, data, "a parsed cluster frame emits the same bytes");
    }
}

/// A journal record, its CRC fixed up first (otherwise nearly every input
/// stops at the CRC).
pub fn journal_record(data: &[u8]) {
    let _ = Record::parse(data);
    let mut fixed = data.to_vec();
    if fixed.len() >= 8 {
        let len = (u32::from_le_bytes([fixed[0], fixed[1], fixed[2], fixed[3]]) as usize).min(fixed.len());
        let crc = crc32fast::hash(fixed.get(8..len.max(8)).unwrap_or(&[]));
        fixed[4..8].copy_from_slice(&crc.to_le_bytes());
    }
    if let Ok(r) = Record::parse(&fixed) {
        let repr = RecordRepr {
            sequence: r.sequence(),
            timestamp: r.timestamp(),
            publisher: r.publisher(),
            publisher_sequence: r.publisher_sequence(),
            topic: r.topic(),
            payload: r.payload(),
        };
        let mut out = Vec::new();
        repr.emit(&mut out).expect("a parsed record emits");
        let again = Record::parse(&out).expect("an emitted record parses");
        assert_eq!((again.sequence(), again.topic(), again.payload()), (r.sequence(), r.topic(), r.payload()));
    }
}

/// An Ethernet frame as an AF_XDP socket hands it over
/// (`tickwire_xdp::packet::read`, every checksum policy): as it is, and with
/// its IPv4 header checksum fixed up (otherwise nearly every input stops
/// there). What is accepted has lengths that add up and writes back to a
/// frame that reads the same.
pub fn xdp_frame(data: &[u8]) {
    check_frame(data);
    if data.len() >= 34 {
        let mut fixed = data.to_vec();
        tickwire_xdp::packet::set_ipv4_checksum(&mut fixed[14..34]);
        check_frame(&fixed);
    }
}

fn check_frame(f: &[u8]) {
    use tickwire_xdp::packet::{read, write, Checksum, Route};
    for policy in [Checksum::Verify, Checksum::Strict, Checksum::Skip] {
        let Ok(r) = read(f, policy) else { continue };
        let ip_total = usize::from(u16::from_be_bytes([f[16], f[17]]));
        let udp_len = usize::from(u16::from_be_bytes([f[38], f[39]]));
        assert_eq!(ip_total, udp_len + 20, "IPv4 and UDP lengths agree");
        assert_eq!(r.payload.len() + 8, udp_len, "the payload is the UDP length");
        assert!(14 + ip_total <= f.len(), "the datagram lies inside the frame");
        let route = Route { dst_mac: [2, 0, 0, 0, 0, 2], src_mac: [2, 0, 0, 0, 0, 1], src: r.from, dst: r.to };
        let mut out = vec![0u8; 14 + ip_total];
        let n = write(&mut out, &route, 1, r.payload).expect("an accepted payload fits its own frame size");
        let again = read(&out[..n], Checksum::Strict).expect("a written frame reads back");
        assert_eq!((again.from, again.to, again.payload), (r.from, r.to, r.payload));
    }
}
