//! # tickwire-impair: built-in network impairment
//!
//! This kernel has no netem, so loss, reorder and duplication are built in
//! and seeded: the same seed and the same traffic give the same decisions.
//! The transport crate wraps any transport with it (`Impaired<T>`), and the
//! protocol's own tests drive it over a simulated network. Modelled on
//! Aeron's loss generators; the driver keeps one [`Impairment`] per
//! direction and per frame class (data or control), so each can be set
//! separately. [`Rng`] is the seeded generator behind it (and behind the
//! protocol's randomised NAK delay).
//!
//! Pure: no I/O, no clock (`now` is passed in), no `unsafe`.
//!
//! # Examples
//!
//! ```
//! use tickwire_impair::{ImpairConfig, Impairment};
//! let mut path = Impairment::new(ImpairConfig { loss: 0.5, seed: 7, ..Default::default() });
//! let mut passed = 0;
//! for _ in 0..1000 {
//!     path.process(0, b"datagram", &mut |_| passed += 1);
//! }
//! assert!(passed > 400 && passed < 600, "{passed}");
//! assert_eq!(path.stats().dropped, 1000 - passed);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod rng;

/// Nanoseconds on the caller's monotonic clock.
pub type Nanos = u64;

pub use rng::Rng;
use std::collections::VecDeque;
use tickwire_wire::{data, FrameHeader, FrameType};

/// What to do to one class of datagrams on one path.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ImpairConfig {
    /// Probability of dropping a datagram.
    pub loss: f64,
    /// Probability of holding a datagram back until `reorder_hold` later
    /// datagrams (or 1 ms) have passed it.
    pub reorder: f64,
    /// Probability of sending a datagram twice.
    pub duplicate: f64,
    /// Drop DATA datagrams that carry any position in `[from, to)`, once: a
    /// retransmission of the range passes.
    pub drop_range: Option<(u64, u64)>,
    /// Seed; equal seeds give equal decisions for equal traffic.
    pub seed: u64,
}

impl ImpairConfig {
    /// Does nothing at all.
    pub fn is_none(&self) -> bool {
        self.loss <= 0.0 && self.reorder <= 0.0 && self.duplicate <= 0.0 && self.drop_range.is_none()
    }
}

/// Counts of what an [`Impairment`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImpairStats {
    /// Datagrams dropped at random.
    pub dropped: u64,
    /// Datagrams dropped by the fixed range.
    pub range_dropped: u64,
    /// Datagrams delayed past later ones.
    pub reordered: u64,
    /// Extra copies sent.
    pub duplicated: u64,
}

const REORDER_HOLD: usize = 3;
const REORDER_MAX_DELAY: Nanos = 1_000_000;

/// One impaired path. Datagrams go in through [`Impairment::process`] and
/// come out through the `out` callback, now or (reordered) later.
#[derive(Debug)]
pub struct Impairment {
    cfg: ImpairConfig,
    rng: Rng,
    range_done_to: u64,
    held: VecDeque<(Vec<u8>, usize, Nanos)>,
    stats: ImpairStats,
}

impl Impairment {
    /// A path with these settings.
    pub fn new(cfg: ImpairConfig) -> Self {
        Self { rng: Rng::new(cfg.seed), range_done_to: 0, held: VecDeque::new(), stats: ImpairStats::default(), cfg }
    }
    /// What it has done.
    pub fn stats(&self) -> &ImpairStats {
        &self.stats
    }
    /// Datagrams held back for reordering.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Passes `datagram` through: calls `out` zero, one or two times with it,
    /// and with any held datagram whose turn has come.
    pub fn process(&mut self, now: Nanos, datagram: &[u8], out: &mut dyn FnMut(&[u8])) {
        if let Some((from, to)) = self.cfg.drop_range {
            if let Some(pos) = first_data_position(datagram) {
                let end = pos + datagram.len() as u64;
                if pos < to && end > from && pos >= self.range_done_to {
                    self.range_done_to = end;
                    self.stats.range_dropped += 1;
                    self.release(now, out, true);
                    return;
                }
            }
        }
        if self.rng.chance(self.cfg.loss) {
            self.stats.dropped += 1;
        } else if self.rng.chance(self.cfg.reorder) {
            self.stats.reordered += 1;
            self.held.push_back((datagram.to_vec(), 0, now));
            return;
        } else {
            out(datagram);
            if self.rng.chance(self.cfg.duplicate) {
                self.stats.duplicated += 1;
                out(datagram);
            }
        }
        self.release(now, out, true);
    }

    /// Releases held datagrams that are old enough; call when idle too.
    pub fn poll(&mut self, now: Nanos, out: &mut dyn FnMut(&[u8])) {
        self.release(now, out, false);
    }

    fn release(&mut self, now: Nanos, out: &mut dyn FnMut(&[u8]), passed: bool) {
        for h in self.held.iter_mut() {
            h.1 += usize::from(passed);
        }
        while let Some((_, n, at)) = self.held.front() {
            if *n < REORDER_HOLD && now.saturating_sub(*at) < REORDER_MAX_DELAY {
                break;
            }
            if let Some((d, _, _)) = self.held.pop_front() {
                out(&d);
            }
        }
    }
}

/// Position of the first DATA frame of a datagram, if it starts with one.
pub fn first_data_position(datagram: &[u8]) -> Option<u64> {
    let h = FrameHeader::new_checked(datagram).ok()?;
    if h.frame_type() != FrameType::Data || datagram.len() < data::HEADER_LEN {
        return None;
    }
    let b = &datagram[data::POSITION..data::POSITION + 8];
    Some(u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickwire_wire::{flags, DataRepr};

    fn dgram(pos: u64) -> Vec<u8> {
        let mut b = vec![0u8; 64];
        let r = DataRepr {
            session_id: 1,
            stream_id: 1,
            position: pos,
            flags: flags::UNFRAGMENTED,
            topic: "",
            payload: b"x",
        };
        r.emit(&mut b).unwrap();
        b
    }

    #[test]
    fn range_drops_once_then_lets_the_retransmission_pass() {
        let mut imp = Impairment::new(ImpairConfig { drop_range: Some((100, 192)), ..Default::default() });
        let mut seen = Vec::new();
        for pos in [0, 64, 128, 192, 64, 128] {
            imp.process(0, &dgram(pos), &mut |d| seen.push(first_data_position(d).unwrap()));
        }
        assert_eq!(seen, vec![0, 192, 64, 128]);
        assert_eq!(imp.stats().range_dropped, 2);
    }

    #[test]
    fn seeded_loss_is_reproducible_and_near_the_rate() {
        let run = |seed| {
            let mut imp = Impairment::new(ImpairConfig { loss: 0.2, seed, ..Default::default() });
            let mut n = 0;
            for i in 0..10_000 {
                imp.process(0, &dgram(i * 64), &mut |_| n += 1);
            }
            n
        };
        assert_eq!(run(7), run(7));
        assert!((7_700..8_300).contains(&run(7)), "{}", run(7));
    }

    #[test]
    fn reorder_delivers_everything_late_and_duplicates_add_copies() {
        let cfg = ImpairConfig { reorder: 0.3, duplicate: 0.1, seed: 3, ..Default::default() };
        let mut imp = Impairment::new(cfg);
        let mut seen = Vec::new();
        for i in 0..1000u64 {
            imp.process(i, &dgram(i * 64), &mut |d| seen.push(first_data_position(d).unwrap()));
        }
        imp.poll(10_000_000, &mut |d| seen.push(first_data_position(d).unwrap()));
        let mut uniq = seen.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(uniq.len(), 1000);
        assert_eq!(seen.len() as u64, 1000 + imp.stats().duplicated);
        assert!(seen.windows(2).any(|w| w[0] > w[1]), "nothing was reordered");
    }
}
