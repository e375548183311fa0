//! HEARTBEAT frames: the sender is alive and has sent up to `position`.
//!
//! ```text
//! +---------------------------------------------------------------+
//! |                     common header (16 bytes)                  |  0
//! +---------------------------------------------------------------+
//! |                     position (u64)                            | 16
//! +---------------------------------------------------------------+
//! ```
//! A receiver that is behind `position` has lost the tail of the stream.

use crate::field::{put_u64, u64_at};
use crate::header::{self, frame_view, FrameType};
use crate::WireError;

/// Offset of `position` (u64).
pub const POSITION: usize = 16;
/// Length of a HEARTBEAT frame.
pub const LEN: usize = 24;

frame_view!(
    /// A checked view of a HEARTBEAT frame.
    HeartbeatFrame,
    FrameType::Heartbeat
);

impl<T: AsRef<[u8]>> HeartbeatFrame<T> {
    fn check_body(&self, _len: usize) -> Result<(), WireError> {
        Ok(())
    }
    /// The position up to which the sender has sent.
    pub fn position(&self) -> u64 {
        u64_at(self.buf.as_ref(), POSITION)
    }
}

/// A parsed HEARTBEAT frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatRepr {
    /// Session identifier.
    pub session_id: u32,
    /// Stream identifier.
    pub stream_id: u32,
    /// The sender's position.
    pub position: u64,
}

impl HeartbeatRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(f: &HeartbeatFrame<T>) -> Self {
        Self { session_id: f.session_id(), stream_id: f.stream_id(), position: f.position() }
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
        header::emit(buf, FrameType::Heartbeat, LEN, 0, self.session_id, self.stream_id)?;
        put_u64(buf, POSITION, self.position);
        Ok(LEN)
    }
}
