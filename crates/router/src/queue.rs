//! A client's bounded outbound queue of DELIVER frames.
//!
//! Frames wait here when the client's transport cannot take them yet (its
//! shared-memory log is full, or its TCP socket's buffer is). Each frame is
//! stored whole behind a 4-byte little-endian length, so the queued bytes
//! are exactly what goes on a TCP connection and one `write` sends many.
//!
//! When a new frame would overflow the bound, the **oldest** frames are
//! dropped (the newest data is what a trading client wants) and the
//! discard count is added to the `value` field of the frame that now comes
//! first after them: Solace's discard indication, carried on the next
//! message the client receives.

use rustc_hash::FxHashMap;
use tickwire_wire::client::{self, ClientRepr};

/// Length prefix bytes before each queued frame.
pub const PREFIX: usize = 4;

/// A FIFO of encoded frames, bounded in bytes, dropping the oldest.
#[derive(Debug)]
pub struct OutQueue {
    buf: Vec<u8>,
    head: usize,
    frames: usize,
    limit: usize,
    dropped: u64,
    /// Bytes ever appended before `buf[0]` (a frame's position in `latest`
    /// less this is its index in `buf`).
    base: u64,
    /// Conflated topics: the position of each one's newest queued frame.
    latest: FxHashMap<Box<str>, u64>,
}

impl OutQueue {
    /// A queue holding at most `limit` bytes (prefixes included); one frame
    /// larger than the limit is still accepted alone.
    pub fn new(limit: usize) -> Self {
        Self { buf: Vec::new(), head: 0, frames: 0, limit, dropped: 0, base: 0, latest: FxHashMap::default() }
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
        self.buf.len() - self.head
    }
    /// Frames dropped since the queue was made.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    fn frame_len_at(&self, at: usize) -> usize {
        let mut p = [0u8; PREFIX];
        p.copy_from_slice(&self.buf[at..at + PREFIX]);
        u32::from_le_bytes(p) as usize
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
        let Some(idx) = idx.filter(|&i| i >= self.head && i + PREFIX <= self.buf.len()) else {
            self.latest.remove(topic);
            return false;
        };
        let len = self.frame_len_at(idx);
        let frame = &mut self.buf[idx + PREFIX..idx + PREFIX + len];
        let body = client::HEADER_LEN + topic.len();
        if len != body + payload.len() || frame.get(client::HEADER_LEN..body) != Some(topic.as_bytes()) {
            return false;
        }
        frame[body..].copy_from_slice(payload);
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

    fn push_with(&mut self, repr: &ClientRepr<'_>, drop_oldest: bool) -> u32 {
        let need = PREFIX + repr.buffer_len();
        let mut dropped = 0u32;
        let mut carried = 0u32;
        while drop_oldest && self.frames > 0 && self.bytes() + need > self.limit {
            let len = self.frame_len_at(self.head);
            let frame = &self.buf[self.head + PREFIX..self.head + PREFIX + len];
            carried = carried.saturating_add(client::value_of(frame)).saturating_add(1);
            self.head += PREFIX + len;
            self.frames -= 1;
            dropped += 1;
        }
        self.dropped += u64::from(dropped);
        if self.frames > 0 && carried > 0 {
            let at = self.head + PREFIX;
            let len = self.frame_len_at(self.head);
            let v = client::value_of(&self.buf[at..at + len]).saturating_add(carried);
            client::set_value(&mut self.buf[at..at + len], v);
            carried = 0;
        }
        if self.head > 0 && self.head >= self.buf.len() / 2 {
            self.buf.drain(..self.head);
            self.base += self.head as u64;
            self.head = 0;
        }
        let at = self.buf.len();
        self.buf.resize(at + need, 0);
        let frame_len = repr.buffer_len() as u32;
        self.buf[at..at + PREFIX].copy_from_slice(&frame_len.to_le_bytes());
        // The buffer was sized from `repr` itself, so emit cannot fail.
        let _ = repr.emit(&mut self.buf[at + PREFIX..]);
        if carried > 0 {
            let f = &mut self.buf[at + PREFIX..];
            let v = client::value_of(f).saturating_add(carried);
            client::set_value(f, v);
        }
        self.frames += 1;
        dropped
    }

    /// The oldest frame, without its prefix.
    pub fn front(&self) -> Option<&[u8]> {
        (self.frames > 0).then(|| {
            let len = self.frame_len_at(self.head);
            &self.buf[self.head + PREFIX..self.head + PREFIX + len]
        })
    }

    /// Removes the oldest frame.
    pub fn pop(&mut self) {
        if self.frames > 0 {
            self.head += PREFIX + self.frame_len_at(self.head);
            self.frames -= 1;
            self.reset_if_empty();
        }
    }

    /// An empty queue starts its buffer again.
    fn reset_if_empty(&mut self) {
        if self.frames == 0 {
            self.base += self.buf.len() as u64;
            self.buf.clear();
            self.head = 0;
            self.latest.clear();
        }
    }

    /// Drops every queued frame (counted as dropped); returns how many.
    pub fn clear(&mut self) -> usize {
        let n = self.frames;
        self.dropped += n as u64;
        self.frames = 0;
        self.reset_if_empty();
        n
    }

    /// Every queued byte, prefixes included, oldest first (what a TCP
    /// connection writes).
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[self.head..]
    }

    /// Removes the first `n` bytes of [`OutQueue::as_bytes`] after they were
    /// written; returns the frames begun. A frame cut by `n` is removed whole
    /// and its unwritten tail appended to `rest`, for the caller to write
    /// before anything else.
    pub fn consume(&mut self, mut n: usize, rest: &mut Vec<u8>) -> usize {
        let mut frames = 0;
        while n > 0 && self.frames > 0 {
            let whole = PREFIX + self.frame_len_at(self.head);
            frames += 1;
            self.frames -= 1;
            if n < whole {
                rest.extend_from_slice(&self.buf[self.head + n..self.head + whole]);
                self.head += whole;
                break;
            }
            n -= whole;
            self.head += whole;
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
    fn front(q: &OutQueue) -> (u64, u32) {
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
        assert_eq!(front(&q), (1, 1), "frame 1 says one was dropped before it");
        assert_eq!(q.push(&deliver(4)), 1);
        assert_eq!(front(&q), (2, 2), "the counts add up: 0 and 1 were dropped");
        q.pop();
        assert_eq!(front(&q), (3, 0));
        assert_eq!(q.dropped(), 2);
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn a_full_queue_of_one_frame_hands_the_count_to_the_new_one() {
        let mut q = OutQueue::new(40);
        q.push(&deliver(0));
        assert_eq!(q.push(&deliver(1)), 1);
        assert_eq!(front(&q), (1, 1));
        assert_eq!(q.push(&deliver(2)), 1);
        assert_eq!(front(&q), (2, 2));
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
            let mut rest = q.as_bytes();
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
        let all = q.as_bytes().to_vec();
        assert_eq!(all.len(), 3 * 36);
        let mut rest = Vec::new();
        assert_eq!(q.consume(36 + 10, &mut rest), 2);
        assert_eq!(rest, all[46..72]);
        assert_eq!(q.len(), 1);
        assert_eq!(front(&q), (2, 0));
        rest.clear();
        assert_eq!(q.consume(36, &mut rest), 1);
        assert!(rest.is_empty());
        assert!(q.is_empty() && q.as_bytes().is_empty());
    }
}
