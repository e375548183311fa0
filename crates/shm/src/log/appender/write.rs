//! The appender's stores into the ring: the frame header, the payload, and
//! the zeroes kept ahead of the newest claim. On the hot path every store
//! counts: a caught-up subscriber holds the line the next frame goes into,
//! and the store buffer drains in order behind it.

use super::{LogAppender, DATA_HDR};
use crate::copy::copy_bytes;
use tickwire_wire::{data, header};

// `write_header`'s three words are the wire's DATA header after the commit
// word: session and stream ids, the position, then the topic length with
// the reserved bytes (zero) to the header's end. Checked here, so that a
// change of the wire layout fails to build instead of writing the old one.
const _: () = assert!(
    header::SESSION_ID == 8
        && header::STREAM_ID == header::SESSION_ID + 4
        && data::POSITION == 16
        && data::TOPIC_LENGTH == 24
        && data::RESERVED == data::TOPIC_LENGTH + 2
        && DATA_HDR == data::TOPIC_LENGTH + 8
);

/// How far past its position the publisher keeps the ring zeroed, in bytes;
/// it clears again, after a commit, when less than half of it is left.
pub(super) const CLEAR_AHEAD: u64 = 1024;
/// A cache line: the ring is cleared in whole lines.
const LINE: u64 = 64;

impl LogAppender {
    /// Writes the header's words after the commit word: session and stream
    /// ids, stream position, topic length (the rest of the word reserved,
    /// zero), then the topic. Three word stores, no copy through the stack:
    /// on the hot path every store counts, since a caught-up subscriber
    /// holds the frame's line and the store buffer drains in order.
    #[inline(always)]
    pub(super) fn write_header(&mut self, off: u64, position: u64, topic: &str) {
        let ids = u64::from(self.session_id) | u64::from(self.stream_id) << 32;
        // SAFETY: bytes [off+8, off+32+topic) lie inside the frame just
        // claimed (frames are at least 32 bytes, 32-aligned, and do not cross
        // the ring end), so the three words are 8-aligned and in the ring; no
        // reader touches them before the commit word is released.
        unsafe {
            let dst = self.ring.add(off as usize);
            dst.add(header::SESSION_ID).cast::<u64>().write(ids.to_le());
            dst.add(data::POSITION).cast::<u64>().write(position.to_le());
            dst.add(data::TOPIC_LENGTH).cast::<u64>().write((topic.len() as u64).to_le());
            if !topic.is_empty() {
                std::ptr::copy_nonoverlapping(topic.as_ptr(), dst.add(DATA_HDR), topic.len());
            }
        }
    }

    /// Copies the payload so that the cache line holding the frame's commit
    /// word (the line caught-up subscribers spin on) is written last: bytes
    /// in later lines first, then the bytes in that line. Otherwise a
    /// spinning subscriber steals the line back while the publisher waits
    /// for the payload's other lines, and the commit must fetch it again.
    #[inline(always)]
    pub(super) fn write_payload_last_line_first(&mut self, frame_off: u64, ring_offset: u64, bytes: &[u8]) {
        let line_end = (frame_off | (LINE - 1)) + 1;
        let split = (line_end.saturating_sub(ring_offset) as usize).min(bytes.len());
        // SAFETY: the caller claimed a frame covering
        // [ring_offset, ring_offset + bytes.len()); see `write_header`.
        unsafe {
            let dst = self.ring.add(ring_offset as usize);
            if split < bytes.len() {
                copy_bytes(bytes.as_ptr().add(split), dst.add(split), bytes.len() - split);
            }
            copy_bytes(bytes.as_ptr(), dst, split);
        }
    }

    /// Zeroes the ring from `cleared_to` up to [`CLEAR_AHEAD`] past the
    /// position (at least to `at_least`, at most to the limit, below which
    /// every subscriber has read the previous lap), so that every commit word
    /// a reader can reach next reads 0 until its frame is committed.
    ///
    /// In whole lines as a rule (a clear forced by `begin_frame` ends where
    /// the frame's next commit word does), ahead of the readers, after a
    /// commit: instead of one store per frame into the line after it, which
    /// a caught-up reader is about to spin on. A few lines at a time (half of
    /// [`CLEAR_AHEAD`]), so that no commit waits behind a long clear: bulk
    /// cleaning of a whole buffer would put multi-microsecond stalls into
    /// p99.9. The zeroes are plain stores, made visible to
    /// readers going frame by frame by the commit release of a frame before
    /// them, to joiners by the `tail` release and to an evicted reader by the
    /// eviction's release ([`order::CLEAR_COMMIT`]'s argument, for a range).
    #[inline(never)]
    pub(super) fn clear_ahead(&mut self, at_least: u64) {
        let want = (self.position + CLEAR_AHEAD) & !(LINE - 1);
        debug_assert!(at_least <= self.limit, "clear to {at_least} past the limit {}", self.limit);
        let to = want.min(self.limit).max(at_least);
        let from = self.cleared_to;
        if to <= from {
            return;
        }
        let off = from & self.mask;
        let len = to - from;
        let first = len.min(self.capacity - off);
        // SAFETY: [from, to) lies past the end of the newest claim (`from` >=
        // position + FRAME_ALIGNMENT, the invariant `begin_frame` keeps) and
        // below the limit, so no subscriber reads it in this lap (it has not
        // reached it) nor in the last (every subscriber is past `to` minus
        // the capacity; a lossy reader evicted but not yet polled may still
        // look at its old commit word, as it may while frames are written
        // there, and its next poll discards what it saw); `len` <= capacity,
        // so the two pieces are in the ring.
        unsafe {
            std::ptr::write_bytes(self.ring.add(off as usize), 0, first as usize);
            if len > first {
                std::ptr::write_bytes(self.ring, 0, (len - first) as usize);
            }
        }
        self.cleared_to = to;
    }
}
