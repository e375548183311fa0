//! Clients of a router cluster across hosts (see cluster.rs for the
//! links themselves), with the real binaries in network namespaces:
//!
//! - A queue group with members on several routers gets each message once
//!   cluster-wide, shared by weight; requests to a group of responders on
//!   other routers are answered once.
//! - A client given one router learns the others from its WELCOME and,
//!   when that router stops, moves to one of them and receives there.
//!
//! Runs as root (namespaces, nftables), in `make test`.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/router.rs"]
mod router;

use cluster::{finish, member, tally, up, Hosts, CLIENTS, SECRET};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A queue group with members on two routers, published to from a third:
/// each message goes to one member cluster-wide (before, each router
/// served its own members: every message twice), shared by weight, while
/// a plain subscriber gets them all; a member where it is published takes
/// them all (local first); with a member's router down, the members on the
/// others take them all.
#[test]
fn a_queue_group_with_members_on_several_routers_gets_each_message_once() {
    let h = Hosts::create(3, 8);
    let _r0 = h.router(0, &[1, 2]);
    let mut r1 = h.router(1, &[0, 2]);
    let _r2 = h.router(2, &[0, 1]);
    h.wait_link(1, 2, Duration::from_secs(5), up);
    const N: u64 = 20_000;
    let a = member(&h, 1, "g", "12s");
    let b = member(&h, 2, "g", "12s");
    let plain = h.sub(2, "md/>", N, "12s");
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["groups"] == 1);
    h.wait_link(0, 2, Duration::from_secs(5), |l| l["groups"] == 1 && l["interest"] == 1);
    h.publish(0, "md/eu/VOD", N, "20k");
    assert_eq!(finish(plain).0, N, "the plain subscriber gets every message");
    let (a, b) = (finish(a).0, finish(b).0);
    assert_eq!(a + b, N, "each message to one member of the group: r1's got {a}, r2's {b}");
    assert!(a >= N / 4 && b >= N / 4, "shared by weight (one member each): {a} and {b}");
    // Their members gone, r1 and r2 hold no group (so the next phase's
    // counts are its own, not a stale status).
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["groups"] == 0);
    h.wait_link(0, 2, Duration::from_secs(5), |l| l["groups"] == 0);

    // A member on the publisher's router takes every message.
    let local = member(&h, 0, "h", "8s");
    let far = member(&h, 1, "h", "8s");
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["groups"] == 1);
    h.wait_link(2, 1, Duration::from_secs(5), |l| l["groups"] == 1);
    h.publish(0, "md/eu/SAP", 1000, "10k");
    assert_eq!((finish(local).0, finish(far).0), (1000, 0), "local first");
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["groups"] == 0);

    // r1 down (not yet forgotten: its members still counted): r2's member
    // takes every message.
    let mut gone = member(&h, 1, "k", "8s");
    let stays = member(&h, 2, "k", "8s");
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["groups"] == 1);
    h.wait_link(0, 2, Duration::from_secs(5), |l| l["groups"] == 1);
    r1.stop();
    h.wait_link(0, 1, Duration::from_secs(5), |l| !up(l) && l["groups"] == 1);
    h.publish(0, "md/eu/BMW", 1000, "10k");
    assert_eq!(finish(stays).0, 1000, "the member whose router is up");
    let _ = gone.kill();
    let _ = gone.wait();
}

/// Requests to a queue group of responders on two other routers: each is
/// answered once, by one of them.
#[test]
fn requests_to_a_queue_group_across_routers_are_answered_once() {
    let h = Hosts::create(3, 9);
    let _r0 = h.router(0, &[1, 2]);
    let _r1 = h.router(1, &[0, 2]);
    let _r2 = h.router(2, &[0, 1]);
    h.wait_link(1, 2, Duration::from_secs(5), up);
    let reply = ["reply", "--router", CLIENTS, "--topic", "rfq/>", "--queue", "pricers", "--echo"];
    let spawn = |k| h.cmd(k, &reply).args(["--duration", "15s"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
    let mut responders = [spawn(1).unwrap(), spawn(2).unwrap()];
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["groups"] == 1);
    h.wait_link(0, 2, Duration::from_secs(5), |l| l["groups"] == 1);
    let args = ["request", "--router", CLIENTS, "--topic", "rfq/eu/VOD", "--data", "q", "--count", "40"];
    let out = h.cmd(0, &args).args(["--timeout", "5s"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 40);
    // Each request crossed to one responder's router, and one reply came
    // back for it: 40 each way in all (the status is written every second).
    let sum = |field: &str| h.link(1, 0)[field].as_u64().unwrap_or(0) + h.link(2, 0)[field].as_u64().unwrap_or(0);
    let until = Instant::now() + Duration::from_secs(3);
    while (sum("messages_in"), sum("messages_out")) != (40, 40) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!((sum("messages_in"), sum("messages_out")), (40, 40), "r1: {} r2: {}", h.link(1, 0), h.link(2, 0));
    for r in &mut responders {
        let _ = r.kill();
        let _ = r.wait();
    }
}

/// A client given one router of the cluster learns the others from its
/// WELCOME (each router told where the others take clients, as a NATS
/// server's `connect_urls`) and, when its router stops, moves to one of
/// them, subscribes again and receives.
#[test]
fn a_client_given_one_router_learns_the_others_and_moves_to_one_when_it_stops() {
    let h = Hosts::create(3, 10);
    let told = |k: usize| vec!["--cluster-client-advertise".to_owned(), format!("tcp://{}:7600", h.addr(k))];
    let _r0 = h.router_tls(0, &[0], SECRET, &told(0));
    let mut r1 = h.router_tls(1, &[0], SECRET, &told(1));
    let _r2 = h.router_tls(2, &[0], SECRET, &told(2));
    h.wait_link(1, 0, Duration::from_secs(5), up);
    h.wait_link(1, 2, Duration::from_secs(5), up);
    // Given r1 alone (its own host's loopback).
    let (mut sub, first) = h.sub_at_line(1, CLIENTS, "md/>", 2000, "30s");
    assert!(first.contains("\"r1\""), "{first}");
    let (tx, rx) = std::sync::mpsc::channel();
    let err = sub.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(err)).map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    r1.stop();
    let until = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    let moved_to = loop {
        let left = until.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).unwrap_or_else(|_| panic!("not moved to r0 or r2: {seen:?}"));
        if line.contains("subscribed to") {
            match ["r0", "r2"].into_iter().find(|r| line.contains(&format!("\"{r}\""))) {
                Some(r) => break r,
                None => panic!("moved where? {line}"),
            }
        }
        seen.push(line);
    };
    // Its interest reaches r2, where the publisher is.
    if moved_to == "r0" {
        h.wait_link(2, 0, Duration::from_secs(5), |l| l["interest"] == 1);
    }
    h.publish(2, "md/eu/VOD", 2000, "10k");
    let status = sub.wait().unwrap();
    reader.join().unwrap();
    let rest: Vec<String> = rx.try_iter().collect();
    assert!(status.success(), "{rest:?}");
    assert_eq!(tally(&rest.join("\n")), (2000, 0, 0, 0), "on {moved_to}");
}
