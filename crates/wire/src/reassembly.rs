//! Reassembly of fragmented messages: shared by the shared-memory subscriber
//! and the network receiver.

use crate::flags;

/// What a fragment did to the message being reassembled.
pub enum Step {
    /// More fragments are needed.
    Pending,
    /// The message is complete in `buf()`.
    Complete,
    /// The fragment did not fit (missing BEGIN, or over `max`): the partial
    /// message was dropped.
    Dropped,
}

/// Collects BEGIN .. END fragments into one buffer, bounded by `max` bytes.
#[derive(Debug)]
pub struct Reassembler {
    buf: Vec<u8>,
    topic: String,
    start: u64,
    active: bool,
    max: usize,
}

impl Reassembler {
    /// A reassembler for messages of at most `max` bytes (memory grows to `max`, never beyond).
    pub fn new(max: usize) -> Self {
        Self { buf: Vec::new(), topic: String::new(), start: 0, active: false, max }
    }

    /// Forgets a partial message (after a loss). Returns whether one existed.
    pub fn reset(&mut self) -> bool {
        std::mem::replace(&mut self.active, false)
    }

    /// Adds one fragment with its DATA flags; see [`Step`].
    pub fn push(&mut self, fl: u8, topic: &str, payload: &[u8], position: u64) -> Step {
        if fl & flags::BEGIN != 0 {
            // The caller resets (and counts) any open message first.
            self.buf.clear();
            self.topic.clear();
            self.topic.push_str(topic);
            self.start = position;
            self.active = true;
        } else if !self.active {
            return Step::Dropped;
        }
        if !self.append(payload) {
            self.active = false;
            return Step::Dropped;
        }
        if fl & flags::END != 0 {
            self.active = false;
            return Step::Complete;
        }
        Step::Pending
    }

    fn append(&mut self, payload: &[u8]) -> bool {
        if self.buf.len() + payload.len() > self.max {
            return false;
        }
        self.buf.extend_from_slice(payload);
        true
    }

    /// The completed message: topic, payload, position of its first fragment.
    pub fn message(&self) -> (&str, &[u8], u64) {
        (&self.topic, &self.buf, self.start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::{BEGIN, END};

    #[test]
    fn joins_fragments_and_drops_orphans_and_oversize() {
        let mut r = Reassembler::new(8);
        assert!(matches!(r.push(0, "", b"xx", 0), Step::Dropped));
        assert!(matches!(r.push(BEGIN, "t", b"abc", 64), Step::Pending));
        assert!(matches!(r.push(0, "", b"de", 128), Step::Pending));
        assert!(matches!(r.push(END, "", b"f", 192), Step::Complete));
        assert_eq!(r.message(), ("t", &b"abcdef"[..], 64));
        assert!(matches!(r.push(BEGIN, "", b"12345", 0), Step::Pending));
        assert!(matches!(r.push(END, "", b"6789", 0), Step::Dropped));
        assert!(matches!(r.push(BEGIN, "", b"1", 0), Step::Pending));
        assert!(r.reset());
        assert!(!r.reset());
    }
}
