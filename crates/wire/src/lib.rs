//! # tickwire-wire: the tickwire frame format and message layer
//!
//! Every byte that tickwire puts in a log buffer or on a network is a *frame*
//! described here. The same frames are stored in shared-memory log buffers and
//! sent on the wire, so a sender can transmit straight from the log.
//!
//! This crate is pure: no `unsafe`, no I/O, no clock. For each frame type it
//! offers
//!
//! * a zero-copy **view** over a byte buffer (`DataFrame<T>`, `NakFrame<T>`, ...),
//!   built with `new_checked`, which validates the buffer *once* and returns a
//!   typed [`WireError`] for truncated, oversized, unknown-version or malformed
//!   input. After that no accessor can panic.
//! * a **`Repr`** (`DataRepr`, `NakRepr`, ...) that parses a view into plain
//!   values and emits those values into a buffer.
//!
//! [`FrameRepr`] parses or emits any frame type. The byte layout is specified
//! in `docs/protocol.md`; every frame starts with the common [`header`].
//!
//! Above the frames, the message layer that every transport shares (sans-IO,
//! so the shared-memory log and the network sender/receiver call the same
//! code):
//!
//! * [`Fragmenter`]: how a message splits into DATA frames.
//! * [`Reassembler`]: how frames become whole messages and [`Event`]s for a
//!   handler, with [`DeliveryStats`] counted on the way.
//! * [`message`]: [`Message`], [`Event`] and [`OfferError`], the one
//!   vocabulary of every publication and subscription.
//! * [`stamp`]: the sequence/send-time stamp generated load carries.
//! * [`client`]: the client protocol between router clients and the router
//!   (one frame per log message over shared memory, length-prefixed over TCP).
//! * [`headers`]: the header block a PUBLISH or DELIVER may carry before
//!   its payload (NATS's format).
//!
//! # Examples
//!
//! ```
//! use tickwire_wire::{DataRepr, FrameRepr, flags};
//! let repr = DataRepr { session_id: 7, stream_id: 1001, position: 4096,
//!     flags: flags::UNFRAGMENTED, topic: "md/eu/VOD", payload: b"bid 101.5" };
//! let mut buf = [0u8; 128];
//! let len = repr.emit(&mut buf).unwrap();
//! assert_eq!(FrameRepr::parse(&buf[..len]).unwrap(), FrameRepr::Data(repr));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod field;
pub mod header;

pub mod auth;
pub mod client;
pub mod cluster;
pub mod data;
pub mod error_frame;
pub mod headers;
pub mod heartbeat;
pub mod nak;
pub mod request;
pub mod setup;
pub mod status;

pub mod fragment;
pub mod message;
pub mod reassembly;
pub mod stamp;

mod repr;

pub use auth::{AuthFrame, AuthRepr};
pub use client::{ClientFrame, ClientFrameError, ClientKind, ClientRepr, RejectCode, SlowConsumer};
pub use data::{DataFrame, DataRepr, PadFrame, PadRepr};
pub use error_frame::{ErrorFrame, ErrorRepr};
pub use fragment::{Fragment, Fragmenter};
pub use header::{FrameHeader, FrameType};
pub use heartbeat::{HeartbeatFrame, HeartbeatRepr};
pub use message::{DeliveryStats, Event, GoneReason, Message, OfferError};
pub use nak::{NakFrame, NakRepr};
pub use reassembly::Reassembler;
pub use repr::FrameRepr;
pub use setup::{SetupFrame, SetupRepr};
pub use status::{StatusFrame, StatusRepr};

/// The protocol version this crate reads and writes.
pub const VERSION: u8 = 1;

/// Frames start at multiples of this many bytes in a log buffer and in a
/// batched datagram.
pub const FRAME_ALIGNMENT: usize = 32;

/// The largest `frame_length` accepted (16 MiB). Larger claims are rejected
/// as [`WireError::Oversized`] before any allocation is sized from them.
pub const MAX_FRAME_LENGTH: usize = 16 * 1024 * 1024;

/// The longest topic a DATA frame may carry, in bytes.
pub const MAX_TOPIC_LENGTH: usize = 250;

/// Rounds `len` up to the next multiple of [`FRAME_ALIGNMENT`].
#[inline]
pub const fn align_frame(len: usize) -> usize {
    (len + FRAME_ALIGNMENT - 1) & !(FRAME_ALIGNMENT - 1)
}

/// Flags carried in byte 5 of every frame header.
pub mod flags {
    /// DATA: this fragment begins a message.
    pub const BEGIN: u8 = 0x80;
    /// DATA: this fragment ends a message.
    pub const END: u8 = 0x40;
    /// DATA: the message fits in one frame.
    pub const UNFRAGMENTED: u8 = BEGIN | END;
    /// STATUS: the receiver asks the sender to send a SETUP frame.
    pub const SEND_SETUP: u8 = 0x80;
    /// STATUS: the receiver has delivered the end of the stream (it heard
    /// END_OF_STREAM and has everything before it); a closing sender waits
    /// for this from every receiver, so a lost END_OF_STREAM heartbeat is
    /// sent again instead of leaving a receiver waiting.
    pub const END_DELIVERED: u8 = 0x40;
    /// HEARTBEAT: the session ends at the heartbeat's position.
    pub const END_OF_STREAM: u8 = 0x80;
    /// AUTH: the datagram comes from a receiver (`origin` is a receiver
    /// id), not from a sender (`origin` is its session id).
    pub const FROM_RECEIVER: u8 = 0x80;
}

/// Why a buffer is not a valid frame.
///
/// Returned by every `new_checked`, `parse` and `emit`; never a panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer ends before the frame does.
    #[error("truncated frame: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the frame needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// `frame_length` claims more than [`MAX_FRAME_LENGTH`].
    #[error("frame length {length} exceeds the maximum {max}")]
    Oversized {
        /// The claimed length.
        length: usize,
        /// The limit.
        max: usize,
    },
    /// The version byte is not [`VERSION`].
    #[error("unsupported protocol version {0} (this build speaks {VERSION})")]
    UnknownVersion(u8),
    /// The type field names no known frame type.
    #[error("unknown frame type {0:#06x}")]
    UnknownType(u16),
    /// The frame is of another type than the view asked for.
    #[error("expected a {expected:?} frame, found {found:?}")]
    WrongType {
        /// The type the caller asked for.
        expected: FrameType,
        /// The type in the header.
        found: FrameType,
    },
    /// A field is inconsistent with the rest of the frame.
    #[error("malformed {kind:?} frame: {reason}")]
    Malformed {
        /// The frame type.
        kind: FrameType,
        /// What is wrong.
        reason: &'static str,
    },
    /// `emit` was given a buffer shorter than `buffer_len()`.
    #[error("buffer too small to emit: need {need} bytes, have {have}")]
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
}
