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

/// 1 ms, in the router's clock.
const MS: u64 = 1_000_000;

/// Publishes messages `from..to` of 1000 B (each body starts with its
/// index), the queues' most after a publish raised to `peak`.
fn publish_range(r: &mut Router, publ: u32, (from, to): (u64, u64), peak: &mut usize) {
    for i in from..to {
        let mut body = [0u8; 1000];
        body[..8].copy_from_slice(&i.to_le_bytes());
        r.handle_frame(publ, &publish("md/x", &body)).unwrap();
        *peak = (*peak).max(r.queued_allocated());
    }
}

/// Publishes `n` messages of 1000 B with a housekeeping every 100 (20 ms
/// apart); returns the most the queues held after a publish.
fn publish_n(r: &mut Router, publ: u32, n: u64) -> usize {
    let mut peak = 0;
    for i in (0..n).step_by(100) {
        publish_range(r, publ, (i, (i + 100).min(n)), &mut peak);
        r.housekeep_memory((i / 100 + 1) * 20 * MS);
    }
    peak
}

/// Sets the frames session `id`'s transport takes before it is full.
fn set_room(r: &mut Router, id: u32, room: usize) {
    let Outbound::Memory(m) = r.session_mut(id).unwrap().outbound_mut() else { panic!() };
    m.room = room;
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
    set_room(&mut r, stalled[0], usize::MAX);
    r.flush(2 * 1000 * MS, &mut Vec::new());
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

#[test]
fn in_the_first_500_ms_the_stillest_queues_are_cut_first_and_a_reader_that_lagged_loses_nothing() {
    // Every client's output moved within 500 ms, so none is past the
    // reading window: the stalled ones (still for 43 ms) are cut, not the
    // reader, which lags (its queue 190 KiB, over the common level of
    // about 100 KiB) but moved just now.
    let (mut r, stalled, reader, publ) = router(0);
    let mut peak = 0;
    for &id in &stalled {
        set_room(&mut r, id, 5);
    }
    publish_range(&mut r, publ, (0, 5), &mut peak);
    r.housekeep_memory(2 * MS);
    for &id in stalled.iter().chain([&reader]) {
        set_room(&mut r, id, 0);
    }
    publish_range(&mut r, publ, (5, 55), &mut peak);
    set_room(&mut r, reader, 10);
    r.flush(45 * MS, &mut Vec::new());
    set_room(&mut r, reader, 0);
    publish_range(&mut r, publ, (55, 205), &mut peak);
    set_room(&mut r, reader, usize::MAX);
    r.flush(46 * MS, &mut Vec::new());
    let got = read(&mut r, reader);
    let discards: Vec<u64> = stalled.iter().map(|&id| r.session(id).unwrap().stats.discards).collect();
    println!(
        "8 stalled, one reader lagging 190 KiB, all moved within 45 ms: at most {} KiB held, {} cuts, \
         discards per stalled client {discards:?}",
        peak >> 10,
        r.queue_trims()
    );
    assert!(peak <= MAX, "{peak} bytes queued, the bound is {MAX}");
    assert_eq!(got, (0..205).map(|i| (i, 0)).collect::<Vec<_>>(), "the reader got everything, nothing dropped");
    assert!(discards.iter().all(|&d| d > 0), "every stalled queue was cut: {discards:?}");
}
