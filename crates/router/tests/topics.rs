//! The topic table (`tickwire_router::topics`): a topic's entry is worked
//! out again after whatever changes who gets it, and the table stays
//! bounded whatever topics clients use.

mod sansio;

use sansio::{client, drain, frame, publish, subscribe, topics, Pair};
use std::sync::Arc;
use tickwire_router::access::{hash_password, AuthResult, UserConfig, Users};
use tickwire_router::topics::TOPIC_LIMIT;
use tickwire_router::{Disconnect, Limits, MemoryOut, Outbound, Router};
use tickwire_wire::client::{credentials, ClientKind, ClientRepr, RejectCode, CLIENT_PROTOCOL_VERSION};

fn unsubscribe(id: u32) -> Vec<u8> {
    frame(ClientRepr { value: id, ..ClientRepr::new(ClientKind::Unsubscribe) })
}

#[test]
fn a_subscription_made_or_dropped_after_a_topic_was_seen_takes_effect_on_its_next_message() {
    let mut r = Router::new("test", Limits::default(), None);
    let (p, a, b) = (client(&mut r, "p", usize::MAX), client(&mut r, "a", usize::MAX), client(&mut r, "b", usize::MAX));
    r.handle_frame(p, &publish("md/eu/VOD", b"1")).unwrap();
    assert_eq!(r.totals().unwanted, 1);
    r.handle_frame(a, &subscribe(1, "md/>")).unwrap();
    r.handle_frame(p, &publish("md/eu/VOD", b"2")).unwrap();
    assert_eq!(topics(&drain(&mut r, a)), ["md/eu/VOD"], "the new subscriber gets the next message");
    r.handle_frame(b, &subscribe(1, "md/eu/VOD")).unwrap();
    r.handle_frame(a, &unsubscribe(1)).unwrap();
    r.handle_frame(p, &publish("md/eu/VOD", b"3")).unwrap();
    assert!(drain(&mut r, a).is_empty(), "unsubscribed: nothing more");
    assert_eq!(topics(&drain(&mut r, b)), ["md/eu/VOD"]);
    // The slot of a session that ended goes to a new one, which wants nothing.
    r.disconnect(b, &Disconnect { code: RejectCode::Normal, reason: "bye".into() }).unwrap();
    let c = client(&mut r, "c", usize::MAX);
    assert_eq!(c, b);
    r.handle_frame(p, &publish("md/eu/VOD", b"4")).unwrap();
    assert!(drain(&mut r, c).is_empty());
    assert_eq!(r.totals().unwanted, 2);
    assert_eq!(r.topic_table().topics, 1, "one topic, one entry");
}

/// A session of user `name` (password `pw`) logged in on `r`.
fn login(r: &mut Router, users: &Users, name: &str) -> u32 {
    let id = r.attach(Outbound::Memory(MemoryOut { frames: Vec::new(), room: usize::MAX }), format!("test {name}"));
    let creds = credentials::password(name, b"pw");
    let f = frame(ClientRepr {
        value: CLIENT_PROTOCOL_VERSION,
        topic: name,
        body: &creds,
        ..ClientRepr::new(ClientKind::Hello)
    });
    r.handle_frame(id, &f).unwrap();
    for a in r.take_auth_requests() {
        let outcome = users.verify(&a.user, b"pw");
        r.handle_auth(AuthResult { session: a.session, ticket: a.ticket, outcome }).unwrap();
    }
    assert_eq!(drain(r, id)[0].0, ClientKind::Welcome);
    id
}

fn user(name: &str, hash: &str, subscribe: &[&str]) -> UserConfig {
    UserConfig {
        name: name.into(),
        password_hash: hash.into(),
        unix_user: None,
        publish: vec![">".into()],
        subscribe: subscribe.iter().map(|s| (*s).into()).collect(),
        slow_consumer: None,
    }
}

#[test]
fn a_users_narrower_acl_takes_effect_on_a_topic_already_seen() {
    let hash = hash_password(b"pw").unwrap();
    let users = Arc::new(Users::new(&[user("desk", &hash, &["md/eu/>", "md/us/>"])]).unwrap());
    let mut r = Router::new("test", Limits::default(), None);
    r.set_users(Some(Arc::clone(&users)));
    let (p, a) = (login(&mut r, &users, "desk"), login(&mut r, &users, "desk"));
    r.handle_frame(a, &subscribe(1, "md/>")).unwrap();
    r.handle_frame(p, &publish("md/us/IBM", b"1")).unwrap();
    assert_eq!(topics(&drain(&mut r, a)), ["md/us/IBM"]);
    // Reloaded: the same password, md/us no longer readable.
    let narrower = Arc::new(Users::new(&[user("desk", &hash, &["md/eu/>"])]).unwrap());
    assert!(r.set_users(Some(narrower)).is_empty());
    r.handle_frame(p, &publish("md/us/IBM", b"2")).unwrap();
    r.handle_frame(p, &publish("md/eu/VOD", b"3")).unwrap();
    assert_eq!(topics(&drain(&mut r, a)), ["md/eu/VOD"], "md/us/IBM is no longer the user's to read");
}

#[test]
fn another_agents_interest_change_takes_effect_on_a_topic_already_seen() {
    let mut pair = Pair::new(1 << 16);
    let p = client(&mut pair.r[0], "p", usize::MAX);
    let a = client(&mut pair.r[1], "a", usize::MAX);
    pair.r[0].handle_frame(p, &publish("md/eu/VOD", b"1")).unwrap();
    pair.r[1].handle_frame(a, &subscribe(1, "md/>")).unwrap();
    pair.exchange();
    pair.r[0].handle_frame(p, &publish("md/eu/VOD", b"2")).unwrap();
    pair.exchange();
    assert_eq!(topics(&drain(&mut pair.r[1], a)), ["md/eu/VOD"], "agent 1's new interest is seen");
    pair.r[1].handle_frame(a, &unsubscribe(1)).unwrap();
    pair.exchange();
    pair.r[0].handle_frame(p, &publish("md/eu/VOD", b"3")).unwrap();
    pair.exchange();
    assert!(drain(&mut pair.r[1], a).is_empty());
    let t = pair.r[0].totals();
    assert_eq!((t.forwarded, t.unwanted), (1, 2), "forwarded only while agent 1 wanted it");
}

#[test]
fn the_topic_table_stays_bounded_under_many_distinct_topics() {
    let mut r = Router::new("test", Limits::default(), None);
    let (p, a) = (client(&mut r, "p", usize::MAX), client(&mut r, "a", usize::MAX));
    r.handle_frame(a, &subscribe(1, "md/>")).unwrap();
    let n = TOPIC_LIMIT + 1000;
    for i in 0..n {
        r.handle_frame(p, &publish(&format!("md/{i}"), b"x")).unwrap();
        // A topic in steady use is kept throughout.
        r.handle_frame(p, &publish("md/hot", b"x")).unwrap();
        if i % 4096 == 0 {
            drain(&mut r, a);
        }
    }
    let t = r.topic_table();
    assert_eq!(t.limit, TOPIC_LIMIT);
    assert!(t.topics <= TOPIC_LIMIT, "{t:?}");
    assert_eq!(t.evictions, (n + 1 - TOPIC_LIMIT) as u64, "{t:?}");
    assert_eq!(r.totals().deliveries, 2 * n as u64, "evictions change what is remembered, not who gets what");
    let before = t.evictions;
    r.handle_frame(p, &publish("md/hot", b"x")).unwrap();
    assert_eq!(r.topic_table().evictions, before, "md/hot was not evicted");
}
