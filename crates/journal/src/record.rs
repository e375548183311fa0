//! One journal record: a zero-copy view checked once ([`Record::parse`]),
//! and its fields to write ([`RecordRepr`]).
//!
//! ```text
//!  0       4       8              16             24             32
//! +-------+-------+--------------+--------------+--------------+
//! |length | crc32 |   sequence   |  timestamp   |  publisher   |
//! +-------+-------+--------------+--------------+--------------+
//! 32             40      42      44      48
//! +--------------+-------+-------+-------+----------------------+
//! | publisher    |topic  | flags |  0    | topic, payload, pad  |
//! | sequence     |length |       |       | to 8 bytes           |
//! +--------------+-------+-------+-------+----------------------+
//! ```
//!
//! All fields little-endian. `length` is the header and body without the
//! padding; records start on 8-byte boundaries, so a scan can look for the
//! next one after a damaged one. `crc32` covers bytes 8..length.

/// Header bytes before the topic.
pub const RECORD_HEADER: usize = 48;
/// Records start on multiples of this.
pub const RECORD_ALIGN: usize = 8;
/// The largest record (header, topic and payload) a journal accepts.
pub const MAX_RECORD: usize = 16 << 20;

/// Why bytes are not a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Fewer bytes than the header, or than `length` says.
    #[error("cut short: {need} bytes needed, {have} present")]
    Truncated {
        /// Bytes the record needs.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// `length` smaller than the header or larger than [`MAX_RECORD`].
    #[error("impossible length {0}")]
    Length(u32),
    /// The CRC does not match.
    #[error("CRC mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Crc {
        /// The CRC in the record.
        stored: u32,
        /// The CRC of its bytes.
        computed: u32,
    },
    /// The topic length goes past the record, or the topic is not UTF-8.
    #[error("bad topic")]
    Topic,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// A checked record. After [`Record::parse`] no accessor can panic.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    buf: &'a [u8],
    topic: &'a str,
}

impl<'a> Record<'a> {
    /// Checks the record at the start of `buf` (which may hold more).
    ///
    /// # Errors
    /// [`RecordError`] saying what is wrong.
    pub fn parse(buf: &'a [u8]) -> Result<Self, RecordError> {
        if buf.len() < RECORD_HEADER {
            return Err(RecordError::Truncated { need: RECORD_HEADER, have: buf.len() });
        }
        let len = u32_at(buf, 0);
        let n = len as usize;
        if !(RECORD_HEADER..=MAX_RECORD).contains(&n) {
            return Err(RecordError::Length(len));
        }
        if buf.len() < n {
            return Err(RecordError::Truncated { need: n, have: buf.len() });
        }
        let buf = &buf[..n];
        let stored = u32_at(buf, 4);
        let computed = crc32fast::hash(&buf[8..]);
        if stored != computed {
            return Err(RecordError::Crc { stored, computed });
        }
        let tl = usize::from(u16::from_le_bytes([buf[40], buf[41]]));
        let topic = buf.get(RECORD_HEADER..RECORD_HEADER + tl).ok_or(RecordError::Topic)?;
        let topic = std::str::from_utf8(topic).map_err(|_| RecordError::Topic)?;
        Ok(Self { buf, topic })
    }
    /// Bytes it takes in the segment, padding included.
    pub fn stride(&self) -> usize {
        padded(self.buf.len())
    }
    /// The journal's sequence number (1, 2, … without gaps).
    pub fn sequence(&self) -> u64 {
        u64_at(self.buf, 8)
    }
    /// When the router took it (realtime, ns since the Unix epoch).
    pub fn timestamp(&self) -> u64 {
        u64_at(self.buf, 16)
    }
    /// The publisher's id (unique per publishing client).
    pub fn publisher(&self) -> u64 {
        u64_at(self.buf, 24)
    }
    /// The publisher's own sequence number.
    pub fn publisher_sequence(&self) -> u64 {
        u64_at(self.buf, 32)
    }
    /// The topic.
    pub fn topic(&self) -> &'a str {
        self.topic
    }
    /// The message.
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[RECORD_HEADER + self.topic.len()..]
    }
}

/// `n` rounded up to [`RECORD_ALIGN`].
pub fn padded(n: usize) -> usize {
    n.div_ceil(RECORD_ALIGN) * RECORD_ALIGN
}

/// A record's fields, to append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRepr<'a> {
    /// See [`Record::sequence`].
    pub sequence: u64,
    /// See [`Record::timestamp`].
    pub timestamp: u64,
    /// See [`Record::publisher`].
    pub publisher: u64,
    /// See [`Record::publisher_sequence`].
    pub publisher_sequence: u64,
    /// See [`Record::topic`] (at most 65,535 bytes).
    pub topic: &'a str,
    /// See [`Record::payload`].
    pub payload: &'a [u8],
}

impl RecordRepr<'_> {
    /// Bytes without padding.
    pub fn len(&self) -> usize {
        RECORD_HEADER + self.topic.len() + self.payload.len()
    }
    /// Never: a record has a header.
    pub fn is_empty(&self) -> bool {
        false
    }
    /// Appends the record, padded, to `out`.
    ///
    /// # Errors
    /// [`RecordError::Length`] if it is over [`MAX_RECORD`];
    /// [`RecordError::Topic`] for a topic over 65,535 bytes.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), RecordError> {
        let n = self.len();
        if n > MAX_RECORD {
            return Err(RecordError::Length(u32::try_from(n).unwrap_or(u32::MAX)));
        }
        let tl = u16::try_from(self.topic.len()).map_err(|_| RecordError::Topic)?;
        let start = out.len();
        out.extend_from_slice(&(n as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&self.sequence.to_le_bytes());
        out.extend_from_slice(&self.timestamp.to_le_bytes());
        out.extend_from_slice(&self.publisher.to_le_bytes());
        out.extend_from_slice(&self.publisher_sequence.to_le_bytes());
        out.extend_from_slice(&tl.to_le_bytes());
        out.extend_from_slice(&[0; 6]);
        out.extend_from_slice(self.topic.as_bytes());
        out.extend_from_slice(self.payload);
        let crc = crc32fast::hash(&out[start + 8..]);
        out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        out.resize(start + padded(n), 0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip_and_any_flipped_bit_is_caught(
            seq in any::<u64>(), p in any::<u64>(), topic in "[a-z/]{0,40}",
            payload in proptest::collection::vec(any::<u8>(), 0..300), bit in any::<usize>(),
        ) {
            let r = RecordRepr { sequence: seq, timestamp: 7, publisher: p, publisher_sequence: 9, topic: &topic, payload: &payload };
            let mut b = Vec::new();
            r.emit(&mut b).unwrap();
            prop_assert_eq!(b.len() % RECORD_ALIGN, 0);
            let got = Record::parse(&b).unwrap();
            prop_assert_eq!((got.sequence(), got.publisher(), got.topic(), got.payload()), (seq, p, topic.as_str(), &payload[..]));
            prop_assert_eq!(got.stride(), b.len());
            let bit = bit % (r.len() * 8);
            b[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Record::parse(&b).is_err(), "bit {} flipped went unseen", bit);
        }

        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = Record::parse(&b);
        }
    }
}
