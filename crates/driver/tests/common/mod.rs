//! What the driver's integration tests share: a numbered message stream
//! whose every message can be checked on arrival (the testkit's pattern,
//! at lengths that make the larger messages span several frames), and
//! the loop that drives UDP senders and receivers in one thread.
#![allow(dead_code)] // each test binary uses its own part

use std::time::{Duration, Instant};
use tickwire_driver::udp::{CloseError, UdpReceiver, UdpSender};
use tickwire_driver::Event;

/// The length of message `i`: 8 to 3007 bytes.
fn length(i: u64) -> usize {
    8 + (i as usize * 37) % 3000
}

/// Message `i`: its number, then the testkit's pattern for it.
pub fn numbered(i: u64) -> Vec<u8> {
    let mut msg = Vec::new();
    tickwire_testkit::pattern(i, length(i), &mut msg);
    msg
}

/// The number of a message made by [`numbered`]; panics if its bytes or
/// its length are not what that number makes.
pub fn check_numbered(payload: &[u8]) -> u64 {
    let i = tickwire_testkit::check(payload).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(payload.len(), length(i), "message {i}: length");
    i
}

/// Drives everything once; collects events per subscription.
pub fn pump(p: &mut [&mut UdpSender], subs: &mut [(&mut UdpReceiver, &mut Vec<String>)]) {
    for p in p.iter_mut() {
        p.do_work();
    }
    for (s, log) in subs.iter_mut() {
        s.poll(
            |ev| {
                log.push(match ev {
                    Event::Message(m) => format!("m{}", check_numbered(m.payload)),
                    Event::Joined { session_id, .. } => format!("joined {session_id}"),
                    Event::Ended { session_id, .. } => format!("ended {session_id}"),
                    Event::Lost { from, to, .. } => format!("lost {from}-{to}"),
                    Event::PublisherGone { session_id, .. } => format!("gone {session_id}"),
                })
            },
            256,
        )
        .unwrap();
    }
}

pub fn offer_all(p: &mut UdpSender, range: std::ops::Range<u64>, subs: &mut [(&mut UdpReceiver, &mut Vec<String>)]) {
    // One message per duty cycle, so that joins happen mid-stream.
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in range {
        while p.offer(&numbered(i)).is_err() {
            assert!(Instant::now() < deadline, "offer {i} never accepted");
            pump(&mut [&mut *p], subs);
        }
        pump(&mut [&mut *p], subs);
    }
}

pub fn settle(p: &mut [&mut UdpSender], subs: &mut [(&mut UdpReceiver, &mut Vec<String>)], ms: u64) {
    let until = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < until {
        pump(p, subs);
    }
}

/// Closes `p` while another thread drives the receivers, as their own
/// processes would: a closing sender waits for every receiver to say it
/// delivered the end. Returns what `close` returned.
pub fn close_driven(p: &mut UdpSender, subs: &mut [(&mut UdpReceiver, &mut Vec<String>)]) -> Result<usize, CloseError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let done = AtomicBool::new(false);
    std::thread::scope(|sc| {
        sc.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                pump(&mut [], subs);
            }
        });
        let drained = p.close(Duration::from_secs(5));
        done.store(true, Ordering::Relaxed);
        drained
    })
}

pub fn messages(log: &[String]) -> Vec<u64> {
    log.iter().filter_map(|l| l.strip_prefix('m')).map(|n| n.parse().unwrap()).collect()
}
