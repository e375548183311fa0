//! Durable queues driven without I/O but with a real journal: consumers
//! compete (each message to one at a time), acknowledge one delivery each,
//! and what a consumer leaves unacknowledged (it goes, or times out) goes
//! to another flagged as redelivered; a restart delivers again only what
//! was not acknowledged; a queue's name is not a subscription's.

mod journaled;

use journaled::*;
use std::collections::BTreeSet;
use std::time::Duration;
use tickwire_router::guaranteed::GuaranteedConfig;
use tickwire_router::{Disconnect, Router};
use tickwire_wire::client::{split_guaranteed_value, ClientKind, RejectCode};

/// Moves the journal along and delivers: `now` in ns.
fn settle(r: &mut Router, now: u64) {
    for _ in 0..4 {
        r.poll_guaranteed(now);
    }
}

/// The deliveries `id` was sent: (journal sequence, publisher sequence,
/// redelivered, count), and the subscription id they carry.
fn got(r: &mut Router, id: u32) -> Vec<(u64, u64, bool, u32, u32)> {
    let sent = frames(r, id);
    let subs: Vec<u32> =
        sent.iter().filter(|f| f.0 == ClientKind::Deliver).map(|f| split_guaranteed_value(f.2).0).collect();
    delivered(&sent).into_iter().zip(subs).map(|((j, p, re, n), s)| (j, p, re, n, s)).collect()
}

#[test]
fn three_consumers_share_a_queue_each_message_to_one_and_every_one_acknowledged() {
    let dir = tempdir("queue-share");
    let mut r = router(&dir, GuaranteedConfig { window: 16, ..GuaranteedConfig::default() }, 1 << 20);
    let p = client(&mut r, "p", 7);
    let consumers: Vec<u32> = (0..3).map(|i| client(&mut r, &format!("c{i}"), 0)).collect();
    for (i, &c) in consumers.iter().enumerate() {
        durable_queue(&mut r, c, 10 + i as u32, "orders/>", "gw");
        assert!(frames(&mut r, c).is_empty(), "bound without a word");
    }
    let listed = r.client_status().into_iter().find(|c| c.name == "c1").unwrap().subscriptions;
    assert_eq!(listed, ["orders/> (durable queue gw)"]);
    const N: u64 = 300;
    for seq in 1..=N {
        publish(&mut r, p, seq, if seq % 2 == 0 { "orders/eu" } else { "fx/nope" });
    }
    let mut seen = BTreeSet::new();
    let mut per = [0u64; 3];
    for _ in 0..100 {
        settle(&mut r, 0);
        let mut any = false;
        for (i, &c) in consumers.iter().enumerate() {
            for (journal, publisher, re, count, sub) in got(&mut r, c) {
                assert!(!re && count == 1, "a first delivery: {journal}");
                assert_eq!(sub, 10 + i as u32, "its own subscription id");
                assert!(seen.insert(publisher), "{publisher} delivered twice");
                per[i] += 1;
                ack(&mut r, c, sub, journal);
                any = true;
            }
        }
        if !any && seen.len() as u64 == N / 2 {
            break;
        }
    }
    println!("per consumer: {per:?}");
    assert_eq!(seen.len() as u64, N / 2, "the queue's topics only, each once");
    assert!(per.iter().all(|&n| n >= 40), "shared: {per:?}");
    let st = r.journal_status().unwrap();
    let q = st.durables.iter().find(|d| d.name.starts_with("gw")).unwrap();
    assert_eq!((q.in_flight, q.backlog), (0, 0), "all acknowledged: {q:?}");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn what_a_consumer_leaves_unacknowledged_goes_to_another_flagged_and_a_restart_resends_only_that() {
    let dir = tempdir("queue-redeliver");
    let cfg = GuaranteedConfig { window: 8, ack_timeout: Duration::from_millis(50), ..GuaranteedConfig::default() };
    let mut r = router(&dir, cfg.clone(), 1 << 20);
    let p = client(&mut r, "p", 7);
    let (a, b) = (client(&mut r, "a", 0), client(&mut r, "b", 0));
    durable_queue(&mut r, a, 1, "orders/>", "gw");
    durable_queue(&mut r, b, 2, "orders/>", "gw");
    for seq in 1..=8 {
        publish(&mut r, p, seq, "orders/eu");
    }
    settle(&mut r, 0);
    let (to_a, to_b) = (got(&mut r, a), got(&mut r, b));
    assert_eq!((to_a.len(), to_b.len()), (4, 4), "round-robin: {to_a:?} {to_b:?}");
    // b acknowledges its four; a acknowledges one and goes.
    for d in &to_b {
        ack(&mut r, b, 2, d.0);
    }
    ack(&mut r, a, 1, to_a[0].0);
    // An acknowledgement of a delivery that was not its own changes nothing.
    ack(&mut r, b, 2, to_a[1].0);
    r.disconnect(a, &Disconnect { code: RejectCode::Normal, reason: "gone".into() });
    settle(&mut r, 1);
    let again = got(&mut r, b);
    let want: Vec<u64> = to_a[1..].iter().map(|d| d.1).collect();
    assert_eq!(again.iter().map(|d| d.1).collect::<Vec<_>>(), want, "a's three unacknowledged, to b");
    assert!(again.iter().all(|d| d.2 && d.3 == 2), "flagged, second delivery: {again:?}");

    // b lets one time out: it comes again, a third delivery.
    for d in &again[1..] {
        ack(&mut r, b, 2, d.0);
    }
    r.guaranteed_housekeeping(100_000_000);
    settle(&mut r, 100_000_000);
    let late = got(&mut r, b);
    assert_eq!(late.iter().map(|d| (d.1, d.3)).collect::<Vec<_>>(), [(again[0].1, 3)], "{late:?}");

    // A restart: the one still unacknowledged is delivered again; the
    // acknowledged ones are not.
    for seq in 9..=10 {
        publish(&mut r, p, seq, "orders/eu");
    }
    settle(&mut r, 100_000_001);
    let before: Vec<(u64, u64)> = got(&mut r, b).iter().map(|d| (d.0, d.1)).collect();
    assert_eq!(before.iter().map(|d| d.1).collect::<Vec<_>>(), [9, 10]);
    ack(&mut r, b, 2, before[0].0);
    r.guaranteed_housekeeping(100_000_002);
    drop(r);
    let mut r = router(&dir, cfg, 1 << 20);
    let c = client(&mut r, "c", 0);
    durable_queue(&mut r, c, 3, "orders/>", "gw");
    settle(&mut r, 0);
    let after = got(&mut r, c);
    let mut resent: Vec<u64> = after.iter().map(|d| d.1).collect();
    resent.sort_unstable();
    assert_eq!(resent, [again[0].1, 10], "only what was not acknowledged: {after:?}");
    assert!(after.iter().all(|d| d.2), "flagged as redelivered after the restart: {after:?}");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_queue_and_a_durable_subscription_do_not_share_a_name_or_a_pattern() {
    let dir = tempdir("queue-names");
    let mut r = router(&dir, GuaranteedConfig::default(), 1 << 20);
    let (a, b) = (client(&mut r, "a", 0), client(&mut r, "b", 0));
    durable_queue(&mut r, a, 1, "orders/>", "gw");
    durable(&mut r, b, 2, "orders/>", "gw");
    durable_queue(&mut r, b, 3, "fx/>", "gw");
    durable(&mut r, b, 4, "fx/>", "desk");
    durable_queue(&mut r, b, 5, "fx/>", "desk");
    let rejects: Vec<(u64, String)> = frames(&mut r, b)
        .into_iter()
        .filter(|f| f.0 == ClientKind::Reject)
        .map(|f| (f.3, String::from_utf8_lossy(&f.5).into_owned()))
        .collect();
    assert_eq!(rejects.iter().map(|r| r.0).collect::<Vec<_>>(), [2, 3, 5], "{rejects:?}");
    assert!(rejects[0].1.contains("is a durable queue"), "{rejects:?}");
    assert!(rejects[1].1.contains("fed by orders/>"), "{rejects:?}");
    assert!(rejects[2].1.contains("is a durable subscription"), "{rejects:?}");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
