//! Why a datagram or frame was dropped without changing anything, counted
//! by reason.

/// Why a datagram or frame was dropped without acting on it. Every frame is
/// checked against the stream's state before it changes anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Invalid {
    /// It does not parse (`new_checked` failed), or a keyed datagram mixes
    /// sessions.
    Malformed,
    /// Keyed channel: no AUTH frame at the end, or a wrong MAC. Unkeyed
    /// channel: a keyed datagram (the other end has a key, this one none).
    Unauthenticated,
    /// Keyed channel: a datagram sequence seen before, or older than the
    /// replay window.
    Replayed,
    /// A position that is not on a 32-byte frame boundary.
    Misaligned,
    /// A DATA frame longer than the session's MTU.
    Oversized,
    /// DATA behind what was delivered, or overlapping received data at
    /// another frame boundary.
    Overlap,
    /// A position further ahead than any sender could be (2^40 bytes).
    TooFar,
    /// END_OF_STREAM before data already received, data after the end, or
    /// an end that moves.
    BadEnd,
    /// A retained-from ahead of the heartbeat's own position.
    BadRetained,
    /// SETUP with an unusable MTU or a misaligned (or absurdly far,
    /// beyond 2^62) initial position.
    BadSetup,
    /// STATUS granting more than any receiver may (a window over 1 GiB) or
    /// consuming beyond what was sent.
    BadStatus,
    /// A NAK for bytes never sent.
    BadNak,
    /// STATUS from a receiver beyond the 256 counted for flow control.
    TooManyReceivers,
}

impl Invalid {
    /// Every reason, in counter order.
    pub const ALL: [Invalid; 13] = [
        Invalid::Malformed,
        Invalid::Unauthenticated,
        Invalid::Replayed,
        Invalid::Misaligned,
        Invalid::Oversized,
        Invalid::Overlap,
        Invalid::TooFar,
        Invalid::BadEnd,
        Invalid::BadRetained,
        Invalid::BadSetup,
        Invalid::BadStatus,
        Invalid::BadNak,
        Invalid::TooManyReceivers,
    ];

    /// The reason's name in counters and logs.
    pub const fn name(self) -> &'static str {
        match self {
            Invalid::Malformed => "malformed",
            Invalid::Unauthenticated => "unauthenticated",
            Invalid::Replayed => "replayed",
            Invalid::Misaligned => "misaligned",
            Invalid::Oversized => "oversized",
            Invalid::Overlap => "overlap",
            Invalid::TooFar => "too_far",
            Invalid::BadEnd => "bad_end",
            Invalid::BadRetained => "bad_retained",
            Invalid::BadSetup => "bad_setup",
            Invalid::BadStatus => "bad_status",
            Invalid::BadNak => "bad_nak",
            Invalid::TooManyReceivers => "too_many_receivers",
        }
    }
}

/// Drops counted by [`Invalid`] reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InvalidCounts([u64; Invalid::ALL.len()]);

impl InvalidCounts {
    /// Drops for `reason`.
    pub fn get(&self, reason: Invalid) -> u64 {
        self.0[reason as usize]
    }
    /// Every drop.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    /// The reasons with a drop, with their counts.
    pub fn nonzero(&self) -> impl Iterator<Item = (Invalid, u64)> + '_ {
        Invalid::ALL.iter().map(|&r| (r, self.get(r))).filter(|&(_, n)| n > 0)
    }
    /// Adds another set of counts (for totals over several endpoints).
    pub fn merge(&mut self, other: &InvalidCounts) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }
    pub(crate) fn add(&mut self, reason: Invalid) {
        self.0[reason as usize] += 1;
    }
}

impl std::fmt::Display for InvalidCounts {
    /// `reason=N` for each reason with a drop, or `none`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (r, n) in self.nonzero() {
            write!(f, "{}{}={n}", if first { "" } else { " " }, r.name())?;
            first = false;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_in_counter_order_and_named_once() {
        for (i, r) in Invalid::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
        let mut names: Vec<_> = Invalid::ALL.iter().map(|r| r.name()).collect();
        names.dedup();
        assert_eq!(names.len(), Invalid::ALL.len());
        let mut c = InvalidCounts::default();
        c.add(Invalid::Replayed);
        c.add(Invalid::Replayed);
        c.add(Invalid::BadEnd);
        assert_eq!((c.total(), c.to_string()), (3, "replayed=2 bad_end=1".to_string()));
    }
}
