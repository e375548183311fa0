//! A client's bounded outbound queue of DELIVER frames.
//!
//! Frames wait here when the client's transport cannot take them yet (its
//! shared-memory log is full, or its TCP socket's buffer is). Each frame is
//! stored whole behind a 4-byte little-endian length, so the queued bytes
//! are exactly what goes on a TCP connection and one `writev` sends many.
//!
//! When a new frame would overflow the bound, the **oldest** frames are
//! dropped (the newest data is what a trading client wants) and the
//! discard count is added to the `value` field of the frame that now comes
//! first after them: Solace's discard indication, carried on the next
//! message the client receives.
//!
//! Its memory is its bound, as the allocator sees it: the frames live in a
//! ring ([`VecDeque`]) that grows by doubling only as far as the bound
//! (past it only for a back-pressure client's frames, by an eighth at a
//! time), so dropping the oldest never copies what is left and a full
//! queue of `queue_bytes` holds `queue_bytes` of memory, not twice that.
//! [`OutQueue::trim`] (the housekeeping's) gives back what a queue that
//! emptied or shrank no longer uses.

use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use tickwire_transport::framing;
use tickwire_wire::client::{self, ClientRepr, HEADER_LEN};

/// Length prefix bytes before each queued frame.
pub const PREFIX: usize = framing::PREFIX_LEN;

/// The least a queue allocates when it first holds something, bytes.
const MIN_CAPACITY: usize = 4 << 10;

/// A FIFO of encoded frames, bounded in bytes, dropping the oldest.
#[derive(Debug)]
pub struct OutQueue {
    /// The frames, oldest first, each behind its prefix.
    buf: VecDeque<u8>,
    frames: usize,
    limit: usize,
    /// The bound now: `limit`, or less while the router-wide
    /// `max_queued_bytes` squeezes it ([`OutQueue::squeeze`]).
    bound: usize,
    dropped: u64,
    /// Bytes ever removed from the front of `buf` (a frame's position in
    /// `latest` less this is its index in `buf`).
    base: u64,
    /// Conflated topics: the position of each one's newest queued frame.
    latest: FxHashMap<Box<str>, u64>,
}

impl OutQueue {
    /// A queue holding at most `limit` bytes (prefixes included); one frame
    /// larger than the limit is still accepted alone.
    pub fn new(limit: usize) -> Self {
        Self { buf: VecDeque::new(), frames: 0, limit, bound: limit, dropped: 0, base: 0, latest: FxHashMap::default() }
    }

    /// Queued frames.
    pub fn len(&self) -> usize {
        self.frames
    }
    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.frames == 0
    }
    /// Queued bytes, prefixes included.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }
    /// Bytes it has allocated for frames (what the allocator gives it:
    /// at most the bound, or what a back-pressure client was let go
    /// past it).
    pub fn allocated(&self) -> usize {
        self.buf.capacity()
    }
    /// Frames dropped since the queue was made.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// `len` bytes from `at`, as the (one or two) slices the ring holds
    /// them in.
    fn parts(&self, at: usize, len: usize) -> (&[u8], &[u8]) {
        let (a, b) = self.buf.as_slices();
        if at >= a.len() {
            (&b[at - a.len()..at - a.len() + len], &[])
        } else if at + len <= a.len() {
            (&a[at..at + len], &[])
        } else {
            (&a[at..], &b[..at + len - a.len()])
        }
    }

    /// Copies `bytes` over the queued bytes from `at`.
    fn write_at(&mut self, at: usize, bytes: &[u8]) {
        let (a, b) = self.buf.as_mut_slices();
        if at >= a.len() {
            b[at - a.len()..at - a.len() + bytes.len()].copy_from_slice(bytes);
        } else if at + bytes.len() <= a.len() {
            a[at..at + bytes.len()].copy_from_slice(bytes);
        } else {
            let (x, y) = bytes.split_at(a.len() - at);
            a[at..].copy_from_slice(x);
            b[..y.len()].copy_from_slice(y);
        }
    }

    /// Copies the queued bytes from `at` into `out` (filled).
    fn read_at(&self, at: usize, out: &mut [u8]) {
        let (x, y) = self.parts(at, out.len());
        out[..x.len()].copy_from_slice(x);
        out[x.len()..].copy_from_slice(y);
    }

    fn frame_len_at(&self, at: usize) -> usize {
        let mut p = [0u8; PREFIX];
        self.read_at(at, &mut p);
        u32::from_le_bytes(p) as usize
    }

    /// The discard indication of the frame whose prefix is at `at`.
    fn value_at(&self, at: usize) -> u32 {
        let mut h = [0u8; HEADER_LEN];
        self.read_at(at + PREFIX, &mut h);
        client::value_of(&h)
    }

    fn set_value_at(&mut self, at: usize, v: u32) {
        let mut h = [0u8; HEADER_LEN];
        self.read_at(at + PREFIX, &mut h);
        client::set_value(&mut h, v);
        self.write_at(at + PREFIX, &h);
    }

    /// Removes the first `n` bytes.
    fn remove_front(&mut self, n: usize) {
        self.buf.drain(..n);
        self.base += n as u64;
    }

    /// Appends `repr` (a DELIVER), dropping the oldest frames first if it
    /// would not fit; returns how many were dropped.
    pub fn push(&mut self, repr: &ClientRepr<'_>) -> u32 {
        self.push_with(repr, true)
    }

    /// [`OutQueue::push`], remembering the frame as its topic's newest for
    /// [`OutQueue::replace`].
    pub fn push_conflated(&mut self, repr: &ClientRepr<'_>) -> u32 {
        let dropped = self.push_with(repr, true);
        let at = self.base + (self.buf.len() - PREFIX - repr.buffer_len()) as u64;
        self.latest.insert(repr.topic.into(), at);
        dropped
    }

    /// Conflation: overwrites the payload of `topic`'s newest queued frame
    /// with `payload`, if it is still queued and the same size (fixed-size
    /// market data); it keeps its place, sequence and discard count.
    /// Whether it did.
    pub fn replace(&mut self, topic: &str, payload: &[u8]) -> bool {
        let Some(&at) = self.latest.get(topic) else { return false };
        let idx = at.checked_sub(self.base).map(|i| i as usize);
        let Some(idx) = idx.filter(|&i| i + PREFIX <= self.buf.len()) else {
            self.latest.remove(topic);
            return false;
        };
        let len = self.frame_len_at(idx);
        let body = HEADER_LEN + topic.len();
        if len != body + payload.len() {
            return false;
        }
        let (x, y) = self.parts(idx + PREFIX + HEADER_LEN, topic.len());
        let t = topic.as_bytes();
        if x != &t[..x.len()] || y != &t[x.len()..] {
            return false;
        }
        self.write_at(idx + PREFIX + body, payload);
        true
    }

    /// Appends `repr` past the bound if need be, dropping nothing (a
    /// back-pressure client: its publishers are held instead).
    pub fn push_keep(&mut self, repr: &ClientRepr<'_>) {
        self.push_with(repr, false);
    }

    /// Whether it holds more than its bound.
    pub fn is_over(&self) -> bool {
        self.bytes() > self.limit
    }

    /// Whether it holds at most half its bound.
    pub fn is_below_half(&self) -> bool {
        self.bytes() <= self.limit / 2
    }

    /// Makes room for `need` more bytes: doubling, but not past the bound
    /// (past it, for a frame kept over it, by an eighth at a time).
    fn make_room(&mut self, need: usize) {
        let (len, cap) = (self.buf.len(), self.buf.capacity());
        let want = len + need;
        if want <= cap {
            return;
        }
        let grown = if want <= self.bound {
            (cap * 2).max(MIN_CAPACITY).min(self.bound).max(want)
        } else {
            want.max(cap + cap / 8)
        };
        self.buf.reserve_exact(grown - len);
    }

    /// Drops the oldest frames (counted) until `need` more bytes fit in
    /// `room`, carrying their discard counts to the frame then first;
    /// returns how many went and the count the next frame must carry (if
    /// none is left to carry it).
    fn drop_oldest(&mut self, need: usize, room: usize) -> (u32, u32) {
        let mut dropped = 0u32;
        let mut carried = 0u32;
        while self.frames > 0 && self.bytes() + need > room {
            let len = self.frame_len_at(0);
            carried = carried.saturating_add(self.value_at(0)).saturating_add(1);
            self.remove_front(PREFIX + len);
            self.frames -= 1;
            dropped += 1;
        }
        self.dropped += u64::from(dropped);
        if self.frames > 0 && carried > 0 {
            let v = self.value_at(0).saturating_add(carried);
            self.set_value_at(0, v);
            carried = 0;
        }
        (dropped, carried)
    }

    fn push_with(&mut self, repr: &ClientRepr<'_>, drop_oldest: bool) -> u32 {
        let frame_len = repr.buffer_len();
        let need = PREFIX + frame_len;
        let (dropped, carried) = if drop_oldest { self.drop_oldest(need, self.bound) } else { (0, 0) };
        self.make_room(need);
        let at = self.buf.len();
        self.buf.resize(at + need, 0);
        self.write_at(at, &framing::prefix(frame_len));
        // Emitted in place, unless the ring's end cuts it (once a turn).
        let start = at + PREFIX;
        let (a, b) = self.buf.as_mut_slices();
        if start >= a.len() {
            let _ = repr.emit(&mut b[start - a.len()..]);
        } else if start + frame_len <= a.len() {
            let _ = repr.emit(&mut a[start..start + frame_len]);
        } else {
            let mut f = vec![0u8; frame_len];
            // Sized from `repr` itself, so emit cannot fail.
            let _ = repr.emit(&mut f);
            self.write_at(start, &f);
        }
        if carried > 0 {
            let v = self.value_at(at).saturating_add(carried);
            self.set_value_at(at, v);
        }
        self.frames += 1;
        dropped
    }

    /// Drops the oldest frames (counted, their discard count carried to
    /// the frame then first) until at most `bytes` are queued; returns how
    /// many went.
    pub fn drop_oldest_to(&mut self, bytes: usize) -> u32 {
        let (dropped, _) = self.drop_oldest(0, bytes);
        self.reset_if_empty();
        dropped
    }

    /// Lowers its bound to `bytes` (at most its own limit) until
    /// [`OutQueue::unsqueeze`]: the oldest frames are dropped (counted) to
    /// fit, the memory above the bound is given back, and it grows no
    /// further. The router-wide `max_queued_bytes` trims this way. Returns
    /// the frames dropped.
    pub fn squeeze(&mut self, bytes: usize) -> u32 {
        self.bound = bytes.min(self.limit);
        let dropped = self.drop_oldest_to(self.bound);
        self.buf.shrink_to(self.bound.max(self.buf.len()));
        dropped
    }

    /// Its bound is its limit again.
    pub fn unsqueeze(&mut self) {
        self.bound = self.limit;
    }

    /// The oldest frame, without its prefix (made contiguous first if the
    /// ring's end cuts it: once a turn).
    pub fn front(&mut self) -> Option<&[u8]> {
        if self.frames == 0 {
            return None;
        }
        let len = self.frame_len_at(0);
        if self.buf.as_slices().0.len() < PREFIX + len {
            self.buf.make_contiguous();
        }
        Some(&self.buf.as_slices().0[PREFIX..PREFIX + len])
    }

    /// Removes the oldest frame.
    pub fn pop(&mut self) {
        if self.frames > 0 {
            let len = self.frame_len_at(0);
            self.remove_front(PREFIX + len);
            self.frames -= 1;
            self.reset_if_empty();
        }
    }

    /// An empty queue forgets its conflated topics.
    fn reset_if_empty(&mut self) {
        if self.frames == 0 {
            self.base += self.buf.len() as u64;
            self.buf.clear();
            self.latest.clear();
        }
    }

    /// Gives back memory it no longer uses: all of it once empty, half of
    /// it while it holds under a quarter (each call halves it again, down
    /// to twice what it holds). Returns the bytes given back. Call it
    /// every few milliseconds (the housekeeping).
    pub fn trim(&mut self) -> usize {
        let cap = self.buf.capacity();
        if self.frames == 0 {
            if cap > 0 || self.latest.capacity() > 0 {
                self.buf = VecDeque::new();
                self.latest = FxHashMap::default();
            }
            return cap;
        }
        if cap > MIN_CAPACITY && self.buf.len() < cap / 4 {
            self.buf.shrink_to((cap / 2).max(MIN_CAPACITY));
            return cap.saturating_sub(self.buf.capacity());
        }
        0
    }

    /// Drops every queued frame (counted as dropped) and gives back their
    /// memory; returns how many.
    pub fn clear(&mut self) -> usize {
        let n = self.frames;
        self.dropped += n as u64;
        self.frames = 0;
        self.reset_if_empty();
        self.trim();
        n
    }

    /// Every queued byte, prefixes included, oldest first (what a TCP
    /// connection writes), as the two slices of the ring.
    pub fn as_slices(&self) -> (&[u8], &[u8]) {
        self.buf.as_slices()
    }

    /// Removes the first `n` bytes of [`OutQueue::as_slices`] after they
    /// were written; returns the frames begun. A frame cut by `n` is
    /// removed whole and its unwritten tail appended to `rest`, for the
    /// caller to write before anything else.
    pub fn consume(&mut self, mut n: usize, rest: &mut Vec<u8>) -> usize {
        let mut frames = 0;
        while n > 0 && self.frames > 0 {
            let whole = PREFIX + self.frame_len_at(0);
            frames += 1;
            self.frames -= 1;
            if n < whole {
                let (x, y) = self.parts(n, whole - n);
                rest.extend_from_slice(x);
                rest.extend_from_slice(y);
                self.remove_front(whole);
                break;
            }
            n -= whole;
            self.remove_front(whole);
        }
        self.reset_if_empty();
        frames
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_wire::client::ClientKind;
    use tickwire_wire::ClientFrame;

    fn deliver(seq: u64) -> ClientRepr<'static> {
        ClientRepr { sequence: seq, topic: "t", body: &[0u8; 15], ..ClientRepr::new(ClientKind::Deliver) }
    }
    fn bytes(q: &OutQueue) -> Vec<u8> {
        let (a, b) = q.as_slices();
        [a, b].concat()
    }
    fn front(q: &mut OutQueue) -> (u64, u32) {
        let f = ClientFrame::new_checked(q.front().unwrap()).unwrap();
        (f.sequence(), f.value())
    }

    #[test]
    fn full_drops_the_oldest_and_the_next_frame_carries_the_count() {
        // Each frame: 4 + 16 + 1 + 15 = 36 bytes; room for 3.
        let mut q = OutQueue::new(3 * 36);
        for s in 0..3 {
            assert_eq!(q.push(&deliver(s)), 0);
        }
        assert_eq!(q.push(&deliver(3)), 1);
        assert_eq!(front(&mut q), (1, 1), "frame 1 says one was dropped before it");
        assert_eq!(q.push(&deliver(4)), 1);
        assert_eq!(front(&mut q), (2, 2), "the counts add up: 0 and 1 were dropped");
        q.pop();
        assert_eq!(front(&mut q), (3, 0));
        assert_eq!(q.dropped(), 2);
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn a_full_queue_of_one_frame_hands_the_count_to_the_new_one() {
        let mut q = OutQueue::new(40);
        q.push(&deliver(0));
        assert_eq!(q.push(&deliver(1)), 1);
        assert_eq!(front(&mut q), (1, 1));
        assert_eq!(q.push(&deliver(2)), 1);
        assert_eq!(front(&mut q), (2, 2));
    }

    #[test]
    fn conflation_overwrites_the_newest_queued_frame_of_a_topic_in_place() {
        let frame = |topic: &'static str, body: &'static [u8], seq| ClientRepr {
            sequence: seq,
            topic,
            body,
            ..ClientRepr::new(ClientKind::Deliver)
        };
        // Room for six 22-byte frames: the oldest go as it fills.
        let mut q = OutQueue::new(150);
        q.push_conflated(&frame("a", b"1", 0));
        q.push_conflated(&frame("b", b"1", 1));
        assert!(q.replace("a", b"2"), "same size: in place");
        assert!(!q.replace("a", b"22"), "another size: not");
        assert!(!q.replace("c", b"1"), "never queued");
        let bodies = |q: &OutQueue| -> Vec<(String, Vec<u8>, u64)> {
            let mut out = Vec::new();
            let all = bytes(q);
            let mut rest = &all[..];
            while !rest.is_empty() {
                let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
                let f = ClientFrame::new_checked(&rest[4..4 + len]).unwrap();
                out.push((f.topic().to_owned(), f.body().to_vec(), f.sequence()));
                rest = &rest[4 + len..];
            }
            out
        };
        assert_eq!(bodies(&q), [("a".into(), b"2".to_vec(), 0), ("b".into(), b"1".to_vec(), 1)]);
        // Filling past the bound drops "a"'s frame: replacing it is refused,
        // and the positions of those left stay right after the buffer moves.
        for s in 2..8 {
            q.push_conflated(&frame("c", b"1", s));
        }
        assert!(!q.replace("a", b"3") && !q.replace("b", b"3"));
        assert!(q.replace("c", b"9"));
        assert_eq!(bodies(&q).len(), 6);
        assert_eq!(bodies(&q).last().unwrap(), &("c".into(), b"9".to_vec(), 7));
        q.clear();
        assert!(!q.replace("c", b"1"));
    }

    #[test]
    fn consume_returns_the_unwritten_tail_of_a_cut_frame() {
        let mut q = OutQueue::new(1 << 20);
        for s in 0..3 {
            q.push(&deliver(s));
        }
        let all = bytes(&q);
        assert_eq!(all.len(), 3 * 36);
        let mut rest = Vec::new();
        assert_eq!(q.consume(36 + 10, &mut rest), 2);
        assert_eq!(rest, all[46..72]);
        assert_eq!(q.len(), 1);
        assert_eq!(front(&mut q), (2, 0));
        rest.clear();
        assert_eq!(q.consume(36, &mut rest), 1);
        assert!(rest.is_empty());
        assert!(q.is_empty() && bytes(&q).is_empty());
    }

    #[test]
    fn a_full_queue_allocates_its_bound_not_twice_it_and_keeps_order_across_the_ring_s_end() {
        // 36-byte frames in a 1000-byte bound: 27 fit; the ring turns
        // every 27 frames and drops the oldest without moving the rest.
        let mut q = OutQueue::new(1000);
        let mut next = 0u64;
        for s in 0..10_000 {
            q.push(&deliver(s));
            assert!(q.allocated() <= 1000, "{} bytes allocated at frame {s}", q.allocated());
            if s % 7 == 0 {
                // A reader takes one now and then: what it gets is in order
                // and says how many it missed.
                let (seq, missed) = front(&mut q);
                assert_eq!(seq, next + u64::from(missed), "frame {s}");
                next = seq + 1;
                q.pop();
            }
        }
        println!("10,000 frames through a 1000-byte queue: {} bytes allocated, {} dropped", q.allocated(), q.dropped());
        assert_eq!(q.bytes(), 27 * 36);
        // Conflation and a cut write work where the ring's end cuts a frame.
        let all = bytes(&q);
        let mut rest = Vec::new();
        let frames = q.consume(all.len() - 10, &mut rest);
        assert_eq!((frames, &rest[..]), (27, &all[all.len() - 10..]));
    }

    #[test]
    fn trim_gives_back_an_emptied_queue_s_memory_and_halves_an_underused_one() {
        let mut q = OutQueue::new(1 << 20);
        for s in 0..20_000 {
            q.push(&deliver(s));
        }
        let full = q.allocated();
        assert!((700_000..=1 << 20).contains(&full), "{full}");
        // Nearly drained: each trim halves it, down to what it holds.
        let mut rest = Vec::new();
        q.consume(q.bytes() - 36 * 10, &mut rest);
        let mut trims = vec![q.allocated()];
        while q.trim() > 0 {
            trims.push(q.allocated());
        }
        println!("a drained 1 MiB queue holding 360 bytes, trimmed: {trims:?}");
        assert!(q.allocated() >= 360 && q.allocated() <= MIN_CAPACITY, "{trims:?}");
        assert_eq!(front(&mut q).0, 20_000 - 10, "what it held is intact");
        while !q.is_empty() {
            q.pop();
        }
        assert!(q.trim() > 0);
        assert_eq!(q.allocated(), 0, "empty: all of it given back");
    }

    #[test]
    fn drop_oldest_to_trims_from_the_front_and_the_next_frame_carries_the_count() {
        let mut q = OutQueue::new(1 << 20);
        for s in 0..100 {
            q.push(&deliver(s));
        }
        assert_eq!(q.drop_oldest_to(36 * 40), 60);
        assert_eq!((q.len(), q.dropped(), front(&mut q)), (40, 60, (60, 60)));
        assert_eq!(q.drop_oldest_to(0), 40);
        assert!(q.is_empty());
    }
}
