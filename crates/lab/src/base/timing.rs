//! Timing loops: spinning with a deadline, bounded measuring loops, and
//! half-round-trip recording.

use super::common::LabError;
use std::time::{Duration, Instant};

/// Spins until `f` returns `Some`, failing after `timeout`. The clock is
/// first read after 4096 fruitless spins, so a wait that succeeds quickly
/// costs no clock read (this sits inside timed round trips).
///
/// # Errors
/// [`LabError::Timeout`] naming `what`.
#[inline]
pub fn spin_until<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> Result<T, LabError> {
    let mut n = 0u32;
    let mut start: Option<Instant> = None;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        n = n.wrapping_add(1);
        if n % 4096 == 0 {
            match start {
                None => start = Some(Instant::now()),
                Some(t) if t.elapsed() > timeout => return Err(LabError::Timeout(what.to_owned())),
                Some(_) => {}
            }
        }
        std::hint::spin_loop();
    }
}

/// Bounds a measuring loop by `warmup + count` iterations and, optionally,
/// by a time limit that starts when recording starts (warm-up is not
/// counted). The clock is read only every 256 recorded iterations.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    warmup: u64,
    count: u64,
    limit: Option<Duration>,
    deadline: Option<Instant>,
}

impl Budget {
    /// `warmup + count` iterations, and at most `limit` of recording.
    pub fn new(warmup: u64, count: u64, limit: Option<Duration>) -> Self {
        Self { warmup, count, limit, deadline: None }
    }

    /// Whether iteration `i` should run.
    #[inline]
    pub fn keep_going(&mut self, i: u64) -> bool {
        if i >= self.warmup.saturating_add(self.count) {
            return false;
        }
        let Some(limit) = self.limit else { return true };
        if i < self.warmup || (i - self.warmup) % 256 != 0 {
            return true;
        }
        let now = Instant::now();
        let deadline = *self.deadline.get_or_insert(now + limit);
        now < deadline
    }
}

/// Times `exchange(i)` (one round trip: send message `i`, wait for its echo)
/// for `warmup + count` iterations or until `limit` of recording has passed,
/// and records half of each round trip after the warm-up.
///
/// # Errors
/// The first error `exchange` returns.
pub fn round_trips(
    warmup: u64,
    count: u64,
    limit: Option<Duration>,
    mut exchange: impl FnMut(u64) -> Result<(), LabError>,
) -> Result<hdrhistogram::Histogram<u64>, LabError> {
    let mut h = super::output::report::histogram();
    let mut budget = Budget::new(warmup, count, limit);
    let mut i = 0;
    while budget.keep_going(i) {
        let t0 = Instant::now();
        exchange(i)?;
        let rtt = t0.elapsed().as_nanos() as u64;
        if i >= warmup {
            h.saturating_record(rtt / 2);
        }
        i += 1;
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_bounds_by_count_and_by_time_after_warmup() {
        let mut b = Budget::new(3, 5, None);
        assert_eq!((0..100).take_while(|&i| b.keep_going(i)).count(), 8);

        // A slow warm-up does not eat the time limit: it starts at the first recorded iteration.
        let mut b = Budget::new(2, u64::MAX / 2, Some(Duration::from_millis(30)));
        assert!(b.keep_going(0));
        std::thread::sleep(Duration::from_millis(50));
        assert!(b.keep_going(1));
        assert!(b.keep_going(2), "recording starts now");
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.keep_going(3), "the clock is read only every 256 iterations");
        assert!(!b.keep_going(2 + 256), "past the limit");
    }
}
