//! The router-wide `limits.max_queued_bytes`, sans I/O: past it the
//! largest queues are cut to one level, each by its slow-consumer policy
//! (`drop-oldest` drops its oldest, counted; `disconnect` and
//! `back-pressure` are ended as slow consumers with the reason), while a
//! client that keeps reading loses nothing.

mod sansio;

use sansio::{client, drain, publish, subscribe};
use tickwire_router::{Limits, Outbound, Router};
use tickwire_wire::client::{ClientKind, SlowConsumer};

const QUEUE: usize = 256 << 10;
const MAX: usize = 1 << 20;

/// A router whose queues hold 256 KiB each and 1 MiB together, eight
/// clients on `md/>` that read nothing (the first `disconnects` of them
/// under the disconnect policy), one that reads everything, a publisher.
fn router(disconnects: usize) -> (Router, Vec<u32>, u32, u32) {
    let limits = Limits { queue_bytes: QUEUE, max_queued_bytes: MAX, ..Limits::default() };
    let mut r = Router::new("test", limits, None);
    let stalled: Vec<u32> = (0..8)
        .map(|i| {
            let id = client(&mut r, &format!("stalled-{i}"), usize::MAX);
            r.handle_frame(id, &subscribe(1, "md/>")).unwrap();
            let s = r.session_mut(id).unwrap();
            if i < disconnects {
                s.policy = SlowConsumer::Disconnect;
            }
            let Outbound::Memory(m) = s.outbound_mut() else { panic!() };
            m.room = 0;
            id
        })
        .collect();
    let reader = client(&mut r, "reader", usize::MAX);
    r.handle_frame(reader, &subscribe(1, "md/>")).unwrap();
    let publ = client(&mut r, "pub", usize::MAX);
    (r, stalled, reader, publ)
}

/// Publishes `n` messages of 1000 B with a housekeeping every 100; returns
/// the most the queues held after a publish.
fn publish_n(r: &mut Router, publ: u32, n: u64) -> usize {
    let mut peak = 0;
    for i in 0..n {
        let mut body = [0u8; 1000];
        body[..8].copy_from_slice(&i.to_le_bytes());
        r.handle_frame(publ, &publish("md/x", &body)).unwrap();
        peak = peak.max(r.queued_allocated());
        if i % 100 == 99 {
            r.housekeep_memory();
        }
    }
    peak
}

/// The reader's deliveries: (index, discards before it).
fn read(r: &mut Router, reader: u32) -> Vec<(u64, u32)> {
    let got = drain(r, reader);
    got.iter()
        .filter(|f| f.0 == ClientKind::Deliver)
        .map(|f| (u64::from_le_bytes(f.2[..8].try_into().unwrap()), f.3))
        .collect()
}

#[test]
fn past_max_queued_bytes_the_largest_drop_oldest_queues_are_cut_and_the_reader_loses_nothing() {
    let (mut r, stalled, reader, publ) = router(0);
    let peak = publish_n(&mut r, publ, 5_000);
    let got = read(&mut r, reader);
    let discards: Vec<u64> = stalled.iter().map(|&id| r.session(id).unwrap().stats.discards).collect();
    println!(
        "8 stalled queues of {} KiB under max_queued_bytes {} KiB: at most {} KiB held after a publish, \
         {} cuts, discards per stalled client {discards:?}",
        QUEUE >> 10,
        MAX >> 10,
        peak >> 10,
        r.queue_trims()
    );
    assert!(peak <= MAX, "{peak} bytes queued, the bound is {MAX}");
    assert_eq!(got, (0..5_000).map(|i| (i, 0)).collect::<Vec<_>>(), "the reader got everything, nothing dropped");
    assert!(r.queue_trims() >= 8, "every stalled queue was cut: {}", r.queue_trims());
    // Cut to one level: the stalled ones lost alike (within a few frames),
    // and more than their own bound alone would have dropped.
    let (lo, hi) = (discards.iter().min().unwrap(), discards.iter().max().unwrap());
    assert!(hi - lo <= 8 && *lo > 5_000 - (QUEUE as u64 / 1020), "{discards:?}");
    assert_eq!(r.totals().discards, discards.iter().sum::<u64>());
    // A cut queue's next delivery says how many went before it.
    let Outbound::Memory(m) = r.session_mut(stalled[0]).unwrap().outbound_mut() else { panic!() };
    m.room = usize::MAX;
    r.flush(&mut Vec::new());
    let first = read(&mut r, stalled[0])[0];
    assert_eq!(u64::from(first.1), first.0, "message {} says {} were dropped before it", first.0, first.1);
}

#[test]
fn past_max_queued_bytes_a_disconnect_client_among_the_largest_is_ended_with_the_reason() {
    let (mut r, stalled, reader, publ) = router(2);
    publish_n(&mut r, publ, 2_000);
    let slow = r.take_slow();
    let mut ended: Vec<u32> = slow.iter().map(|s| s.0).collect();
    ended.sort_unstable();
    println!("ended past max_queued_bytes: {ended:?}: {}", slow.first().map_or("", |s| s.1.reason.as_str()));
    assert_eq!(ended, stalled[..2], "the two disconnect clients, once each");
    assert!(slow.iter().all(|s| s.1.reason.contains("limits.max_queued_bytes")), "{slow:?}");
    assert_eq!(read(&mut r, reader).len(), 2_000, "the reader got everything");
}
