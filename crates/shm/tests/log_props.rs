//! Property tests of the log buffer: any interleaving of offers, claims
//! committed or aborted, polls of a tethered and a lossy subscriber (whose
//! lag makes the publisher evict it) delivers each committed message
//! exactly once and in order to the tethered subscriber, and to the lossy
//! one either in order or behind a `Lost` notice, never silently skipped.

use proptest::prelude::*;
use std::path::PathBuf;
use tickwire_shm::*;

#[derive(Debug, Clone)]
enum Op {
    /// Copy in a message of this many bytes (fragmented past the MTU).
    Offer(usize),
    /// Claim, write, commit.
    Commit(usize),
    /// Claim, write, drop without committing (becomes padding).
    Abort(usize),
    /// Poll the tethered subscriber for up to this many fragments.
    PollTethered(usize),
    /// Poll the lossy subscriber.
    PollLossy(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (8usize..3000).prop_map(Op::Offer),
        2 => (8usize..900).prop_map(Op::Commit),
        1 => (8usize..900).prop_map(Op::Abort),
        3 => (1usize..64).prop_map(Op::PollTethered),
        1 => (1usize..16).prop_map(Op::PollLossy),
    ]
}

fn message(id: u64, len: usize) -> Vec<u8> {
    let mut m = vec![(id % 251) as u8; len];
    m[..8].copy_from_slice(&id.to_le_bytes());
    m
}

/// What one subscriber saw, checked as it arrives.
#[derive(Default)]
struct Seen {
    ids: Vec<u64>,
    lost_since_last: bool,
    errors: Vec<String>,
}

fn poll(r: &mut LogReader, limit: usize, seen: &mut Seen, committed: &[(u64, usize)]) {
    r.poll(
        |e| match e {
            Event::Message(m) => {
                let id = u64::from_le_bytes(m.payload[..8].try_into().unwrap());
                let expect_next = seen.ids.last().map_or(0, |l| l + 1);
                if id != expect_next && !seen.lost_since_last {
                    seen.errors.push(format!("message {id} after {expect_next:?} with no Lost notice"));
                }
                match committed.get(id as usize) {
                    Some(&(_, len)) if m.payload == message(id, len).as_slice() => {}
                    _ => seen.errors.push(format!("message {id} has the wrong contents or was never committed")),
                }
                seen.ids.push(id);
                seen.lost_since_last = false;
            }
            Event::Lost { from, to, .. } if from < to => seen.lost_since_last = true,
            other => seen.errors.push(format!("unexpected {other:?}")),
        },
        limit,
    )
    .unwrap();
}

fn dir() -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!("tw-logprop-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)))
}

fn cases() -> u32 {
    std::env::var("TICKWIRE_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(200)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_committed_message_is_delivered_once_in_order_or_reported_lost(ops in proptest::collection::vec(op(), 1..400)) {
        let d = dir();
        let ctx = Context::new(&d).unwrap();
        let cfg = LogConfig { capacity: 64 << 10, mtu: 1024, max_message: 16 << 10, ..LogConfig::default() };
        let mut p = ctx.appender("prop", 1, &cfg).unwrap();
        let mut tethered = ctx.reader("prop", 1, ReaderOptions::default()).unwrap();
        let lossy_opts = ReaderOptions { mode: Mode::Lossy, ..ReaderOptions::default() };
        let mut lossy = ctx.reader("prop", 1, lossy_opts).unwrap();
        let mut committed: Vec<(u64, usize)> = Vec::new();
        let (mut t_seen, mut l_seen) = (Seen::default(), Seen::default());
        for op in ops {
            let id = committed.len() as u64;
            match op {
                Op::Offer(len) => {
                    if p.offer(&message(id, len)).is_ok() {
                        committed.push((id, len));
                    }
                }
                Op::Commit(len) | Op::Abort(len) => {
                    if let Ok(mut c) = p.try_claim(len) {
                        c.buffer().copy_from_slice(&message(id, len));
                        if matches!(op, Op::Commit(_)) {
                            let _position = c.commit();
                            committed.push((id, len));
                        }
                    }
                }
                Op::PollTethered(n) => poll(&mut tethered, n, &mut t_seen, &committed),
                Op::PollLossy(n) => poll(&mut lossy, n, &mut l_seen, &committed),
            }
        }
        for _ in 0..10_000 {
            poll(&mut tethered, 256, &mut t_seen, &committed);
            poll(&mut lossy, 256, &mut l_seen, &committed);
        }
        drop((p, tethered, lossy, ctx));
        let _ = std::fs::remove_dir_all(&d);
        prop_assert!(t_seen.errors.is_empty(), "tethered: {:?}", t_seen.errors);
        prop_assert!(l_seen.errors.is_empty(), "lossy: {:?}", l_seen.errors);
        let all: Vec<u64> = (0..committed.len() as u64).collect();
        prop_assert_eq!(&t_seen.ids, &all, "the tethered subscriber got each committed message once, in order");
        prop_assert!(l_seen.ids.windows(2).all(|w| w[0] < w[1]), "lossy ids go forward");
        if let Some(&last) = committed.last() {
            // Once everyone has caught up, the newest message reaches the lossy one too.
            prop_assert_eq!(l_seen.ids.last(), Some(&last.0));
        }
    }
}
