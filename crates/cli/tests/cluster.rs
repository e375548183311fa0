//! A router cluster across hosts: routers each in a network namespace of
//! their own, joined by veth pairs to a bridge in one more (all made and
//! removed by the test), each with its clients in its namespace: the real
//! binaries (`tickwire router`, `pub`, `sub --verify`).
//!
//! - Publishers on one router, wildcard subscribers on the others: every
//!   message once to each matching subscriber, none to one that does not
//!   match; a subscriber made later on the first router receives from a
//!   publisher on another; a router killed (-9) leaves the others serving
//!   their clients, and is linked again when it comes back.
//! - A partition between two routers (an `nft` drop rule): the link comes
//!   back after the rule is removed, interest is told again, and what was
//!   lost meanwhile reaches the subscriber as a discard count: received
//!   plus discarded is what was published, and `--verify` finds no gap
//!   that was not announced.
//! - Four routers each told only of the next (a ring): a link with each
//!   of the others, every message once to each subscriber, no loop.
//! - A request on one router is answered by a responder on another (the
//!   reply back over the link); with no responder anywhere, at once
//!   `NoResponders`.
//! - A router down past `forget_after` is forgotten: what it wanted is
//!   withdrawn, one only learned of is no longer dialed and leaves the
//!   status; back, it is linked with again.
//! - A router with another secret is refused, and says why.
//! - Links over TLS: messages cross them (and `tickwire stat` shows the
//!   link's counters, its round trip measured); a router whose certificate
//!   names another router, or another CA signed, is refused, and the
//!   router it tried says why.
//!
//! Clients of a cluster (queue groups across routers, a client moving
//! between routers) are in cluster_clients.rs.
//!
//! Runs as root (namespaces, nftables), in `make test`.

#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/router.rs"]
mod router;

use cluster::{finish, run, up, Hosts, CLIENTS, SECRET};
use router::{RouterProcess, BIN};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tickwire_testkit::ca::{TestCa, Usage};

#[test]
fn every_matching_subscriber_on_every_router_gets_each_message_once() {
    let h = Hosts::create(3, 1);
    let _r0 = h.router(0, &[0]);
    let mut r1 = h.router(1, &[0]);
    let mut r2 = h.router(2, &[0]);
    // r1 and r2 learn of each other from r0.
    h.wait_link(1, 2, Duration::from_secs(5), up);
    h.wait_link(2, 1, Duration::from_secs(5), up);
    const N: u64 = 50_000;
    let b = h.sub(1, "md/>", N, "30s");
    let c = h.sub(2, "md/eu/*", N, "30s");
    let none = h.sub(2, "fx/>", N, "4s");
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["interest"] == 1);
    h.wait_link(0, 2, Duration::from_secs(5), |l| l["interest"] == 2);
    h.publish(0, "md/eu/VOD", N, "50k");
    assert_eq!(finish(b), (N, 0, 0, 0), "md/> on r1");
    assert_eq!(finish(c), (N, 0, 0, 0), "md/eu/* on r2");
    assert_eq!(finish(none).0, 0, "fx/> matches nothing published");
    assert_eq!(h.link(0, 1)["messages_out"], N, "one copy per link, whatever the subscribers");

    // A subscriber made later on r0 receives from a publisher on r1.
    let late = h.sub(0, "md/us/*", 1000, "20s");
    h.wait_link(1, 0, Duration::from_secs(5), |l| l["interest"] == 1);
    h.publish(1, "md/us/IBM", 1000, "10k");
    assert_eq!(finish(late), (1000, 0, 0, 0));

    // r1 killed: r0 and r2 carry on, and r1's subscriber, given r1 then
    // r0, moves to r0 and hears r2 (its interest told by r0 within 3 s,
    // the status files' second of staleness included).
    let c = h.sub(2, "md/>", 2000, "20s");
    // (A client shuffles its list: the one that started on r0 is let go.)
    let urls = format!("{CLIENTS},tcp://{}:7600", h.addr(0));
    let moved = (0..20)
        .find_map(|_| {
            let (mut child, first) = h.sub_at_line(1, &urls, "md/eu/>", 2000, "20s");
            if first.contains("\"r1\"") {
                return Some(child);
            }
            let _ = child.kill();
            let _ = child.wait();
            None
        })
        .expect("a subscriber given r1 and r0 started on r1 once in 20 tries");
    h.wait_link(2, 1, Duration::from_secs(5), |l| l["interest"] == 1);
    r1.stop();
    h.wait_link(0, 1, Duration::from_secs(5), |l| !up(l));
    h.wait_link(2, 0, Duration::from_secs(3), |l| l["interest"] == 1);
    h.publish(2, "md/eu/SAP", 2000, "10k");
    assert_eq!(finish(c), (2000, 0, 0, 0), "r2's own subscriber");
    assert_eq!(finish(moved), (2000, 0, 0, 0), "r1's subscriber, moved to r0");
    assert!(r2.is_running());
    let _r1 = h.router(1, &[0]);
    h.wait_link(1, 2, Duration::from_secs(5), up);
    let b = h.sub(1, "md/>", 1000, "20s");
    h.wait_link(2, 1, Duration::from_secs(5), |l| up(l) && l["interest"] == 1);
    h.publish(2, "md/eu/BMW", 1000, "10k");
    assert_eq!(finish(b), (1000, 0, 0, 0), "r1 back hears r2");
}

#[test]
fn a_partition_heals_and_what_it_lost_reaches_the_subscriber_as_discards() {
    let h = Hosts::create(2, 2);
    let _r0 = h.router(0, &[0]);
    let _r1 = h.router(1, &[0]);
    h.wait_link(1, 0, Duration::from_secs(5), up);
    const N: u64 = 60_000;
    // It ends at its duration: what it receives is fewer than N.
    let sub = h.sub(1, "md/>", N, "20s");
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["interest"] == 1);
    // 12 s of messages; the partition from 2 s to 5 s.
    let (a, b) = (h.addr(0), h.addr(1));
    let publisher = std::thread::spawn({
        let (ns, bin) = (h.ns(0), BIN);
        move || {
            let args = ["pub", "--router", CLIENTS, "--topic", "md/x", "--count", "60000", "--rate", "5k"];
            let out = Command::new("ip").args(["netns", "exec", &ns, bin]).args(args).output().unwrap();
            assert!(out.status.success(), "pub: {}", String::from_utf8_lossy(&out.stderr));
        }
    });
    std::thread::sleep(Duration::from_secs(2));
    let rules = format!(
        "table inet tw_cut {{\n  chain in {{\n    type filter hook input priority 0;\n    ip saddr {a} ip daddr {b} drop;\n  }}\n  \
         chain out {{\n    type filter hook output priority 0;\n    ip saddr {b} ip daddr {a} drop;\n  }}\n}}\n"
    );
    let mut nft =
        Command::new("ip").args(["netns", "exec", &h.ns(1), "nft", "-f", "-"]).stdin(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(&mut nft.stdin.take().unwrap(), rules.as_bytes()).unwrap();
    assert!(nft.wait().unwrap().success(), "nft: {rules}");
    h.wait_link(1, 0, Duration::from_secs(5), |l| !up(l));
    std::thread::sleep(Duration::from_secs(1));
    run(Command::new("ip").args(["netns", "exec", &h.ns(1), "nft", "delete", "table", "inet", "tw_cut"]));
    h.wait_link(1, 0, Duration::from_secs(10), |l| up(l) && l["connects"].as_u64() >= Some(2));
    h.wait_link(0, 1, Duration::from_secs(5), |l| up(l) && l["interest"] == 1);
    publisher.join().unwrap();
    let (received, discarded, gaps, dups) = finish(sub);
    assert_eq!(dups, 0, "nothing twice");
    assert!(gaps > 0 && discarded > 0, "the partition lost messages: {received} received, {gaps} gaps");
    // Every message lost was announced: none silently, none twice.
    assert_eq!(received + discarded, N, "{received} received, {discarded} discarded");
    let l = h.link(1, 0);
    assert_eq!(l["lost_in"], discarded, "r1 counts what it lost from r0: {l}");
}

#[test]
fn four_routers_in_a_ring_of_peers_deliver_each_message_once() {
    let h = Hosts::create(4, 3);
    // The cluster's agent on the routing agent's thread (r0, the
    // default), on its own with one routing agent (r1), beside two (r2).
    let more = |k: usize| match k {
        1 => vec!["--cluster-thread".to_owned(), "own".to_owned()],
        2 => vec!["--agents".to_owned(), "2".to_owned()],
        _ => vec![],
    };
    let r: Vec<RouterProcess> = (0..4).map(|k| h.router_tls(k, &[(k + 1) % 4], SECRET, &more(k))).collect();
    // Its threads by name: the cluster's agent has one of its own ("cluster") or not.
    let threads = |k: usize| -> Vec<String> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", r[k].child.id())).unwrap();
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|c| c.trim().to_owned())
            .collect()
    };
    for (k, own) in [(0, false), (1, true), (2, true), (3, false)] {
        assert_eq!(threads(k).iter().any(|t| t == "cluster"), own, "r{k}'s threads: {:?}", threads(k));
    }
    for k in 0..4 {
        for j in (0..4).filter(|&j| j != k) {
            h.wait_link(k, j, Duration::from_secs(10), up);
        }
    }
    const N: u64 = 20_000;
    let subs: Vec<Child> = (0..4).map(|k| h.sub(k, "md/>", N, "30s")).collect();
    for j in 1..4 {
        h.wait_link(0, j, Duration::from_secs(5), |l| l["interest"] == 1);
    }
    h.publish(0, "md/eu/VOD", N, "20k");
    for (k, s) in subs.into_iter().enumerate() {
        assert_eq!(finish(s), (N, 0, 0, 0), "the subscriber on r{k}");
    }
    for k in 0..4 {
        let st = h.status(k);
        let links = st["cluster"]["links"].as_array().cloned().unwrap_or_default();
        assert_eq!(links.len(), 3, "r{k}: {st}");
        assert!(links.iter().all(up), "r{k}: {links:?}");
        // A second link between a pair, closed, is not a refusal.
        assert_eq!(st["cluster"]["refused"], 0, "r{k}: {st}");
    }
}

/// A request on one router, its responders on another: each request is
/// answered, the reply crossing back over the link to the requester; with
/// no responder on any router, `NoResponders` at once.
#[test]
fn a_request_on_one_router_is_answered_by_a_responder_on_another() {
    let h = Hosts::create(2, 7);
    let _r0 = h.router(0, &[1]);
    let _r1 = h.router(1, &[0]);
    h.wait_link(0, 1, Duration::from_secs(5), up);
    let ask = |count: &str| {
        let args = ["request", "--router", CLIENTS, "--topic", "rfq/eu/VOD", "--data", "buy 100", "--count", count];
        h.cmd(0, &args).args(["--timeout", "5s"]).output().unwrap()
    };
    let out = ask("1");
    assert_eq!(out.status.code(), Some(3), "no responder anywhere: {}", String::from_utf8_lossy(&out.stderr));
    let reply = ["reply", "--router", CLIENTS, "--topic", "rfq/>", "--exec", "printf 'quote for %s' \"$(cat)\""];
    let responder = h.cmd(1, &reply).args(["--duration", "15s"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn();
    let responder = responder.unwrap();
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["interest"] == 1);
    let out = ask("20");
    let replies = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(replies.lines().count(), 20, "{replies}");
    assert!(replies.lines().all(|l| l == "quote for buy 100"), "{replies}");
    // Each crossed r1's link once (20 requests in, 20 replies out; the
    // status is written every second).
    h.wait_link(1, 0, Duration::from_secs(3), |l| l["messages_in"] == 20 && l["messages_out"] == 20);
    let mut responder = responder;
    let _ = responder.kill();
    let _ = responder.wait();
}

#[test]
fn a_router_down_past_forget_after_is_forgotten_no_longer_dialed_and_linked_again_when_back() {
    let h = Hosts::create(3, 6);
    let forget = ["--cluster-forget-after".to_owned(), "2s".to_owned()];
    let _r0 = h.router_tls(0, &[0], SECRET, &forget);
    let r1 = h.router_tls(1, &[0], SECRET, &forget);
    let mut r2 = h.router_tls(2, &[0], SECRET, &forget);
    // r1 learns of r2 from r0, and dials it (the lower name dials).
    h.wait_link(1, 2, Duration::from_secs(5), up);
    let mut sub = h.sub(2, "md/>", 1, "30s");
    h.wait_link(1, 2, Duration::from_secs(5), |l| l["interest"] == 1);
    r2.stop();
    let _ = sub.kill();
    let _ = sub.wait();
    h.wait_link(1, 2, Duration::from_secs(5), |l| l["state"] == "down");
    // Down for 2 s: what it wanted withdrawn, its dial given up, and gone
    // from the status (no longer dialed every 5 s for ever).
    let line = r1.wait_for_line("router r2 down for", Duration::from_secs(6));
    assert!(line.as_ref().is_some_and(|l| l.contains("what it wanted withdrawn, no longer dialed")), "{line:?}");
    h.wait_link(1, 2, Duration::from_secs(3), serde_json::Value::is_null);
    h.wait_link(0, 2, Duration::from_secs(3), serde_json::Value::is_null);
    // Back: it dials r0, which tells r1 of it, and r1 dials it again.
    let _r2 = h.router_tls(2, &[0], SECRET, &forget);
    h.wait_link(1, 2, Duration::from_secs(10), up);
    h.wait_link(0, 2, Duration::from_secs(5), up);
}

#[test]
fn a_router_without_the_secret_is_refused_and_told_why() {
    let h = Hosts::create(2, 4);
    let r0 = h.router(0, &[0]);
    let r1 = h.router_with(1, &[0], "another-secret-entirely-0123456");
    let line = r0.wait_for_line("failed the cluster's secret", Duration::from_secs(5));
    assert!(line.is_some_and(|l| l.contains("\"r1\"")), "{:?}", r0.lines.lock().unwrap());
    assert!(r1.wait_for_line("failed the cluster's secret", Duration::from_secs(5)).is_some());
    std::thread::sleep(Duration::from_millis(1500));
    assert!(h.status(0)["cluster"]["refused"].as_u64() >= Some(1));
    let st = h.status(1);
    assert!(st["cluster"]["links"].is_array(), "r1's status: {st}");
    assert!(st["cluster"]["links"].as_array().unwrap().iter().all(|l| !up(l)), "r1 linked without the secret: {st}");
}

#[test]
fn links_speak_tls_and_a_certificate_naming_another_router_or_from_another_ca_is_refused() {
    let h = Hosts::create(3, 5);
    let pki = h.dir.join("pki");
    let (ca, foreign) = (TestCa::new(&pki, "cluster-ca"), TestCa::new(&pki, "another-ca"));
    let tls = |ca: &TestCa, file: &str, names: &str| -> Vec<String> {
        let (cert, key) = ca.issue(file, Usage::Peer, Some(names), &[], &[]);
        [("--cluster-tls-cert", &cert), ("--cluster-tls-key", &key), ("--cluster-tls-ca", &ca.pem)]
            .iter()
            .flat_map(|(flag, path)| [(*flag).to_owned(), path.display().to_string()])
            .collect()
    };
    let r0 = h.router_tls(0, &[], SECRET, &tls(&ca, "r0", "r0"));
    let _r1 = h.router_tls(1, &[0], SECRET, &tls(&ca, "r1", "r1"));
    h.wait_link(1, 0, Duration::from_secs(10), up);
    assert_eq!(h.status(0)["cluster"]["tls"], true);
    let sub = h.sub(1, "md/>", 2000, "20s");
    h.publish(0, "md/eu/x", 2000, "20k");
    let (received, discarded, gaps, dups) = finish(sub);
    assert_eq!((received, discarded, gaps, dups), (2000, 0, 0, 0), "over TLS");
    h.wait_link(0, 1, Duration::from_secs(3), |l| l["messages_out"] == 2000);
    // A round trip is measured once per heartbeat interval (1 s).
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["round_trip_us"].as_u64().is_some_and(|us| us > 0));
    // `tickwire stat` shows the link from the router's counters file.
    let dir = h.dir(0).display().to_string();
    let out = Command::new(BIN).args(["--dir", &dir, "stat", "--json"]).output().unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let link = rows.as_array().unwrap().iter().find(|r| r["side"] == "cluster-link" && r["channel"] == "r1").cloned();
    let link = link.unwrap_or_else(|| panic!("no cluster-link r1 in `stat`: {rows}"));
    assert_eq!((link["counters"]["up"].as_u64(), link["counters"]["messages_out"].as_u64()), (Some(1), Some(2000)));

    // A certificate the cluster's CA signed, naming r1: r2 cannot pass for it.
    let mut r2 = h.router_tls(2, &[0], SECRET, &tls(&ca, "r2-as-r1", "r1"));
    let line = r0.wait_for_line("certificate naming \"r1\"", Duration::from_secs(5));
    assert!(line.is_some_and(|l| l.contains("router \"r2\"")), "{:?}", r0.lines.lock().unwrap());
    r2.stop();
    // A certificate from another CA: refused by TLS, said by both ends.
    let r2 = h.router_tls(2, &[0], SECRET, &tls(&foreign, "r2-foreign", "r2"));
    assert!(r0.wait_for_line("tls: ", Duration::from_secs(5)).is_some(), "{:?}", r0.lines.lock().unwrap());
    assert!(r2.wait_for_line("tls: ", Duration::from_secs(5)).is_some(), "{:?}", r2.lines.lock().unwrap());
    std::thread::sleep(Duration::from_millis(500));
    let st = h.status(2);
    assert!(st["cluster"]["links"].as_array().is_none_or(|ls| ls.iter().all(|l| !up(l))), "r2 linked: {st}");
    assert!(h.status(0)["cluster"]["refused"].as_u64() >= Some(2));
}
