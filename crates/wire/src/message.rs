//! What an application sees above the frames, the same for every transport:
//! a [`Message`], the [`Event`]s a subscription delivers, the
//! [`OfferError`]s a publication refuses with, and the [`DeliveryStats`]
//! that delivery counts.

/// A whole message as delivered to a handler, borrowed from a log, a
/// receive window or a reassembly buffer. The same type for shared memory
/// and the network, so handlers look the same for both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Message<'a> {
    /// The payload.
    pub payload: &'a [u8],
    /// The topic, `""` if none.
    pub topic: &'a str,
    /// Stream position of the message's first frame.
    pub position: u64,
    /// Publisher session.
    pub session_id: u32,
    /// Stream.
    pub stream_id: u32,
}

/// What a subscription hands to its handler, in stream order.
///
/// Over shared memory `Message`, `Lost` and `PublisherGone` occur (a log
/// has one publisher session for its whole life); over the network a
/// receiver also reports joining and leaving sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// A session was joined at `position`; its messages follow.
    Joined {
        /// The session.
        session_id: u32,
        /// Where this subscription starts.
        position: u64,
    },
    /// A whole message.
    Message(Message<'a>),
    /// Stream bytes `[from, to)` of `session_id` will never be delivered to
    /// this subscription. Never silent: every byte is either delivered in a
    /// message or named here.
    Lost {
        /// The session.
        session_id: u32,
        /// First lost position.
        from: u64,
        /// First position delivered again.
        to: u64,
    },
    /// The session ended at `position` (closed by the publisher, or replaced
    /// after it fell silent).
    Ended {
        /// The session.
        session_id: u32,
        /// Its final position.
        position: u64,
    },
    /// The publisher of `session_id` is gone without closing its stream: its
    /// process died, or it fell silent for longer than the subscriber's
    /// publisher timeout. Everything it committed before `position` was
    /// delivered; nothing more will come from it. Reported once.
    PublisherGone {
        /// The session.
        session_id: u32,
        /// Where its stream stopped.
        position: u64,
        /// Died or silent.
        reason: GoneReason,
    },
}

/// Why [`Event::PublisherGone`] was reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoneReason {
    /// The publisher's process no longer runs (pid gone, or reused by a
    /// process with another start time).
    Died {
        /// The dead publisher's pid.
        pid: u32,
    },
    /// The process runs but neither published nor refreshed its heartbeat
    /// for longer than the timeout the subscriber asked for.
    Silent {
        /// How long it has been silent, milliseconds.
        for_ms: u64,
    },
}

impl std::fmt::Display for GoneReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GoneReason::Died { pid } => write!(f, "publisher pid {pid} died"),
            GoneReason::Silent { for_ms } => write!(f, "publisher silent for {for_ms} ms"),
        }
    }
}

/// Why a publication refused a message. Nothing was published: a message is
/// published whole or not at all, and the caller may retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OfferError {
    /// Nobody is listening: no subscriber is attached (shared memory), or no
    /// receiver has answered or all timed out (network).
    #[error("not connected: no subscriber is attached")]
    NotConnected,
    /// The slowest tethered subscriber (or the flow-control window) has no
    /// room yet; try again.
    #[error("back-pressured by the slowest subscriber")]
    BackPressured,
    /// A claim cannot be fragmented: `len` exceeds the largest frame payload.
    #[error("claim of {len} bytes exceeds the largest frame payload {max}")]
    MaxPayloadExceeded {
        /// Requested length.
        len: usize,
        /// Largest allowed.
        max: usize,
    },
    /// The message exceeds `max_message`.
    #[error("message of {len} bytes exceeds max_message {max}")]
    MaxMessageExceeded {
        /// Requested length.
        len: usize,
        /// Largest allowed.
        max: usize,
    },
    /// The topic does not fit a frame (or exceeds the wire limit).
    #[error("topic longer than {max} bytes")]
    TopicTooLong {
        /// Largest allowed.
        max: usize,
    },
    /// The publication was closed.
    #[error("publication closed")]
    Closed,
}

/// What delivery did, for counters: each reader keeps one and adds it to its
/// own counters after a poll.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeliveryStats {
    /// Messages delivered.
    pub messages: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
    /// Partial messages dropped (a fragment was lost, or a message outgrew
    /// the reassembly limit).
    pub reassembly_dropped: u64,
    /// `Lost` events.
    pub lost_events: u64,
    /// Stream bytes reported lost.
    pub lost_bytes: u64,
}
