//! [`FrameRepr`]: parse or emit a frame of any type.

use crate::auth::{AuthFrame, AuthRepr};
use crate::data::{DataFrame, DataRepr, PadFrame, PadRepr};
use crate::error_frame::{ErrorFrame, ErrorRepr};
use crate::header::{FrameHeader, FrameType};
use crate::heartbeat::{HeartbeatFrame, HeartbeatRepr};
use crate::nak::{NakFrame, NakRepr};
use crate::setup::{SetupFrame, SetupRepr};
use crate::status::{StatusFrame, StatusRepr};
use crate::WireError;

/// Any frame, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameRepr<'a> {
    /// See [`crate::data`].
    Pad(PadRepr),
    /// See [`crate::data`].
    Data(DataRepr<'a>),
    /// See [`crate::nak`].
    Nak(NakRepr),
    /// See [`crate::status`].
    Status(StatusRepr),
    /// See [`crate::error_frame`].
    Error(ErrorRepr<'a>),
    /// See [`crate::setup`].
    Setup(SetupRepr),
    /// See [`crate::heartbeat`].
    Heartbeat(HeartbeatRepr),
    /// See [`crate::auth`].
    Auth(AuthRepr),
}

impl<'a> FrameRepr<'a> {
    /// Parses the frame at the start of `buf`. Bytes after `frame_length` are
    /// ignored (the next frame starts at the aligned length).
    ///
    /// # Errors
    /// Any [`WireError`]; never panics, whatever the bytes.
    pub fn parse(buf: &'a [u8]) -> Result<Self, WireError> {
        let ty = FrameHeader::new_checked(buf)?.frame_type();
        Ok(match ty {
            FrameType::Pad => Self::Pad(PadRepr::parse(&PadFrame::new_checked(buf)?)),
            FrameType::Data => Self::Data(DataRepr::parse(&DataFrame::new_checked(buf)?)),
            FrameType::Nak => Self::Nak(NakRepr::parse(&NakFrame::new_checked(buf)?)),
            FrameType::Status => Self::Status(StatusRepr::parse(&StatusFrame::new_checked(buf)?)),
            FrameType::Error => Self::Error(ErrorRepr::parse(&ErrorFrame::new_checked(buf)?)),
            FrameType::Setup => Self::Setup(SetupRepr::parse(&SetupFrame::new_checked(buf)?)),
            FrameType::Heartbeat => Self::Heartbeat(HeartbeatRepr::parse(&HeartbeatFrame::new_checked(buf)?)),
            FrameType::Auth => Self::Auth(AuthRepr::parse(&AuthFrame::new_checked(buf)?)),
        })
    }

    /// Bytes needed to emit (unaligned).
    pub fn buffer_len(&self) -> usize {
        match self {
            Self::Pad(r) => r.length,
            Self::Data(r) => r.buffer_len(),
            Self::Nak(r) => r.buffer_len(),
            Self::Status(r) => r.buffer_len(),
            Self::Error(r) => r.buffer_len(),
            Self::Setup(r) => r.buffer_len(),
            Self::Heartbeat(r) => r.buffer_len(),
            Self::Auth(r) => r.buffer_len(),
        }
    }

    /// Writes the frame at the start of `buf`, returning its `frame_length`.
    ///
    /// # Errors
    /// Any [`WireError`] the frame type's `emit` returns.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        match self {
            Self::Pad(r) => r.emit(buf),
            Self::Data(r) => r.emit(buf),
            Self::Nak(r) => r.emit(buf),
            Self::Status(r) => r.emit(buf),
            Self::Error(r) => r.emit(buf),
            Self::Setup(r) => r.emit(buf),
            Self::Heartbeat(r) => r.emit(buf),
            Self::Auth(r) => r.emit(buf),
        }
    }
}
