//! # tickwire-latency: one latency histogram for the whole workspace
//!
//! Every latency tickwire measures goes into the same kind of histogram: an
//! HdrHistogram of nanoseconds from 1 ns to 1 hour with 3 significant
//! figures, made by [`histogram`]. The lab records into it directly; its
//! tables, JSON rows and interval logs are read from it.
//!
//! Inside the router, a histogram is written on one thread (a routing
//! agent, the journal's writer or its fsync thread) and read on another
//! (the metrics thread, `router status`): [`SharedLatencies`] holds one
//! behind a mutex that the writer only ever *tries*. A sample that finds
//! the lock held by a reader is dropped and counted ([`SharedLatencies::dropped`]),
//! so a hot writer never waits; readers take the lock, briefly, to read
//! quantiles, the count and the exact sum, or buckets.
//!
//! Prometheus wants fixed buckets: [`SharedLatencies::buckets`] (or
//! [`Buckets::of`] for a plain histogram) counts the samples at or below
//! each of a list of bounds, with the count and sum read under the same
//! lock, so the three agree.
//!
//! ```
//! use tickwire_latency::SharedLatencies;
//! let l = SharedLatencies::default();
//! for ns in [100, 200, 300, 400] {
//!     l.record(ns);
//! }
//! assert_eq!((l.count(), l.sum_ns(), l.quantile(0.5)), (4, 1000, 200));
//! let b = l.buckets(&[150, 1000]);
//! assert_eq!(b.at_or_below, [(150, 1), (1000, 4)]);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

pub use hdrhistogram::Histogram;

/// The lowest value told apart from 0, in nanoseconds.
pub const LOWEST_NS: u64 = 1;
/// The highest value recorded as itself, in nanoseconds (one hour);
/// [`SharedLatencies::record`] records anything longer as this.
pub const HIGHEST_NS: u64 = 3_600_000_000_000;
/// Significant decimal figures kept: a value reads back within 0.1 %.
pub const SIGNIFICANT_FIGURES: u8 = 3;

/// A latency histogram in nanoseconds (1 ns to 1 hour, 3 significant
/// digits): the one every tickwire latency is recorded into.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_FIGURES)
        .unwrap_or_else(|_| Histogram::new(SIGNIFICANT_FIGURES).expect("hdr"))
}

/// A [`histogram`] and the exact sum of what it holds.
#[derive(Debug, Clone)]
struct Recorded {
    histogram: Histogram<u64>,
    sum_ns: u64,
}

/// A latency [`histogram`] written by one hot thread and read by others:
/// the writer never waits for a reader.
///
/// [`record`](Self::record) only tries the lock: a sample that finds a
/// reader holding it is dropped and counted in [`dropped`](Self::dropped).
/// Readers lock it for as long as one read takes (a quantile, the
/// buckets, a copy).
#[derive(Debug)]
pub struct SharedLatencies {
    recorded: Mutex<Recorded>,
    dropped: AtomicU64,
}

impl Default for SharedLatencies {
    fn default() -> Self {
        Self { recorded: Mutex::new(Recorded { histogram: histogram(), sum_ns: 0 }), dropped: AtomicU64::new(0) }
    }
}

impl SharedLatencies {
    /// An empty one.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one latency of `ns` nanoseconds (longer than an hour: as
    /// an hour), unless a reader holds the lock: then the sample is
    /// dropped and counted, and the writer goes on at once.
    #[inline]
    pub fn record(&self, ns: u64) {
        let mut r = match self.recorded.try_lock() {
            Ok(r) => r,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        r.histogram.saturating_record(ns);
        r.sum_ns = r.sum_ns.saturating_add(ns);
    }

    /// Samples dropped because a reader held the lock.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.read().histogram.len()
    }

    /// The exact sum of the samples recorded, in nanoseconds.
    pub fn sum_ns(&self) -> u64 {
        self.read().sum_ns
    }

    /// The `q` quantile (0..=1) in nanoseconds, to 3 significant figures
    /// (the highest value equivalent to it); 0 when nothing was recorded.
    pub fn quantile(&self, q: f64) -> u64 {
        quantile(&self.read().histogram, q)
    }

    /// Samples at or below each of `bounds_ns` (ascending), with the count
    /// and the sum, all read at the same moment.
    pub fn buckets(&self, bounds_ns: &[u64]) -> Buckets {
        let r = self.read();
        Buckets { sum_ns: r.sum_ns, ..Buckets::of(&r.histogram, bounds_ns) }
    }

    fn read(&self) -> MutexGuard<'_, Recorded> {
        self.recorded.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `h`'s `q` quantile (0..=1), 0 for an empty histogram.
pub fn quantile(h: &Histogram<u64>, q: f64) -> u64 {
    if h.is_empty() {
        0
    } else {
        h.value_at_quantile(q)
    }
}

/// A histogram counted into fixed buckets, as Prometheus exports one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Buckets {
    /// (upper bound in ns, samples at or below it): cumulative, as
    /// Prometheus' `le` buckets. A sample counts at or below a bound when
    /// the highest value its HdrHistogram bucket stands for is (exact
    /// below 2,048 ns; beyond, to 3 significant figures).
    pub at_or_below: Vec<(u64, u64)>,
    /// Every sample (the `+Inf` bucket).
    pub count: u64,
    /// Their sum in nanoseconds (0 from [`Buckets::of`]: a histogram
    /// keeps no exact sum).
    pub sum_ns: u64,
}

impl Buckets {
    /// `h` counted at or below each of `bounds_ns` (ascending).
    pub fn of(h: &Histogram<u64>, bounds_ns: &[u64]) -> Self {
        debug_assert!(bounds_ns.windows(2).all(|w| w[0] < w[1]), "bounds ascend");
        let mut within = vec![0u64; bounds_ns.len()];
        for v in h.iter_recorded() {
            let i = bounds_ns.partition_point(|&b| b < v.value_iterated_to());
            if let Some(n) = within.get_mut(i) {
                *n += v.count_at_value();
            }
        }
        let mut seen = 0;
        let at_or_below = bounds_ns
            .iter()
            .zip(within)
            .map(|(&b, n)| {
                seen += n;
                (b, seen)
            })
            .collect();
        Self { at_or_below, count: h.len(), sum_ns: 0 }
    }

    /// Adds `other`'s counts (over the same bounds) to these: one
    /// histogram of several writers.
    pub fn add(&mut self, other: &Buckets) {
        if self.at_or_below.is_empty() {
            self.at_or_below = other.at_or_below.iter().map(|&(b, _)| (b, 0)).collect();
        }
        debug_assert!(self.at_or_below.iter().map(|b| b.0).eq(other.at_or_below.iter().map(|b| b.0)), "same bounds");
        for (mine, theirs) in self.at_or_below.iter_mut().zip(&other.at_or_below) {
            mine.1 += theirs.1;
        }
        self.count += other.count;
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }

    /// Samples in each bucket alone (not cumulative): (upper bound, count)
    /// per bound, then (`None`, those above the last bound).
    pub fn per_bucket(&self) -> Vec<(Option<u64>, u64)> {
        let mut below = 0;
        let mut out: Vec<(Option<u64>, u64)> = self
            .at_or_below
            .iter()
            .map(|&(b, n)| {
                let here = n - below;
                below = n;
                (Some(b), here)
            })
            .collect();
        out.push((None, self.count - below));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_histogram_spans_1_ns_to_an_hour_at_3_figures() {
        let h = histogram();
        assert_eq!((h.low(), h.high(), h.sigfig()), (1, 3_600_000_000_000, 3));
        assert!(!h.is_auto_resize());
    }

    #[test]
    fn a_record_that_finds_the_lock_held_is_dropped_and_counted() {
        let l = Arc::new(SharedLatencies::default());
        l.record(10);
        let held = l.read();
        // Another thread, as a routing agent would be: it must not wait.
        let writer = Arc::clone(&l);
        std::thread::spawn(move || {
            writer.record(20);
            writer.record(30);
        })
        .join()
        .unwrap();
        drop(held);
        assert_eq!(l.dropped(), 2);
        assert_eq!((l.count(), l.sum_ns()), (1, 10), "only the sample before the reader");
        l.record(40);
        assert_eq!((l.count(), l.sum_ns(), l.dropped()), (2, 50, 2));
    }

    #[test]
    fn quantiles_are_read_to_3_significant_figures() {
        let l = SharedLatencies::new();
        assert_eq!(l.quantile(0.5), 0, "nothing recorded");
        for ns in 1..=1000 {
            l.record(ns);
        }
        assert_eq!(l.quantile(0.5), 500);
        assert_eq!(l.quantile(0.99), 990);
        assert_eq!(l.quantile(1.0), 1000);
        assert_eq!(l.count(), 1000);
        assert_eq!(l.sum_ns(), 500_500);
        // Past 2,048 ns values share buckets: 1,234,567 ns reads back
        // within 0.1 %.
        let big = SharedLatencies::new();
        big.record(1_234_567);
        let q = big.quantile(0.5);
        assert!(q.abs_diff(1_234_567) * 1000 <= 1_234_567, "{q}");
    }

    #[test]
    fn an_hour_or_more_is_recorded_as_an_hour() {
        let l = SharedLatencies::new();
        l.record(u64::MAX);
        assert_eq!(l.count(), 1);
        assert!(l.quantile(1.0) >= HIGHEST_NS);
        assert_eq!(l.sum_ns(), u64::MAX, "the sum saturates");
    }

    #[test]
    fn prometheus_buckets_count_samples_at_or_below_each_bound() {
        let l = SharedLatencies::new();
        for ns in [0, 1, 64, 65, 128, 129, 1_000_000_000] {
            l.record(ns);
        }
        let bounds: Vec<u64> = (0..20).map(|i| 64u64 << i).collect();
        let b = l.buckets(&bounds);
        assert_eq!(&b.at_or_below[..4], &[(64, 3), (128, 5), (256, 6), (512, 6)]);
        assert_eq!(b.at_or_below.last(), Some(&(64 << 19, 6)), "a second is past 34 ms");
        assert_eq!((b.count, b.sum_ns), (7, 1_000_000_387));
        let per: Vec<(Option<u64>, u64)> = b.per_bucket();
        assert_eq!(&per[..3], &[(Some(64), 3), (Some(128), 2), (Some(256), 1)]);
        assert_eq!(per.last(), Some(&(None, 1)), "+Inf holds the second");
        assert_eq!(per.iter().map(|p| p.1).sum::<u64>(), 7);
    }

    #[test]
    fn a_sample_past_2048_ns_counts_below_a_bound_only_if_its_bucket_does() {
        let mut h = histogram();
        // 4,095 ns shares its HdrHistogram bucket with 4,094 (width 2):
        // wholly at or below 4,096. 4,096 starts a bucket of width 4
        // reaching 4,099: above 4,096.
        h.record(4095).unwrap();
        h.record(4096).unwrap();
        let b = Buckets::of(&h, &[4096, 8192]);
        assert_eq!(b.at_or_below, [(4096, 1), (8192, 2)]);
    }

    #[test]
    fn buckets_of_several_writers_add_up() {
        let (a, b) = (SharedLatencies::new(), SharedLatencies::new());
        a.record(10);
        b.record(100);
        b.record(10_000);
        let mut total = Buckets::default();
        for l in [&a, &b] {
            total.add(&l.buckets(&[50, 500]));
        }
        assert_eq!(total.at_or_below, [(50, 1), (500, 2)]);
        assert_eq!((total.count, total.sum_ns), (3, 10_110));
        assert_eq!(total.per_bucket(), [(Some(50), 1), (Some(500), 1), (None, 1)]);
    }
}
