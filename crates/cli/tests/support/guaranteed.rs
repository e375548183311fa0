//! What the crash tests share: a guaranteed publisher paced on the clock,
//! and the check of one durable subscriber's stream of one publisher.
#![allow(dead_code)] // each test file uses some of it

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tickwire_client::{Client, PublishError};

/// Publishes 0, 1, … (8 bytes each) on `topic` through `c`, one every
/// `every`, until `stop`; then waits (60 s at most) for every
/// acknowledgement. Returns how many were acknowledged (messages 0 to N-1).
pub fn publish_paced(mut c: Client, topic: &str, every: Duration, stop: &AtomicBool) -> u64 {
    let mut seq = 0u64;
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() < start + every * seq as u32 {
            c.poll(|_| {}, 64);
            std::thread::sleep(every / 2);
            continue;
        }
        match c.publish_guaranteed(topic, &seq.to_le_bytes()) {
            Ok(_) => seq += 1,
            Err(PublishError::WindowFull(_)) => std::thread::sleep(Duration::from_micros(200)),
            Err(e) => panic!("{topic}: {e}"),
        }
        c.poll(|_| {}, 64);
    }
    let until = Instant::now() + Duration::from_secs(60);
    while c.unacknowledged() > 0 {
        assert!(Instant::now() < until, "{topic}: {} never acknowledged", c.unacknowledged());
        c.poll(|_| {}, 256);
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(c.acknowledged(), seq);
    seq
}

/// One durable subscriber's stream of one publisher, (sequence,
/// redelivered) in arrival order: in order, every repeat flagged, nothing
/// missing below `acked`.
pub fn check(who: &str, topic: &str, stream: &[(u64, bool)], acked: u64) {
    let mut next = 0u64;
    for (i, &(seq, redelivered)) in stream.iter().enumerate() {
        let around = || format!("{:?}", &stream[i.saturating_sub(5)..(i + 5).min(stream.len())]);
        assert!(seq <= next, "{who} {topic}: gap: {seq} arrived while {next} was expected: {}", around());
        if seq < next {
            assert!(redelivered, "{who} {topic}: {seq} arrived again without the redelivered flag: {}", around());
        }
        next = next.max(seq + 1);
    }
    assert!(next >= acked, "{who} {topic}: acknowledged up to {acked}, delivered up to {next}");
}
