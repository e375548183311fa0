//! Reading the journal from any sequence: what a durable subscription
//! replays. A reader keeps its own buffer and file position; the journal
//! tells it where the segments are and how far it may read.

use crate::journal::{Journal, JournalError};
use crate::record::{Record, RECORD_HEADER};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// What [`Reader::next`] found.
#[derive(Debug)]
pub enum Read<'a> {
    /// The next record.
    Record(Record<'a>),
    /// Sequences `from..=to` are no longer held (retention removed them, or
    /// damage was skipped): the reader goes on after them.
    Lost {
        /// First sequence lost.
        from: u64,
        /// Last sequence lost.
        to: u64,
    },
    /// Nothing more up to the limit.
    End,
}

/// A cursor over the journal (see the module docs).
#[derive(Debug)]
pub struct Reader {
    /// The next sequence it returns.
    next: u64,
    /// The segment it reads: (base, file).
    segment: Option<(u64, Arc<File>)>,
    /// Bytes read from the segment, starting at file offset `buf_at`.
    buf: Vec<u8>,
    buf_at: u64,
    /// Where in `buf` the next record starts.
    pos: usize,
}

const CHUNK: usize = 256 << 10;

impl Reader {
    /// A reader whose first record will be `from`.
    pub fn new(from: u64) -> Self {
        Self { next: from, segment: None, buf: Vec::new(), buf_at: 0, pos: 0 }
    }

    /// The next sequence it will return.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// Moves it to `seq` (back for a redelivery, or on).
    pub fn seek(&mut self, seq: u64) {
        if seq < self.next {
            self.segment = None; // find it again from the index
        }
        self.next = seq;
    }

    /// The next record at or before `limit` (a sequence: the journal's
    /// durable one, for delivery).
    ///
    /// # Errors
    /// [`JournalError::Io`] reading; [`JournalError::Corrupt`] for a record
    /// that no longer checks out on disk.
    pub fn next<'a>(&'a mut self, j: &Journal, limit: u64) -> Result<Read<'a>, JournalError> {
        if self.next > limit.min(j.written()) {
            return Ok(Read::End);
        }
        let first = j.first();
        if self.next < first {
            let lost = Read::Lost { from: self.next, to: first - 1 };
            self.next = first;
            self.segment = None;
            return Ok(lost);
        }
        // The segment holding `next`.
        let i = j.segments.partition_point(|s| s.base <= self.next).saturating_sub(1);
        let seg = &j.segments[i];
        if self.segment.as_ref().is_none_or(|(base, _)| *base != seg.base) {
            self.segment = Some((seg.base, Arc::clone(&seg.file)));
            self.buf.clear();
            self.pos = 0;
            self.buf_at = seg.offset_for(self.next);
        }
        let seg_len = seg.len;
        let seg_last = seg.last;
        if self.next > seg_last {
            // Past this segment's end (damage skipped at its end).
            let to = j.segments.get(i + 1).map_or(self.next, |s| s.base - 1);
            let lost = Read::Lost { from: self.next, to };
            self.next = to + 1;
            return Ok(lost);
        }
        if let Some(&(_, to, resume)) = seg.holes.iter().find(|h| (h.0..=h.1).contains(&self.next)) {
            let lost = Read::Lost { from: self.next, to };
            self.next = to + 1;
            self.buf.clear();
            self.pos = 0;
            self.buf_at = resume;
            return Ok(lost);
        }
        let Some((_, file)) = &self.segment else { unreachable!("set above") };
        let file = Arc::clone(file);
        let path = &seg.path;
        loop {
            // A whole record at `pos`? Else read more.
            let have = self.buf.len() - self.pos;
            let need = if have >= RECORD_HEADER {
                u32::from_le_bytes(self.buf[self.pos..self.pos + 4].try_into().unwrap_or_default()) as usize
            } else {
                RECORD_HEADER
            };
            if have < need.max(RECORD_HEADER) {
                let offset = self.buf_at + self.pos as u64;
                if offset >= seg_len {
                    let why = format!("sequence {} not found before the segment's end", self.next);
                    return Err(JournalError::Corrupt { segment: path.clone(), offset, why });
                }
                self.buf.drain(..self.pos);
                self.buf_at = offset;
                self.pos = 0;
                let want = need.max(CHUNK).min((seg_len - offset) as usize);
                let old = self.buf.len();
                self.buf.resize(old + want, 0);
                let n = file
                    .read_at(&mut self.buf[old..], offset + old as u64)
                    .map_err(|source| JournalError::Io { path: path.clone(), source })?;
                self.buf.truncate(old + n);
                if n == 0 {
                    let why = "the file ends before its recorded length".to_owned();
                    return Err(JournalError::Corrupt { segment: path.clone(), offset, why });
                }
                continue;
            }
            let seq = u64::from_le_bytes(self.buf[self.pos + 8..self.pos + 16].try_into().unwrap_or_default());
            if seq < self.next {
                self.pos += crate::record::padded(need);
                continue;
            }
            if seq > self.next {
                let lost = Read::Lost { from: self.next, to: seq - 1 };
                self.next = seq;
                return Ok(lost);
            }
            let at = self.pos;
            let r = Record::parse(&self.buf[at..]).map_err(|e| JournalError::Corrupt {
                segment: path.clone(),
                offset: self.buf_at + at as u64,
                why: e.to_string(),
            })?;
            self.pos += r.stride();
            self.next += 1;
            return Ok(Read::Record(r));
        }
    }
}
