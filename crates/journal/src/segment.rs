//! Segment files: a 64-byte header, then records end to end
//! ([`crate::record`]). A segment is named by the sequence of its first
//! record, so the directory lists in order.
//!
//! ```text
//!  0        8       12      16              24              32      36
//! +--------+-------+-------+---------------+---------------+-------+------+
//! |TWJRNL01|version|header |base sequence  |created (ns)   |crc32  | 0 …  |
//! |        |  (1)  |len 64 |               |               |of 0..32      |
//! +--------+-------+-------+---------------+---------------+-------+------+
//! ```

use crate::record::{Record, RecordError, RECORD_ALIGN, RECORD_HEADER};
use std::path::{Path, PathBuf};

/// Bytes before the first record.
pub const SEGMENT_HEADER: usize = 64;
const MAGIC: &[u8; 8] = b"TWJRNL01";
const VERSION: u32 = 1;
/// Segment files end with this.
pub const SEGMENT_SUFFIX: &str = ".twj";
/// One index entry per this many bytes of records (at most).
const INDEX_EVERY: u64 = 64 << 10;

/// A segment's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The sequence of its first record.
    pub base: u64,
    /// When it was created (realtime, ns since the Unix epoch).
    pub created: u64,
}

impl SegmentHeader {
    /// The 64 header bytes.
    pub fn emit(&self) -> [u8; SEGMENT_HEADER] {
        let mut b = [0u8; SEGMENT_HEADER];
        b[..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(SEGMENT_HEADER as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.base.to_le_bytes());
        b[24..32].copy_from_slice(&self.created.to_le_bytes());
        let crc = crc32fast::hash(&b[..32]);
        b[32..36].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Reads a header.
    ///
    /// # Errors
    /// What is wrong with it, for people.
    pub fn parse(b: &[u8]) -> Result<Self, String> {
        if b.len() < SEGMENT_HEADER {
            return Err(format!("{} bytes: shorter than the {SEGMENT_HEADER}-byte header", b.len()));
        }
        if &b[..8] != MAGIC {
            return Err("not a tickwire journal segment (bad magic)".into());
        }
        let word = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let long = |at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(a)
        };
        if word(8) != VERSION {
            return Err(format!("segment version {} (this build reads {VERSION})", word(8)));
        }
        if word(32) != crc32fast::hash(&b[..32]) {
            return Err("header CRC mismatch".into());
        }
        Ok(Self { base: long(16), created: long(24) })
    }
}

/// The file name of the segment starting at `base`.
pub fn file_name(base: u64) -> String {
    format!("{base:020}{SEGMENT_SUFFIX}")
}

/// The segments in `dir`, by base sequence (from their names).
///
/// # Errors
/// The directory cannot be listed.
pub fn list(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        let Some(name) = p.file_name().and_then(|n| n.to_str()) else { continue };
        if let Some(base) = name.strip_suffix(SEGMENT_SUFFIX).and_then(|b| b.parse::<u64>().ok()) {
            v.push((base, p));
        }
    }
    v.sort();
    Ok(v)
}

/// What a scan of one segment's bytes found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Records that checked out, in order.
    pub records: u64,
    /// Where the valid records end (the file may be cut here).
    pub end: u64,
    /// The sequence of the last valid record (`base - 1` if none).
    pub last: u64,
    /// (sequence, offset) every 64 KiB or so.
    pub index: Vec<(u64, u64)>,
    /// The first damaged record, if any.
    pub damage: Option<Damage>,
}

/// A record that failed its checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Its offset in the segment.
    pub offset: u64,
    /// What is wrong.
    pub why: String,
    /// The next valid record after it in this segment (offset and
    /// sequence), if any: damage with valid records after it is not a torn
    /// tail.
    pub resumes: Option<(u64, u64)>,
}

/// Checks the records of a segment (`bytes`: the whole file) from offset
/// `at`, where the record after sequence `last` should start; stops at the
/// first damaged one, and looks for a valid record after it. `visit` sees
/// each valid record and its offset.
pub fn scan(bytes: &[u8], at: usize, last: u64, mut visit: impl FnMut(&Record<'_>, u64)) -> Scan {
    let mut s = Scan { end: at as u64, last, ..Scan::default() };
    let mut at = at;
    let mut next_index = 0u64;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let why = match Record::parse(rest) {
            Ok(r) if r.sequence() == s.last.wrapping_add(1) => {
                if at as u64 >= next_index {
                    s.index.push((r.sequence(), at as u64));
                    next_index = at as u64 + INDEX_EVERY;
                }
                visit(&r, at as u64);
                s.records += 1;
                s.last = r.sequence();
                at += r.stride();
                s.end = at as u64;
                continue;
            }
            Ok(r) => format!("sequence {} where {} was expected", r.sequence(), s.last.wrapping_add(1)),
            // Zeros where a record would start: nothing more was written
            // (a file extended but not filled), unless records follow.
            Err(RecordError::Length(0)) => "no record (zeros)".into(),
            Err(e) => e.to_string(),
        };
        let resumes = find_next(bytes, at + RECORD_ALIGN, s.last);
        s.damage = Some(Damage { offset: at as u64, why, resumes });
        break;
    }
    s
}

/// The first valid record at or after `from` (8-aligned offsets) whose
/// sequence is after `last`: (offset, sequence).
fn find_next(bytes: &[u8], from: usize, last: u64) -> Option<(u64, u64)> {
    let mut at = from.next_multiple_of(RECORD_ALIGN);
    while at + RECORD_HEADER <= bytes.len() {
        if let Ok(r) = Record::parse(&bytes[at..]) {
            if r.sequence() > last {
                return Some((at as u64, r.sequence()));
            }
        }
        at += RECORD_ALIGN;
    }
    None
}
