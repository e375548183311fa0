//! STATUS frames: a receiver reports how far it has consumed and how much
//! more it can take (flow control).
//!
//! ```text
//! +---------------------------------------------------------------+
//! |                     common header (16 bytes)                  |  0
//! +---------------------------------------------------------------+
//! |                     consumption_position (u64)                | 16
//! +---------------------------------------------------------------+
//! |                     receiver_window (u32)                     | 24
//! +---------------------------------------------------------------+
//! |                     receiver_id (u32)                         | 28
//! +---------------------------------------------------------------+
//! ```
//! The sender may send up to `consumption_position + receiver_window`.
//! Flag [`SEND_SETUP`](crate::flags::SEND_SETUP) asks for a SETUP frame.

use crate::field::{put_u32, put_u64, u32_at, u64_at};
use crate::header::{self, frame_view, FrameType};
use crate::WireError;

/// Offset of `consumption_position` (u64).
pub const CONSUMPTION_POSITION: usize = 16;
/// Offset of `receiver_window` (u32).
pub const RECEIVER_WINDOW: usize = 24;
/// Offset of `receiver_id` (u32).
pub const RECEIVER_ID: usize = 28;
/// Length of a STATUS frame.
pub const LEN: usize = 32;

frame_view!(
    /// A checked view of a STATUS frame.
    StatusFrame,
    FrameType::Status
);

impl<T: AsRef<[u8]>> StatusFrame<T> {
    fn check_body(&self, _len: usize) -> Result<(), WireError> {
        Ok(())
    }
    /// Position up to which the receiver has consumed.
    pub fn consumption_position(&self) -> u64 {
        u64_at(self.buf.as_ref(), CONSUMPTION_POSITION)
    }
    /// Bytes beyond `consumption_position` the receiver can take.
    pub fn receiver_window(&self) -> u32 {
        u32_at(self.buf.as_ref(), RECEIVER_WINDOW)
    }
    /// Identifies the receiver (for min/max multicast flow control).
    pub fn receiver_id(&self) -> u32 {
        u32_at(self.buf.as_ref(), RECEIVER_ID)
    }
}

/// A parsed STATUS frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusRepr {
    /// Session identifier.
    pub session_id: u32,
    /// Stream identifier.
    pub stream_id: u32,
    /// Flags ([`SEND_SETUP`](crate::flags::SEND_SETUP)).
    pub flags: u8,
    /// Position up to which the receiver has consumed.
    pub consumption_position: u64,
    /// Window beyond that position.
    pub receiver_window: u32,
    /// Receiver identifier.
    pub receiver_id: u32,
}

impl StatusRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(f: &StatusFrame<T>) -> Self {
        Self {
            session_id: f.session_id(),
            stream_id: f.stream_id(),
            flags: f.flags(),
            consumption_position: f.consumption_position(),
            receiver_window: f.receiver_window(),
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
    /// [`WireError::BufferTooSmall`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        header::emit(buf, FrameType::Status, LEN, self.flags, self.session_id, self.stream_id)?;
        put_u64(buf, CONSUMPTION_POSITION, self.consumption_position);
        put_u32(buf, RECEIVER_WINDOW, self.receiver_window);
        put_u32(buf, RECEIVER_ID, self.receiver_id);
        Ok(LEN)
    }
}
