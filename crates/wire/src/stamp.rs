//! The stamp that generated load carries in its first 16 payload bytes (the
//! lab, `tickwire pub --rate`, the tests): a sequence number, then the
//! intended send time in nanoseconds on CLOCK_MONOTONIC, both little-endian.
//! One writer and one reader for every tool that checks order or latency
//! (the lab's throughput streams write only the sequence, with
//! `tickwire_shm::floor::stamp_sequence`, one store for the copy after it).

/// Bytes a full stamp takes.
pub const LEN: usize = 16;

/// Writes `seq` and, if the payload has room, `intended_ns` into its start.
/// Shorter payloads get as much of the sequence number as fits.
#[inline]
pub fn write(payload: &mut [u8], seq: u64, intended_ns: u64) {
    let s = seq.to_le_bytes();
    let n = payload.len().min(8);
    payload[..n].copy_from_slice(&s[..n]);
    if payload.len() >= LEN {
        payload[8..LEN].copy_from_slice(&intended_ns.to_le_bytes());
    }
}

/// The sequence number, if the payload holds one.
#[inline]
pub fn seq(payload: &[u8]) -> Option<u64> {
    payload.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)
}

/// The intended send time, if the payload holds one.
#[inline]
pub fn intended_ns(payload: &[u8]) -> Option<u64> {
    payload.get(8..LEN).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_and_refuses_short_payloads() {
        let mut p = [0u8; 20];
        super::write(&mut p, 7, 99);
        assert_eq!((super::seq(&p), super::intended_ns(&p)), (Some(7), Some(99)));
        assert_eq!((super::seq(&p[..8]), super::intended_ns(&p[..8])), (Some(7), None));
        assert_eq!(super::seq(&p[..7]), None);
    }
}
