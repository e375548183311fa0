//! Durable queues managed by the router's own requests (`_sys/queue/*`),
//! driven without I/O but with a real journal: create, list, browse and
//! delete, kept across a restart; a bounded queue that refuses or holds
//! publishes when full; an exclusive queue whose consumers take over one
//! from another, in order.

mod journaled;

use journaled::*;
use tickwire_router::guaranteed::GuaranteedConfig;
use tickwire_router::routing::queue_admin::{AdminReply, FullPolicy, QueueOptions, QueueRequest};
use tickwire_router::{Disconnect, Router};
use tickwire_wire::client::{flags, ClientKind, ClientRepr, RejectCode};

fn settle(r: &mut Router, now: u64) {
    for _ in 0..4 {
        r.poll_guaranteed(now);
    }
}

/// Sends `body` as a request on `topic` (correlation `seq`) and returns
/// the router's frames to `id` that answer it.
fn raw_request(r: &mut Router, id: u32, topic: &str, body: &[u8], seq: u64) -> Vec<Sent> {
    let f = ClientRepr { flags: flags::REQUEST, sequence: seq, topic, body, ..ClientRepr::new(ClientKind::Publish) };
    r.handle_frame(id, &frame(f)).unwrap();
    frames(r, id)
}

/// `_sys/queue/OP` with `req`: the router's JSON answer, on the inbox of
/// this very request.
fn ask(r: &mut Router, id: u32, op: &str, req: &QueueRequest) -> AdminReply {
    let sent = raw_request(r, id, &format!("_sys/queue/{op}"), &serde_json::to_vec(req).unwrap(), 77);
    assert_eq!(sent.len(), 1, "one answer: {sent:?}");
    let (kind, _, _, _, topic, body) = &sent[0];
    assert_eq!(*kind, ClientKind::Deliver, "{sent:?}");
    assert_eq!(tickwire_wire::request::correlation_of(topic), Some(77), "on the request's own inbox: {topic}");
    serde_json::from_slice(body).unwrap()
}

fn create(name: &str, topic: &str, options: QueueOptions) -> QueueRequest {
    QueueRequest { name: name.into(), topic: topic.into(), options, ..QueueRequest::default() }
}

fn named(name: &str) -> QueueRequest {
    QueueRequest { name: name.into(), ..QueueRequest::default() }
}

/// Guaranteed publishes acknowledged to `id` (the highest sequence).
fn acked(sent: &[Sent]) -> Option<u64> {
    sent.iter().filter(|f| f.0 == ClientKind::Ack).map(|f| f.3).max()
}

fn rejected(sent: &[Sent]) -> Vec<(u32, u64, String)> {
    sent.iter()
        .filter(|f| f.0 == ClientKind::Reject)
        .map(|f| (f.2, f.3, String::from_utf8_lossy(&f.5).into_owned()))
        .collect()
}

#[test]
fn queues_are_created_listed_browsed_and_deleted_by_request_and_kept_across_a_restart() {
    let dir = tempdir("queue-admin");
    let cfg = GuaranteedConfig { window: 2, ..GuaranteedConfig::default() };
    let mut r = router(&dir, cfg.clone(), 1 << 20);
    let admin = client(&mut r, "admin", 0);
    let opts = QueueOptions { exclusive: true, max_depth: 100, full: FullPolicy::Block };
    let made = ask(&mut r, admin, "create", &create("gw", "orders/>", opts));
    assert_eq!(made.error, None);
    assert_eq!((made.queues[0].name.as_str(), made.queues[0].options), ("gw", opts));
    // The same again is no error; other options for the same name are.
    assert_eq!(ask(&mut r, admin, "create", &create("gw", "orders/>", opts)).error, None);
    let other = ask(&mut r, admin, "create", &create("gw", "orders/>", QueueOptions::default()));
    assert!(other.error.unwrap().contains("exists"));
    for (req, why) in [
        (create("a/b", "x", QueueOptions::default()), "1 to 64 of"),
        (create("q", "bad//topic", QueueOptions::default()), "topic"),
        (create("q", "_inbox/>", QueueOptions::default()), "router's topics"),
    ] {
        let e = ask(&mut r, admin, "create", &req).error.unwrap_or_default();
        assert!(e.contains(why), "{req:?}: {e}");
    }
    assert!(ask(&mut r, admin, "drop", &named("gw")).error.unwrap().contains("create, delete, list and browse"));
    let bad = raw_request(&mut r, admin, "_sys/queue/list", b"{\"nme\":1}", 5);
    assert!(String::from_utf8_lossy(&bad[0].5).contains("not a queue request"), "{bad:?}");

    // A request on a topic of the router's that it does not serve: no
    // responders at once; a plain publish there is refused.
    let none = raw_request(&mut r, admin, "_sys/other", b"", 6);
    assert_eq!(
        rejected(&none),
        [(RejectCode::NoResponders as u32, 6, "_sys/other: the router serves no such request".into())]
    );
    let f = ClientRepr { sequence: 8, topic: "_sys/queue/list", ..ClientRepr::new(ClientKind::Publish) };
    r.handle_frame(admin, &frame(f)).unwrap();
    assert_eq!(rejected(&frames(&mut r, admin))[0].0, RejectCode::Unsupported as u32);

    let p = client(&mut r, "p", 7);
    for seq in 1..=3 {
        publish(&mut r, p, seq, "orders/eu");
    }
    publish(&mut r, p, 4, "fx/eu");
    settle(&mut r, 0);
    let list = ask(&mut r, admin, "list", &QueueRequest::default());
    assert_eq!((list.queues.len(), list.queues[0].depth, list.queues[0].consumers), (1, 3, 0), "{list:?}");
    let browsed = ask(&mut r, admin, "browse", &QueueRequest { count: 2, ..named("gw") });
    let seen: Vec<(u64, u32, usize)> = browsed.messages.iter().map(|m| (m.sequence, m.deliveries, m.size)).collect();
    assert_eq!(seen, [(1, 0, 8), (2, 0, 8)], "the oldest two, never delivered");

    // A consumer takes two (its window): browsing shows them delivered once.
    let c = client(&mut r, "c", 0);
    durable_queue(&mut r, c, 1, "orders/>", "gw");
    settle(&mut r, 0);
    assert_eq!(delivered(&frames(&mut r, c)).len(), 2);
    let browsed = ask(&mut r, admin, "browse", &named("gw"));
    let counts: Vec<u32> = browsed.messages.iter().map(|m| m.deliveries).collect();
    assert_eq!(counts, [1, 1, 0]);
    let busy = ask(&mut r, admin, "delete", &named("gw")).error.unwrap();
    assert!(busy.contains("1 consumers bound"), "{busy}");
    r.disconnect(c, &Disconnect { code: RejectCode::Normal, reason: "gone".into() });
    settle(&mut r, 1);

    // A restart keeps the queue, its options and its depth.
    drop(r);
    let mut r = router(&dir, cfg, 1 << 20);
    let admin = client(&mut r, "admin", 0);
    let list = ask(&mut r, admin, "list", &QueueRequest::default());
    assert_eq!((list.queues[0].options, list.queues[0].depth), (opts, 3), "{list:?}");
    let gone = ask(&mut r, admin, "delete", &named("gw"));
    assert_eq!((gone.error, gone.queues[0].depth), (None, 3));
    assert!(ask(&mut r, admin, "list", &QueueRequest::default()).queues.is_empty());
    assert!(ask(&mut r, admin, "browse", &named("gw")).error.unwrap().contains("no queue gw"));
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_full_queue_refuses_publishes_naming_it_until_its_consumer_makes_room() {
    let dir = tempdir("queue-full-reject");
    let mut r = router(&dir, GuaranteedConfig::default(), 1 << 20);
    let admin = client(&mut r, "admin", 0);
    let opts = QueueOptions { max_depth: 3, ..QueueOptions::default() };
    assert_eq!(ask(&mut r, admin, "create", &create("gw", "orders/>", opts)).error, None);
    let p = client(&mut r, "p", 7);
    for seq in 1..=5 {
        publish(&mut r, p, seq, "orders/eu");
    }
    // Other topics are not held back by it.
    publish(&mut r, p, 6, "fx/eu");
    settle(&mut r, 0);
    let sent = frames(&mut r, p);
    let refusals = rejected(&sent);
    let why = "queue gw is full (3 messages)".to_owned();
    assert_eq!(refusals, [(RejectCode::Limit as u32, 4, why.clone()), (RejectCode::Limit as u32, 5, why)]);
    assert_eq!(acked(&sent), Some(6));
    assert_eq!(r.journal_status().unwrap().stats.queue_full, 2);

    // A consumer acknowledges one: room for one more.
    let c = client(&mut r, "c", 0);
    durable_queue(&mut r, c, 1, "orders/>", "gw");
    settle(&mut r, 0);
    let got = delivered(&frames(&mut r, c));
    assert_eq!(got.iter().map(|d| d.1).collect::<Vec<_>>(), [1, 2, 3]);
    ack(&mut r, c, 1, got[0].0);
    publish(&mut r, p, 7, "orders/eu");
    publish(&mut r, p, 8, "orders/eu");
    settle(&mut r, 0);
    let sent = frames(&mut r, p);
    assert_eq!(rejected(&sent).iter().map(|x| x.1).collect::<Vec<_>>(), [8]);
    assert_eq!(acked(&sent), Some(7));
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_full_queue_that_blocks_holds_publishes_unacknowledged_and_stores_them_in_order_as_room_comes() {
    let dir = tempdir("queue-full-block");
    let mut r = router(&dir, GuaranteedConfig::default(), 1 << 20);
    let admin = client(&mut r, "admin", 0);
    let opts = QueueOptions { max_depth: 2, full: FullPolicy::Block, ..QueueOptions::default() };
    assert_eq!(ask(&mut r, admin, "create", &create("gw", "orders/>", opts)).error, None);
    let p = client(&mut r, "p", 7);
    for seq in 1..=5 {
        publish(&mut r, p, seq, "orders/eu");
    }
    // Behind its held ones, even a publish the queue does not take waits:
    // a publisher's order is kept.
    publish(&mut r, p, 6, "fx/eu");
    settle(&mut r, 0);
    let sent = frames(&mut r, p);
    assert!(rejected(&sent).is_empty(), "{sent:?}");
    assert_eq!(acked(&sent), Some(2), "the held ones are not acknowledged");
    let st = r.journal_status().unwrap();
    assert_eq!((st.held, st.stats.held, st.stats.stored), (4, 4, 2));

    let c = client(&mut r, "c", 0);
    durable_queue(&mut r, c, 1, "orders/>", "gw");
    let mut order = Vec::new();
    for _ in 0..10 {
        settle(&mut r, 0);
        for d in delivered(&frames(&mut r, c)) {
            order.push(d.1);
            ack(&mut r, c, 1, d.0);
        }
    }
    assert_eq!(order, [1, 2, 3, 4, 5], "every one, in the publisher's order");
    assert_eq!(acked(&frames(&mut r, p)), Some(6));
    assert_eq!(r.journal_status().unwrap().held, 0);
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_exclusive_queue_delivers_to_its_first_consumer_alone_and_the_next_takes_over_in_order() {
    let dir = tempdir("queue-exclusive");
    let mut r = router(&dir, GuaranteedConfig { window: 4, ..GuaranteedConfig::default() }, 1 << 20);
    let admin = client(&mut r, "admin", 0);
    let opts = QueueOptions { exclusive: true, ..QueueOptions::default() };
    assert_eq!(ask(&mut r, admin, "create", &create("gw", "orders/>", opts)).error, None);
    let (a, b) = (client(&mut r, "a", 0), client(&mut r, "b", 0));
    durable_queue(&mut r, a, 1, "orders/>", "gw");
    durable_queue(&mut r, b, 2, "orders/>", "gw");
    let p = client(&mut r, "p", 7);
    for seq in 1..=10 {
        publish(&mut r, p, seq, "orders/eu");
    }
    settle(&mut r, 0);
    let to_a = delivered(&frames(&mut r, a));
    assert_eq!(to_a.iter().map(|d| d.1).collect::<Vec<_>>(), [1, 2, 3, 4], "the first bound, up to its window");
    assert!(delivered(&frames(&mut r, b)).is_empty(), "the second waits");
    ack(&mut r, a, 1, to_a[0].0);
    ack(&mut r, a, 1, to_a[1].0);
    settle(&mut r, 0);
    assert_eq!(delivered(&frames(&mut r, a)).iter().map(|d| d.1).collect::<Vec<_>>(), [5, 6]);
    assert!(delivered(&frames(&mut r, b)).is_empty());
    // a dies with 3, 4, 5, 6 unacknowledged: b takes over from 3, in order.
    r.disconnect(a, &Disconnect { code: RejectCode::Normal, reason: "gone".into() });
    let mut order = Vec::new();
    for _ in 0..10 {
        settle(&mut r, 1);
        for d in delivered(&frames(&mut r, b)) {
            order.push((d.1, d.2));
            ack(&mut r, b, 2, d.0);
        }
    }
    let want: Vec<(u64, bool)> = (3..=10).map(|s| (s, s <= 6)).collect();
    assert_eq!(order, want, "in order, what a had flagged as redelivered");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_queue_whose_messages_retention_removed_tells_its_consumer_and_counts_only_what_is_held() {
    let dir = tempdir("queue-loss");
    let mut r = small_router(&dir);
    let admin = client(&mut r, "admin", 0);
    assert_eq!(ask(&mut r, admin, "create", &create("gw", "orders/>", QueueOptions::default())).error, None);
    let p = client(&mut r, "p", 7);
    let first = overflow(&mut r, p, "orders/a");
    let c = client(&mut r, "c", 0);
    durable_queue(&mut r, c, 4, "orders/>", "gw");
    r.poll_guaranteed(0);
    let sent = frames(&mut r, c);
    let loss = sent.iter().find(|f| f.0 == ClientKind::Loss).expect("a loss event");
    assert_eq!((loss.2, loss.3, u64::from_le_bytes(loss.5[..8].try_into().unwrap())), (4, 1, first - 1));
    assert_eq!(delivered(&sent).first().map(|d| d.0), Some(first), "then what is held, from the first");
    let list = ask(&mut r, admin, "list", &QueueRequest::default());
    assert_eq!(list.queues[0].depth, 1000 - (first - 1), "what retention removed is no longer waiting: {list:?}");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_publisher_held_for_one_full_queue_does_not_hold_back_another_publisher_s() {
    let dir = tempdir("queue-held-order");
    let mut r = router(&dir, GuaranteedConfig::default(), 1 << 20);
    let admin = client(&mut r, "admin", 0);
    let block = QueueOptions { max_depth: 1, full: FullPolicy::Block, ..QueueOptions::default() };
    assert_eq!(ask(&mut r, admin, "create", &create("a", "a/>", block)).error, None);
    assert_eq!(ask(&mut r, admin, "create", &create("b", "b/>", block)).error, None);
    let (pa, pb) = (client(&mut r, "pa", 7), client(&mut r, "pb", 8));
    // Each queue full after its first message; the second of each is held.
    for (p, topic) in [(pa, "a/x"), (pb, "b/x")] {
        publish(&mut r, p, 1, topic);
        publish(&mut r, p, 2, topic);
    }
    settle(&mut r, 0);
    assert_eq!((acked(&frames(&mut r, pa)), acked(&frames(&mut r, pb))), (Some(1), Some(1)));
    // b's consumer makes room in b; a stays full (nobody consumes it).
    let c = client(&mut r, "c", 0);
    durable_queue(&mut r, c, 1, "b/>", "b");
    settle(&mut r, 0);
    let got = delivered(&frames(&mut r, c));
    ack(&mut r, c, 1, got[0].0);
    settle(&mut r, 0);
    assert_eq!(acked(&frames(&mut r, pb)), Some(2), "b's publisher was not held behind a's");
    assert_eq!(acked(&frames(&mut r, pa)), None, "a's still waits");
    assert_eq!(r.journal_status().unwrap().held, 1);
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn acknowledgements_around_a_message_held_unacknowledged_stay_a_few_ranges_whatever_else_the_journal_holds() {
    let dir = tempdir("queue-ranges");
    let cfg = GuaranteedConfig { window: 100_000, ..GuaranteedConfig::default() };
    let mut r = router(&dir, cfg, 1 << 24);
    let p = client(&mut r, "p", 7);
    let c = client(&mut r, "c", 0);
    durable_queue(&mut r, c, 1, "orders/>", "gw");
    // The queue's messages are every other record of the journal.
    for seq in 1..=2_000u64 {
        publish(&mut r, p, seq, if seq % 2 == 0 { "orders/eu" } else { "fx/eu" });
    }
    settle(&mut r, 0);
    let got = delivered(&frames(&mut r, c));
    assert_eq!(got.len(), 1_000);
    // The first is held unacknowledged (a poison message); the rest are
    // acknowledged.
    for d in &got[1..] {
        ack(&mut r, c, 1, d.0);
    }
    settle(&mut r, 0);
    r.guaranteed_housekeeping(1);
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(tickwire_router::guaranteed::DURABLES_FILE)).unwrap()).unwrap();
    let ranges = saved[0]["acked_beyond"].as_array().unwrap();
    assert!(ranges.len() <= 2, "a few ranges, not one per acknowledgement: {} of them", ranges.len());
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
