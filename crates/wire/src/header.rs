//! The 16-byte header that starts every frame.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +---------------------------------------------------------------+
//! |                         frame_length                          |  0
//! +---------------+---------------+-------------------------------+
//! |    version    |     flags     |          frame_type           |  4
//! +---------------+---------------+-------------------------------+
//! |                          session_id                           |  8
//! +---------------------------------------------------------------+
//! |                          stream_id                            | 12
//! +---------------------------------------------------------------+
//! ```
//! `frame_length` comes first and is written last: in a log buffer the first
//! eight bytes form the commit word (a frame exists once they are non-zero).

use crate::field::{put_u16, put_u32, u16_at, u32_at};
use crate::{WireError, MAX_FRAME_LENGTH, VERSION};

/// Offset of `frame_length` (u32).
pub const FRAME_LENGTH: usize = 0;
/// Offset of `version` (u8).
pub const VERSION_OFFSET: usize = 4;
/// Offset of `flags` (u8).
pub const FLAGS: usize = 5;
/// Offset of `frame_type` (u16).
pub const FRAME_TYPE: usize = 6;
/// Offset of `session_id` (u32).
pub const SESSION_ID: usize = 8;
/// Offset of `stream_id` (u32).
pub const STREAM_ID: usize = 12;
/// Length of the common header.
pub const HEADER_LEN: usize = 16;

/// The kinds of frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum FrameType {
    /// Filler: skip `frame_length` bytes (end of a log buffer, aborted claims).
    Pad = 0,
    /// Application data, or a fragment of it.
    Data = 1,
    /// Receiver asks for a retransmission of a range.
    Nak = 2,
    /// Receiver reports its position and window (flow control).
    Status = 3,
    /// Something went wrong; a code and a message.
    Error = 4,
    /// Sender announces a session: initial position, MTU.
    Setup = 5,
    /// Sender is alive and has sent up to a position.
    Heartbeat = 6,
    /// See [`crate::auth`].
    Auth = 7,
}

impl FrameType {
    /// Decodes a type field.
    ///
    /// # Errors
    /// [`WireError::UnknownType`] for values that name no frame type.
    pub fn from_u16(v: u16) -> Result<Self, WireError> {
        Ok(match v {
            0 => Self::Pad,
            1 => Self::Data,
            2 => Self::Nak,
            3 => Self::Status,
            4 => Self::Error,
            5 => Self::Setup,
            6 => Self::Heartbeat,
            7 => Self::Auth,
            other => return Err(WireError::UnknownType(other)),
        })
    }

    /// The fixed header length of this frame type; the frame may be longer.
    pub const fn header_len(self) -> usize {
        match self {
            Self::Pad | Self::Data | Self::Nak | Self::Status | Self::Setup | Self::Heartbeat => 32,
            Self::Error => 24,
            Self::Auth => crate::auth::LEN,
        }
    }
}

/// A view of the common header of any frame.
#[derive(Debug, Clone, Copy)]
pub struct FrameHeader<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> FrameHeader<T> {
    /// Wraps a buffer without checking it. Accessors may panic on a short
    /// buffer; use [`FrameHeader::new_checked`] on untrusted input.
    pub const fn new_unchecked(buf: T) -> Self {
        Self { buf }
    }

    /// Wraps a buffer after checking version, type and length.
    ///
    /// # Errors
    /// [`WireError::Truncated`] if the buffer is shorter than the header or the
    /// frame, [`WireError::UnknownVersion`], [`WireError::UnknownType`],
    /// [`WireError::Oversized`], or [`WireError::Malformed`] if
    /// `frame_length` is shorter than the type's header.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated { need: HEADER_LEN, have: b.len() });
        }
        let version = b[VERSION_OFFSET];
        if version != VERSION {
            return Err(WireError::UnknownVersion(version));
        }
        let ty = FrameType::from_u16(u16_at(b, FRAME_TYPE))?;
        let len = u32_at(b, FRAME_LENGTH) as usize;
        if len > MAX_FRAME_LENGTH {
            return Err(WireError::Oversized { length: len, max: MAX_FRAME_LENGTH });
        }
        if len < ty.header_len() {
            return Err(WireError::Malformed { kind: ty, reason: "frame_length shorter than header" });
        }
        if b.len() < len {
            return Err(WireError::Truncated { need: len, have: b.len() });
        }
        Ok(Self { buf })
    }

    /// Total length of the frame in bytes, header included.
    pub fn frame_length(&self) -> usize {
        u32_at(self.buf.as_ref(), FRAME_LENGTH) as usize
    }
    /// Protocol version.
    pub fn version(&self) -> u8 {
        self.buf.as_ref()[VERSION_OFFSET]
    }
    /// Frame flags.
    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[FLAGS]
    }
    /// Frame type. A checked header always holds a known type; an unchecked
    /// one with an unknown type reads as [`FrameType::Pad`].
    pub fn frame_type(&self) -> FrameType {
        FrameType::from_u16(u16_at(self.buf.as_ref(), FRAME_TYPE)).unwrap_or(FrameType::Pad)
    }
    /// Session identifier: one per publisher incarnation.
    pub fn session_id(&self) -> u32 {
        u32_at(self.buf.as_ref(), SESSION_ID)
    }
    /// Stream identifier.
    pub fn stream_id(&self) -> u32 {
        u32_at(self.buf.as_ref(), STREAM_ID)
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }
}

/// Checks a buffer for a frame of type `ty`, returning its `frame_length`.
pub(crate) fn check(b: &[u8], ty: FrameType) -> Result<usize, WireError> {
    let h = FrameHeader::new_checked(b)?;
    let found = h.frame_type();
    if found != ty {
        return Err(WireError::WrongType { expected: ty, found });
    }
    Ok(h.frame_length())
}

/// Checks an emit buffer and writes the common header.
pub(crate) fn emit(
    b: &mut [u8],
    ty: FrameType,
    frame_length: usize,
    flags: u8,
    session_id: u32,
    stream_id: u32,
) -> Result<(), WireError> {
    if frame_length > MAX_FRAME_LENGTH {
        return Err(WireError::Oversized { length: frame_length, max: MAX_FRAME_LENGTH });
    }
    if b.len() < frame_length {
        return Err(WireError::BufferTooSmall { need: frame_length, have: b.len() });
    }
    put_u32(b, FRAME_LENGTH, frame_length as u32);
    b[VERSION_OFFSET] = VERSION;
    b[FLAGS] = flags;
    put_u16(b, FRAME_TYPE, ty as u16);
    put_u32(b, SESSION_ID, session_id);
    put_u32(b, STREAM_ID, stream_id);
    Ok(())
}

/// Declares a typed, checked view `$name<T>` over a frame of type `$ty`,
/// with the common-header accessors. Type-specific accessors are written
/// beside each use.
macro_rules! frame_view {
    ($(#[$doc:meta])* $name:ident, $ty:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name<T: AsRef<[u8]>> {
            buf: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking it; accessors may panic on a
            /// short buffer. Use `new_checked` on untrusted input.
            pub const fn new_unchecked(buf: T) -> Self {
                Self { buf }
            }

            /// Wraps a buffer after checking the header, the type and every
            /// length field, so that no accessor can panic afterwards.
            ///
            /// # Errors
            /// Any [`WireError`](crate::WireError) describing why the buffer
            /// is not a valid frame of this type.
            pub fn new_checked(buf: T) -> Result<Self, crate::WireError> {
                let len = crate::header::check(buf.as_ref(), $ty)?;
                let view = Self { buf };
                view.check_body(len)?;
                Ok(view)
            }

            /// Total length of the frame, header included.
            pub fn frame_length(&self) -> usize {
                crate::field::u32_at(self.buf.as_ref(), crate::header::FRAME_LENGTH) as usize
            }
            /// Frame flags.
            pub fn flags(&self) -> u8 {
                self.buf.as_ref()[crate::header::FLAGS]
            }
            /// Session identifier.
            pub fn session_id(&self) -> u32 {
                crate::field::u32_at(self.buf.as_ref(), crate::header::SESSION_ID)
            }
            /// Stream identifier.
            pub fn stream_id(&self) -> u32 {
                crate::field::u32_at(self.buf.as_ref(), crate::header::STREAM_ID)
            }
            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buf
            }
            /// The frame's bytes (the checked buffer).
            pub fn as_bytes(&self) -> &[u8] {
                self.buf.as_ref()
            }
        }
    };
}
pub(crate) use frame_view;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_short_buffers() {
        assert_eq!(
            FrameHeader::new_checked(&[0u8; 3][..]).unwrap_err(),
            WireError::Truncated { need: HEADER_LEN, have: 3 }
        );
    }

    #[test]
    fn rejects_unknown_version_before_type() {
        let mut b = [0u8; 32];
        b[VERSION_OFFSET] = 9;
        put_u16(&mut b, FRAME_TYPE, 77);
        assert_eq!(FrameHeader::new_checked(&b[..]).unwrap_err(), WireError::UnknownVersion(9));
    }

    #[test]
    fn rejects_unknown_type_and_oversize() {
        let mut b = [0u8; 32];
        b[VERSION_OFFSET] = VERSION;
        put_u16(&mut b, FRAME_TYPE, 77);
        assert_eq!(FrameHeader::new_checked(&b[..]).unwrap_err(), WireError::UnknownType(77));
        put_u16(&mut b, FRAME_TYPE, 1);
        put_u32(&mut b, FRAME_LENGTH, u32::MAX);
        assert!(matches!(FrameHeader::new_checked(&b[..]), Err(WireError::Oversized { .. })));
        put_u32(&mut b, FRAME_LENGTH, 64);
        assert_eq!(FrameHeader::new_checked(&b[..]).unwrap_err(), WireError::Truncated { need: 64, have: 32 });
    }
}
