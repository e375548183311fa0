//! `tickwire lab topic-match`: what a router pays to find a topic's
//! subscribers, with few and with many unrelated subscriptions.
//!
//! For each index size (10 wanted subscriptions plus N unrelated ones, half
//! literal three-level patterns and half with `*` or `>`), rounds
//! interleave the sizes and time, per lookup:
//! * `cached`: a topic seen before, with subscribers (one hash lookup in a
//!   [`TopicTable`], as the router's topic table does);
//! * `unwanted`: a topic seen before that nobody wants (one hash lookup);
//! * `uncached`: the trie walk and deduplication.
//!
//! The figure that matters is the ratio of each cost with many unrelated
//! subscriptions to the same cost with few: flat means near 1.

use crate::base::output::report::median;
use crate::LabError;
use std::hint::black_box;
use std::time::Instant;
use tickwire_router::topics::TopicTable;
use tickwire_router::SubscriptionIndex;
use tickwire_topic::Pattern;

/// `lab topic-match`.
#[derive(Debug, Clone, clap::Args)]
pub struct TopicMatch {
    /// Unrelated subscriptions in each index measured (the first is the baseline).
    #[arg(long, value_delimiter = ',', default_value = "10,100000")]
    pub unrelated: Vec<usize>,
    /// Interleaved rounds (each: 1M cached lookups, 1M unwanted, 100k uncached per size).
    #[arg(long, default_value_t = 7)]
    pub rounds: usize,
    /// One JSON object per size.
    #[arg(long)]
    pub json: bool,
}

/// One size's costs, nanoseconds per lookup (the median over rounds).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct MatchRow {
    /// Unrelated subscriptions in the index.
    pub unrelated: usize,
    /// A cached topic with subscribers.
    pub cached_ns: f64,
    /// A cached topic nobody wants.
    pub unwanted_ns: f64,
    /// A topic matched through the trie.
    pub uncached_ns: f64,
}

fn build(unrelated: usize) -> Result<SubscriptionIndex<u32>, LabError> {
    let mut ix = SubscriptionIndex::new();
    let p = |s: &str| Pattern::parse(s).map_err(|e| LabError::Usage(e.to_string()));
    for i in 0..10u32 {
        ix.insert(&p(&format!("md/eu/S{i:03}"))?, i, 1);
    }
    ix.insert(&p("md/*/S000")?, 10, 1);
    for i in 0..unrelated {
        let pat = match i % 4 {
            0 | 1 => format!("eq/x{}/y{}", i % 997, i),
            2 => format!("fx/{}/*", i),
            _ => format!("rates/{}/>", i),
        };
        ix.insert(&p(&pat)?, 100 + (i % 1000) as u32, i as u32);
    }
    Ok(ix)
}

/// Nanoseconds per call of `f` over `n` calls.
fn per_call(n: u32, mut f: impl FnMut(u32)) -> f64 {
    let t = Instant::now();
    for i in 0..n {
        f(i);
    }
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

/// Measures each size in `sizes`, `rounds` interleaved rounds of `n`
/// lookups per kind.
///
/// # Errors
/// [`LabError::Usage`] for an empty list of sizes.
pub fn run(sizes: &[usize], rounds: usize, n: u32) -> Result<Vec<MatchRow>, LabError> {
    if sizes.is_empty() || rounds == 0 || n == 0 {
        return Err(LabError::Usage("topic-match needs sizes, rounds and lookups".into()));
    }
    let mut indexes = sizes.iter().map(|&s| build(s)).collect::<Result<Vec<_>, _>>()?;
    let wanted: Vec<String> = (0..10).map(|i| format!("md/eu/S{i:03}")).collect();
    let unwanted: Vec<String> = (0..10).map(|i| format!("eq/none/S{i:03}")).collect();
    let mut samples = vec![(Vec::new(), Vec::new(), Vec::new()); sizes.len()];
    for _ in 0..rounds {
        for (ix, s) in indexes.iter_mut().zip(samples.iter_mut()) {
            // Each topic's match, remembered as the router does.
            let mut table: TopicTable<Box<[u32]>> = TopicTable::new(64);
            for t in wanted.iter().chain(&unwanted) {
                let m = ix.matches(t).into();
                table.insert(t, m);
            }
            let mut cached = |t: &str| match table.find(t) {
                Some(slot) => table.value_mut(slot).len(),
                None => 0,
            };
            s.0.push(per_call(n, |i| {
                black_box(cached(black_box(&wanted[i as usize % 10])));
            }));
            s.1.push(per_call(n, |i| {
                black_box(cached(black_box(&unwanted[i as usize % 10])));
            }));
            s.2.push(per_call(n / 10, |i| {
                black_box(ix.matches(black_box(&wanted[i as usize % 10])).len());
            }));
        }
    }
    Ok(sizes
        .iter()
        .zip(samples)
        .map(|(&unrelated, (c, u, m))| MatchRow {
            unrelated,
            cached_ns: median(c),
            unwanted_ns: median(u),
            uncached_ns: median(m),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_size_gets_a_row() {
        let rows = super::run(&[10, 1000], 2, 1000).unwrap();
        assert_eq!(rows.iter().map(|r| r.unrelated).collect::<Vec<_>>(), [10, 1000]);
        assert!(rows.iter().all(|r| r.cached_ns > 0.0 && r.uncached_ns > 0.0));
    }
}
