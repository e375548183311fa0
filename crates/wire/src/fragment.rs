//! Fragmentation: how a message splits into DATA frames, shared by the
//! shared-memory log's appender and the network sender.
//!
//! The first fragment carries the topic and flag BEGIN, the last one END
//! (a message that fits one frame has both: UNFRAGMENTED). Every frame but
//! the last is full (`mtu` bytes); frames occupy `align_frame(len)` bytes of
//! stream.

use crate::{align_frame, data, flags, OfferError, MAX_TOPIC_LENGTH};

/// One DATA frame's worth of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment<'a> {
    /// BEGIN and/or END.
    pub flags: u8,
    /// The topic (first fragment only, else `""`).
    pub topic: &'a str,
    /// This fragment's part of the payload.
    pub payload: &'a [u8],
}

impl Fragment<'_> {
    /// The DATA frame's length (header, topic, payload), before alignment.
    #[inline]
    pub fn frame_len(&self) -> usize {
        data::HEADER_LEN + self.topic.len() + self.payload.len()
    }
}

/// Splits messages into frames of at most `mtu` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragmenter {
    mtu: usize,
}

impl Fragmenter {
    /// For frames of at most `mtu` bytes (header included); `mtu` must
    /// exceed the DATA header.
    pub const fn new(mtu: usize) -> Self {
        Self { mtu }
    }

    /// The largest payload of one frame without a topic.
    #[inline]
    pub const fn max_payload(&self) -> usize {
        self.mtu - data::HEADER_LEN
    }

    /// Payload room left in the first frame once `topic` is in it.
    ///
    /// # Errors
    /// [`OfferError::TopicTooLong`] if the topic exceeds the wire limit or
    /// leaves no room for a payload byte.
    #[inline]
    pub fn first_room(&self, topic: &str) -> Result<usize, OfferError> {
        let max = MAX_TOPIC_LENGTH.min(self.max_payload() - 1);
        if topic.len() > max {
            return Err(OfferError::TopicTooLong { max });
        }
        Ok(self.max_payload() - topic.len())
    }

    /// Stream bytes a message of `len` payload bytes with a topic of
    /// `topic_len` bytes occupies (every frame aligned), given
    /// `first_room` from [`Fragmenter::first_room`].
    #[inline]
    pub fn stream_len(&self, topic_len: usize, first_room: usize, len: usize) -> u64 {
        let first = len.min(first_room);
        let rest = len - first;
        let chunk = self.max_payload();
        let tail = rest % chunk;
        (align_frame(data::HEADER_LEN + topic_len + first)
            + rest / chunk * align_frame(self.mtu)
            + if tail == 0 { 0 } else { align_frame(data::HEADER_LEN + tail) }) as u64
    }

    /// The fragments of `msg`, in order (one for an empty message), given
    /// `first_room` from [`Fragmenter::first_room`].
    #[inline]
    pub fn fragments<'a>(&self, topic: &'a str, first_room: usize, msg: &'a [u8]) -> Fragments<'a> {
        Fragments { topic, msg, at: 0, room: first_room, chunk: self.max_payload(), done: false }
    }
}

/// The iterator of [`Fragmenter::fragments`].
#[derive(Debug, Clone)]
pub struct Fragments<'a> {
    topic: &'a str,
    msg: &'a [u8],
    at: usize,
    room: usize,
    chunk: usize,
    done: bool,
}

impl<'a> Iterator for Fragments<'a> {
    type Item = Fragment<'a>;

    #[inline]
    fn next(&mut self) -> Option<Fragment<'a>> {
        if self.done {
            return None;
        }
        let first = self.at == 0;
        let n = (self.msg.len() - self.at).min(self.room);
        let mut fl = if first { flags::BEGIN } else { 0 };
        if self.at + n == self.msg.len() {
            fl |= flags::END;
            self.done = true;
        }
        let frag =
            Fragment { flags: fl, topic: if first { self.topic } else { "" }, payload: &self.msg[self.at..][..n] };
        self.at += n;
        self.room = self.chunk;
        Some(frag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::{BEGIN, END, UNFRAGMENTED};

    #[test]
    fn splits_with_topic_first_and_counts_stream_bytes() {
        let f = Fragmenter::new(128); // 96 payload bytes per frame
        let msg: Vec<u8> = (0..250u8).collect();
        let room = f.first_room("abcd").unwrap();
        assert_eq!(room, 92);
        let frags: Vec<_> = f.fragments("abcd", room, &msg).collect();
        assert_eq!(frags.iter().map(|x| x.flags).collect::<Vec<_>>(), vec![BEGIN, 0, END]);
        assert_eq!(frags.iter().map(|x| x.payload.len()).collect::<Vec<_>>(), vec![92, 96, 62]);
        assert_eq!((frags[0].topic, frags[1].topic), ("abcd", ""));
        assert_eq!(frags.iter().flat_map(|x| x.payload.iter().copied()).collect::<Vec<_>>(), msg);
        let sum: usize = frags.iter().map(|x| align_frame(x.frame_len())).sum();
        assert_eq!(f.stream_len(4, room, msg.len()), sum as u64);
        let empty: Vec<_> = f.fragments("", f.first_room("").unwrap(), b"").collect();
        assert_eq!(empty, vec![Fragment { flags: UNFRAGMENTED, topic: "", payload: b"" }]);
        assert_eq!(f.stream_len(0, 96, 0), 32);
        assert_eq!(f.first_room(&"t".repeat(96)), Err(OfferError::TopicTooLong { max: 95 }));
    }
}
