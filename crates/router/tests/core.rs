//! The routing core driven without I/O: sessions on in-memory transports.

mod sansio;

use sansio::{client, drain, frame, hello, publish, subscribe, topics, Pair};
use tickwire_router::{Disconnect, Limits, MemoryOut, Outbound, Router, SlowConsumer};
use tickwire_wire::client::{flags, ClientKind, ClientRepr, RejectCode, CLIENT_PROTOCOL_VERSION};
use tickwire_wire::ClientFrame;

#[test]
fn wildcard_fan_out_delivers_once_per_client() {
    let mut r = Router::new("test", Limits::default(), None);
    let (p, a, b, c) = (
        client(&mut r, "p", usize::MAX),
        client(&mut r, "a", usize::MAX),
        client(&mut r, "b", usize::MAX),
        client(&mut r, "c", usize::MAX),
    );
    for (id, pat) in [(a, "md/>"), (a, "md/*/VOD"), (a, "md/eu/VOD"), (b, "md/*/VOD"), (c, "fx/>")] {
        r.handle_frame(id, &subscribe(pat.len() as u32, pat)).unwrap();
    }
    r.handle_frame(p, &publish("md/eu/VOD", b"bid 101")).unwrap();
    r.handle_frame(p, &publish("md/us/IBM", b"bid 150")).unwrap();
    r.handle_frame(p, &publish("eq/nobody", b"x")).unwrap();
    let got_a = drain(&mut r, a);
    assert_eq!(topics(&got_a), ["md/eu/VOD", "md/us/IBM"], "three patterns match, one delivery");
    assert_eq!(got_a[0].2, b"bid 101");
    assert_eq!((got_a[0].4, got_a[1].4), (0, 1), "delivery sequence per client");
    assert_eq!(topics(&drain(&mut r, b)), ["md/eu/VOD"]);
    assert!(drain(&mut r, c).is_empty());
    let t = r.totals();
    assert_eq!((t.messages_in, t.deliveries, t.unwanted), (3, 3, 1));
}

#[test]
fn unsubscribe_and_disconnect_stop_deliveries() {
    let mut r = Router::new("test", Limits::default(), None);
    let (p, a) = (client(&mut r, "p", usize::MAX), client(&mut r, "a", usize::MAX));
    r.handle_frame(a, &subscribe(1, "x/>")).unwrap();
    r.handle_frame(p, &publish("x/1", b"")).unwrap();
    r.handle_frame(a, &frame(ClientRepr { value: 1, ..ClientRepr::new(ClientKind::Unsubscribe) })).unwrap();
    r.handle_frame(p, &publish("x/2", b"")).unwrap();
    assert_eq!(topics(&drain(&mut r, a)), ["x/1"]);
    r.handle_frame(a, &subscribe(2, "x/>")).unwrap();
    r.disconnect(a, &Disconnect { code: RejectCode::Normal, reason: "bye".into() }).unwrap();
    r.handle_frame(p, &publish("x/3", b"")).unwrap();
    assert_eq!(r.totals().unwanted, 2);
    // The slot is reused by the next client, which inherits nothing.
    let b = client(&mut r, "b", usize::MAX);
    assert_eq!(b, a);
    r.handle_frame(p, &publish("x/4", b"")).unwrap();
    assert!(drain(&mut r, b).is_empty());
}

#[test]
fn bad_requests_are_rejected_and_bad_frames_disconnect() {
    let mut r = Router::new("test", Limits { max_frame: 1000, ..Limits::default() }, None);
    let a = client(&mut r, "a", usize::MAX);
    r.handle_frame(a, &subscribe(7, "md//x")).unwrap();
    r.handle_frame(a, &publish("md/*", b"")).unwrap();
    r.handle_frame(
        a,
        &frame(ClientRepr { flags: flags::GUARANTEED, topic: "md/x", ..ClientRepr::new(ClientKind::Publish) }),
    )
    .unwrap();
    let got = drain(&mut r, a);
    let rejects: Vec<_> = got.iter().map(|f| (f.0, f.3, f.4, String::from_utf8_lossy(&f.2).into_owned())).collect();
    assert_eq!(rejects.len(), 3);
    assert_eq!((rejects[0].1, rejects[0].2), (RejectCode::BadTopic as u32, 7));
    assert!(rejects[0].3.contains("empty level"), "{}", rejects[0].3);
    assert!(rejects[1].3.contains("wildcard"), "{}", rejects[1].3);
    assert_eq!(rejects[2].1, RejectCode::Unsupported as u32);
    assert_eq!(r.session(a).unwrap().stats.rejects, 3);

    let e = r.handle_frame(a, &[1, 2, 3]).unwrap_err();
    assert_eq!(e.code, RejectCode::Protocol);
    assert!(e.reason.contains("truncated"), "{e}");
    assert_eq!(r.handle_frame(a, &vec![0u8; 1001]).unwrap_err().code, RejectCode::TooLarge);
    assert!(r.handle_frame(a, &hello("again")).unwrap_err().reason.contains("second HELLO"));
    let d = frame(ClientRepr { topic: "x", ..ClientRepr::new(ClientKind::Deliver) });
    assert!(r.handle_frame(a, &d).unwrap_err().reason.contains("router's to send"));

    let b = r.attach(Outbound::Memory(MemoryOut { frames: Vec::new(), room: usize::MAX }), "test b".into());
    let e = r.handle_frame(b, &publish("x", b"")).unwrap_err();
    assert!(e.reason.contains("first frame must be HELLO"), "{e}");
    let e = r.handle_frame(b, &frame(ClientRepr { value: 99, ..ClientRepr::new(ClientKind::Hello) })).unwrap_err();
    assert_eq!(e.code, RejectCode::Unsupported);
    // The disconnect sends the reason.
    let s = r.disconnect(b, &e).unwrap();
    let Outbound::Memory(m) = s.outbound() else { panic!() };
    let f = ClientFrame::new_checked(m.frames.last().unwrap()).unwrap();
    assert_eq!(f.kind(), ClientKind::Close);
    assert!(String::from_utf8_lossy(f.body()).contains("client protocol 99"));
}

/// A router whose clients' queues hold 290 bytes (each queued delivery of
/// an 8-byte message on `t`: 4 + 16 + 1 + 8 = 29 bytes, so 10), and a
/// publisher, a subscriber that reads nothing and one that reads all, both
/// on `t`.
fn stalled(slow_consumer: SlowConsumer) -> (Router, u32, u32, u32) {
    let mut r = Router::new("test", Limits { queue_bytes: 290, slow_consumer, ..Limits::default() }, None);
    let p = client(&mut r, "p", usize::MAX);
    let slow = client(&mut r, "slow", usize::MAX);
    let fast = client(&mut r, "fast", usize::MAX);
    for id in [slow, fast] {
        r.handle_frame(id, &subscribe(1, "t")).unwrap();
    }
    let Outbound::Memory(m) = r.session_mut(slow).unwrap().outbound_mut() else { panic!() };
    m.room = 0;
    (r, p, slow, fast)
}

#[test]
fn a_stalled_client_loses_its_oldest_and_hears_how_many() {
    let (mut r, p, slow, fast) = stalled(SlowConsumer::DropOldest);
    for i in 0u64..25 {
        r.handle_frame(p, &publish("t", &i.to_le_bytes())).unwrap();
    }
    assert_eq!(topics(&drain(&mut r, fast)).len(), 25, "the others are untouched");
    assert_eq!(r.session(slow).unwrap().queued(), 10);
    // The slow client reads again: the newest 10, the first carrying the count.
    let Outbound::Memory(m) = r.session_mut(slow).unwrap().outbound_mut() else { panic!() };
    m.room = usize::MAX;
    r.flush(0, &mut Vec::new());
    let got = drain(&mut r, slow);
    let firsts: Vec<(u64, u32)> = got.iter().map(|f| (u64::from_le_bytes(f.2[..8].try_into().unwrap()), f.3)).collect();
    assert_eq!(firsts[0], (15, 15), "message 15 comes first and says 15 were dropped before it");
    assert!(firsts[1..].iter().all(|&(_, d)| d == 0));
    assert_eq!(got[0].4, 15, "delivery sequence numbers show the gap too");
    assert_eq!(r.totals().discards, 15);
    assert_eq!(r.session(slow).unwrap().stats.discards, 15);
}

#[test]
fn two_routing_agents_deliver_each_others_messages_once_per_client() {
    let mut pair = Pair::new(1 << 16);
    let [r0, r1] = &mut pair.r;
    let (p, b) = (client(r0, "p", usize::MAX), client(r0, "b", usize::MAX));
    let (a, c) = (client(r1, "a", usize::MAX), client(r1, "c", usize::MAX));
    assert_eq!((r0.client_id(p), r0.client_id(b), r1.client_id(a), r1.client_id(c)), (0, 2, 1, 3));
    for (k, id, pat) in [(1, a, "md/>"), (1, a, "md/*/VOD"), (1, c, "md/eu/VOD"), (0, b, "md/*/VOD")] {
        pair.r[k].handle_frame(id, &subscribe(pat.len() as u32, pat)).unwrap();
    }
    pair.exchange();
    let [r0, _] = &mut pair.r;
    for (t, body) in [("md/eu/VOD", &b"bid 101"[..]), ("md/us/IBM", b"bid 150"), ("eq/nobody", b"x")] {
        r0.handle_frame(p, &publish(t, body)).unwrap();
    }
    pair.exchange();
    let [r0, r1] = &mut pair.r;
    assert_eq!(topics(&drain(r1, a)), ["md/eu/VOD", "md/us/IBM"], "two of its patterns match: one delivery");
    assert_eq!(topics(&drain(r1, c)), ["md/eu/VOD"]);
    assert_eq!(topics(&drain(r0, b)), ["md/eu/VOD"]);
    let (t0, t1) = (r0.totals(), r1.totals());
    assert_eq!((t0.messages_in, t0.deliveries, t0.forwarded, t0.unwanted), (3, 1, 2, 1));
    assert_eq!((t1.messages_in, t1.deliveries), (0, 3));

    // The last holder of each pattern on agent 1 goes: nothing crosses.
    r1.disconnect(a, &Disconnect { code: RejectCode::Normal, reason: "bye".into() });
    r1.handle_frame(c, &frame(ClientRepr { value: 9, ..ClientRepr::new(ClientKind::Unsubscribe) })).unwrap();
    pair.exchange();
    let [r0, _] = &mut pair.r;
    r0.handle_frame(p, &publish("md/eu/VOD", b"bid 102")).unwrap();
    r0.handle_frame(p, &publish("md/us/IBM", b"bid 151")).unwrap();
    pair.exchange();
    let [r0, r1] = &mut pair.r;
    assert!(drain(r1, c).is_empty());
    assert_eq!(topics(&drain(r0, b)), ["md/eu/VOD"]);
    assert_eq!((r0.totals().forwarded, r0.totals().unwanted), (2, 2));
    assert_eq!(r1.totals().deliveries, 3);
}

#[test]
fn messages_dropped_on_a_full_link_are_indicated_on_the_next_delivery() {
    let mut pair = Pair::new(256);
    let [r0, r1] = &mut pair.r;
    let p = client(r0, "p", usize::MAX);
    let a = client(r1, "a", usize::MAX);
    r1.handle_frame(a, &subscribe(1, "t")).unwrap();
    pair.exchange();
    let [r0, _] = &mut pair.r;
    let body = [5u8; 150];
    // One 12 + 1 + 150 byte record fits in 256; the next two are dropped.
    for _ in 0..3 {
        r0.handle_frame(p, &publish("t", &body)).unwrap();
    }
    assert_eq!((r0.totals().forwarded, r0.totals().discards), (1, 2));
    pair.exchange();
    let [r0, _] = &mut pair.r;
    r0.handle_frame(p, &publish("t", &body)).unwrap();
    pair.exchange();
    let [_, r1] = &mut pair.r;
    let got = drain(r1, a);
    let values: Vec<u32> = got.iter().filter(|f| f.0 == ClientKind::Deliver).map(|f| f.3).collect();
    assert_eq!(values, [0, 2], "the second delivery says two were dropped before it");
}

#[test]
fn a_cached_subscription_gets_the_last_values_first_then_live_without_a_seam() {
    use tickwire_router::cache::{CacheConfig, LastValues};
    let mut r = Router::new("test", Limits::default(), None);
    let patterns = vec![tickwire_topic::Pattern::parse("md/>").unwrap()];
    r.set_cache(LastValues::new(CacheConfig { patterns, max_topics: 100, max_bytes: 1 << 20 }));
    let (p, a) = (client(&mut r, "p", usize::MAX), client(&mut r, "a", usize::MAX));
    for (t, body) in [("md/eu/VOD", &b"1"[..]), ("md/eu/VOD", b"2"), ("md/us/IBM", b"3"), ("fx/EURUSD", b"4")] {
        r.handle_frame(p, &publish(t, body)).unwrap();
    }
    let cached = |id: u32, pattern: &str| {
        frame(ClientRepr { value: id, flags: flags::CACHED, topic: pattern, ..ClientRepr::new(ClientKind::Subscribe) })
    };
    r.handle_frame(a, &cached(1, "md/eu/>")).unwrap();
    r.handle_frame(p, &publish("md/eu/VOD", b"5")).unwrap();
    assert_eq!(
        deliveries(&mut r, a),
        [("md/eu/VOD".into(), b"2".to_vec(), flags::CACHED), ("md/eu/VOD".into(), b"5".to_vec(), 0)],
        "the newest value, flagged, then live: no gap, no duplicate"
    );
    assert_eq!(r.totals().cache_deliveries, 1);
    // fx is not a cached pattern: nothing to send.
    r.handle_frame(a, &cached(2, "fx/>")).unwrap();
    assert!(deliveries(&mut r, a).is_empty());
}

/// (topic, payload, flags) of every DELIVER session `id` was sent.
fn deliveries(r: &mut Router, id: u32) -> Vec<(String, Vec<u8>, u8)> {
    let Outbound::Memory(m) = r.session_mut(id).unwrap().outbound_mut() else { panic!() };
    std::mem::take(&mut m.frames)
        .iter()
        .map(|b| ClientFrame::new_checked(b).unwrap())
        .filter(|f| f.kind() == ClientKind::Deliver)
        .map(|f| (f.topic().to_owned(), f.body().to_vec(), f.flags()))
        .collect()
}

#[test]
fn under_the_disconnect_policy_a_stalled_client_is_closed_and_the_others_are_untouched() {
    let (mut r, p, slow, fast) = stalled(SlowConsumer::Disconnect);
    for i in 0u64..10 {
        r.handle_frame(p, &publish("t", &i.to_le_bytes())).unwrap();
    }
    assert!(r.take_slow().is_empty(), "ten fit in its queue");
    for i in 10u64..25 {
        r.handle_frame(p, &publish("t", &i.to_le_bytes())).unwrap();
    }
    let slow_ones = r.take_slow();
    assert_eq!(slow_ones.len(), 1, "once, however many overflowed");
    assert_eq!((slow_ones[0].0, slow_ones[0].1.code), (slow, RejectCode::Limit));
    assert!(slow_ones[0].1.reason.contains("slow consumer"), "{}", slow_ones[0].1.reason);
    assert_eq!(topics(&drain(&mut r, fast)).len(), 25);
    // Closing: its subscriptions and queue go at once, its CLOSE waits.
    assert!(r.begin_close(slow, &slow_ones[0].1));
    r.handle_frame(p, &publish("t", b"after")).unwrap();
    assert_eq!(topics(&drain(&mut r, fast)), ["t"]);
    assert!(!r.close_sent(slow), "no room yet");
    let Outbound::Memory(m) = r.session_mut(slow).unwrap().outbound_mut() else { panic!() };
    m.room = usize::MAX;
    r.flush(0, &mut Vec::new());
    assert!(r.close_sent(slow));
    let last = drain(&mut r, slow).pop().unwrap();
    assert_eq!((last.0, last.3), (ClientKind::Close, RejectCode::Limit as u32), "the CLOSE is next, no delivery");
}

#[test]
fn under_back_pressure_nothing_is_dropped_and_the_publisher_is_held_until_half_is_read() {
    let limits = Limits { queue_bytes: 290, slow_consumer: SlowConsumer::BackPressure, ..Limits::default() };
    let mut r = Router::new("test", limits, None);
    let (p, other) = (client(&mut r, "p", usize::MAX), client(&mut r, "other", usize::MAX));
    let slow = client(&mut r, "slow", usize::MAX);
    r.handle_frame(slow, &subscribe(1, "t")).unwrap();
    let Outbound::Memory(m) = r.session_mut(slow).unwrap().outbound_mut() else { panic!() };
    m.room = 0;
    // Ten fit in its 290 bytes; the eleventh goes past: p is held.
    for i in 0u64..11 {
        assert!(!r.is_held(p), "not before the bound is passed ({i})");
        r.handle_frame(p, &publish("t", &i.to_le_bytes())).unwrap();
    }
    assert!(r.any_held() && r.is_held(p) && !r.is_held(other));
    assert_eq!((r.session(slow).unwrap().queued(), r.totals().discards), (11, 0), "kept, not dropped");
    assert_eq!(r.totals().back_pressured, 1);
    // It reads: below half its bound, p is let go; every message arrives.
    let Outbound::Memory(m) = r.session_mut(slow).unwrap().outbound_mut() else { panic!() };
    m.room = usize::MAX;
    r.flush(0, &mut Vec::new());
    assert!(!r.any_held() && !r.is_held(p));
    let got = drain(&mut r, slow);
    let seqs: Vec<u64> = got
        .iter()
        .filter(|f| f.0 == ClientKind::Deliver)
        .map(|f| u64::from_le_bytes(f.2[..8].try_into().unwrap()))
        .collect();
    assert_eq!(seqs, (0..11).collect::<Vec<_>>());
    // A held publisher's slot taken by a new session is not let go twice.
    r.disconnect(slow, &Disconnect { code: RejectCode::Normal, reason: "bye".into() });
    assert!(!r.any_held());
}

#[test]
fn a_back_pressure_client_that_holds_publishers_past_the_timeout_is_ended_and_they_go_on() {
    let (mut r, p, slow, fast) = stalled(SlowConsumer::BackPressure);
    for i in 0u64..11 {
        r.handle_frame(p, &publish("t", &i.to_le_bytes())).unwrap();
    }
    assert!(r.is_held(p));
    let s = 1_000_000_000u64; // a second, in ns
    assert!(r.take_stuck(100 * s).is_empty(), "a hold is first seen");
    assert!(r.take_stuck(104 * s).is_empty(), "4 s: within the 5 s default");
    let stuck = r.take_stuck(105 * s);
    assert_eq!(stuck.len(), 1);
    assert_eq!((stuck[0].0, stuck[0].1.code), (slow, RejectCode::Limit));
    assert!(stuck[0].1.reason.contains("back_pressure_timeout"), "{}", stuck[0].1.reason);
    assert!(r.begin_close(slow, &stuck[0].1));
    assert_eq!(r.totals().slow_disconnected, 1);
    r.flush(0, &mut Vec::new());
    assert!(!r.is_held(p) && !r.any_held(), "its publisher is let go");
    r.handle_frame(p, &publish("t", b"after")).unwrap();
    assert_eq!(topics(&drain(&mut r, fast)).len(), 12);
    assert!(r.take_stuck(200 * s).is_empty());
}

#[test]
fn a_hold_that_ends_in_time_starts_the_clock_again() {
    let (mut r, p, slow, _) = stalled(SlowConsumer::BackPressure);
    let s = 1_000_000_000u64;
    for round in 0..3u64 {
        for i in 0u64..11 {
            r.handle_frame(p, &publish("t", &i.to_le_bytes())).unwrap();
        }
        assert!(r.is_held(p));
        assert!(r.take_stuck(round * 10 * s + 1).is_empty());
        assert!(r.take_stuck(round * 10 * s + 4 * s).is_empty());
        // It reads everything, then stalls again.
        let Outbound::Memory(m) = r.session_mut(slow).unwrap().outbound_mut() else { panic!() };
        m.room = usize::MAX;
        r.flush(0, &mut Vec::new());
        assert!(!r.is_held(p));
        drain(&mut r, slow);
        let Outbound::Memory(m) = r.session_mut(slow).unwrap().outbound_mut() else { panic!() };
        m.room = 0;
    }
}

#[test]
fn a_client_asks_for_its_slow_consumer_policy_in_hello() {
    let mut r = Router::new("test", Limits::default(), None);
    for (asked, policy) in [
        (None, SlowConsumer::DropOldest),
        (Some(SlowConsumer::Disconnect), SlowConsumer::Disconnect),
        (Some(SlowConsumer::BackPressure), SlowConsumer::BackPressure),
        (Some(SlowConsumer::DropOldest), SlowConsumer::DropOldest),
    ] {
        let id = r.attach(Outbound::Memory(MemoryOut { frames: Vec::new(), room: usize::MAX }), "test".into());
        let flags = asked.map_or(0, SlowConsumer::hello_flags);
        let hello = frame(ClientRepr {
            value: CLIENT_PROTOCOL_VERSION,
            topic: "c",
            flags,
            ..ClientRepr::new(ClientKind::Hello)
        });
        r.handle_frame(id, &hello).unwrap();
        assert_eq!(r.session(id).unwrap().policy, policy, "asked {asked:?}");
    }
}

#[test]
fn a_lagging_client_gets_only_the_newest_message_of_a_conflated_topic() {
    let conflate = vec![tickwire_topic::Pattern::parse("md/>").unwrap()];
    let mut r = Router::new("test", Limits { conflate, ..Limits::default() }, None);
    let (p, lag, fast) =
        (client(&mut r, "p", usize::MAX), client(&mut r, "lag", usize::MAX), client(&mut r, "fast", usize::MAX));
    for id in [lag, fast] {
        r.handle_frame(id, &subscribe(1, ">")).unwrap();
    }
    let Outbound::Memory(m) = r.session_mut(lag).unwrap().outbound_mut() else { panic!() };
    m.room = 0;
    for (t, v) in [("md/a", b"1"), ("md/b", b"1"), ("md/a", b"2"), ("fx/x", b"1"), ("md/a", b"3"), ("fx/x", b"2")] {
        r.handle_frame(p, &publish(t, v)).unwrap();
    }
    assert_eq!(topics(&drain(&mut r, fast)).len(), 6, "a client that keeps up gets every one");
    let Outbound::Memory(m) = r.session_mut(lag).unwrap().outbound_mut() else { panic!() };
    m.room = usize::MAX;
    r.flush(0, &mut Vec::new());
    let got: Vec<(String, Vec<u8>)> = deliveries(&mut r, lag).into_iter().map(|d| (d.0, d.1)).collect();
    let want = [("md/a", b"3"), ("md/b", b"1"), ("fx/x", b"1"), ("fx/x", b"2")];
    assert_eq!(got, want.map(|(t, v)| (t.to_owned(), v.to_vec())), "md/a's newest in md/a's place; fx/x not conflated");
    assert_eq!(r.session(lag).unwrap().stats.conflated, 2);
}

/// Issue 43: a WELCOME that found its client's transport full when the
/// password check came back (and no frame was kept to carry it along)
/// waited until something else flushed the session.
#[test]
fn a_welcome_after_a_password_check_is_flushed_when_the_client_has_room() {
    use std::sync::Arc;
    use tickwire_router::access::{hash_password, AuthResult, UserConfig, Users};
    let mut r = Router::new("test", Limits::default(), None);
    let desk = UserConfig {
        name: "desk".into(),
        password_hash: hash_password(b"pw").unwrap(),
        unix_user: None,
        publish: vec![],
        subscribe: vec!["md/>".into()],
        slow_consumer: None,
    };
    let users = Arc::new(Users::new(&[desk]).unwrap());
    r.set_users(Some(Arc::clone(&users)));
    let id = r.attach(Outbound::Memory(MemoryOut { frames: Vec::new(), room: 0 }), "test desk".into());
    let creds = tickwire_wire::client::credentials::password("desk", b"pw");
    let hello = ClientRepr {
        value: CLIENT_PROTOCOL_VERSION,
        topic: "desk",
        body: &creds,
        ..ClientRepr::new(ClientKind::Hello)
    };
    r.handle_frame(id, &frame(hello)).unwrap();
    let mut failed = Vec::new();
    r.flush(0, &mut failed);
    let asked = r.take_auth_requests();
    assert_eq!(asked.len(), 1);
    let a = &asked[0];
    let outcome = users.verify(&a.user, b"pw");
    r.handle_auth(AuthResult { session: a.session, ticket: a.ticket, outcome }).unwrap();
    // The client reads again; the router's next duty cycle flushes.
    let Outbound::Memory(m) = r.session_mut(id).unwrap().outbound_mut() else { panic!() };
    m.room = usize::MAX;
    r.flush(0, &mut failed);
    let got = drain(&mut r, id);
    assert_eq!(got.first().map(|f| f.0), Some(ClientKind::Welcome), "{got:?}");
}

#[test]
fn the_status_lists_the_first_100_subscriptions_and_how_many_more() {
    let mut r = Router::new("test", Limits::default(), None);
    let id = client(&mut r, "many", usize::MAX);
    for i in 0..150u32 {
        r.handle_frame(id, &subscribe(i + 1, &format!("md/s{i:03}"))).unwrap();
    }
    let listed = r.client_status().into_iter().find(|c| c.name == "many").unwrap().subscriptions;
    let mut want: Vec<String> = (0..100).map(|i| format!("md/s{i:03}")).collect();
    want.push("(and 50 more)".into());
    assert_eq!(listed, want);
}

#[test]
fn a_queue_group_alternates_its_members_shows_in_status_and_a_member_that_leaves_gets_nothing() {
    let mut r = Router::new("test", Limits::default(), None);
    let (p, a, b, plain) = (
        client(&mut r, "p", usize::MAX),
        client(&mut r, "a", usize::MAX),
        client(&mut r, "b", usize::MAX),
        client(&mut r, "plain", usize::MAX),
    );
    let member = |sid: u32, group: &str| {
        frame(ClientRepr {
            value: sid,
            flags: flags::QUEUE,
            topic: "orders/>",
            body: group.as_bytes(),
            ..ClientRepr::new(ClientKind::Subscribe)
        })
    };
    r.handle_frame(a, &member(1, "gw")).unwrap();
    r.handle_frame(b, &member(7, "gw")).unwrap();
    r.handle_frame(plain, &subscribe(1, "orders/>")).unwrap();
    let listed = r.client_status().into_iter().find(|c| c.name == "b").unwrap().subscriptions;
    assert_eq!(listed, ["orders/> (queue group gw)"]);
    for i in 0..10u8 {
        r.handle_frame(p, &publish("orders/eu", &[i])).unwrap();
    }
    let (got_a, got_b) = (deliveries(&mut r, a), deliveries(&mut r, b));
    assert_eq!((got_a.len(), got_b.len()), (5, 5), "alternating");
    // Flagged QUEUE, each names the member's subscription, then the payload.
    let sid = |d: &(String, Vec<u8>, u8)| tickwire_wire::client::split_queue_body(d.2, &d.1).and_then(|(s, _)| s);
    assert!(got_a.iter().all(|d| d.2 & flags::QUEUE != 0 && sid(d) == Some(1)), "{got_a:?}");
    assert!(got_b.iter().all(|d| d.2 & flags::QUEUE != 0 && sid(d) == Some(7)), "{got_b:?}");
    let mut all: Vec<u8> = got_a.iter().chain(&got_b).map(|d| d.1[4]).collect();
    all.sort_unstable();
    assert_eq!(all, (0..10).collect::<Vec<u8>>(), "each once");
    assert_eq!(deliveries(&mut r, plain).len(), 10, "a plain subscriber gets every one");
    // A name that is no name is refused, the session goes on.
    r.handle_frame(a, &member(2, "two words")).unwrap();
    let refused: Vec<_> = drain(&mut r, a).into_iter().filter(|f| f.0 == ClientKind::Reject).collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(RejectCode::from_u32(refused[0].3), RejectCode::BadTopic);
    // a leaves the group: b takes every message at once.
    r.handle_frame(a, &frame(ClientRepr { value: 1, ..ClientRepr::new(ClientKind::Unsubscribe) })).unwrap();
    for i in 0..4u8 {
        r.handle_frame(p, &publish("orders/eu", &[i])).unwrap();
    }
    assert_eq!((deliveries(&mut r, a).len(), deliveries(&mut r, b).len()), (0, 4));
    // b ends: nothing of the group is left to deliver to.
    r.disconnect(b, &Disconnect { code: RejectCode::Normal, reason: "bye".into() });
    r.handle_frame(p, &publish("orders/eu", b"x")).unwrap();
    assert_eq!(deliveries(&mut r, plain).len(), 5);
}

/// A message another router of a cluster sends serves only the queue
/// groups it names (the publisher's router picked this one for them), and
/// the plain subscribers always.
#[test]
fn a_message_from_another_router_serves_only_the_queue_groups_it_names() {
    use tickwire_router::peers::Record;
    let mut r = Router::new("test", Limits::default(), None);
    let (a, b, plain) =
        (client(&mut r, "a", usize::MAX), client(&mut r, "b", usize::MAX), client(&mut r, "p", usize::MAX));
    let member = |group: &str| {
        frame(ClientRepr {
            value: 1,
            flags: flags::QUEUE,
            topic: "orders/>",
            body: group.as_bytes(),
            ..ClientRepr::new(ClientKind::Subscribe)
        })
    };
    r.handle_frame(a, &member("gw")).unwrap();
    r.handle_frame(b, &member("audit")).unwrap();
    r.handle_frame(plain, &subscribe(1, "orders/>")).unwrap();
    let got = |r: &mut Router| [deliveries(r, a).len(), deliveries(r, b).len(), deliveries(r, plain).len()];
    let m = |groups| Record { topic: "orders/eu", payload: b"x", discards: 0, flags: 0, groups };
    r.route_forwarded(m(""));
    assert_eq!(got(&mut r), [0, 0, 1], "a plain MESSAGE serves no group");
    r.route_forwarded(m("gw"));
    assert_eq!(got(&mut r), [1, 0, 1]);
    r.route_forwarded(m("audit gw other"));
    assert_eq!(got(&mut r), [1, 1, 1]);
    r.route_forwarded(m("gwx"));
    assert_eq!(got(&mut r), [0, 0, 1], "names match whole");
}

/// A member closed as a slow consumer leaves its group in what the
/// cluster is told (its count back to 0), and a plain subscription on the
/// same pattern is withdrawn as itself, not in the group's place.
#[test]
fn a_slow_member_closed_is_told_gone_from_its_group_and_its_plain_pattern_withdrawn() {
    use tickwire_router::peers::{link, Interest, Peers};
    let (l, _reader) = link(1 << 12, None);
    let mut peers = Peers::new(0, vec![None, Some(l)]);
    peers.set_cluster(1);
    let mut r = Router::with_peers("test", Limits::default(), None, peers, 1);
    let a = client(&mut r, "a", usize::MAX);
    let member = frame(ClientRepr {
        value: 1,
        flags: flags::QUEUE,
        topic: "orders/>",
        body: b"gw",
        ..ClientRepr::new(ClientKind::Subscribe)
    });
    r.handle_frame(a, &member).unwrap();
    r.handle_frame(a, &subscribe(2, "orders/>")).unwrap();
    let told = r.take_announcements();
    assert!(told.iter().any(|c| matches!(c, Interest::Group { members: 1, .. })), "{told:?}");
    assert!(told.iter().any(|c| matches!(c, Interest::Add { .. })), "{told:?}");
    assert!(r.begin_close(a, &Disconnect { code: RejectCode::Limit, reason: "slow".into() }));
    let told = r.take_announcements();
    assert!(told.iter().any(|c| matches!(c, Interest::Group { members: 0, .. })), "{told:?}");
    assert!(told.iter().any(|c| matches!(c, Interest::Remove { .. })), "{told:?}");
    assert_eq!(told.len(), 2, "{told:?}");
}

/// A router of a cluster names the others where they take clients in
/// WELCOME, after its own name, to a client of protocol 3 (which adds them
/// to the routers it fails over to); a version 2 client is welcomed with
/// the name alone, as before, and version 1 is refused.
#[test]
fn a_welcome_names_the_clusters_other_routers_to_a_protocol_3_client_only() {
    use tickwire_wire::client::welcome;
    let mut r = Router::new("r1", Limits::default(), None);
    let others = std::sync::Arc::new(tickwire_router::cluster::OtherRouters::default());
    r.set_other_routers(std::sync::Arc::clone(&others));
    let welcomed = |r: &mut Router, version: u32| {
        let id = r.attach(Outbound::Memory(MemoryOut { frames: Vec::new(), room: 8 }), "test".into());
        let h = frame(ClientRepr { value: version, topic: "c", ..ClientRepr::new(ClientKind::Hello) });
        r.handle_frame(id, &h).map(|()| drain(r, id).into_iter().find(|f| f.0 == ClientKind::Welcome).unwrap().2)
    };
    // None known yet: the name alone.
    assert_eq!(welcomed(&mut r, CLIENT_PROTOCOL_VERSION).unwrap(), b"r1");
    others.set("tcp://10.0.0.2:7600,tcp://10.0.0.3:7600".into());
    let body = welcomed(&mut r, CLIENT_PROTOCOL_VERSION).unwrap();
    let want = vec!["tcp://10.0.0.2:7600".to_owned(), "tcp://10.0.0.3:7600".to_owned()];
    assert_eq!(welcome::split(&body), ("r1".to_owned(), want));
    assert_eq!(welcomed(&mut r, 2).unwrap(), b"r1", "a version 2 client reads the body as the name");
    let refused = welcomed(&mut r, 1).unwrap_err();
    assert!(refused.reason.contains("client protocol 1"), "{}", refused.reason);
}
