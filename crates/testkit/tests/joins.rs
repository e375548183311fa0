//! Late joiners at arbitrary moments, while the publisher wraps a small ring
//! and pads its end constantly, never see a corrupt or torn frame. (The
//! nanosecond window between clearing the next commit word and publishing
//! `tail` is too narrow for this test to hit; `begin_frame` documents the
//! order that closes it.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_shm::{Context, Event, LogConfig, OfferError, ReaderOptions};
use tickwire_testkit::{check, length, pattern};

#[test]
fn late_joiners_see_only_whole_valid_messages() {
    let d = std::env::temp_dir().join(format!("tw-joins-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    let ctx = Context::new(&d).unwrap();
    let mut p = ctx.appender("j", 1, &LogConfig::with_capacity(1 << 16)).unwrap();
    // One lossy subscriber keeps the publisher connected without holding it.
    let mut anchor =
        ctx.reader("j", 1, ReaderOptions { mode: tickwire_shm::Mode::Lossy, ..Default::default() }).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let publisher = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let mut seq = 0u64;
        let start = Instant::now();
        while !flag.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(30) {
            pattern(seq, length(seq, 0), &mut buf);
            match p.offer(&buf) {
                Ok(_) => seq += 1,
                Err(OfferError::BackPressured) => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
            if seq % 64 == 0 {
                let _ = anchor.poll(|_| {}, 1024);
            }
        }
        seq
    });
    let start = Instant::now();
    let mut joins = 0;
    while joins < 500 && start.elapsed() < Duration::from_secs(20) {
        let mut s = ctx.reader("j", 1, ReaderOptions::default()).unwrap();
        let mut got = 0;
        let t = Instant::now();
        while got < 3 && t.elapsed() < Duration::from_secs(2) {
            s.poll(
                |e| match e {
                    Event::Message(m) => {
                        check(m.payload).unwrap_or_else(|e| panic!("join {joins}: {e}"));
                        got += 1;
                    }
                    other => panic!("a tethered joiner was told {other:?}"),
                },
                8,
            )
            .unwrap_or_else(|e| panic!("join {joins}: {e}"));
        }
        assert!(got >= 3, "join {joins} received only {got}");
        joins += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let sent = publisher.join().unwrap();
    assert_eq!(joins, 500);
    assert!(sent > 1000);
}
