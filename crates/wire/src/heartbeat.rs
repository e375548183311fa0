//! HEARTBEAT frames: the sender is alive, has sent up to `position`, and can
//! still retransmit everything from `retained_from`.
//!
//! ```text
//! +---------------------------------------------------------------+
//! |                     common header (16 bytes)                  |  0
//! +---------------------------------------------------------------+
//! |                     position (u64)                            | 16
//! +---------------------------------------------------------------+
//! |                     retained_from (u64)                       | 24
//! +---------------------------------------------------------------+
//! ```
//! A receiver that is behind `position` has lost the tail of the stream and
//! asks for it with a NAK. A gap that starts below `retained_from` can no
//! longer be repaired: the receiver reports it as lost. Flag
//! [`END_OF_STREAM`](crate::flags::END_OF_STREAM) says the session is closed
//! at `position`.

use crate::field::{put_u64, u64_at};
use crate::header::{self, frame_view, FrameType};
use crate::WireError;

/// Offset of `position` (u64).
pub const POSITION: usize = 16;
/// Offset of `retained_from` (u64).
pub const RETAINED_FROM: usize = 24;
/// Length of a HEARTBEAT frame.
pub const LEN: usize = 32;

frame_view!(
    /// A checked view of a HEARTBEAT frame.
    HeartbeatFrame,
    FrameType::Heartbeat
);

impl<T: AsRef<[u8]>> HeartbeatFrame<T> {
    fn check_body(&self, _len: usize) -> Result<(), WireError> {
        if self.retained_from() > self.position() {
            return Err(WireError::Malformed { kind: FrameType::Heartbeat, reason: "retained_from beyond position" });
        }
        Ok(())
    }
    /// The position up to which the sender has sent.
    pub fn position(&self) -> u64 {
        u64_at(self.buf.as_ref(), POSITION)
    }
    /// The oldest position the sender can still retransmit.
    pub fn retained_from(&self) -> u64 {
        u64_at(self.buf.as_ref(), RETAINED_FROM)
    }
}

/// A parsed HEARTBEAT frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatRepr {
    /// Session identifier.
    pub session_id: u32,
    /// Stream identifier.
    pub stream_id: u32,
    /// Flags ([`END_OF_STREAM`](crate::flags::END_OF_STREAM)).
    pub flags: u8,
    /// The sender's position.
    pub position: u64,
    /// The oldest position the sender still retains.
    pub retained_from: u64,
}

impl HeartbeatRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(f: &HeartbeatFrame<T>) -> Self {
        Self {
            session_id: f.session_id(),
            stream_id: f.stream_id(),
            flags: f.flags(),
            position: f.position(),
            retained_from: f.retained_from(),
        }
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }
    /// Writes the frame, returning its length.
    ///
    /// # Errors
    /// [`WireError::BufferTooSmall`], or [`WireError::Malformed`] if
    /// `retained_from` is beyond `position`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        if self.retained_from > self.position {
            return Err(WireError::Malformed { kind: FrameType::Heartbeat, reason: "retained_from beyond position" });
        }
        header::emit(buf, FrameType::Heartbeat, LEN, self.flags, self.session_id, self.stream_id)?;
        put_u64(buf, POSITION, self.position);
        put_u64(buf, RETAINED_FROM, self.retained_from);
        Ok(LEN)
    }
}
