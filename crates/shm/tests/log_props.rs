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

/// Runs `ops` and checks what each subscriber saw.
fn check(ops: Vec<Op>) -> Result<(), TestCaseError> {
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
        // Once everyone has caught up, the newest message reaches the lossy
        // one too, or a Lost notice after its last message says it was
        // evicted past it (an eviction moves a lossy subscriber to the
        // publisher's position, as Aeron rejoins an untethered one at the
        // tail: a later claim that is aborted, or an offer refused for the
        // tethered one, can evict it past the newest message).
        prop_assert!(
            l_seen.ids.last() == Some(&last.0) || l_seen.lost_since_last,
            "the newest message {} neither reached the lossy subscriber nor was reported lost (last seen {:?})",
            last.0,
            l_seen.ids.last()
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_committed_message_is_delivered_once_in_order_or_reported_lost(ops in proptest::collection::vec(op(), 1..400)) {
        check(ops)?;
    }
}

/// Found by the property above (make test, 2026-11-23): the lossy
/// subscriber's last message was 35 of 80. It had been evicted to the
/// publisher's position by the final aborted claims, with a Lost notice:
/// the model expected the newest message; the log was right.
#[test]
fn regression_the_lossy_subscriber_catches_up_after_eviction() {
    check(vec![
        Op::Commit(8),
        Op::Abort(481),
        Op::PollLossy(1),
        Op::Offer(1697),
        Op::Offer(1249),
        Op::Offer(801),
        Op::Offer(2049),
        Op::Offer(2817),
        Op::Commit(193),
        Op::Abort(481),
        Op::Offer(97),
        Op::Offer(2273),
        Op::Offer(481),
        Op::Commit(737),
        Op::Commit(449),
        Op::Offer(1569),
        Op::Offer(1665),
        Op::Offer(2977),
        Op::Abort(513),
        Op::PollLossy(5),
        Op::Offer(801),
        Op::Offer(833),
        Op::Offer(2785),
        Op::Offer(1825),
        Op::PollLossy(5),
        Op::Offer(1089),
        Op::Offer(929),
        Op::Offer(2849),
        Op::Offer(1121),
        Op::PollLossy(14),
        Op::PollLossy(10),
        Op::Abort(417),
        Op::Offer(1729),
        Op::Offer(2785),
        Op::Offer(2401),
        Op::PollLossy(15),
        Op::Offer(2849),
        Op::Offer(1153),
        Op::Offer(129),
        Op::Commit(865),
        Op::Abort(577),
        Op::Offer(2337),
        Op::Offer(353),
        Op::Offer(8),
        Op::Offer(513),
        Op::Offer(1057),
        Op::Offer(2689),
        Op::Offer(1921),
        Op::Offer(1121),
        Op::Offer(1569),
        Op::PollTethered(47),
        Op::Offer(2337),
        Op::PollLossy(2),
        Op::PollLossy(5),
        Op::PollLossy(9),
        Op::Offer(584),
        Op::Commit(256),
        Op::Offer(2215),
        Op::Offer(1658),
        Op::Offer(1550),
        Op::Offer(473),
        Op::Offer(2498),
        Op::Offer(2549),
        Op::Offer(807),
        Op::Offer(915),
        Op::PollLossy(5),
        Op::Offer(946),
        Op::Offer(267),
        Op::Commit(183),
        Op::Abort(111),
        Op::Commit(484),
        Op::Offer(2431),
        Op::Commit(883),
        Op::Offer(2917),
        Op::Offer(1951),
        Op::Offer(181),
        Op::PollLossy(4),
        Op::Commit(213),
        Op::Offer(2933),
        Op::Offer(2822),
        Op::Offer(1372),
        Op::Offer(2246),
        Op::PollTethered(16),
        Op::Offer(2536),
        Op::Commit(344),
        Op::Offer(195),
        Op::Commit(11),
        Op::PollTethered(45),
        Op::Abort(887),
        Op::Abort(745),
        Op::Offer(1507),
        Op::Offer(314),
        Op::Offer(1531),
        Op::Offer(2859),
        Op::Offer(986),
        Op::Offer(2434),
        Op::Offer(2631),
        Op::Offer(637),
        Op::Offer(98),
        Op::Commit(386),
        Op::Offer(836),
        Op::Offer(20),
        Op::Offer(1062),
        Op::Abort(814),
        Op::Abort(670),
        Op::Abort(239),
    ])
    .unwrap();
}
