//! The physical floor: the simplest possible cross-process signalling, used
//! by the lab as the baseline every tickwire figure is divided by.
//!
//! * [`CacheLines`]: two counters on separate cache-line pairs; each side
//!   spins on one and writes the other.
//! * [`RawRing`]: a plain single-producer single-consumer index ring of fixed
//!   slots, the textbook C design (each side caches the other's index).
//! * [`SlotRing`]: the same ring with each message visible on its own: a
//!   sequence stamp in each slot, release-stored after the payload, and no
//!   shared tail (the streaming floor of a log that commits every message).
//! * [`LineStream`]: whole cache lines streamed one way, each carrying its
//!   own sequence stamp (no index to publish): a measure of the rate at
//!   which the two CPUs move bytes from one to the other, the physical
//!   reference the lab sets beside its floors.

use crate::dir::Dir;
use crate::error::ShmError;
use crate::mapped::MappedFile;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::copy::stamp_sequence;

/// Makes the file `path` of `len` zero bytes in its directory (this user's
/// own, [`Dir`]), replacing any file of that name; `init` writes its
/// header before it takes the name, so no opener sees it unwritten.
fn create(path: &Path, len: usize, init: impl FnOnce(&MappedFile)) -> Result<MappedFile, ShmError> {
    let io = |e| ShmError::io(path, e);
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| io(std::io::ErrorKind::InvalidInput.into()))?;
    let dir = Dir::open(parent)?;
    let (map, tmp) = MappedFile::create_new(&dir, name, len, path)?;
    init(&map);
    if let Err(e) = dir.rename(&tmp, name) {
        let _ = dir.remove(&tmp);
        return Err(io(e));
    }
    Ok(map)
}

/// Two padded counters in a shared file.
#[derive(Debug)]
pub struct CacheLines {
    map: MappedFile,
}

impl CacheLines {
    /// Creates the file.
    ///
    /// # Errors
    /// I/O errors.
    pub fn create(path: &Path) -> Result<Self, ShmError> {
        Ok(Self { map: create(path, 4096, |_| ())? })
    }
    /// Opens a file made by [`CacheLines::create`].
    ///
    /// # Errors
    /// I/O errors, or [`ShmError::Corrupt`] if too short.
    pub fn open(path: &Path) -> Result<Self, ShmError> {
        let map = MappedFile::open(path).map_err(|e| ShmError::io(path, e))?;
        if map.len() < 4096 {
            return Err(ShmError::Corrupt { path: path.into(), reason: "short floor file".into() });
        }
        Ok(Self { map })
    }
    /// Counter `i` (0 or 1), each on its own 128-byte line pair.
    pub fn line(&self, i: usize) -> &AtomicU64 {
        self.map.atomic_u64(128 * (i & 1))
    }
}

/// A raw SPSC ring of `slots` slots of `slot_len` bytes in a shared file:
/// the classic index ring. The producer writes a slot and publishes `tail`
/// (its own cache-line pair); the consumer reads `tail`, drains every slot
/// up to it, and publishes `head` (another line pair) every 32 slots or when
/// it finds the ring empty. Each side caches the other's index.
#[derive(Debug)]
pub struct RawRing {
    map: MappedFile,
    slots: u64,
    slot_len: usize,
    index: u64,
    cached_other: u64,
    published: u64,
}

const RING_HDR: usize = 512;
const TAIL: usize = 128;
const HEAD: usize = 256;
/// Where a ring file's header says which ring it is (after its slot count
/// at 8 and slot length at 16).
const KIND: usize = 24;
const RAW_KIND: u64 = 0x7261_775f_7269_6e67;
const SLOT_KIND: u64 = 0x736c_6f74_7269_6e67;

/// Makes a ring file of `slots` slots (a power of two) of `slot_len` bytes
/// (a multiple of 64) and writes its header.
fn create_ring(path: &Path, slots: usize, slot_len: usize, kind: u64, what: &str) -> Result<MappedFile, ShmError> {
    let len = slots.checked_mul(slot_len).and_then(|n| n.checked_add(RING_HDR));
    let Some(len) = len.filter(|_| slots.is_power_of_two() && slot_len % 64 == 0 && slot_len != 0) else {
        return Err(ShmError::Config(format!("{what}: slots must be a power of two, slot_len a multiple of 64")));
    };
    create(path, len, |map| {
        map.atomic_u64(8).store(slots as u64, Ordering::Relaxed);
        map.atomic_u64(16).store(slot_len as u64, Ordering::Relaxed);
        map.atomic_u64(KIND).store(kind, Ordering::Release);
    })
}

/// Opens a ring file made by [`create_ring`] with `kind`, checking its
/// header (another process's file) against its length: the mapping, the
/// slot count and the slot length.
fn open_ring(path: &Path, kind: u64, what: &str) -> Result<(MappedFile, u64, usize), ShmError> {
    let map = MappedFile::open(path).map_err(|e| ShmError::io(path, e))?;
    let corrupt = |why: &str| ShmError::Corrupt { path: path.into(), reason: format!("{what}: {why}") };
    if map.len() < RING_HDR {
        return Err(corrupt("shorter than its header"));
    }
    if map.atomic_u64(KIND).load(Ordering::Acquire) != kind {
        return Err(corrupt("another kind of ring"));
    }
    let slots = map.atomic_u64(8).load(Ordering::Relaxed);
    let slot_len = map.atomic_u64(16).load(Ordering::Relaxed);
    let len = slots.checked_mul(slot_len).and_then(|n| n.checked_add(RING_HDR as u64));
    if !slots.is_power_of_two() || slot_len % 64 != 0 || slot_len == 0 || !len.is_some_and(|n| n <= map.len() as u64) {
        return Err(corrupt("sizes do not match the file"));
    }
    Ok((map, slots, slot_len as usize))
}

impl RawRing {
    /// Creates the ring file. `slots` must be a power of two, `slot_len` a
    /// multiple of 64.
    ///
    /// # Errors
    /// [`ShmError::Config`] for bad sizes, or I/O errors.
    pub fn create(path: &Path, slots: usize, slot_len: usize) -> Result<Self, ShmError> {
        let map = create_ring(path, slots, slot_len, RAW_KIND, "raw ring")?;
        Ok(Self { map, slots: slots as u64, slot_len, index: 0, cached_other: 0, published: 0 })
    }

    /// Opens a ring made by [`RawRing::create`].
    ///
    /// # Errors
    /// I/O errors, or [`ShmError::Corrupt`] if the sizes do not match the file.
    pub fn open(path: &Path) -> Result<Self, ShmError> {
        let (map, slots, slot_len) = open_ring(path, RAW_KIND, "raw ring")?;
        Ok(Self { map, slots, slot_len, index: 0, cached_other: 0, published: 0 })
    }

    /// Largest payload per slot.
    pub fn max_payload(&self) -> usize {
        self.slot_len
    }

    fn slot(&self, i: u64) -> usize {
        RING_HDR + ((i & (self.slots - 1)) as usize) * self.slot_len
    }

    /// Producer: pushes `msg` (truncated to `max_payload`) and publishes it.
    /// False if full.
    #[inline]
    pub fn try_push(&mut self, msg: &[u8]) -> bool {
        let pushed = self.write_next(msg);
        self.flush();
        pushed
    }

    /// Producer, for streaming: as [`RawRing::try_push`], but the tail is
    /// published once per 16 messages (and when the ring is full), as a
    /// textbook SPSC ring batches it; call [`RawRing::flush`] to publish the
    /// rest.
    #[inline]
    pub fn try_push_batched(&mut self, msg: &[u8]) -> bool {
        self.try_push_every(msg, 16)
    }

    /// As [`RawRing::try_push_batched`], publishing the tail once per
    /// `every` messages (1: each, as [`RawRing::try_push`]).
    #[inline]
    pub fn try_push_every(&mut self, msg: &[u8], every: u64) -> bool {
        let pushed = self.write_next(msg);
        if !pushed || self.index - self.published >= every {
            self.flush();
        }
        pushed
    }

    /// Writes `msg` into the next slot without publishing it. False if full.
    #[inline]
    fn write_next(&mut self, msg: &[u8]) -> bool {
        if self.index.wrapping_sub(self.cached_other) >= self.slots {
            self.cached_other = self.map.atomic_u64(HEAD).load(Ordering::Acquire);
            if self.index.wrapping_sub(self.cached_other) >= self.slots {
                return false;
            }
        }
        let s = self.slot(self.index);
        let n = msg.len().min(self.slot_len);
        // SAFETY: [s, s+n) is inside this slot, which the consumer has
        // released (head) and does not read until `tail` passes it.
        unsafe { crate::copy::copy_bytes(msg.as_ptr(), self.map.base().add(s), n) }
        self.index += 1;
        true
    }

    /// Producer: publishes every message pushed so far.
    #[inline]
    pub fn flush(&mut self) {
        if self.published != self.index {
            self.published = self.index;
            self.map.atomic_u64(TAIL).store(self.index, Ordering::Release);
        }
    }

    /// Consumer: hands the next slot's payload to `f`. False if empty.
    #[inline]
    pub fn try_pop(&mut self, f: impl FnOnce(&[u8])) -> bool {
        if self.index == self.cached_other {
            self.cached_other = self.map.atomic_u64(TAIL).load(Ordering::Acquire);
            if self.index == self.cached_other {
                if self.published != self.index {
                    self.published = self.index;
                    self.map.atomic_u64(HEAD).store(self.index, Ordering::Release);
                }
                return false;
            }
        }
        let s = self.slot(self.index);
        // SAFETY: the slot is below `tail` (published with release after the
        // write); the producer does not rewrite it until `head` passes it.
        let payload = unsafe { std::slice::from_raw_parts(self.map.base().add(s), self.slot_len) };
        f(payload);
        self.index += 1;
        if self.index - self.published >= 32 {
            self.published = self.index;
            self.map.atomic_u64(HEAD).store(self.index, Ordering::Release);
        }
        true
    }
}

/// A ring whose every message is visible on its own, as a log that commits
/// each frame makes it: each slot starts with an 8-byte stamp (the
/// message's index plus one, so a slot from an earlier lap never looks
/// written), release-stored after the payload; the consumer acquire-loads
/// the next slot's stamp, so no index is shared per message. The consumer
/// publishes `head` every 32 slots or when it finds the ring empty; the
/// producer reads it only when it would lap. The best known method for
/// per-message visibility (FastForward's, Aeron's frame-length word): one
/// copy and one release/acquire pair per message, in the message's own
/// line.
#[derive(Debug)]
pub struct SlotRing {
    map: MappedFile,
    slots: u64,
    slot_len: usize,
    index: u64,
    cached_head: u64,
    published: u64,
}

const STAMP: usize = 8;

impl SlotRing {
    /// Creates the ring file. `slots` must be a power of two, `slot_len` a
    /// multiple of 64 (each slot holds an 8-byte stamp and the payload).
    ///
    /// # Errors
    /// [`ShmError::Config`] for bad sizes, or I/O errors.
    pub fn create(path: &Path, slots: usize, slot_len: usize) -> Result<Self, ShmError> {
        let map = create_ring(path, slots, slot_len, SLOT_KIND, "slot ring")?;
        Ok(Self { map, slots: slots as u64, slot_len, index: 0, cached_head: 0, published: 0 })
    }

    /// Opens a ring made by [`SlotRing::create`].
    ///
    /// # Errors
    /// I/O errors, or [`ShmError::Corrupt`] if it is not a slot ring or its
    /// sizes do not match the file.
    pub fn open(path: &Path) -> Result<Self, ShmError> {
        let (map, slots, slot_len) = open_ring(path, SLOT_KIND, "slot ring")?;
        Ok(Self { map, slots, slot_len, index: 0, cached_head: 0, published: 0 })
    }

    /// Largest payload per slot (the slot less its stamp).
    pub fn max_payload(&self) -> usize {
        self.slot_len - STAMP
    }

    fn slot(&self, i: u64) -> usize {
        RING_HDR + ((i & (self.slots - 1)) as usize) * self.slot_len
    }

    /// Producer: writes `msg` (truncated to `max_payload`) into the next
    /// slot and stamps it, which makes it visible. False if full.
    #[inline]
    pub fn try_push(&mut self, msg: &[u8]) -> bool {
        if self.index.wrapping_sub(self.cached_head) >= self.slots {
            self.cached_head = self.map.atomic_u64(HEAD).load(Ordering::Acquire);
            if self.index.wrapping_sub(self.cached_head) >= self.slots {
                return false;
            }
        }
        let s = self.slot(self.index);
        let n = msg.len().min(self.max_payload());
        // SAFETY: [s+8, s+8+n) is inside this slot, which the consumer has
        // passed (`head`) and does not read until it acquires the stamp
        // stored below.
        unsafe { crate::copy::copy_bytes(msg.as_ptr(), self.map.base().add(s + STAMP), n) }
        self.map.atomic_u64(s).store(self.index + 1, Ordering::Release);
        self.index += 1;
        true
    }

    /// Consumer: hands the next slot's payload to `f`. False if empty.
    #[inline]
    pub fn try_pop(&mut self, f: impl FnOnce(&[u8])) -> bool {
        let s = self.slot(self.index);
        if self.map.atomic_u64(s).load(Ordering::Acquire) != self.index + 1 {
            if self.published != self.index {
                self.published = self.index;
                self.map.atomic_u64(HEAD).store(self.index, Ordering::Release);
            }
            return false;
        }
        // SAFETY: the slot's stamp, acquired above, was release-stored after
        // its payload; the producer does not rewrite it until `head` passes
        // it.
        let payload = unsafe { std::slice::from_raw_parts(self.map.base().add(s + STAMP), self.max_payload()) };
        f(payload);
        self.index += 1;
        if self.index - self.published >= 32 {
            self.published = self.index;
            self.map.atomic_u64(HEAD).store(self.index, Ordering::Release);
        }
        true
    }
}

/// Cache lines streamed one way through a shared file of `lines` lines.
///
/// The producer writes line `i mod lines` whole: its first seven words in
/// one copy, then the eighth (the stamp, `i + 1`) with release. The
/// consumer waits until the last line of a batch is stamped, reads the
/// first word and the stamp of each line of it, and publishes how far it
/// has read (`head`, its own line pair) at least every 64 lines; the
/// producer reads `head` only when it would lap. One line moved per line
/// written, and nothing else shared.
#[derive(Debug)]
pub struct LineStream {
    map: MappedFile,
    lines: u64,
    index: u64,
    cached_head: u64,
}

const LINE_WORDS: usize = 8;
const STREAM_HEAD: usize = 128;
const STREAM_LINES: usize = 8;

impl LineStream {
    /// Creates the file; `lines` must be a power of two of at least 128.
    ///
    /// # Errors
    /// [`ShmError::Config`] for a bad size, or I/O errors.
    pub fn create(path: &Path, lines: usize) -> Result<Self, ShmError> {
        if !lines.is_power_of_two() || lines < 128 {
            return Err(ShmError::Config("line stream: lines must be a power of two of at least 128".into()));
        }
        let map = create(path, RING_HDR + lines * 64, |map| {
            map.atomic_u64(STREAM_LINES).store(lines as u64, Ordering::Release);
        })?;
        Ok(Self { map, lines: lines as u64, index: 0, cached_head: 0 })
    }

    /// Opens a file made by [`LineStream::create`].
    ///
    /// # Errors
    /// I/O errors, or [`ShmError::Corrupt`] if its size does not match.
    pub fn open(path: &Path) -> Result<Self, ShmError> {
        let map = MappedFile::open(path).map_err(|e| ShmError::io(path, e))?;
        let corrupt = || ShmError::Corrupt { path: path.into(), reason: "line stream size".into() };
        if map.len() < RING_HDR {
            return Err(corrupt());
        }
        let lines = map.atomic_u64(STREAM_LINES).load(Ordering::Acquire);
        if !lines.is_power_of_two() || lines < 128 || (map.len() as u64) < RING_HDR as u64 + lines * 64 {
            return Err(corrupt());
        }
        Ok(Self { map, lines, index: 0, cached_head: 0 })
    }

    fn word(&self, line: u64, w: usize) -> &AtomicU64 {
        self.map.atomic_u64(RING_HDR + ((line & (self.lines - 1)) as usize) * 64 + w * 8)
    }

    /// Producer: writes the next line (every word `value`, then its stamp).
    /// False if the consumer is a whole stream behind.
    #[inline]
    pub fn try_write(&mut self, value: u64) -> bool {
        if self.index.wrapping_sub(self.cached_head) >= self.lines {
            self.cached_head = self.map.atomic_u64(STREAM_HEAD).load(Ordering::Acquire);
            if self.index.wrapping_sub(self.cached_head) >= self.lines {
                return false;
            }
        }
        let line = RING_HDR + ((self.index & (self.lines - 1)) as usize) * 64;
        let words = [value; LINE_WORDS - 1];
        // SAFETY: the line's first 56 bytes are inside the file (`lines`
        // lines checked against its length); the consumer has read this
        // line's previous lap (`head`, acquired above or earlier, passed
        // it) and reads these bytes only after it acquires the stamp of
        // its batch's last line, which this producer release-stores after
        // this copy (this line's own stamp below, or a later line's). One wide
        // copy, not seven stores: fewer store-buffer entries per line, so
        // more lines in flight.
        unsafe { std::ptr::copy_nonoverlapping(words.as_ptr().cast::<u8>(), self.map.base().add(line), 56) }
        self.word(self.index, LINE_WORDS - 1).store(self.index + 1, Ordering::Release);
        self.index += 1;
        true
    }

    /// Consumer: reads the next `batch` lines (at most half the stream)
    /// once the last of them is stamped, the first word and the stamp of
    /// each (the
    /// stamp of the last, stored with release after the others, makes the
    /// earlier ones visible), and publishes how far it read. Waiting for a
    /// whole batch keeps the consumer off the line the producer is writing:
    /// a line read while being written moves between the CPUs twice.
    #[inline]
    pub fn try_read(&mut self, batch: u64) -> Line {
        let batch = batch.clamp(1, self.lines / 2);
        let last = self.index + batch - 1;
        if self.word(last, LINE_WORDS - 1).load(Ordering::Acquire) != last + 1 {
            return Line::Empty;
        }
        let (mut value, mut torn) = (0, 0);
        for line in self.index..=last {
            // The first and last words: the line crosses whole either way,
            // and the reader does no more work per line than it must.
            value = self.word(line, 0).load(Ordering::Relaxed);
            if self.word(line, LINE_WORDS - 1).load(Ordering::Relaxed) != line + 1 {
                torn += 1;
            }
        }
        self.index = last + 1;
        if self.index % 64 < batch || batch >= 64 {
            self.map.atomic_u64(STREAM_HEAD).store(self.index, Ordering::Release);
        }
        Line::Read { last: value, torn }
    }
}

/// What [`LineStream::try_read`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// The batch's last line is not written yet.
    Empty,
    /// A batch read: the value of its last line, and how many of its lines
    /// had a wrong stamp (possible only if the file is written by another
    /// hand).
    Read {
        /// The last line's value.
        last: u64,
        /// Lines found torn.
        torn: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_fills_then_drains_in_order() {
        let p = std::env::temp_dir().join(format!("tw-raw-{}", std::process::id()));
        let mut prod = RawRing::create(&p, 4, 64).unwrap();
        let mut cons = RawRing::open(&p).unwrap();
        for i in 0u8..4 {
            assert!(prod.try_push(&[i; 8]));
        }
        assert!(!prod.try_push(&[9; 8]));
        assert!(!prod.try_push(&[9; 8]), "still full");
        let mut got = vec![];
        while cons.try_pop(|b| got.push(b[0])) {}
        assert_eq!(got, vec![0, 1, 2, 3]);
        assert!(prod.try_push(&[4; 8]));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn line_stream_laps_without_overwriting_unread_lines() {
        let p = std::env::temp_dir().join(format!("tw-lines-{}", std::process::id()));
        let mut prod = LineStream::create(&p, 128).unwrap();
        let mut cons = LineStream::open(&p).unwrap();
        for v in 0..128 {
            assert!(prod.try_write(v));
        }
        assert!(!prod.try_write(999), "a whole stream ahead");
        for v in 0..64 {
            assert_eq!(cons.try_read(1), Line::Read { last: v, torn: 0 });
        }
        for v in 128..192 {
            assert!(prod.try_write(v), "the consumer published 64 lines read");
        }
        assert!(!prod.try_write(999));
        let mut got = vec![];
        while let Line::Read { last, torn: 0 } = cons.try_read(16) {
            got.push(last);
        }
        assert_eq!(got, (64..192).skip(15).step_by(16).collect::<Vec<u64>>(), "each batch's last");
        assert_eq!(cons.try_read(1), Line::Empty, "nothing past what was written");
        assert!(prod.try_write(192), "batches published how far they read");
        assert_eq!(cons.try_read(2), Line::Empty, "a batch waits for its last line");
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn a_slot_ring_shows_each_message_at_once_and_laps_only_past_the_reader() {
        let p = std::env::temp_dir().join(format!("tw-slots-{}", std::process::id()));
        let mut prod = SlotRing::create(&p, 4, 64).unwrap();
        let mut cons = SlotRing::open(&p).unwrap();
        assert_eq!(prod.max_payload(), 56);
        assert!(!cons.try_pop(|_| panic!("nothing written")));
        assert!(prod.try_push(&[7; 8]));
        let mut got = vec![];
        assert!(cons.try_pop(|b| got.push(b[0])), "one message, visible without a flush");
        assert!(!cons.try_pop(|_| panic!("read twice")), "found empty: publishes how far it read");
        for i in 1u8..4 {
            assert!(prod.try_push(&[i; 8]));
        }
        assert!(prod.try_push(&[4; 8]), "slot 0 was read, and published when found empty");
        assert!(!prod.try_push(&[9; 8]), "full: the reader has not passed slot 1");
        while cons.try_pop(|b| got.push(b[0])) {}
        assert_eq!(got, vec![7, 1, 2, 3, 4], "the next lap's stamp told slot 0's new message from its old one");
        assert!(prod.try_push(&[5; 8]));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn a_ring_file_of_another_kind_or_with_sizes_past_its_end_is_refused() {
        let p = std::env::temp_dir().join(format!("tw-slots-kind-{}", std::process::id()));
        let q = std::env::temp_dir().join(format!("tw-slots-raw-{}", std::process::id()));
        SlotRing::create(&p, 4, 64).unwrap();
        RawRing::create(&q, 4, 64).unwrap();
        assert!(matches!(SlotRing::open(&q), Err(ShmError::Corrupt { .. })));
        assert!(matches!(RawRing::open(&p), Err(ShmError::Corrupt { .. })), "and the other way round");
        let z = std::env::temp_dir().join(format!("tw-slots-zero-{}", std::process::id()));
        std::fs::write(&z, vec![0u8; RING_HDR + 4 * 64]).unwrap();
        assert!(matches!(RawRing::open(&z), Err(ShmError::Corrupt { .. })), "a file of zeros is no ring");
        let _ = std::fs::remove_file(&z);
        // A header whose sizes overflow or pass the file's end is refused.
        for (slots, slot_len) in [(1u64 << 62, 64u64), (8, 64), (4, 96)] {
            let map = MappedFile::open(&q).unwrap();
            map.atomic_u64(8).store(slots, Ordering::Relaxed);
            map.atomic_u64(16).store(slot_len, Ordering::Relaxed);
            let e = RawRing::open(&q).unwrap_err().to_string();
            assert!(e.contains("sizes do not match"), "{slots} x {slot_len}: {e}");
        }
        let _ = (std::fs::remove_file(&p), std::fs::remove_file(&q));
    }

    #[test]
    fn batched_pushes_are_seen_after_a_flush() {
        let p = std::env::temp_dir().join(format!("tw-raw-batch-{}", std::process::id()));
        let mut prod = RawRing::create(&p, 64, 64).unwrap();
        let mut cons = RawRing::open(&p).unwrap();
        for i in 0u8..20 {
            assert!(prod.try_push_batched(&[i; 8]));
        }
        let mut got = vec![];
        while cons.try_pop(|b| got.push(b[0])) {}
        assert_eq!(got, (0..16).collect::<Vec<u8>>(), "the first 16 were published");
        prod.flush();
        while cons.try_pop(|b| got.push(b[0])) {}
        assert_eq!(got, (0..20).collect::<Vec<u8>>());
        let _ = std::fs::remove_file(&p);
    }
}
