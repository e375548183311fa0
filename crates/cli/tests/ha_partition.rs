//! No split brain: a leader cut off from both followers, while its own
//! clients still reach it, acknowledges nothing after its lease, and the
//! group keeps one history.
//!
//! The test makes a network namespace of its own (removed at the end) and
//! runs three routers in it, each on an address of its own on loopback
//! (127.0.0.11 to .13; a member dials from its own address), with the
//! test's clients on 127.0.0.1. Once the traffic flows, an `nft` rule
//! drops every packet between the leader's address and the followers'
//! (the clients' packets still pass) for three seconds, then is deleted.
//! Clients:
//! - a guaranteed publisher given only the leader's URL: nothing it
//!   publishes after the cut is ever acknowledged, and no acknowledgement
//!   reaches it later than the lease (two election timeouts, the bound of
//!   raft-rs's check-quorum) after the cut;
//! - two guaranteed publishers and a durable subscriber given the group's
//!   list: the majority's new leader serves them during the cut, and every
//!   message acknowledged to them reaches the subscriber, in order;
//! - a direct subscriber and publisher given only the cut-off leader's
//!   URL: direct messages still flow between them during the cut.
//!
//! After the cut heals, the old leader follows the new one; at the end
//! every member's journal holds each message once and the same history,
//! and no journal holds a message the pinned publisher sent after the cut.
//! Runs as root (namespaces, nftables), in `make test` and `make ha`.
//! Beside the lease: the cut-off leader must have stepped down (raft-rs's
//! check-quorum) within a second of the cut.

#[path = "support/guaranteed.rs"]
mod guaranteed;
#[path = "support/ha.rs"]
mod ha;
#[path = "support/router.rs"]
mod router;

use ha::{check_histories, consumer, opts, Member, Seen};
use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent};

/// Two election timeouts at the defaults (15 ticks of 10 ms): raft-rs's
/// check-quorum steps a leader down within that of its last quorum.
const LEASE: Duration = Duration::from_millis(300);
/// How long the leader stays cut off.
const CUT: Duration = Duration::from_secs(3);

/// A network namespace this test made; deleted when dropped.
struct Netns(String);

impl Netns {
    fn create() -> Self {
        let name = format!("tw-part-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).stderr(std::process::Stdio::null()).status();
        run(Command::new("ip").args(["netns", "add", &name]));
        let ns = Self(name);
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    fn exec(&self, args: &[&str]) {
        run(Command::new("ip").args(["netns", "exec", &self.0]).args(args));
    }

    /// Moves the calling thread (and the threads it starts after) into it.
    fn enter(&self) {
        let f = std::fs::File::open(format!("/run/netns/{}", self.0)).unwrap();
        // SAFETY: setns on a valid descriptor of a network namespace; it
        // changes only the calling thread's namespace.
        let r = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
    }

    /// Drops every packet between `cut` and each of `others`, both ways.
    fn partition(&self, cut: &str, others: &[&str]) {
        let others = others.join(", ");
        let rules = format!(
            "table inet tw_partition {{\n  chain out {{\n    type filter hook output priority 0;\n    \
             ip saddr {cut} ip daddr {{ {others} }} drop;\n    ip saddr {{ {others} }} ip daddr {cut} drop;\n  }}\n}}\n"
        );
        let mut nft = Command::new("ip")
            .args(["netns", "exec", &self.0, "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut nft.stdin.take().unwrap(), rules.as_bytes()).unwrap();
        assert!(nft.wait().unwrap().success(), "nft: {rules}");
    }

    fn heal(&self) {
        self.exec(&["nft", "delete", "table", "inet", "tw_partition"]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// What the publisher pinned to one router saw: when each message went
/// out (index: its sequence), and each change of the acknowledged count.
#[derive(Default)]
struct Pinned {
    published: Vec<Instant>,
    acks: Vec<(Instant, u64)>,
}

fn pinned(url: &str, topic: &str, stop: &AtomicBool) -> Pinned {
    let mut c = Client::connect(url, opts(topic)).unwrap();
    let (mut p, every, start) = (Pinned::default(), Duration::from_micros(500), Instant::now());
    let mut acked = 0;
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() >= start + every * p.published.len() as u32 {
            let seq = p.published.len() as u64;
            // The window full, or the session refused (NotLeader): nothing
            // to do but wait.
            if c.publish_guaranteed(topic, &seq.to_le_bytes()).is_ok() {
                p.published.push(Instant::now());
            }
        }
        c.poll(|_| {}, 64);
        if c.acknowledged() != acked {
            acked = c.acknowledged();
            p.acks.push((Instant::now(), acked));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    p
}

/// Direct messages on `md/x` through one router: publishes one every
/// millisecond and records when each came back to its subscriber.
fn direct(url: &str, stop: &AtomicBool, got: &Mutex<Vec<Instant>>) {
    let mut sub = Client::connect(url, opts("direct-sub")).unwrap();
    sub.subscribe("md/x").unwrap();
    let mut publ = Client::connect(url, opts("direct-pub")).unwrap();
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() >= next {
            let _ = publ.publish("md/x", b"tick");
            let _ = publ.flush();
            next += Duration::from_millis(1);
        }
        publ.poll(|_| {}, 64);
        let mut n = 0;
        sub.poll(
            |e| {
                if matches!(e, ClientEvent::Message(_)) {
                    n += 1;
                }
            },
            256,
        );
        got.lock().unwrap().extend((0..n).map(|_| Instant::now()));
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
fn a_leader_cut_off_from_its_group_acknowledges_nothing_after_its_lease_and_the_group_keeps_one_history() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test makes a network namespace and nftables rules: run it as root");
    let ns = Netns::create();
    ns.enter();
    let base = ha::fresh_base("partition");
    let ips = ["127.0.0.11", "127.0.0.12", "127.0.0.13"];
    let peers: Vec<String> = ips.iter().enumerate().map(|(i, ip)| format!("{}={ip}:7100", i + 1)).collect();
    let urls: Vec<String> = ips.iter().map(|ip| format!("tcp://{ip}:7000")).collect();
    let group = urls.join(",");
    let mut members: Vec<Member> = (0..3)
        .map(|i| Member {
            id: i as u64 + 1,
            base: base.clone(),
            client: urls[i].clone(),
            peers: peers.clone(),
            netns: Some(ns.0.clone()),
            config: None,
            process: None,
        })
        .collect();
    let first = ha::start_all(&mut members);

    let stop = Arc::new(AtomicBool::new(false));
    let stop_sub = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let sub = {
        let (g, s, stop) = (group.clone(), Arc::clone(&seen), Arc::clone(&stop_sub));
        std::thread::spawn(move || consumer(&g, "d0", false, &s, &stop))
    };
    let durables = members[first].journal().join("durables.json");
    let until = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&durables).unwrap_or_default().contains("\"name\"") {
        assert!(Instant::now() < until, "the durable subscription was not made");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pubs: Vec<_> = (0..2)
        .map(|i| {
            let (g, stop) = (group.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let topic = format!("orders/p{i}");
                let c = Client::connect(&g, opts(&topic)).unwrap();
                (topic.clone(), guaranteed::publish_paced(c, &topic, Duration::from_micros(500), &stop))
            })
        })
        .collect();
    // The leader now (the clients above found it by themselves): the
    // pinned clients are given its URL alone.
    let l = ha::leader(&members, Duration::from_secs(5)).expect("no leader");
    eprintln!("ha partition test: member {} leads", members[l].id);
    let stop_pinned = Arc::new(AtomicBool::new(false));
    let pin = {
        let (u, stop) = (urls[l].clone(), Arc::clone(&stop_pinned));
        std::thread::spawn(move || pinned(&u, "orders/pinned", &stop))
    };
    let direct_got: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let direct_thread = {
        let (u, stop, got) = (urls[l].clone(), Arc::clone(&stop), Arc::clone(&direct_got));
        std::thread::spawn(move || direct(&u, &stop, &got))
    };
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        members[l].leads(),
        "the leadership moved before the cut: {:?}",
        members.iter().map(Member::leads).collect::<Vec<_>>()
    );

    // The cut.
    let others: Vec<&str> = (0..3).filter(|&i| i != l).map(|i| ips[i]).collect();
    ns.partition(ips[l], &others);
    let cut = Instant::now();
    let new = loop {
        if let Some(n) = (0..3).filter(|&i| i != l).find(|&i| members[i].leads()) {
            break n;
        }
        assert!(cut.elapsed() < Duration::from_secs(5), "no new leader among the majority");
        std::thread::sleep(Duration::from_millis(2));
    };
    let elected = cut.elapsed();
    let delivered_then = seen.lock().unwrap().values().map(Vec::len).sum::<usize>();
    std::thread::sleep(CUT.saturating_sub(cut.elapsed()));
    let delivered_during = seen.lock().unwrap().values().map(Vec::len).sum::<usize>() - delivered_then;
    let (stepped_down_at, line) = members[l].leading_line().unwrap();
    assert!(!line.contains(ha::LEADS), "member {} still leads after {CUT:?} cut off: {line}", members[l].id);
    let stepped_down = stepped_down_at.saturating_duration_since(cut);
    assert!(
        stepped_down < Duration::from_secs(1),
        "member {} stepped down {stepped_down:?} after the cut",
        members[l].id
    );
    stop_pinned.store(true, Ordering::Relaxed);
    let pinned = pin.join().unwrap();
    let direct_during = direct_got.lock().unwrap().iter().filter(|&&t| t > cut + LEASE).count();

    // The heal: the old leader follows the new one.
    // Taken before the rule goes: the old leader may hear the new one
    // before `nft` returns.
    let healed = Instant::now();
    ns.heal();
    let follows = format!("leader={}", members[new].id);
    let rejoined = loop {
        let p = members[l].process.as_ref().unwrap();
        let found = p
            .lines
            .lock()
            .unwrap()
            .iter()
            .any(|(t, s)| *t > healed && s.contains("Raft: leader") && s.contains(&follows));
        if found {
            break healed.elapsed();
        }
        if healed.elapsed() >= Duration::from_secs(10) {
            let lines: Vec<String> = p.lines.lock().unwrap().iter().rev().take(40).map(|(_, s)| s.clone()).collect();
            panic!("member {} did not rejoin its group; its last lines, newest first: {lines:#?}", members[l].id);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let acked: HashMap<String, u64> = pubs.into_iter().map(|t| t.join().unwrap()).collect();
    direct_thread.join().unwrap();
    // Every member applies what the group committed before they stop.
    ha::wait_caught_up(&members, &[0, 1, 2], ha::epoch_ms(), Duration::from_secs(30));

    let until = Instant::now() + Duration::from_secs(60);
    let caught_up =
        |s: &Seen| acked.iter().all(|(t, &n)| s.get(t).is_some_and(|v| v.iter().map(|x| x.0 + 1).max() >= Some(n)));
    while !caught_up(&seen.lock().unwrap()) {
        assert!(Instant::now() < until, "the durable subscriber did not catch up with {acked:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    stop_sub.store(true, Ordering::Relaxed);
    sub.join().unwrap();

    // The cut-off leader: nothing published after the cut acknowledged,
    // no acknowledgement after its lease.
    let before_cut = pinned.published.iter().filter(|&&t| t < cut).count() as u64;
    let pinned_acked = pinned.acks.last().map_or(0, |a| a.1);
    assert!(
        pinned_acked <= before_cut,
        "{pinned_acked} acknowledged to the pinned publisher, {before_cut} published before the cut"
    );
    let late: Vec<_> = pinned.acks.iter().filter(|a| a.0 > cut + LEASE).map(|a| (a.0 - cut, a.1)).collect();
    assert!(late.is_empty(), "the cut-off leader acknowledged after its lease ({LEASE:?}): {late:?}");
    assert!(pinned_acked > 0, "the pinned publisher got no acknowledgement before the cut");
    // The majority served, and direct messages still flowed on the old
    // leader.
    assert!(delivered_during > 100, "{delivered_during} guaranteed deliveries during the cut");
    assert!(direct_during > 100, "{direct_during} direct deliveries on the cut-off leader during the cut");
    let s = seen.lock().unwrap();
    for (topic, &n) in &acked {
        guaranteed::check("durable subscriber d0", topic, &s[topic], n);
    }

    for m in &mut members {
        m.stop_cleanly();
    }
    let total: u64 = acked.values().sum::<u64>() + pinned_acked;
    let histories = check_histories(&members, total);
    for (m, h) in members.iter().zip(&histories) {
        let after_cut: Vec<u64> =
            h.iter().filter(|(t, s)| t == "orders/pinned" && *s >= before_cut).map(|x| x.1).collect();
        assert!(after_cut.is_empty(), "member {}: pinned messages published after the cut stored: {after_cut:?}", m.id);
    }
    eprintln!(
        "ha partition test: member {} cut off; member {} led after {elected:?}; the old leader stepped down {:?} \
         after the cut, acknowledged {pinned_acked} of {before_cut} published before it and none after; \
         {delivered_during} guaranteed deliveries through the majority and {direct_during} direct ones on the \
         cut-off leader during the cut; rejoined {rejoined:?} after the heal; {total} acknowledged in all",
        members[l].id, members[new].id, stepped_down,
    );
    let _ = std::fs::remove_dir_all(&base);
}
