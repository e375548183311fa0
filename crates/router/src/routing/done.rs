//! A set of sequences kept as ranges: what a durable queue's consumers
//! acknowledged out of order.

use std::collections::BTreeMap;

/// Sequences acknowledged out of order, as ranges (first → last): with
/// consumers acknowledging at their own pace the set is a few ranges
/// between the messages still in flight, however long a message stays
/// unacknowledged (a poison message cycling to its dead letter).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Done(BTreeMap<u64, u64>);

impl Done {
    pub(super) fn from_ranges(r: impl IntoIterator<Item = (u64, u64)>) -> Self {
        // Sorted, then merged where they touch or overlap (a saved file is
        // the router's own, but need not be canonical).
        let mut all: Vec<(u64, u64)> = r.into_iter().filter(|(a, b)| a <= b).collect();
        all.sort_unstable();
        let mut d = Self::default();
        let mut open: Option<(u64, u64)> = None;
        for (a, b) in all {
            open = match open {
                Some((s, e)) if a <= e.saturating_add(1) => Some((s, e.max(b))),
                Some((s, e)) => {
                    d.0.insert(s, e);
                    Some((a, b))
                }
                None => Some((a, b)),
            };
        }
        if let Some((s, e)) = open {
            d.0.insert(s, e);
        }
        d
    }

    pub(super) fn ranges(&self) -> Vec<(u64, u64)> {
        self.0.iter().map(|(&a, &b)| (a, b)).collect()
    }

    pub(super) fn contains(&self, x: u64) -> bool {
        self.0.range(..=x).next_back().is_some_and(|(_, &b)| x <= b)
    }

    /// Adds `x` (joining the ranges it touches).
    pub(super) fn insert(&mut self, x: u64) {
        if self.contains(x) {
            return;
        }
        let before = self.0.range(..x).next_back().filter(|(_, &b)| b + 1 == x).map(|(&a, _)| a);
        let after = x.checked_add(1).and_then(|n| self.0.remove(&n));
        let start = before.unwrap_or(x);
        self.0.insert(start, after.unwrap_or(x));
    }

    /// Forgets everything below `x`.
    pub(super) fn drop_below(&mut self, x: u64) {
        while let Some((&a, &b)) = self.0.first_key_value() {
            if b < x {
                self.0.remove(&a);
            } else {
                if a < x {
                    self.0.remove(&a);
                    self.0.insert(x, b);
                }
                break;
            }
        }
    }

    /// Sequences held.
    #[cfg(test)]
    fn len(&self) -> u64 {
        self.0.iter().map(|(a, b)| b - a + 1).sum()
    }

    /// Ranges held (what it costs).
    #[cfg(test)]
    fn range_count(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::Done;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// The ranges hold exactly the sequences a plain set would, through
        /// inserts and cuts in any order.
        #[test]
        fn done_ranges_hold_what_a_set_holds(ops in proptest::collection::vec((0u64..200, any::<bool>()), 0..300)) {
            let (mut d, mut set) = (Done::default(), BTreeSet::new());
            for (x, cut) in ops {
                if cut {
                    d.drop_below(x);
                    set.retain(|&y| y >= x);
                } else {
                    d.insert(x);
                    set.insert(x);
                }
                prop_assert_eq!(d.len(), set.len() as u64);
                for y in 0..201 {
                    prop_assert_eq!(d.contains(y), set.contains(&y), "{}", y);
                }
                let again = Done::from_ranges(d.ranges());
                prop_assert_eq!(&again, &d);
                // Out of order and overlapping, it comes out the same.
                let mut messy = d.ranges();
                messy.reverse();
                messy.extend(d.ranges().iter().map(|&(a, b)| (a, a.max(b.saturating_sub(1)))));
                prop_assert_eq!(&Done::from_ranges(messy), &d);
            }
        }
    }

    /// Acknowledgements in any order around a message held forever (a
    /// poison message cycling to its dead letter) keep two ranges, not one
    /// entry each.
    #[test]
    fn a_message_held_forever_costs_two_ranges_not_an_entry_per_acknowledgement() {
        let mut d = Done::default();
        for x in (2..100_000u64).rev() {
            d.insert(x);
        }
        d.insert(0);
        assert_eq!((d.range_count(), d.len()), (2, 99_999));
        assert!(!d.contains(1));
    }
}
