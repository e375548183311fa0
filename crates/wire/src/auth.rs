//! AUTH frames: the last frame of every datagram on a channel with a shared
//! key. It names who sent the datagram and in what order, and carries a MAC
//! over every byte before the MAC field (the datagram's other frames and
//! this frame's first 40 bytes).
//!
//! ```text
//! +---------------------------------------------------------------+
//! |                     common header (16 bytes)                  |  0
//! +---------------------------------------------------------------+
//! |                     sequence (u64)                            | 16
//! +---------------------------------------------------------------+
//! |                     challenge (u64)                           | 24
//! +---------------------------------------------------------------+
//! |                     origin (u32)                              | 32
//! +---------------------------------------------------------------+
//! |                     reserved (u32, zero)                      | 36
//! +---------------------------------------------------------------+
//! |                     mac (24 bytes)                            | 40
//! +---------------------------------------------------------------+
//! ```
//! `session_id` is the session the datagram belongs to; `origin` is the
//! sender's session id for a sender's datagrams, the receiver id for a
//! receiver's (flag [`FROM_RECEIVER`](crate::flags::FROM_RECEIVER)). `sequence` counts the origin's datagrams in this session
//! (replay protection). `challenge` carries a receiver's nonce in its SETUP
//! request and the sender's echo of it in the SETUP that answers, so that a
//! captured SETUP cannot be replayed to start a session. The MAC itself is
//! computed by `tickwire-proto` (this crate has no cryptography).

use crate::field::{put_u32, put_u64, u32_at, u64_at};
use crate::header::{self, frame_view, FrameType};
use crate::WireError;

/// Offset of `sequence` (u64).
pub const SEQUENCE: usize = 16;
/// Offset of `challenge` (u64).
pub const CHALLENGE: usize = 24;
/// Offset of `origin` (u32).
pub const ORIGIN: usize = 32;
/// Offset of the MAC.
pub const MAC: usize = 40;
/// Length of the MAC.
pub const MAC_LEN: usize = 24;
/// Length of an AUTH frame.
pub const LEN: usize = 64;

frame_view!(
    /// A checked view of an AUTH frame.
    AuthFrame,
    FrameType::Auth
);

impl<T: AsRef<[u8]>> AuthFrame<T> {
    fn check_body(&self, len: usize) -> Result<(), WireError> {
        if len != LEN {
            return Err(WireError::Malformed { kind: FrameType::Auth, reason: "frame_length is not 64" });
        }
        Ok(())
    }
    /// The origin's datagram sequence.
    pub fn sequence(&self) -> u64 {
        u64_at(self.buf.as_ref(), SEQUENCE)
    }
    /// A receiver's nonce, or a sender's echo of one (0: none).
    pub fn challenge(&self) -> u64 {
        u64_at(self.buf.as_ref(), CHALLENGE)
    }
    /// The sender's session id or the receiver's id.
    pub fn origin(&self) -> u32 {
        u32_at(self.buf.as_ref(), ORIGIN)
    }
    /// The MAC.
    pub fn mac(&self) -> &[u8] {
        &self.buf.as_ref()[MAC..LEN]
    }
}

/// A parsed AUTH frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthRepr {
    /// Session identifier.
    pub session_id: u32,
    /// Flags ([`FROM_RECEIVER`](crate::flags::FROM_RECEIVER)).
    pub flags: u8,
    /// Stream identifier.
    pub stream_id: u32,
    /// The origin's datagram sequence.
    pub sequence: u64,
    /// Nonce or echo (0: none).
    pub challenge: u64,
    /// The sender's session id or the receiver's id.
    pub origin: u32,
    /// The MAC.
    pub mac: [u8; MAC_LEN],
}

impl AuthRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(f: &AuthFrame<T>) -> Self {
        let mut mac = [0; MAC_LEN];
        mac.copy_from_slice(f.mac());
        Self {
            session_id: f.session_id(),
            flags: f.flags(),
            stream_id: f.stream_id(),
            sequence: f.sequence(),
            challenge: f.challenge(),
            origin: f.origin(),
            mac,
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
        header::emit(buf, FrameType::Auth, LEN, self.flags, self.session_id, self.stream_id)?;
        put_u64(buf, SEQUENCE, self.sequence);
        put_u64(buf, CHALLENGE, self.challenge);
        put_u32(buf, ORIGIN, self.origin);
        put_u32(buf, ORIGIN + 4, 0);
        buf[MAC..LEN].copy_from_slice(&self.mac);
        Ok(LEN)
    }
}
