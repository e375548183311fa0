//! ERROR frames: a code and a human-readable UTF-8 message about the stream
//! named in the header.
//!
//! ```text
//! +---------------------------------------------------------------+
//! |                     common header (16 bytes)                  |  0
//! +---------------------------------------------------------------+
//! |                     error_code (u32)                          | 16
//! +---------------------------------------------------------------+
//! |                     message_length (u32)                      | 20
//! +---------------------------------------------------------------+
//! |                     message (UTF-8) ...                       | 24
//! +---------------------------------------------------------------+
//! ```

use crate::field::{put_u32, u32_at};
use crate::header::{self, frame_view, FrameType};
use crate::WireError;

/// Offset of `error_code` (u32).
pub const ERROR_CODE: usize = 16;
/// Offset of `message_length` (u32).
pub const MESSAGE_LENGTH: usize = 20;
/// Length of the ERROR header; the message starts here.
pub const HEADER_LEN: usize = 24;

frame_view!(
    /// A checked view of an ERROR frame.
    ErrorFrame,
    FrameType::Error
);

impl<T: AsRef<[u8]>> ErrorFrame<T> {
    fn check_body(&self, len: usize) -> Result<(), WireError> {
        let mlen = u32_at(self.buf.as_ref(), MESSAGE_LENGTH) as usize;
        if HEADER_LEN.saturating_add(mlen) > len {
            return Err(WireError::Malformed { kind: FrameType::Error, reason: "message runs past frame end" });
        }
        if std::str::from_utf8(&self.buf.as_ref()[HEADER_LEN..HEADER_LEN + mlen]).is_err() {
            return Err(WireError::Malformed { kind: FrameType::Error, reason: "message is not UTF-8" });
        }
        Ok(())
    }
    /// The error code.
    pub fn error_code(&self) -> u32 {
        u32_at(self.buf.as_ref(), ERROR_CODE)
    }
    /// The message (checked as UTF-8 by `new_checked`).
    pub fn message(&self) -> &str {
        let mlen = u32_at(self.buf.as_ref(), MESSAGE_LENGTH) as usize;
        std::str::from_utf8(&self.buf.as_ref()[HEADER_LEN..HEADER_LEN + mlen]).unwrap_or("")
    }
}

/// A parsed ERROR frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorRepr<'a> {
    /// Session identifier of the stream concerned.
    pub session_id: u32,
    /// Stream identifier of the stream concerned.
    pub stream_id: u32,
    /// Error code.
    pub error_code: u32,
    /// Message.
    pub message: &'a str,
}

impl<'a> ErrorRepr<'a> {
    /// Parses a checked view.
    pub fn parse(f: &ErrorFrame<&'a [u8]>) -> Self {
        let b: &'a [u8] = f.buf;
        let mlen = u32_at(b, MESSAGE_LENGTH) as usize;
        Self {
            session_id: f.session_id(),
            stream_id: f.stream_id(),
            error_code: f.error_code(),
            message: std::str::from_utf8(&b[HEADER_LEN..HEADER_LEN + mlen]).unwrap_or(""),
        }
    }
    /// Bytes needed to emit.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.message.len()
    }
    /// Writes the frame, returning its length.
    ///
    /// # Errors
    /// [`WireError::BufferTooSmall`] or [`WireError::Oversized`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let len = self.buffer_len();
        header::emit(buf, FrameType::Error, len, 0, self.session_id, self.stream_id)?;
        put_u32(buf, ERROR_CODE, self.error_code);
        put_u32(buf, MESSAGE_LENGTH, self.message.len() as u32);
        buf[HEADER_LEN..len].copy_from_slice(self.message.as_bytes());
        Ok(len)
    }
}
