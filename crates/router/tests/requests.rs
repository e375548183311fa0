//! Request/reply and queue groups through a router on a thread, clients
//! over shared memory and TCP in the same process: replies matched by id
//! with thousands outstanding, no responders at once, a responder that
//! goes quiet, inboxes no pattern reaches, and queue groups that give each
//! message to one member.

mod common;

use common::{client, start, tempdir};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, Gather, PublishError, RejectCode, RequestError};
use tickwire_router::RouterConfig;

/// A responder on `pattern` (in `group`, if any) that answers each request
/// with its payload and `tag` after it, until `stop`; returns how many it
/// answered.
fn responder(
    uri: String,
    dir: std::path::PathBuf,
    pattern: &'static str,
    group: Option<&'static str>,
    tag: &'static [u8],
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut c = client(&uri, &dir, "responder");
        match group {
            Some(g) => c.subscribe_queue(pattern, g).unwrap(),
            None => c.subscribe(pattern).unwrap(),
        };
        c.wait_connected(Duration::from_secs(5)).unwrap();
        let mut answered = 0;
        let mut todo: Vec<(String, Vec<u8>)> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            c.poll(
                |e| {
                    if let ClientEvent::Request(r) = e {
                        todo.push((r.inbox.to_owned(), [r.payload, tag].concat()));
                    }
                },
                256,
            );
            let mut i = 0;
            while i < todo.len() {
                match c.reply(&todo[i].0, &todo[i].1) {
                    Ok(()) => i += 1,
                    Err(PublishError::BackPressured) => break,
                    Err(e) => panic!("reply: {e}"),
                }
            }
            answered += i as u64;
            todo.drain(..i);
            if i == 0 {
                std::thread::yield_now();
            }
        }
        answered
    })
}

#[test]
fn ten_thousand_outstanding_requests_over_shared_memory_and_tcp_each_get_their_own_reply() {
    let dir = tempdir("requests-many");
    let r = start(&dir, RouterConfig::default());
    let tcp = format!("tcp://{}", r.tcp);
    let stop = Arc::new(AtomicBool::new(false));
    // Two responders in one group: each request is answered once.
    let responders = [
        responder("ipc".into(), dir.clone(), "rfq/>", Some("pricers"), b"!", Arc::clone(&stop)),
        responder(tcp.clone(), dir.clone(), "rfq/>", Some("pricers"), b"!", Arc::clone(&stop)),
    ];
    let mut requesters: Vec<Client> =
        (0..10).map(|i| client(if i % 2 == 0 { "ipc" } else { &tcp }, &dir, &format!("req{i}"))).collect();
    for c in &mut requesters {
        c.wait_connected(Duration::from_secs(5)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    // Every request sent before any reply is read: 10,000 outstanding.
    const EACH: usize = 1000;
    let mut sent: Vec<HashMap<u64, Vec<u8>>> = vec![HashMap::new(); requesters.len()];
    let started = Instant::now();
    for (k, c) in requesters.iter_mut().enumerate() {
        for i in 0..EACH {
            let body = format!("rfq {k}/{i}").into_bytes();
            loop {
                match c.send_request(&format!("rfq/{k}"), &body, Duration::from_secs(30)) {
                    Ok(id) => {
                        sent[k].insert(id, body);
                        break;
                    }
                    Err(PublishError::BackPressured) => {
                        c.poll(|_| {}, 0);
                        std::thread::yield_now();
                    }
                    Err(e) => panic!("request: {e}"),
                }
            }
        }
        c.flush().unwrap();
    }
    let outstanding: usize = sent.iter().map(HashMap::len).sum();
    assert_eq!(outstanding, 10 * EACH);
    let mut answered = 0;
    let until = Instant::now() + Duration::from_secs(60);
    while answered < outstanding && Instant::now() < until {
        for (k, c) in requesters.iter_mut().enumerate() {
            let want = &mut sent[k];
            c.poll(
                |e| match e {
                    ClientEvent::Reply { request, payload, .. } => {
                        let body = want.remove(&request).unwrap_or_else(|| panic!("client {k}: reply to {request}?"));
                        assert_eq!(payload, [&body[..], b"!"].concat(), "client {k}: the reply of another request");
                        answered += 1;
                    }
                    ClientEvent::RequestFailed { request, why } => panic!("client {k}: request {request}: {why}"),
                    _ => {}
                },
                1024,
            );
        }
    }
    println!("{answered} of {outstanding} requests answered in {:?}", started.elapsed());
    assert_eq!(answered, outstanding);
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<u64> = responders.into_iter().map(|t| t.join().unwrap()).collect();
    println!("answered by each responder: {counts:?}");
    assert_eq!(counts.iter().sum::<u64>(), outstanding as u64, "each request answered once");
    drop(requesters);
    let _ = r.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_request_nobody_wants_is_told_no_responders_at_once_and_a_silent_responder_means_a_timeout() {
    let dir = tempdir("requests-none");
    let r = start(&dir, RouterConfig::default());
    let tcp = format!("tcp://{}", r.tcp);
    for uri in ["ipc", tcp.as_str()] {
        let mut c = client(uri, &dir, "asker");
        c.wait_connected(Duration::from_secs(5)).unwrap();
        let t = Instant::now();
        let got = c.request("nobody/home", b"?", Duration::from_secs(5), |_| {});
        let took = t.elapsed();
        println!("{uri}: no responders in {took:?}");
        assert_eq!(got, Err(RequestError::NoResponders), "{uri}");
        assert!(took < Duration::from_millis(10), "{uri}: no responders took {took:?}");

        // A responder that takes the request and never answers (it
        // stalled, or died with it): the requester's timeout, no hang.
        let mut silent = client(uri, &dir, "silent");
        silent.subscribe("quiet/>").unwrap();
        silent.wait_connected(Duration::from_secs(5)).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        let got = c.request("quiet/please", b"?", Duration::from_millis(300), |_| {});
        let took = t.elapsed();
        assert_eq!(got, Err(RequestError::TimedOut), "{uri}");
        assert!(took >= Duration::from_millis(300) && took < Duration::from_secs(2), "{uri}: timed out after {took:?}");
        let mut asked = 0;
        silent.poll(|e| asked += usize::from(matches!(e, ClientEvent::Request(_))), 64);
        assert_eq!(asked, 1, "{uri}: the silent responder had the request");
        // Gone for good: the next one has no responders again.
        drop(silent);
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(c.request("quiet/please", b"?", Duration::from_secs(5), |_| {}), Err(RequestError::NoResponders));
    }
    let _ = r.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn scatter_gather_collects_one_reply_from_each_responder() {
    let dir = tempdir("requests-gather");
    let r = start(&dir, RouterConfig::default());
    let stop = Arc::new(AtomicBool::new(false));
    let tags: [&'static [u8]; 3] = [b" a", b" b", b" c"];
    let responders: Vec<_> =
        tags.iter().map(|t| responder("ipc".into(), dir.clone(), "risk/>", None, t, Arc::clone(&stop))).collect();
    let mut c = client("ipc", &dir, "gatherer");
    c.wait_connected(Duration::from_secs(5)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let until = Gather { within: Duration::from_secs(5), count: Some(3), quiet: None };
    let mut replies = c.request_many("risk/positions", b"pos", until, |_| {}).unwrap();
    replies.sort();
    assert_eq!(replies, [b"pos a".to_vec(), b"pos b".to_vec(), b"pos c".to_vec()]);
    // A quiet gap ends the gathering too.
    let t = Instant::now();
    let until = Gather { within: Duration::from_secs(5), count: None, quiet: Some(Duration::from_millis(100)) };
    assert_eq!(c.request_many("risk/positions", b"pos", until, |_| {}).unwrap().len(), 3);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    stop.store(true, Ordering::Relaxed);
    for t in responders {
        t.join().unwrap();
    }
    let _ = r.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_pattern_reaches_another_clients_inbox_and_none_may_name_one() {
    let dir = tempdir("requests-inbox");
    let r = start(&dir, RouterConfig::default());
    let stop = Arc::new(AtomicBool::new(false));
    let echo = responder("ipc".into(), dir.clone(), "svc/echo", None, b"", Arc::clone(&stop));
    let mut snoop = client("ipc", &dir, "snoop");
    let all = snoop.subscribe(">").unwrap();
    let named = snoop.subscribe("_inbox/>").unwrap();
    let wild = snoop.subscribe("*/*").unwrap();
    snoop.wait_connected(Duration::from_secs(5)).unwrap();
    let mut asker = client("ipc", &dir, "asker");
    asker.wait_connected(Duration::from_secs(5)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..20u8 {
        assert_eq!(asker.request("svc/echo", &[i], Duration::from_secs(5), |_| {}).unwrap(), [i]);
    }
    let (mut seen, mut refused) = (Vec::new(), Vec::new());
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        snoop.poll(
            |e| match e {
                ClientEvent::Message(m) => seen.push(m.topic.to_owned()),
                ClientEvent::Request(r) => seen.push(r.topic.to_owned()),
                ClientEvent::Rejected { code, request, .. } => refused.push((code, request)),
                _ => {}
            },
            64,
        );
    }
    println!("the snoop saw {} messages: {:?}", seen.len(), &seen[..seen.len().min(3)]);
    assert_eq!(refused, [(RejectCode::Forbidden, u64::from(named))]);
    // It saw the 20 requests (it subscribed to `>`: it could answer them),
    // never a reply.
    assert_eq!(seen.len(), 20, "{seen:?}");
    assert!(seen.iter().all(|t| t == "svc/echo"), "{seen:?}");
    let _ = (all, wild);
    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();
    let _ = r.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_queue_group_gives_each_message_to_one_member_spread_evenly_and_plain_subscribers_get_all() {
    let dir = tempdir("queue-group");
    let r = start(&dir, RouterConfig::default());
    let tcp = format!("tcp://{}", r.tcp);
    let mut members: Vec<Client> = (0..4)
        .map(|i| {
            let mut c = client(if i < 2 { "ipc" } else { &tcp }, &dir, &format!("member{i}"));
            c.subscribe_queue("orders/>", "gateways").unwrap();
            c
        })
        .collect();
    let mut plain = client("ipc", &dir, "audit");
    plain.subscribe("orders/>").unwrap();
    let mut publ = client("ipc", &dir, "publisher");
    for c in members.iter_mut().chain([&mut plain, &mut publ]) {
        c.wait_connected(Duration::from_secs(5)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(300));
    const N: u64 = 100_000;
    let mut got = vec![0u64; members.len()];
    let mut seen = vec![false; N as usize];
    let mut audit = 0u64;
    let mut i = 0;
    while i < N {
        match publ.publish("orders/eu", &i.to_le_bytes()) {
            Ok(()) => i += 1,
            Err(PublishError::BackPressured) => poll_all(&mut members, &mut plain, &mut got, &mut seen, &mut audit),
            Err(e) => panic!("publish: {e}"),
        }
        if i % 256 == 0 {
            poll_all(&mut members, &mut plain, &mut got, &mut seen, &mut audit);
        }
    }
    let until = Instant::now() + Duration::from_secs(30);
    while (got.iter().sum::<u64>() < N || audit < N) && Instant::now() < until {
        poll_all(&mut members, &mut plain, &mut got, &mut seen, &mut audit);
    }
    println!("per member: {got:?}; the plain subscriber: {audit}");
    assert_eq!(got.iter().sum::<u64>(), N, "each message to exactly one member");
    assert_eq!(audit, N, "the plain subscriber gets every one");
    for (k, &g) in got.iter().enumerate() {
        let share = g as f64 / (N as f64 / 4.0);
        assert!((0.9..=1.1).contains(&share), "member {k} got {g} ({share:.2} of an even share)");
    }

    // One member leaves: the other three take every message at once.
    drop(members.pop());
    std::thread::sleep(Duration::from_millis(200));
    let mut got = vec![0u64; members.len()];
    let mut seen = vec![false; N as usize];
    let mut audit = 0;
    for i in 0..3000u64 {
        while publ.publish("orders/eu", &i.to_le_bytes()).is_err() {
            poll_all(&mut members, &mut plain, &mut got, &mut seen, &mut audit);
        }
    }
    let until = Instant::now() + Duration::from_secs(10);
    while got.iter().sum::<u64>() < 3000 && Instant::now() < until {
        poll_all(&mut members, &mut plain, &mut got, &mut seen, &mut audit);
    }
    println!("after one left: {got:?}");
    assert_eq!(got.iter().sum::<u64>(), 3000);
    drop((members, plain, publ));
    let _ = r.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Polls each member (counting what each got, and that no message came
/// twice) and the plain subscriber.
fn poll_all(members: &mut [Client], plain: &mut Client, got: &mut [u64], seen: &mut [bool], audit: &mut u64) {
    for (k, c) in members.iter_mut().enumerate() {
        c.poll(
            |e| {
                if let ClientEvent::Message(m) = e {
                    let i = u64::from_le_bytes(m.payload[..8].try_into().unwrap()) as usize;
                    assert!(!std::mem::replace(&mut seen[i], true), "message {i} delivered twice");
                    got[k] += 1;
                }
            },
            1024,
        );
    }
    plain.poll(|e| *audit += u64::from(matches!(e, ClientEvent::Message(_))), 4096);
}
