//! A router with several routing agents on threads of their own: clients
//! spread over them, messages cross between them, once per subscriber;
//! requests and their replies cross them too.

mod common;

use common::{client, start, tempdir};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, RejectCode, RequestError};
use tickwire_router::RouterConfig;

/// Everything a subscriber received, by topic (probes left out), and the
/// probes' payloads.
#[derive(Default)]
struct Got {
    messages: Vec<(String, Vec<u8>)>,
    probes: Vec<Vec<u8>>,
}

fn poll(c: &mut Client, got: &mut Got) {
    c.poll(
        |e| {
            if let ClientEvent::Message(m) = e {
                if m.topic == "probe" {
                    got.probes.push(m.payload.to_vec());
                } else {
                    got.messages.push((m.topic.to_owned(), m.payload.to_vec()));
                }
            }
        },
        64,
    );
}

#[test]
fn three_agents_share_the_clients_and_route_between_them() {
    let dir = tempdir("agents");
    let r = start(&dir, RouterConfig { agents: 3, ..RouterConfig::default() });
    let tcp = format!("tcp://{}", r.tcp);
    let mut subs = vec![client("ipc", &dir, "a"), client(&tcp, &dir, "b"), client("ipc", &dir, "c")];
    subs.push(client(&tcp, &dir, "d"));
    let mut pubs = [client("ipc", &dir, "p1"), client(&tcp, &dir, "p2")];
    for c in subs.iter_mut().chain(pubs.iter_mut()) {
        c.wait_connected(Duration::from_secs(10)).unwrap();
    }
    // Six clients, each to the agent serving the fewest: two each. A
    // client's id is its session number times 3 plus its agent.
    let mut per_agent = BTreeMap::new();
    for c in subs.iter().chain(pubs.iter()) {
        *per_agent.entry(c.client_id().unwrap() % 3).or_insert(0) += 1;
    }
    assert_eq!(per_agent.into_values().collect::<Vec<_>>(), [2, 2, 2]);

    for (i, pats) in [&["md/>", "md/*/VOD"][..], &["md/*/VOD"], &["fx/>"], &["md/eu/VOD"]].iter().enumerate() {
        for p in *pats {
            subs[i].subscribe(p).unwrap();
        }
        // Last: an agent passes its interest on in order, so once a probe
        // from every publisher arrives, every pattern above is known to
        // every publisher's agent.
        subs[i].subscribe("probe").unwrap();
    }
    let mut got: Vec<Got> = subs.iter().map(|_| Got::default()).collect();
    let until = Instant::now() + Duration::from_secs(10);
    let settled = |got: &[Got]| got.iter().all(|g| [b"p1", b"p2"].iter().all(|p| g.probes.iter().any(|x| x == p)));
    while !settled(&got) {
        assert!(Instant::now() < until, "probes never reached every subscriber");
        for (p, name) in pubs.iter_mut().zip(["p1", "p2"]) {
            p.publish("probe", name.as_bytes()).unwrap();
            p.poll(|_| {}, 64);
        }
        for _ in 0..20 {
            for (s, g) in subs.iter_mut().zip(&mut got) {
                poll(s, g);
            }
        }
    }

    pubs[0].publish("md/eu/VOD", b"bid 101.25").unwrap();
    pubs[1].publish("md/us/IBM", b"bid 150").unwrap();
    pubs[1].publish("fx/EURUSD", b"1.0850").unwrap();
    pubs[0].publish("eq/nobody", b"x").unwrap();
    let expect: [&[&str]; 4] = [&["md/eu/VOD", "md/us/IBM"], &["md/eu/VOD"], &["fx/EURUSD"], &["md/eu/VOD"]];
    let until = Instant::now() + Duration::from_millis(500);
    while Instant::now() < until {
        for (s, g) in subs.iter_mut().zip(&mut got) {
            poll(s, g);
        }
    }
    for (i, (g, want)) in got.iter().zip(expect).enumerate() {
        let mut topics: Vec<&str> = g.messages.iter().map(|m| m.0.as_str()).collect();
        topics.sort_unstable();
        assert_eq!(topics, want, "subscriber {i}: each matching message once");
    }
    let report = r.stop();
    assert_eq!(report.clients, 6);
    let t = report.totals;
    // Every probe and message was counted in once, on its publisher's agent.
    assert!(t.forwarded > 0, "{t:?}");
    assert_eq!(t.connected, 6);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The last-value cache with two agents: the publisher on one, the
/// subscriber on the other; subscribing with the cache while the
/// publisher publishes as fast as it can gives the newest value flagged
/// as cached, then every later message, none missing and none twice.
#[test]
fn the_cache_seam_holds_across_agents_while_publishing() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let dir = tempdir("agents-cache");
    let cache =
        tickwire_router::config::CacheTable { patterns: vec!["md/>".into()], max_topics: 10, max_bytes: 1 << 20 };
    let r = start(&dir, RouterConfig { agents: 2, cache: Some(cache), ..RouterConfig::default() });
    let mut publisher = client("ipc", &dir, "p");
    publisher.wait_connected(Duration::from_secs(10)).unwrap();
    let mut sub = client("ipc", &dir, "s");
    sub.wait_connected(Duration::from_secs(10)).unwrap();
    assert_ne!(publisher.client_id().unwrap() % 2, sub.client_id().unwrap() % 2, "one on each agent");
    // A plain subscriber on the subscriber's agent: once it has a message,
    // that agent's copy of the cache holds a value.
    let mut filler = client("ipc", &dir, "filler");
    filler.wait_connected(Duration::from_secs(10)).unwrap();
    let mut watch = client("ipc", &dir, "watch");
    watch.subscribe("md/>").unwrap();
    watch.wait_connected(Duration::from_secs(10)).unwrap();
    assert_eq!(
        watch.client_id().unwrap() % 2,
        sub.client_id().unwrap() % 2,
        "the fourth client joins the second agent"
    );

    let (published, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
    let (count, halt) = (Arc::clone(&published), Arc::clone(&stop));
    let pub_thread = std::thread::spawn(move || {
        let started = Instant::now();
        let mut seq = 0u64;
        // Bounded: 10 s or 2M messages, whichever first.
        while !halt.load(Ordering::Relaxed) && seq < 2_000_000 && started.elapsed() < Duration::from_secs(10) {
            if publisher.publish("md/x", &seq.to_le_bytes()).is_ok() {
                seq += 1;
                count.store(seq, Ordering::Relaxed);
            }
            publisher.poll(|_| {}, 16);
        }
    });
    // Mid-stream: once the subscriber's agent has routed a message.
    let until = Instant::now() + Duration::from_secs(10);
    let mut seen = 0;
    while seen == 0 {
        assert!(Instant::now() < until, "nothing reached the second agent");
        watch.poll(|e| seen += usize::from(matches!(e, ClientEvent::Message(_))), 64);
    }
    sub.subscribe_cached("md/>").unwrap();
    let mut seqs: Vec<(u64, bool, u32)> = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while seqs.len() < 20_000 && Instant::now() < until {
        sub.poll(
            |e| {
                if let ClientEvent::Message(m) = e {
                    let seq = u64::from_le_bytes(m.payload.try_into().unwrap());
                    seqs.push((seq, m.is_cached(), m.discarded));
                }
            },
            256,
        );
    }
    stop.store(true, Ordering::Relaxed);
    pub_thread.join().unwrap();
    assert!(seqs.len() >= 1_000, "only {} messages", seqs.len());
    assert!(seqs[0].1 && seqs[0].0 > 0, "first the cached value: {:?}", seqs[0]);
    assert!(seqs[1..].iter().all(|s| !s.1), "then live only");
    for w in seqs.windows(2) {
        assert_eq!(w[1].0, w[0].0 + 1 + u64::from(w[1].2), "no gap, no duplicate at or after the seam: {w:?}");
    }
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Requests and replies across agents: requesters and responders spread
/// over two agents, each reply back to its requester's agent (by the
/// inbox's agent), no responders known across agents, and queue groups
/// refused (they need one agent).
#[test]
fn requests_cross_agents_and_each_reply_finds_its_requester() {
    let dir = tempdir("agents-requests");
    let r = start(&dir, RouterConfig { agents: 2, ..RouterConfig::default() });
    let tcp = format!("tcp://{}", r.tcp);
    let mut clients: Vec<Client> = (0..4).map(|i| client(if i % 2 == 0 { "ipc" } else { &tcp }, &dir, "c")).collect();
    for c in &mut clients {
        c.wait_connected(Duration::from_secs(10)).unwrap();
    }
    // Each client to the agent serving the fewest: 0, 1, 0, 1 (by id).
    let agent = |c: &Client| c.client_id().unwrap() % 2;
    let (a0, a1): (Vec<usize>, Vec<usize>) = (0..4).partition(|&i| agent(&clients[i]) == 0);
    assert_eq!((a0.len(), a1.len()), (2, 2));
    // A responder on each agent, each on its own topic; the requesters
    // are the other two.
    let (resp, ask) = ([a0[0], a1[0]], [a1[1], a0[1]]);
    for (k, &i) in resp.iter().enumerate() {
        clients[i].subscribe(&format!("svc/{k}")).unwrap();
    }
    // Interest crosses agents in order: wait until a request is answered.
    let until = Instant::now() + Duration::from_secs(10);
    for (k, &i) in ask.iter().enumerate() {
        // The requester on the other agent than responder k.
        assert_ne!(agent(&clients[i]), agent(&clients[resp[k]]));
        let mut answered = 0;
        while answered < 50 {
            assert!(Instant::now() < until, "requests to svc/{k} never all answered");
            let id = match clients[i].send_request(&format!("svc/{k}"), &[k as u8, answered], Duration::from_secs(5)) {
                Ok(id) => id,
                Err(_) => continue,
            };
            let mut outcome = None;
            let step = Instant::now() + Duration::from_secs(5);
            while outcome.is_none() && Instant::now() < step {
                let (head, tail) = clients.split_at_mut(resp[k].max(i));
                let (responder, requester) =
                    if resp[k] < i { (&mut head[resp[k]], &mut tail[0]) } else { (&mut tail[0], &mut head[i]) };
                let mut todo = Vec::new();
                responder.poll(
                    |e| {
                        if let ClientEvent::Request(r) = e {
                            todo.push((r.inbox.to_owned(), r.payload.to_vec()));
                        }
                    },
                    64,
                );
                for (inbox, p) in todo {
                    responder.reply(&inbox, &p).unwrap();
                }
                requester.poll(
                    |e| match e {
                        ClientEvent::Reply { request, payload, .. } if request == id => {
                            outcome = Some(Ok(payload.to_vec()))
                        }
                        ClientEvent::RequestFailed { request, why } if request == id => outcome = Some(Err(why)),
                        _ => {}
                    },
                    64,
                );
            }
            match outcome {
                Some(Ok(p)) => {
                    assert_eq!(p, [k as u8, answered], "the reply to its own request");
                    answered += 1;
                }
                // The interest has not crossed yet: try again.
                Some(Err(RequestError::NoResponders)) => std::thread::sleep(Duration::from_millis(10)),
                other => panic!("request to svc/{k}: {other:?}"),
            }
        }
    }
    // Nothing anywhere wants it: said at once, across agents too.
    let got = clients[ask[0]].request("svc/none", b"?", Duration::from_secs(5), |_| {});
    assert_eq!(got, Err(RequestError::NoResponders));
    let queue = clients[resp[0]].subscribe_queue("svc/q", "g").unwrap();
    let mut refused = None;
    let until = Instant::now() + Duration::from_secs(5);
    while refused.is_none() && Instant::now() < until {
        clients[resp[0]].poll(
            |e| {
                if let ClientEvent::Rejected { code, request, reason } = e {
                    refused = Some((code, request, reason.to_owned()));
                }
            },
            64,
        );
    }
    let (code, request, reason) = refused.expect("the queue subscription refused");
    assert_eq!((code, request), (RejectCode::Unsupported, u64::from(queue)), "{reason}");
    assert!(reason.contains("one routing agent"), "{reason}");
    drop(clients);
    let _ = r.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two agents idling with `park` (100 ms at a time): a message published
/// while both are parked wakes the publisher's agent (its socket) and then
/// the subscriber's (the ring between them rings its doorbell), so it
/// arrives in far less than a park; agents that slept through their park
/// would take about one park per hop.
#[test]
fn parked_agents_wake_on_a_message_not_at_their_park_timeout() {
    use tickwire_agent::Idle;
    let dir = tempdir("parked");
    let cfg = RouterConfig {
        dir: dir.clone(),
        listen: vec!["tcp://127.0.0.1:0".into()],
        agents: 2,
        idle: "park".into(),
        ..RouterConfig::default()
    };
    let mut server = tickwire_router::Server::start(cfg).unwrap();
    let tcp = format!("tcp://{}", server.tcp_addrs()[0]);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&stop);
    let wakes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = std::sync::Arc::clone(&wakes);
    let thread = std::thread::spawn(move || {
        let mut idle = Idle::park();
        while !flag.load(std::sync::atomic::Ordering::Relaxed) {
            let work = server.do_work();
            idle.idle_with(work, &mut server);
        }
        *seen.lock().unwrap() = server.doorbells();
        server.shutdown(Duration::from_millis(200))
    });
    // The first client goes to agent 0 (the server's thread), the second
    // to agent 1 (a thread of its own).
    let mut publisher = client(&tcp, &dir, "p");
    publisher.wait_connected(Duration::from_secs(10)).unwrap();
    let mut sub = client(&tcp, &dir, "s");
    sub.wait_connected(Duration::from_secs(10)).unwrap();
    assert_eq!((publisher.client_id().unwrap() % 2, sub.client_id().unwrap() % 2), (0, 1));
    sub.subscribe("md/>").unwrap();
    // Until agent 0 knows agent 1's interest.
    let until = Instant::now() + Duration::from_secs(10);
    let mut got = Got::default();
    while got.messages.is_empty() {
        assert!(Instant::now() < until, "agent 1's interest never reached agent 0");
        publisher.publish("md/warm", b"x").unwrap();
        publisher.poll(|_| {}, 64);
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(20) {
            poll(&mut sub, &mut got);
        }
    }
    let mut took = Vec::new();
    for i in 0..15u32 {
        // Long enough for both agents to park (100 spins and 10 yields,
        // then a park of up to 100 ms).
        let quiet = Instant::now() + Duration::from_millis(150);
        while Instant::now() < quiet {
            poll(&mut sub, &mut got);
        }
        got.messages.clear();
        let sent = Instant::now();
        publisher.publish("md/eu/VOD", &i.to_le_bytes()).unwrap();
        publisher.poll(|_| {}, 64);
        while got.messages.is_empty() && sent.elapsed() < Duration::from_secs(2) {
            poll(&mut sub, &mut got);
        }
        assert_eq!(got.messages.len(), 1, "message {i} arrived once");
        took.push(sent.elapsed());
    }
    took.sort_unstable();
    let median = took[took.len() / 2];
    assert!(
        median < Duration::from_millis(30),
        "median {median:?} of {took:?}: woken at the timeout, not by the message"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let report = thread.join().unwrap();
    assert_eq!(report.clients, 2);
    let bells = wakes.lock().unwrap().clone();
    // Agent 1 waited, and agent 0's ring woke it for most messages.
    let (woken, waited) = bells[1];
    assert!(waited >= 15 && woken >= 8, "agent 1 waited {waited} times, woken by its doorbell {woken}: {bells:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
