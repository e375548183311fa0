//! Byte layout of a log file.
//!
//! ```text
//!  file offset
//!  0      +--------------------------------------------------------------+
//!         | descriptor (read-only after creation)                        |
//!         |  magic "TWLOG\0v1", layout version, header_len, capacity,     |
//!         |  mtu, max_message, stream_id, session_id, max_subscribers,    |
//!         |  flags (asymmetric fence),                                   |
//!         |  publisher pid + start time, created_ns, unblock_timeout_ns,  |
//!         |  channel name                                                |
//!  128    +--------------------------------------------------------------+
//!         | publisher line (written by the publisher only)               |
//!         |  tail: end of the newest claim   heartbeat_ns   limit  closed |
//!  256    +--------------------------------------------------------------+
//!         | coordination line: waiters (parked subscribers), limit lock  |
//!  384    +--------------------------------------------------------------+
//!         | subscriber slot 0 (128 bytes: state, mode, position, pid,    |
//!         |   start time, heartbeat, parked)                             |
//!         | subscriber slot 1 ...                                        |
//!  header_len (page aligned)
//!         +--------------------------------------------------------------+
//!         | ring: `capacity` bytes of 32-byte-aligned DATA / PAD frames   |
//!         |  frame at stream position p lives at p & (capacity - 1)      |
//!         +--------------------------------------------------------------+
//! ```
//! Each line is 128 bytes so that fields written by different processes never
//! share a cache line (two lines, because adjacent-line prefetch pulls pairs).

/// File magic.
pub const MAGIC: [u8; 8] = *b"TWLOG\0v1";
/// Layout version; bumped on any incompatible change.
pub const LAYOUT_VERSION: u32 = 1;

pub const MAGIC_OFFSET: usize = 0;
pub const LAYOUT_VERSION_OFFSET: usize = 8;
pub const HEADER_LEN_OFFSET: usize = 12;
pub const CAPACITY_OFFSET: usize = 16;
pub const MTU_OFFSET: usize = 24;
pub const MAX_MESSAGE_OFFSET: usize = 28;
pub const STREAM_ID_OFFSET: usize = 32;
pub const SESSION_ID_OFFSET: usize = 36;
pub const MAX_SUBSCRIBERS_OFFSET: usize = 40;
/// Descriptor flags (u32); see [`FLAG_ASYMMETRIC_FENCE`].
pub const FLAGS_OFFSET: usize = 44;
/// The publisher is registered for membarrier and does not fence after a
/// commit: a subscriber about to park must call `membarrier_global`.
pub const FLAG_ASYMMETRIC_FENCE: u32 = 1;
pub const PUBLISHER_PID_OFFSET: usize = 48;
pub const PUBLISHER_START_OFFSET: usize = 56;
pub const CREATED_NS_OFFSET: usize = 64;
pub const UNBLOCK_TIMEOUT_OFFSET: usize = 72;
pub const CHANNEL_OFFSET: usize = 80;
/// Longest channel name stored in the descriptor.
pub const CHANNEL_MAX: usize = 48;

/// Publisher line.
pub const TAIL_OFFSET: usize = 128;
pub const PUB_HEARTBEAT_OFFSET: usize = 136;
pub const PUB_LIMIT_OFFSET: usize = 144;
pub const CLOSED_OFFSET: usize = 152;

/// Coordination line.
pub const WAITERS_OFFSET: usize = 256;
pub const LOCK_OFFSET: usize = 264;

/// Subscriber slots.
pub const SLOTS_OFFSET: usize = 384;
pub const SLOT_LEN: usize = 128;
pub const SLOT_STATE: usize = 0;
pub const SLOT_MODE: usize = 4;
pub const SLOT_POSITION: usize = 8;
pub const SLOT_PID: usize = 16;
pub const SLOT_START: usize = 24;
pub const SLOT_HEARTBEAT: usize = 32;
pub const SLOT_PARKED: usize = 40;

/// Slot states.
pub const SLOT_FREE: u32 = 0;
pub const SLOT_ACTIVE: u32 = 1;

/// Bit 63 of a lossy subscriber's position word: it is inside `poll`, and the
/// publisher must not move it.
pub const READING: u64 = 1 << 63;

/// Page size assumed for aligning the ring.
pub const PAGE: usize = 4096;

/// Header length for a number of subscriber slots, rounded up to a page.
pub const fn header_len(max_subscribers: usize) -> usize {
    let raw = SLOTS_OFFSET + max_subscribers * SLOT_LEN;
    (raw + PAGE - 1) & !(PAGE - 1)
}

/// Offset of subscriber slot `i`.
pub const fn slot(i: usize) -> usize {
    SLOTS_OFFSET + i * SLOT_LEN
}

/// The 64-bit commit word of a frame: `frame_length | version | flags | type`
/// exactly as the first eight bytes of the wire header, little-endian.
pub const fn commit_word(frame_length: u32, flags: u8, frame_type: u16) -> u64 {
    frame_length as u64 | (tickwire_wire::VERSION as u64) << 32 | (flags as u64) << 40 | (frame_type as u64) << 48
}

/// Splits a commit word into (frame_length, version, flags, type).
pub const fn split_commit(word: u64) -> (u32, u8, u8, u16) {
    (word as u32, (word >> 32) as u8, (word >> 40) as u8, (word >> 48) as u16)
}
