//! What `tickwire journal inspect DIR` prints: each segment, its records
//! and any damage, without changing anything (a running router's journal
//! may be inspected; its last record may then be half written).

use crate::segment::{self, SegmentHeader};
use std::path::{Path, PathBuf};

/// One segment as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentReport {
    /// The file.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Its first sequence (from the header), if the header checks out.
    pub base: Option<u64>,
    /// Valid records.
    pub records: u64,
    /// The last valid sequence.
    pub last: u64,
    /// The first damage: (offset, why, whether valid records follow).
    pub damage: Option<(u64, String, bool)>,
}

/// Every segment of a journal directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// In order.
    pub segments: Vec<SegmentReport>,
}

impl Report {
    /// Records that check out.
    pub fn records(&self) -> u64 {
        self.segments.iter().map(|s| s.records).sum()
    }
    /// Damaged segments.
    pub fn damaged(&self) -> usize {
        self.segments.iter().filter(|s| s.damage.is_some()).count()
    }
}

/// Reads every segment in `dir`.
///
/// # Errors
/// The directory or a segment cannot be read.
pub fn inspect(dir: &Path) -> std::io::Result<Report> {
    let mut segments = Vec::new();
    for (_, path) in segment::list(dir)? {
        let bytes = std::fs::read(&path)?;
        let mut r = SegmentReport { path, bytes: bytes.len() as u64, base: None, records: 0, last: 0, damage: None };
        match SegmentHeader::parse(&bytes) {
            Err(why) => r.damage = Some((0, why, false)),
            Ok(h) => {
                r.base = Some(h.base);
                let s = segment::scan(&bytes, segment::SEGMENT_HEADER, h.base - 1, |_, _| {});
                r.records = s.records;
                r.last = s.last;
                r.damage = s.damage.map(|d| (d.offset, d.why, d.resumes.is_some()));
            }
        }
        segments.push(r);
    }
    Ok(Report { segments })
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{:<26} {:>12} {:>10} {:>12} {:>12}  DAMAGE", "SEGMENT", "BYTES", "RECORDS", "FIRST", "LAST")?;
        for s in &self.segments {
            let name = s.path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            let (first, last) = match s.base {
                Some(b) if s.records > 0 => (b.to_string(), s.last.to_string()),
                _ => ("-".into(), "-".into()),
            };
            let damage = match &s.damage {
                None => "none".to_owned(),
                Some((at, why, true)) => format!("at {at}: {why} (valid records follow: CRC/structure failure)"),
                Some((at, why, false)) => format!("at {at}: {why} (tail: torn or being written)"),
            };
            writeln!(f, "{name:<26} {:>12} {:>10} {first:>12} {last:>12}  {damage}", s.bytes, s.records)?;
        }
        write!(f, "{} segment(s), {} record(s), {} damaged", self.segments.len(), self.records(), self.damaged())
    }
}
