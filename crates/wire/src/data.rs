//! DATA and PAD frames (32-byte header, then optional topic, then payload).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                     common header (16 bytes)                  |  0
//! +---------------------------------------------------------------+
//! |                     position (u64, low word)                  | 16
//! |                     position (u64, high word)                 | 20
//! +-------------------------------+-------------------------------+
//! |         topic_length          |           reserved            | 24
//! +-------------------------------+-------------------------------+
//! |                           reserved                            | 28
//! +---------------------------------------------------------------+
//! |        topic (topic_length bytes of UTF-8) ...                | 32
//! +---------------------------------------------------------------+
//! |        payload (frame_length - 32 - topic_length bytes) ...   |
//! +---------------------------------------------------------------+
//! ```
//! `position` is the stream position of the frame's first byte. Flags carry
//! [`BEGIN`](crate::flags::BEGIN)/[`END`](crate::flags::END) for fragments.
//! A PAD frame has the same header; its body is skipped.

use crate::field::{put_u16, put_u32, put_u64, u16_at, u64_at};
use crate::header::{self, frame_view, FrameType};
use crate::{WireError, MAX_TOPIC_LENGTH};

/// Offset of `position` (u64).
pub const POSITION: usize = 16;
/// Offset of `topic_length` (u16).
pub const TOPIC_LENGTH: usize = 24;
/// Offset of the reserved bytes, zero when emitted, ignored when read.
pub const RESERVED: usize = 26;
/// Length of the DATA header; the topic starts here.
pub const HEADER_LEN: usize = 32;

frame_view!(
    /// A checked view of a DATA frame.
    DataFrame,
    FrameType::Data
);

impl<T: AsRef<[u8]>> DataFrame<T> {
    fn check_body(&self, len: usize) -> Result<(), WireError> {
        let topic_len = usize::from(u16_at(self.buf.as_ref(), TOPIC_LENGTH));
        if topic_len > MAX_TOPIC_LENGTH {
            return Err(WireError::Malformed { kind: FrameType::Data, reason: "topic too long" });
        }
        if HEADER_LEN + topic_len > len {
            return Err(WireError::Malformed { kind: FrameType::Data, reason: "topic runs past frame end" });
        }
        if std::str::from_utf8(self.topic_bytes()).is_err() {
            return Err(WireError::Malformed { kind: FrameType::Data, reason: "topic is not UTF-8" });
        }
        Ok(())
    }

    /// Stream position of the first byte of this frame.
    pub fn position(&self) -> u64 {
        u64_at(self.buf.as_ref(), POSITION)
    }
    /// Topic length in bytes (0: no topic).
    pub fn topic_length(&self) -> usize {
        usize::from(u16_at(self.buf.as_ref(), TOPIC_LENGTH))
    }
    fn topic_bytes(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..HEADER_LEN + self.topic_length()]
    }
    /// The topic, or `""` if none. Checked as UTF-8 by `new_checked`.
    #[inline]
    pub fn topic(&self) -> &str {
        // Most messages carry no topic: skip the UTF-8 check's call for them
        // (it showed in the IPC ping-pong profile).
        if self.topic_length() == 0 {
            return "";
        }
        std::str::from_utf8(self.topic_bytes()).unwrap_or("")
    }
    /// The payload bytes.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN + self.topic_length()..self.frame_length()]
    }
}

/// A parsed DATA frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRepr<'a> {
    /// Session identifier.
    pub session_id: u32,
    /// Stream identifier.
    pub stream_id: u32,
    /// Stream position of the frame's first byte.
    pub position: u64,
    /// Fragment flags.
    pub flags: u8,
    /// Topic (may be empty, at most [`MAX_TOPIC_LENGTH`] bytes).
    pub topic: &'a str,
    /// Payload.
    pub payload: &'a [u8],
}

impl<'a> DataRepr<'a> {
    /// Parses a checked view.
    pub fn parse(frame: &DataFrame<&'a [u8]>) -> Self {
        let b: &'a [u8] = frame.buf;
        Self {
            session_id: frame.session_id(),
            stream_id: frame.stream_id(),
            position: frame.position(),
            flags: frame.flags(),
            topic: frame_topic(b),
            payload: frame_payload(b),
        }
    }

    /// Bytes needed to emit this frame (unaligned).
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.topic.len() + self.payload.len()
    }

    /// Writes the frame into `buf`, returning its `frame_length`.
    ///
    /// # Errors
    /// [`WireError::BufferTooSmall`], [`WireError::Oversized`], or
    /// [`WireError::Malformed`] for a topic over [`MAX_TOPIC_LENGTH`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        if self.topic.len() > MAX_TOPIC_LENGTH {
            return Err(WireError::Malformed { kind: FrameType::Data, reason: "topic too long" });
        }
        let len = self.buffer_len();
        header::emit(buf, FrameType::Data, len, self.flags, self.session_id, self.stream_id)?;
        write_data_fields(buf, self.position, self.topic.len());
        buf[HEADER_LEN..HEADER_LEN + self.topic.len()].copy_from_slice(self.topic.as_bytes());
        buf[HEADER_LEN + self.topic.len()..len].copy_from_slice(self.payload);
        Ok(len)
    }
}

/// Writes `position`, `topic_length` and zeroes the reserved bytes of a DATA
/// or PAD header. Used by log buffers that write payload in place.
pub fn write_data_fields(buf: &mut [u8], position: u64, topic_len: usize) {
    put_u64(buf, POSITION, position);
    put_u16(buf, TOPIC_LENGTH, topic_len as u16);
    put_u16(buf, RESERVED, 0);
    put_u32(buf, RESERVED + 2, 0);
}

fn frame_topic(b: &[u8]) -> &str {
    let len = usize::from(u16_at(b, TOPIC_LENGTH));
    std::str::from_utf8(&b[HEADER_LEN..HEADER_LEN + len]).unwrap_or("")
}

fn frame_payload(b: &[u8]) -> &[u8] {
    let f = DataFrame::new_unchecked(b);
    let start = HEADER_LEN + f.topic_length();
    &b[start..f.frame_length()]
}

frame_view!(
    /// A checked view of a PAD frame: `frame_length` bytes to skip.
    PadFrame,
    FrameType::Pad
);

impl<T: AsRef<[u8]>> PadFrame<T> {
    fn check_body(&self, _len: usize) -> Result<(), WireError> {
        Ok(())
    }
    /// Stream position of the first padded byte.
    pub fn position(&self) -> u64 {
        u64_at(self.buf.as_ref(), POSITION)
    }
}

/// A parsed PAD frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PadRepr {
    /// Session identifier.
    pub session_id: u32,
    /// Stream identifier.
    pub stream_id: u32,
    /// Stream position of the first padded byte.
    pub position: u64,
    /// Total padded length (at least the 32-byte header).
    pub length: usize,
}

impl PadRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(frame: &PadFrame<T>) -> Self {
        Self {
            session_id: frame.session_id(),
            stream_id: frame.stream_id(),
            position: frame.position(),
            length: frame.frame_length(),
        }
    }
    /// Writes the PAD header (the body is left as is), returning `length`.
    ///
    /// # Errors
    /// [`WireError::BufferTooSmall`] or [`WireError::Oversized`]; a length
    /// under 32 is [`WireError::Malformed`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        if self.length < HEADER_LEN {
            return Err(WireError::Malformed { kind: FrameType::Pad, reason: "pad shorter than header" });
        }
        header::emit(buf, FrameType::Pad, self.length, 0, self.session_id, self.stream_id)?;
        write_data_fields(buf, self.position, 0);
        Ok(self.length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags;

    fn sample() -> DataRepr<'static> {
        DataRepr {
            session_id: 0xdead,
            stream_id: 10,
            position: 1 << 40,
            flags: flags::BEGIN,
            topic: "a/b/c",
            payload: b"hello",
        }
    }

    #[test]
    fn emit_then_view() {
        let mut buf = [0u8; 64];
        let n = sample().emit(&mut buf).unwrap();
        assert_eq!(n, 32 + 5 + 5);
        let f = DataFrame::new_checked(&buf[..n]).unwrap();
        assert_eq!(f.position(), 1 << 40);
        assert_eq!(f.topic(), "a/b/c");
        assert_eq!(f.payload(), b"hello");
        assert_eq!(DataRepr::parse(&f), sample());
    }

    #[test]
    fn topic_overrun_is_malformed() {
        let mut buf = [0u8; 64];
        let n = sample().emit(&mut buf).unwrap();
        put_u16(&mut buf, TOPIC_LENGTH, 20);
        assert!(matches!(
            DataFrame::new_checked(&buf[..n]),
            Err(WireError::Malformed { reason: "topic runs past frame end", .. })
        ));
    }

    #[test]
    fn non_utf8_topic_is_malformed() {
        let mut buf = [0u8; 64];
        let n = sample().emit(&mut buf).unwrap();
        buf[HEADER_LEN] = 0xff;
        assert!(matches!(DataFrame::new_checked(&buf[..n]), Err(WireError::Malformed { .. })));
    }

    #[test]
    fn emit_into_short_buffer_fails() {
        let mut buf = [0u8; 16];
        assert_eq!(sample().emit(&mut buf), Err(WireError::BufferTooSmall { need: 42, have: 16 }));
    }

    #[test]
    fn wrong_type_is_reported() {
        let mut buf = [0u8; 64];
        let n = sample().emit(&mut buf).unwrap();
        assert!(matches!(PadFrame::new_checked(&buf[..n]), Err(WireError::WrongType { .. })));
    }
}
