//! Guaranteed delivery driven without I/O but with a real journal:
//! publishes stored once and acknowledged when durable, durable
//! subscriptions acknowledged, redelivered (reconnect, timeout, restart),
//! dead letters and loss events.

mod journaled;

use journaled::*;
use std::time::Duration;
use tickwire_router::guaranteed::GuaranteedConfig;
use tickwire_router::{Disconnect, Outbound};
use tickwire_wire::client::{ClientKind, ClientRepr, RejectCode};

#[test]
fn a_guaranteed_publish_is_stored_once_and_acknowledged_when_durable() {
    let dir = tempdir("publish");
    let mut r = router(&dir, GuaranteedConfig::default(), 1 << 20);
    let p = client(&mut r, "p", 42);
    let direct = client(&mut r, "direct", 0);
    r.handle_frame(
        direct,
        &frame(ClientRepr { value: 1, topic: "orders/>", ..ClientRepr::new(ClientKind::Subscribe) }),
    )
    .unwrap();
    for seq in 1..=3 {
        publish(&mut r, p, seq, "orders/a");
    }
    assert!(frames(&mut r, p).is_empty(), "no acknowledgement before the write");
    assert_eq!(frames(&mut r, direct).len(), 3, "direct subscribers get it at once");
    r.poll_guaranteed(0);
    let acks: Vec<u64> = frames(&mut r, p).iter().filter(|f| f.0 == ClientKind::Ack).map(|f| f.3).collect();
    assert_eq!(acks, [3], "one cumulative acknowledgement");
    // A resend (after a reconnect) is recognised, acknowledged, not stored.
    publish(&mut r, p, 2, "orders/a");
    publish(&mut r, p, 4, "orders/a");
    r.poll_guaranteed(0);
    let acks: Vec<u64> = frames(&mut r, p).iter().filter(|f| f.0 == ClientKind::Ack).map(|f| f.3).collect();
    assert_eq!(acks, [4]);
    let g = r.guaranteed().unwrap();
    assert_eq!((g.stats().stored, g.stats().duplicates, g.journal().written()), (4, 1, 4));
    // Without a publisher id: refused.
    let anon = client(&mut r, "anon", 0);
    publish(&mut r, anon, 1, "orders/a");
    assert_eq!(frames(&mut r, anon)[0].2, RejectCode::Protocol as u32);
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_durable_subscription_is_acknowledged_and_redelivered_after_a_reconnect_and_a_timeout() {
    let dir = tempdir("durable");
    let cfg = GuaranteedConfig { ack_timeout: Duration::from_secs(1), ..GuaranteedConfig::default() };
    let mut r = router(&dir, cfg, 1 << 20);
    let p = client(&mut r, "p", 7);
    let s = client(&mut r, "s", 0);
    durable(&mut r, s, 1, "orders/>", "desk");
    for seq in 1..=5 {
        publish(&mut r, p, seq, "orders/a");
    }
    publish(&mut r, p, 6, "md/x"); // not for it
    r.poll_guaranteed(0);
    let got = delivered(&frames(&mut r, s));
    assert_eq!(got.iter().map(|d| d.1).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    assert!(got.iter().all(|d| !d.2 && d.3 == 1), "first deliveries: {got:?}");
    assert_eq!(r.session(s).unwrap().stats.messages_out, 5, "counted for the client");
    let listed = r.client_status().into_iter().find(|c| c.name == "s").unwrap().subscriptions;
    assert_eq!(listed, ["orders/> (durable desk)"], "router status shows it");
    ack(&mut r, s, 1, got[2].0);
    // Away and back: 4 and 5 again, flagged, counted twice.
    r.disconnect(s, &Disconnect { code: RejectCode::Normal, reason: "bye".into() });
    let s = client(&mut r, "s", 0);
    durable(&mut r, s, 1, "orders/>", "desk");
    r.poll_guaranteed(0);
    let again = delivered(&frames(&mut r, s));
    assert_eq!(again.iter().map(|d| (d.1, d.2, d.3)).collect::<Vec<_>>(), [(4, true, 2), (5, true, 2)]);
    // Not acknowledged within the timeout: sent again.
    r.guaranteed_housekeeping(500_000_000);
    r.poll_guaranteed(600_000_000);
    assert!(delivered(&frames(&mut r, s)).is_empty(), "within the timeout");
    r.guaranteed_housekeeping(2_000_000_000);
    r.poll_guaranteed(2_000_000_000);
    assert_eq!(delivered(&frames(&mut r, s)).iter().map(|d| (d.1, d.3)).collect::<Vec<_>>(), [(4, 3), (5, 3)]);
    // Timed out again, and then the acknowledgement comes before the
    // redelivery: nothing is sent again.
    r.guaranteed_housekeeping(4_000_000_000);
    ack(&mut r, s, 1, again[1].0);
    r.poll_guaranteed(4_000_000_000);
    assert!(delivered(&frames(&mut r, s)).is_empty(), "acknowledged while a redelivery was due");
    r.guaranteed_housekeeping(10_000_000_000);
    r.poll_guaranteed(10_000_000_000);
    assert!(delivered(&frames(&mut r, s)).is_empty(), "all acknowledged");
    // A second client may not take the name while it is bound.
    let other = client(&mut r, "other", 0);
    durable(&mut r, other, 9, "orders/>", "desk");
    assert_eq!(frames(&mut r, other)[0].2, RejectCode::Limit as u32);
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn positions_survive_a_restart_and_what_may_have_been_delivered_is_flagged() {
    let dir = tempdir("restart");
    {
        let mut r = router(&dir, GuaranteedConfig::default(), 1 << 20);
        let p = client(&mut r, "p", 7);
        let s = client(&mut r, "s", 0);
        durable(&mut r, s, 1, "orders/>", "desk");
        for seq in 1..=4 {
            publish(&mut r, p, seq, "orders/a");
        }
        r.poll_guaranteed(0);
        let got = delivered(&frames(&mut r, s));
        ack(&mut r, s, 1, got[1].0);
        r.guaranteed_housekeeping(0); // saves the position
    }
    let mut r = router(&dir, GuaranteedConfig::default(), 1 << 20);
    let p = client(&mut r, "p", 7);
    publish(&mut r, p, 4, "orders/a"); // the publisher resends what it had no ack for
    publish(&mut r, p, 5, "orders/a");
    let s = client(&mut r, "s", 0);
    durable(&mut r, s, 1, "orders/>", "desk");
    r.poll_guaranteed(0);
    let got = delivered(&frames(&mut r, s));
    assert_eq!(got.iter().map(|d| (d.1, d.2)).collect::<Vec<_>>(), [(3, true), (4, true), (5, false)]);
    assert_eq!(r.guaranteed().unwrap().stats().duplicates, 1, "4 was stored before the restart");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_message_past_its_delivery_count_goes_to_the_dead_letter_topic() {
    let dir = tempdir("dead");
    let cfg = GuaranteedConfig { max_deliveries: 2, ack_timeout: Duration::from_millis(10), ..Default::default() };
    let mut r = router(&dir, cfg, 1 << 20);
    let p = client(&mut r, "p", 7);
    let s = client(&mut r, "s", 0);
    let dlq = client(&mut r, "dlq", 0);
    durable(&mut r, s, 1, "orders/>", "desk");
    durable(&mut r, dlq, 1, "dead/>", "dead-letters");
    publish(&mut r, p, 1, "orders/poison");
    let mut t = 0;
    for _ in 0..4 {
        r.poll_guaranteed(t);
        t += 1_000_000_000;
        r.guaranteed_housekeeping(t);
    }
    r.poll_guaranteed(t);
    let tries = delivered(&frames(&mut r, s));
    assert_eq!(tries.iter().map(|d| d.3).collect::<Vec<_>>(), [1, 2], "delivered twice, then no more");
    // (Not acknowledged by the dead-letter reader either: sent again.)
    let mut dead: Vec<(u64, String)> =
        frames(&mut r, dlq).into_iter().filter(|f| f.0 == ClientKind::Deliver).map(|f| (f.3, f.4)).collect();
    dead.dedup();
    assert_eq!(dead.len(), 1, "one dead letter: {dead:?}");
    assert_eq!(dead[0].1, "dead/desk");
    assert_eq!(r.guaranteed().unwrap().stats().dead_letters, 1);
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_durable_subscriber_away_longer_than_retention_gets_a_loss_event() {
    let dir = tempdir("loss");
    let mut r = small_router(&dir);
    let p = client(&mut r, "p", 7);
    let s = client(&mut r, "s", 0);
    durable(&mut r, s, 1, "orders/>", "desk");
    r.disconnect(s, &Disconnect { code: RejectCode::Normal, reason: "away".into() });
    let first = overflow(&mut r, p, "orders/a");
    let s = client(&mut r, "s", 0);
    durable(&mut r, s, 1, "orders/>", "desk");
    r.poll_guaranteed(0);
    let sent = frames(&mut r, s);
    let loss = sent.iter().find(|f| f.0 == ClientKind::Loss).expect("a loss event");
    assert_eq!((loss.2, loss.3, u64::from_le_bytes(loss.5[..8].try_into().unwrap())), (1, 1, first - 1));
    assert_eq!(delivered(&sent).first().map(|d| d.0), Some(first), "then what is held, from the first");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn saving_one_subscriptions_limit_keeps_the_others_in_the_file() {
    let dir = tempdir("saved");
    {
        let mut r = router(&dir, GuaranteedConfig::default(), 1 << 20);
        let (a, b) = (client(&mut r, "a", 0), client(&mut r, "b", 0));
        durable(&mut r, a, 1, "orders/>", "alpha");
        durable(&mut r, b, 1, "orders/>", "beta");
        r.guaranteed_housekeeping(0);
    }
    // After a restart, alpha alone runs past its saved limit (4,096
    // messages ahead): its limit is saved before that delivery, and the
    // file must still hold beta, or a crash now would lose beta for good.
    let mut r = router(&dir, GuaranteedConfig { window: 8192, ..GuaranteedConfig::default() }, 1 << 20);
    let p = client(&mut r, "p", 7);
    let a = client(&mut r, "a", 0);
    durable(&mut r, a, 1, "orders/>", "alpha");
    for seq in 1..=5000 {
        publish(&mut r, p, seq, "orders/a");
        if seq % 100 == 0 {
            r.poll_guaranteed(0);
            frames(&mut r, a);
        }
    }
    r.poll_guaranteed(0);
    let text = std::fs::read_to_string(dir.join("durables.json")).unwrap();
    assert!(text.contains("\"alpha\"") && text.contains("\"beta\""), "{text}");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 43, bug 3: a publisher whose control queue was full (it was
/// behind on reading) had its ACKs thrown away while its session stayed
/// open: it kept its publishes for ever. ACKs are cumulative: one waits,
/// coalesced, and goes when the client reads again.
#[test]
fn an_ack_is_never_dropped_for_a_publisher_behind_on_reading() {
    let dir = tempdir("ack-behind");
    let mut r = router(&dir, GuaranteedConfig::default(), 1 << 20);
    let p = client(&mut r, "p", 7);
    // The client stops reading: its transport takes nothing.
    let Outbound::Memory(m) = r.session_mut(p).unwrap().outbound_mut() else { panic!() };
    m.room = 0;
    // Replies pile up in its control queue, past its bound (each a REJECT
    // of a subscription to a malformed pattern).
    for sid in 0..400u32 {
        let bad = ClientRepr { value: sid, topic: "md/>/x", ..ClientRepr::new(ClientKind::Subscribe) };
        let _ = r.handle_frame(p, &frame(bad));
    }
    for seq in 1..=500 {
        publish(&mut r, p, seq, "orders/a");
        if seq % 50 == 0 {
            r.poll_guaranteed(0);
        }
    }
    r.poll_guaranteed(0);
    assert!(r.session_mut(p).is_some(), "the session stays open");
    // It reads again.
    let Outbound::Memory(m) = r.session_mut(p).unwrap().outbound_mut() else { panic!() };
    m.room = usize::MAX;
    let mut failed = Vec::new();
    r.flush(0, &mut failed);
    r.flush(0, &mut failed);
    assert!(failed.is_empty(), "{failed:?}");
    let acks: Vec<u64> = frames(&mut r, p).iter().filter(|f| f.0 == ClientKind::Ack).map(|f| f.3).collect();
    assert_eq!(acks.last(), Some(&500), "the highest ACK the client got: {acks:?}");
    assert!(acks.windows(2).all(|w| w[0] < w[1]), "ACKs in order: {acks:?}");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
