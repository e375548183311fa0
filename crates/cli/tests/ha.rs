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

#[path = "support/guaranteed.rs"]
mod guaranteed;
#[path = "support/router.rs"]
mod router;

use router::{RouterProcess, BIN};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, ClientOptions};

const LEADS: &str = "ha: this router leads its group";

struct Member {
    id: u64,
    base: PathBuf,
    client: String,
    peers: Vec<String>,
    process: Option<RouterProcess>,
}

impl Member {
    fn journal(&self) -> PathBuf {
        self.base.join(format!("j{}", self.id))
    }

    fn start(&mut self) {
        let dir = self.base.join(format!("shm{}", self.id));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["--dir", &dir.display().to_string(), "router", "--no-ipc", "--listen", &self.client, "--journal"])
            .arg(self.journal())
            .args(["--sync", "os", "--ha-group", "crash", "--ha-node", &self.id.to_string()]);
        for p in &self.peers {
            cmd.args(["--ha-peer", p]);
        }
        self.process = Some(RouterProcess::spawn(cmd.env("RUST_LOG", "info")));
    }

    /// Whether it runs and its last word on leading was that it leads.
    fn leads(&self) -> bool {
        let Some(p) = &self.process else { return false };
        let lines = p.lines.lock().unwrap();
        lines.iter().rev().find(|(_, l)| l.contains("leads its group")).is_some_and(|(_, l)| l.contains(LEADS))
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn opts(name: &str) -> ClientOptions {
    ClientOptions {
        name: name.into(),
        reconnect_interval: Duration::from_millis(20),
        guaranteed_window: 2000,
        ..ClientOptions::default()
    }
}

/// Publishes 0, 1, … on `topic` every 200 µs until `stop`, then waits for
/// every acknowledgement; returns how many were acknowledged.
fn publisher(group: &str, topic: String, stop: &AtomicBool) -> u64 {
    guaranteed::publish_paced(Client::connect(group, opts(&topic)).unwrap(), &topic, Duration::from_micros(200), stop)
}

/// Per topic, (sequence, redelivered) in arrival order.
type Seen = HashMap<String, Vec<(u64, bool)>>;

/// A durable subscriber (`queue`: a consumer of the durable queue `q`),
/// acknowledging each delivery.
fn consumer(group: &str, name: &str, queue: bool, seen: &Mutex<Seen>, stop: &AtomicBool) {
    let mut c = Client::connect(group, opts(name)).unwrap();
    if queue {
        c.subscribe_durable_queue("orders/>", "q").unwrap();
    } else {
        c.subscribe_durable("orders/>", name).unwrap();
    }
    while !stop.load(Ordering::Relaxed) {
        let mut got = Vec::new();
        let n = c.poll(
            |e| {
                if let ClientEvent::Message(m) = e {
                    if m.is_guaranteed() && m.payload.len() == 8 {
                        let seq = u64::from_le_bytes(m.payload[..8].try_into().unwrap());
                        got.push((m.topic.to_owned(), seq, m.is_redelivered(), m.subscription.unwrap(), m.sequence));
                    }
                }
            },
            256,
        );
        let mut s = seen.lock().unwrap();
        for (topic, seq, redelivered, sub, at) in got {
            s.entry(topic).or_default().push((seq, redelivered));
            c.ack(sub, at);
        }
        drop(s);
        if n == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Each journal's (publisher, sequence) in journal order.
fn history(journal: &Path) -> Vec<(u64, u64)> {
    let (j, _) = tickwire_journal::Journal::open(tickwire_journal::JournalConfig {
        sync: tickwire_journal::SyncPolicy::Os,
        ..tickwire_journal::JournalConfig::new(journal)
    })
    .unwrap();
    let mut out = Vec::new();
    let mut reader = tickwire_journal::Reader::new(j.first());
    while let tickwire_journal::Read::Record(r) = reader.next(&j, u64::MAX).unwrap() {
        out.push((r.publisher(), r.publisher_sequence()));
    }
    out
}

fn leader(members: &[Member], within: Duration) -> Option<usize> {
    let until = Instant::now() + within;
    loop {
        if let Some(i) = members.iter().position(Member::leads) {
            return Some(i);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn no_acknowledged_message_is_lost_across_kill_9_of_the_leader() {
    let cycles: u32 = std::env::var("TICKWIRE_HA_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let base = std::env::temp_dir().join(format!("tw-ha-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let peers: Vec<String> = ports.iter().enumerate().map(|(i, p)| format!("{}=127.0.0.1:{}", i + 1, p.1)).collect();
    let group = ports.iter().map(|p| format!("tcp://127.0.0.1:{}", p.0)).collect::<Vec<_>>().join(",");
    let mut members: Vec<Member> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| Member {
            id: i as u64 + 1,
            base: base.clone(),
            client: format!("tcp://127.0.0.1:{}", p.0),
            peers: peers.clone(),
            process: None,
        })
        .collect();
    for m in &mut members {
        m.start();
    }
    let first = leader(&members, Duration::from_secs(10)).expect("no leader elected");
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
    let mut stopped = Vec::new();
    for m in &mut members {
        if let Some(mut p) = m.process.take() {
            let _ = Command::new("kill").args(["-INT", &p.child.id().to_string()]).status();
            p.child.wait().unwrap();
            stopped.push(p);
        }
    }
    let histories: Vec<Vec<(u64, u64)>> = members.iter().map(|m| history(&m.journal())).collect();
    for (m, h) in members.iter().zip(&histories) {
        let once: HashSet<&(u64, u64)> = h.iter().collect();
        assert_eq!(once.len(), h.len(), "member {}: a message stored twice", m.id);
        assert!(h.len() as u64 >= total, "member {}: {} stored, {total} acknowledged", m.id, h.len());
    }
    let shortest = histories.iter().map(Vec::len).min().unwrap();
    for h in &histories[1..] {
        assert_eq!(h[..shortest], histories[0][..shortest], "the members' journals differ");
    }
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
