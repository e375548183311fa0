//! SETUP frames: a sender announces a session so that receivers, including
//! late joiners, start at a known position.
//!
//! ```text
//! +---------------------------------------------------------------+
//! |                     common header (16 bytes)                  |  0
//! +---------------------------------------------------------------+
//! |                     initial_position (u64)                    | 16
//! +---------------------------------------------------------------+
//! |                     mtu (u32)                                 | 24
//! +---------------------------------------------------------------+
//! |                     max_message (u32)                         | 28
//! +---------------------------------------------------------------+
//! ```

use crate::field::{put_u32, put_u64, u32_at, u64_at};
use crate::header::{self, frame_view, FrameType};
use crate::WireError;

/// Offset of `initial_position` (u64).
pub const INITIAL_POSITION: usize = 16;
/// Offset of `mtu` (u32): the largest frame the sender emits.
pub const MTU: usize = 24;
/// Offset of `max_message` (u32): the largest reassembled message.
pub const MAX_MESSAGE: usize = 28;
/// Length of a SETUP frame.
pub const LEN: usize = 32;

frame_view!(
    /// A checked view of a SETUP frame.
    SetupFrame,
    FrameType::Setup
);

impl<T: AsRef<[u8]>> SetupFrame<T> {
    fn check_body(&self, _len: usize) -> Result<(), WireError> {
        if (self.mtu() as usize) < crate::data::HEADER_LEN {
            return Err(WireError::Malformed { kind: FrameType::Setup, reason: "mtu below DATA header" });
        }
        Ok(())
    }
    /// Position of the first byte of the session.
    pub fn initial_position(&self) -> u64 {
        u64_at(self.buf.as_ref(), INITIAL_POSITION)
    }
    /// Largest frame the sender emits.
    pub fn mtu(&self) -> u32 {
        u32_at(self.buf.as_ref(), MTU)
    }
    /// Largest message the sender emits.
    pub fn max_message(&self) -> u32 {
        u32_at(self.buf.as_ref(), MAX_MESSAGE)
    }
}

/// A parsed SETUP frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetupRepr {
    /// Session identifier.
    pub session_id: u32,
    /// Stream identifier.
    pub stream_id: u32,
    /// Position of the first byte of the session.
    pub initial_position: u64,
    /// Largest frame, at least 32.
    pub mtu: u32,
    /// Largest message.
    pub max_message: u32,
}

impl SetupRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(f: &SetupFrame<T>) -> Self {
        Self {
            session_id: f.session_id(),
            stream_id: f.stream_id(),
            initial_position: f.initial_position(),
            mtu: f.mtu(),
            max_message: f.max_message(),
        }
    }
    /// Bytes needed to emit.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }
    /// Writes the frame, returning its length.
    ///
    /// # Errors
    /// [`WireError::BufferTooSmall`]; an `mtu` under 32 is
    /// [`WireError::Malformed`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        if (self.mtu as usize) < crate::data::HEADER_LEN {
            return Err(WireError::Malformed { kind: FrameType::Setup, reason: "mtu below DATA header" });
        }
        header::emit(buf, FrameType::Setup, LEN, 0, self.session_id, self.stream_id)?;
        put_u64(buf, INITIAL_POSITION, self.initial_position);
        put_u32(buf, MTU, self.mtu);
        put_u32(buf, MAX_MESSAGE, self.max_message);
        Ok(LEN)
    }
}
