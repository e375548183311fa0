//! A durable queue with three competing consumers (`tickwire sub
//! --durable-queue`), one of them killed with -9 at random moments and a
//! new one started in its place, and the router itself killed with -9 and
//! started again on the same journal, while this process publishes
//! guaranteed messages: every message the router acknowledged is consumed,
//! and what is seen twice is only what a kill left unacknowledged.
//!
//! `make test` runs 6 consumer kills and 2 router kills; `make crash` the
//! issue's 20 and 5 (`TICKWIRE_QUEUE_KILLS`, `TICKWIRE_QUEUE_ROUTER_KILLS`).

#[path = "support/router.rs"]
mod router;

use router::{RouterProcess, BIN};
use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientOptions, PublishError};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn consumer(d: &str) -> Child {
    Command::new(BIN)
        .args(["--dir", d, "sub", "--router", "ipc", "--topic", "orders/>", "--durable-queue", "gw", "--print"])
        .args(["--duration", "300s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// What a consumer printed: the messages' texts.
fn printed(mut c: Child, seen: &mut BTreeMap<String, u32>) {
    let mut out = String::new();
    if let Some(mut o) = c.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    let _ = c.wait();
    for l in out.lines() {
        if let Some(m) = l.strip_prefix("orders/eu ") {
            *seen.entry(m.to_owned()).or_insert(0) += 1;
        }
    }
}

/// A cheap random number (the kill moments), seeded by the clock.
fn rand(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

#[test]
fn every_acknowledged_message_of_a_durable_queue_is_consumed_through_consumer_and_router_kills() {
    let kills = env("TICKWIRE_QUEUE_KILLS", 6);
    let router_kills = env("TICKWIRE_QUEUE_ROUTER_KILLS", 2);
    let n = 150 * (kills + 4);
    let base = std::env::temp_dir().join(format!("tw-cli-dqueue-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (d, journal) = (base.join("dir").display().to_string(), base.join("journal").display().to_string());
    let start_router = || RouterProcess::start(&["--dir", &d, "router", "--no-tcp", "--journal", &journal]);
    let mut r = start_router();

    let mut consumers: Vec<Child> = (0..3).map(|_| consumer(&d)).collect();
    let opts = ClientOptions { name: "feed".into(), dir: base.join("dir"), ..ClientOptions::default() };
    let mut feed = Client::connect("ipc", opts).unwrap();
    feed.wait_connected(Duration::from_secs(10)).unwrap();
    // The queue exists once a consumer has bound it: before, the journal
    // keeps the messages but no queue is fed by them.
    std::thread::sleep(Duration::from_secs(2));

    let mut seen = BTreeMap::new();
    let mut rng = 0x9e37_79b9_7f4a_7c15 ^ u64::from(std::process::id());
    let every = n / (kills + 1);
    let router_every = n / (router_kills + 1);
    let mut sent = 0u64;
    let until = Instant::now() + Duration::from_secs(120);
    while sent < n {
        assert!(Instant::now() < until, "publishing took over 120 s ({sent} of {n})");
        match feed.publish_guaranteed("orders/eu", format!("m{sent}").as_bytes()) {
            Ok(_) => sent += 1,
            Err(PublishError::WindowFull(_) | PublishError::NotConnected | PublishError::BackPressured) => {}
            Err(e) => panic!("publish {sent}: {e}"),
        }
        feed.poll(|_| {}, 64);
        std::thread::sleep(Duration::from_millis(5));
        if sent > 0 && sent % every == 0 && sent / every <= kills {
            let k = (rand(&mut rng) % 3) as usize;
            let mut victim = std::mem::replace(&mut consumers[k], consumer(&d));
            victim.kill().unwrap();
            printed(victim, &mut seen);
            sent += u64::from(sent < n && feed.publish_guaranteed("orders/eu", format!("m{sent}").as_bytes()).is_ok());
        }
        if sent > 0 && sent % router_every == 0 && sent / router_every <= router_kills {
            r.child.kill().unwrap();
            let _ = r.child.wait();
            r = start_router();
            sent += u64::from(sent < n && feed.publish_guaranteed("orders/eu", format!("m{sent}").as_bytes()).is_ok());
        }
    }
    // Every publish acknowledged (stored), then consumed.
    let until = Instant::now() + Duration::from_secs(60);
    while feed.acknowledged() < n && Instant::now() < until {
        feed.poll(|_| {}, 64);
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(feed.acknowledged(), n, "the router acknowledged every publish");
    std::thread::sleep(Duration::from_secs(3));
    for c in consumers {
        let _ = Command::new("kill").args(["-INT", &c.id().to_string()]).status();
        printed(c, &mut seen);
    }
    let missing: Vec<u64> = (0..n).filter(|i| !seen.contains_key(&format!("m{i}"))).collect();
    let twice = seen.values().filter(|&&k| k > 1).count();
    println!(
        "{n} published and acknowledged, {} consumed, {twice} seen more than once, after {kills} consumer and \
         {router_kills} router kills",
        seen.len()
    );
    assert!(missing.is_empty(), "acknowledged and never consumed: {missing:?}");
    assert_eq!(seen.len() as u64, n, "nothing else: {:?}", seen.keys().find(|m| !m.starts_with('m')));
    drop(r);
    let _ = std::fs::remove_dir_all(&base);
}
