//! A high-availability group of three routers loses no acknowledged
//! message when its leader is killed: three routers on loopback (their
//! own directories, journals and Raft logs), three guaranteed publishers,
//! two durable subscribers and a durable queue with two consumers, all
//! given the group's URL list; the current leader is killed (SIGKILL) at
//! random moments, `TICKWIRE_HA_CYCLES` times (5 by default; `make ha`
//! runs 20), and restarted a while later. At the end every message
//! acknowledged to a publisher has reached both durable subscribers in
//! each publisher's order (repeats flagged) and one of the queue's
//! consumers, every member's journal holds each message once and the
//! same history, and the fail-over times (kill to the next leader's
//! line) are printed, median and worst.
//!
//! Beside it: a queue deleted on the leader is deleted on every member, a
//! follower away for a million messages catches up from a snapshot, and
//! members are added and removed from the command line.

#[path = "support/guaranteed.rs"]
mod guaranteed;
#[path = "support/ha.rs"]
mod ha;
#[path = "support/router.rs"]
mod router;

use ha::{check_histories, consumer, leader, opts, Seen};
use router::BIN;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tickwire_client::Client;

/// Publishes 0, 1, … on `topic` every 200 µs until `stop`, then waits for
/// every acknowledgement; returns how many were acknowledged.
fn publisher(group: &str, topic: String, stop: &AtomicBool) -> u64 {
    guaranteed::publish_paced(Client::connect(group, opts(&topic)).unwrap(), &topic, Duration::from_micros(200), stop)
}

#[test]
fn no_acknowledged_message_is_lost_across_kill_9_of_the_leader() {
    let cycles: u32 = std::env::var("TICKWIRE_HA_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let base = ha::fresh_base("crash");
    let (mut members, group) = ha::loopback_group(&base);
    let first = ha::start_all(&mut members);
    eprintln!("ha crash test: {cycles} cycles; member {} leads first", members[first].id);

    let stop_pub = Arc::new(AtomicBool::new(false));
    let stop_sub = Arc::new(AtomicBool::new(false));
    let names = ["d0", "d1", "q0", "q1"];
    let seen: Vec<Arc<Mutex<Seen>>> = names.iter().map(|_| Arc::default()).collect();
    let subs: Vec<_> = names
        .iter()
        .zip(&seen)
        .map(|(&name, s)| {
            let (g, stop, s) = (group.clone(), Arc::clone(&stop_sub), Arc::clone(s));
            std::thread::spawn(move || consumer(&g, name, name.starts_with('q'), &s, &stop))
        })
        .collect();
    // The durable subscriptions and the queue exist before anything is
    // published (on the leader's journal).
    let durables = members[first].journal().join("durables.json");
    let until = Instant::now() + Duration::from_secs(20);
    while std::fs::read_to_string(&durables).unwrap_or_default().matches("\"name\"").count() < 3 {
        assert!(Instant::now() < until, "the durable subscriptions were not made");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pubs: Vec<_> = (0..3)
        .map(|i| {
            let (g, stop) = (group.clone(), Arc::clone(&stop_pub));
            std::thread::spawn(move || (format!("orders/p{i}"), publisher(&g, format!("orders/p{i}"), &stop)))
        })
        .collect();

    let mut seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("ha crash test: seed {seed}");
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut fail_overs = Vec::new();
    for cycle in 0..cycles {
        std::thread::sleep(Duration::from_millis(300 + next() % 700));
        let l = leader(&members, Duration::from_secs(5)).unwrap_or_else(|| panic!("cycle {cycle}: no leader"));
        let killed = Instant::now();
        members[l].process.take().unwrap().stop(); // SIGKILL
        let new = leader(&members, Duration::from_secs(10)).unwrap_or_else(|| panic!("cycle {cycle}: no new leader"));
        let took = killed.elapsed();
        fail_overs.push(took);
        eprintln!("cycle {cycle}: member {} killed, member {} leads after {took:?}", members[l].id, members[new].id);
        std::thread::sleep(Duration::from_millis(200 + next() % 800));
        members[l].start();
    }
    std::thread::sleep(Duration::from_millis(500));
    stop_pub.store(true, Ordering::Relaxed);
    let acked: HashMap<String, u64> = pubs.into_iter().map(|t| t.join().unwrap()).collect();

    let until = Instant::now() + Duration::from_secs(60);
    let caught_up =
        |s: &Seen| acked.iter().all(|(t, &n)| s.get(t).is_some_and(|v| v.iter().map(|x| x.0 + 1).max() >= Some(n)));
    let queue_done = |seen: &[Arc<Mutex<Seen>>]| {
        acked.iter().all(|(t, &n)| {
            let got: HashSet<u64> = seen[2..]
                .iter()
                .flat_map(|s| s.lock().unwrap().get(t).cloned().unwrap_or_default())
                .map(|x| x.0)
                .collect();
            (0..n).all(|i| got.contains(&i))
        })
    };
    while !(seen[..2].iter().all(|s| caught_up(&s.lock().unwrap())) && queue_done(&seen)) {
        assert!(Instant::now() < until, "the consumers did not catch up with {acked:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    stop_sub.store(true, Ordering::Relaxed);
    for t in subs {
        t.join().unwrap();
    }
    let total: u64 = acked.values().sum();
    assert!(total > 1000, "the publishers published: {acked:?}");
    for (j, s) in seen[..2].iter().enumerate() {
        let s = s.lock().unwrap();
        for (topic, &n) in &acked {
            guaranteed::check(&format!("durable subscriber d{j}"), topic, &s[topic], n);
        }
        let redelivered: usize = s.values().map(|v| v.iter().filter(|x| x.1).count()).sum();
        eprintln!("durable subscriber d{j}: {redelivered} flagged redeliveries");
    }
    // Every member's journal: each message once, one history.
    for m in &mut members {
        m.stop_cleanly();
    }
    check_histories(&members, total);
    fail_overs.sort();
    if !fail_overs.is_empty() {
        eprintln!(
            "ha crash test: {total} messages acknowledged across {cycles} leader kills, every one delivered; \
             fail-over median {:?}, worst {:?}",
            fail_overs[fail_overs.len() / 2],
            fail_overs[fail_overs.len() - 1]
        );
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// The member's saved durable subscriptions and queues (durables.json).
fn saved_names(m: &ha::Member) -> String {
    std::fs::read_to_string(m.journal().join("durables.json")).unwrap_or_default()
}

#[test]
fn a_queue_deleted_on_the_leader_is_deleted_on_every_member() {
    let base = ha::fresh_base("queue");
    let (mut members, _) = ha::loopback_group(&base);
    let l = ha::start_all(&mut members);
    let queue = |op: &str| {
        let out = std::process::Command::new(BIN)
            .args(["queue", op, "jobs", "--router", &members[l].client])
            .args(if op == "create" { &["--topic", "jobs/>"][..] } else { &[][..] })
            .output()
            .unwrap();
        assert!(out.status.success(), "queue {op}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let wait = |what: &str, on_every: &dyn Fn(&str) -> bool| {
        let until = Instant::now() + Duration::from_secs(10);
        while !members.iter().all(|m| on_every(&saved_names(m))) {
            let states: Vec<String> = members.iter().map(saved_names).collect();
            assert!(Instant::now() < until, "{what}: {states:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    queue("create");
    wait("the queue made on every member", &|s| s.contains("\"jobs\""));
    queue("delete");
    wait("the queue deleted on every member", &|s| !s.contains("\"jobs\""));
    let _ = std::fs::remove_dir_all(&base);
}

/// A follower away while `TICKWIRE_HA_AWAY` guaranteed messages (a million
/// by default, about 40 MB of entries) were acknowledged catches up when it
/// is back, from a snapshot: the leader's log holds 16 MiB of entries
/// (`log_bytes`), so it no longer has what the member lacks. Its journal
/// then holds each message once, in the group's order.
#[test]
fn a_follower_away_for_many_messages_catches_up_from_a_snapshot() {
    let n: u64 = std::env::var("TICKWIRE_HA_AWAY").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let base = ha::fresh_base("away");
    let (mut members, group) = ha::loopback_group(&base);
    std::fs::create_dir_all(&base).unwrap();
    for m in &mut members {
        let config = base.join(format!("ha{}.toml", m.id));
        // As the flags say, and the Raft log's bounds.
        let toml = format!(
            "[router.journal]\ndir = {:?}\n[router.ha]\ngroup = \"crash\"\nnode = {}\npeers = {:?}\n\
             log_bytes = 16777216\nfollower_log_bytes = 1048576\n",
            m.journal().display().to_string(),
            m.id,
            m.peers
        );
        std::fs::write(&config, toml).unwrap();
        m.config = Some(config);
    }
    let l = ha::start_all(&mut members);
    let f = (l + 1) % 3;
    members[f].process.take().unwrap().stop(); // SIGKILL
    let mut c = Client::connect(&group, opts("away")).unwrap();
    let t = Instant::now();
    let mut seq = 0u64;
    while seq < n {
        match c.publish_guaranteed("orders/away", &seq.to_le_bytes()) {
            Ok(_) => seq += 1,
            Err(tickwire_client::PublishError::WindowFull(_)) => {
                c.poll(|_| {}, 256);
            }
            Err(e) => panic!("publish {seq}: {e}"),
        }
        assert!(t.elapsed() < Duration::from_secs(240), "{seq} of {n} published in 240 s");
    }
    while c.acknowledged() < n {
        c.poll(|_| {}, 256);
        assert!(t.elapsed() < Duration::from_secs(300), "{} of {n} acknowledged", c.acknowledged());
    }
    let published = t.elapsed();
    let acked_at = ha::epoch_ms();
    members[f].start();
    let caught_up = ha::wait_caught_up(&members, &[f], acked_at, Duration::from_secs(120));
    if std::env::var("TW_DEBUG").is_ok() {
        for m in &members {
            let lines = m.process.as_ref().unwrap().lines.lock().unwrap().clone();
            for (t, l) in lines.iter().filter(|(_, l)| l.contains("snapshot") || l.contains("Raft")) {
                eprintln!("member {} {:?}: {l}", m.id, t.elapsed());
            }
        }
    }
    let status = ha::status_json(&members[f]).unwrap();
    let (g, links) = (&status["journal"]["ha"]["group"], &status["journal"]["ha"]["group"]["links"]);
    assert!(g["stats"]["snapshots_installed"].as_u64() >= Some(1), "no snapshot installed: {g}");
    let fetched = links["snapshot_bytes_in"].as_u64().unwrap_or(0);
    assert!(fetched > 20_000_000, "{fetched} snapshot bytes fetched: {g}");
    drop(c);
    for m in &mut members {
        m.stop_cleanly();
    }
    let histories = check_histories(&members, n);
    assert!(histories[f].len() as u64 >= n, "member {}: {} stored of {n}", members[f].id, histories[f].len());
    eprintln!(
        "ha away test: {n} messages acknowledged in {published:?} with member {} away; back, it caught up in \
         {caught_up:?} from a snapshot of {fetched} bytes",
        members[f].id
    );
    let _ = std::fs::remove_dir_all(&base);
}

fn cli(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(BIN).args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// Publishes `n` guaranteed messages on `topic` through `group` and waits
/// for every acknowledgement (30 s at most).
fn publish_acked(group: &str, topic: &str, n: u64) {
    let mut c = Client::connect(group, opts(topic)).unwrap();
    let t = Instant::now();
    let mut seq = 0;
    while seq < n || c.acknowledged() < n {
        if seq < n {
            match c.publish_guaranteed(topic, &seq.to_le_bytes()) {
                Ok(_) => seq += 1,
                Err(tickwire_client::PublishError::WindowFull(_)) => {
                    c.poll(|_| {}, 256);
                }
                Err(e) => panic!("publish {seq}: {e}"),
            }
        } else {
            c.poll(|_| {}, 256);
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{} of {n} acknowledged", c.acknowledged());
    }
}

/// `tickwire router ha add` brings a fourth router, started with
/// `--ha-join`, into a running group: it catches up from a snapshot, holds
/// the group's history, and counts in its majority; `router ha remove`
/// takes a member out, so it no longer counts. Wrong requests are refused
/// with what is wrong.
#[test]
fn members_added_and_removed_from_the_command_line_count_in_the_majority() {
    let base = ha::fresh_base("members");
    let (mut members, group) = ha::loopback_group(&base);
    let l = ha::start_all(&mut members);
    publish_acked(&group, "orders/before", 2000);
    let (client, peer) = (ha::free_port(), ha::free_port());
    let four = format!("4=127.0.0.1:{peer}");
    let mut peers = members[0].peers.clone();
    peers.push(four.clone());
    std::fs::create_dir_all(&base).unwrap();
    let config = base.join("join.toml");
    let journal = base.join("j4").display().to_string();
    let toml = format!(
        "[router.journal]\ndir = {journal:?}\n[router.ha]\ngroup = \"crash\"\nnode = 4\npeers = {peers:?}\njoin = true\n"
    );
    std::fs::write(&config, toml).unwrap();
    members.push(ha::Member {
        id: 4,
        base: base.clone(),
        client: format!("tcp://127.0.0.1:{client}"),
        peers,
        netns: None,
        config: Some(config),
        process: None,
    });
    members[3].start();
    let leader = members[l].client.clone();
    let follower = members[(l + 1) % 3].client.clone();
    let (ok, said) = cli(&["router", "ha", "add", &four, "--router", &follower]);
    assert!(!ok && said.contains("does not lead its group"), "{said}");
    let at = ha::epoch_ms();
    let (ok, said) = cli(&["router", "ha", "add", &four, "--router", &leader]);
    assert!(ok && said.contains("member 4 added: the group's members are now [1, 2, 3, 4]"), "{said}");
    let (ok, said) = cli(&["router", "ha", "add", &four, "--router", &leader]);
    assert!(!ok && said.contains("member 4 is already in the group"), "{said}");
    ha::wait_caught_up(&members, &[3], at, Duration::from_secs(30));
    let status = ha::status_json(&members[3]).unwrap();
    let g = &status["journal"]["ha"]["group"];
    assert!(g["stats"]["snapshots_installed"].as_u64() >= Some(1), "member 4 did not start from a snapshot: {g}");
    // One original follower out: three voters, member 4 among them.
    let (out, other) = ((l + 1) % 3, (l + 2) % 3);
    let leader_id = members[l].id.to_string();
    let (ok, said) = cli(&["router", "ha", "remove", &leader_id, "--router", &leader]);
    assert!(!ok && said.contains("leads the group"), "{said}");
    let out_id = members[out].id.to_string();
    let (ok, said) = cli(&["router", "ha", "remove", &out_id, "--router", &leader]);
    assert!(ok && said.contains(&format!("member {out_id} removed")), "{said}");
    // The leader and member 4 are two of the three: with the other
    // original follower and the removed one stopped, they still commit.
    members[other].process.take().unwrap().stop();
    members[out].stop_cleanly();
    publish_acked(&group, "orders/after", 500);
    for m in &mut members {
        m.stop_cleanly();
    }
    let kept = [members[l].journal(), members[3].journal()].map(|j| ha::history(&j));
    assert_eq!(kept[0], kept[1], "the leader's and member 4's journals differ");
    assert_eq!(kept[1].len(), 2500, "member 4 stores each message once");
    let _ = std::fs::remove_dir_all(&base);
}
