//! Log buffer configuration.

use crate::error::ShmError;
use std::time::Duration;

/// How a publication's log is sized and how it behaves when stuck.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Ring bytes; a power of two, at least 64 KiB.
    pub capacity: usize,
    /// Largest frame, header included; a multiple of 32, at most capacity/8.
    /// Messages longer than `mtu - 32` are fragmented.
    pub mtu: usize,
    /// Largest message `offer` accepts (reassembled size); at most capacity/2.
    pub max_message: usize,
    /// Subscriber slots.
    pub max_subscribers: usize,
    /// A claim not committed after this long is padded out by subscribers.
    pub unblock_timeout: Duration,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            capacity: 16 << 20,
            mtu: 64 << 10,
            max_message: 4 << 20,
            max_subscribers: 32,
            unblock_timeout: Duration::from_secs(5),
        }
    }
}

impl LogConfig {
    /// The defaults with `capacity` bytes of ring; `mtu` and `max_message`
    /// shrink to fit a small ring (capacity/8 and capacity/2).
    pub fn with_capacity(capacity: usize) -> Self {
        let d = Self::default();
        Self { capacity, mtu: d.mtu.min(capacity / 8), max_message: d.max_message.min(capacity / 2), ..d }
    }

    /// Checks the invariants documented on each field.
    ///
    /// # Errors
    /// [`ShmError::Config`] naming the first violated invariant.
    pub fn validate(&self) -> Result<(), ShmError> {
        let bad = |why: String| Err(ShmError::Config(why));
        if !self.capacity.is_power_of_two() || self.capacity < 64 << 10 || self.capacity > 1 << 40 {
            return bad(format!("capacity {} must be a power of two in 64KiB..=1TiB", self.capacity));
        }
        if self.mtu % tickwire_wire::FRAME_ALIGNMENT != 0 || self.mtu < 64 || self.mtu > self.capacity / 8 {
            return bad(format!("mtu {} must be a multiple of 32 in 64..=capacity/8", self.mtu));
        }
        if self.mtu > tickwire_wire::MAX_FRAME_LENGTH {
            return bad(format!("mtu {} exceeds the frame limit", self.mtu));
        }
        if self.max_message == 0 || self.max_message > self.capacity / 2 || self.max_message > u32::MAX as usize {
            return bad(format!("max_message {} must be in 1..=capacity/2", self.max_message));
        }
        if self.max_subscribers == 0 || self.max_subscribers > 1024 {
            return bad(format!("max_subscribers {} must be in 1..=1024", self.max_subscribers));
        }
        Ok(())
    }
}
