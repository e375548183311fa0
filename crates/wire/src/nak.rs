//! NAK frames: a receiver asks for `length` bytes from `position` again.
//!
//! ```text
//! +---------------------------------------------------------------+
//! |                     common header (16 bytes)                  |  0
//! +---------------------------------------------------------------+
//! |                     position (u64)                            | 16
//! +---------------------------------------------------------------+
//! |                     length (u32)                              | 24
//! +---------------------------------------------------------------+
//! |                     receiver_id (u32)                         | 28
//! +---------------------------------------------------------------+
//! ```

use crate::field::{put_u32, put_u64, u32_at, u64_at};
use crate::header::{self, frame_view, FrameType};
use crate::WireError;

/// Offset of `position` (u64): first missing byte.
pub const POSITION: usize = 16;
/// Offset of `length` (u32): missing bytes.
pub const LENGTH: usize = 24;
/// Offset of `receiver_id` (u32).
pub const RECEIVER_ID: usize = 28;
/// Length of a NAK frame.
pub const LEN: usize = 32;

frame_view!(
    /// A checked view of a NAK frame.
    NakFrame,
    FrameType::Nak
);

impl<T: AsRef<[u8]>> NakFrame<T> {
    fn check_body(&self, _len: usize) -> Result<(), WireError> {
        if self.length() == 0 {
            return Err(WireError::Malformed { kind: FrameType::Nak, reason: "zero-length NAK" });
        }
        Ok(())
    }
    /// First missing byte.
    pub fn position(&self) -> u64 {
        u64_at(self.buf.as_ref(), POSITION)
    }
    /// Number of missing bytes.
    pub fn length(&self) -> u32 {
        u32_at(self.buf.as_ref(), LENGTH)
    }
    /// Identifies the receiver.
    pub fn receiver_id(&self) -> u32 {
        u32_at(self.buf.as_ref(), RECEIVER_ID)
    }
}

/// A parsed NAK frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NakRepr {
    /// Session identifier.
    pub session_id: u32,
    /// Stream identifier.
    pub stream_id: u32,
    /// First missing byte.
    pub position: u64,
    /// Number of missing bytes, at least 1.
    pub length: u32,
    /// Receiver identifier.
    pub receiver_id: u32,
}

impl NakRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(f: &NakFrame<T>) -> Self {
        Self {
            session_id: f.session_id(),
            stream_id: f.stream_id(),
            position: f.position(),
            length: f.length(),
            receiver_id: f.receiver_id(),
        }
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }
    /// Writes the frame, returning its length.
    ///
    /// # Errors
    /// [`WireError::BufferTooSmall`]; a zero length is [`WireError::Malformed`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        if self.length == 0 {
            return Err(WireError::Malformed { kind: FrameType::Nak, reason: "zero-length NAK" });
        }
        header::emit(buf, FrameType::Nak, LEN, 0, self.session_id, self.stream_id)?;
        put_u64(buf, POSITION, self.position);
        put_u32(buf, LENGTH, self.length);
        put_u32(buf, RECEIVER_ID, self.receiver_id);
        Ok(LEN)
    }
}
