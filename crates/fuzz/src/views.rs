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
