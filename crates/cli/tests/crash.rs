//! No acknowledged message lost across `kill -9`: the router is killed at
//! random moments (20 times by default; `TICKWIRE_CRASH_CYCLES`) and
//! restarted on the same journal (sync policy `TICKWIRE_CRASH_SYNC`, `os`
//! by default) while three publishers publish guaranteed messages and two
//! durable subscribers consume and acknowledge them, one of them slowly.
//! At the end every message acknowledged to a publisher has reached both
//! subscribers, each publisher's order is kept (redeliveries aside), every
//! repeat is flagged, and the journal holds each message once.

#[path = "support/guaranteed.rs"]
mod guaranteed;
#[path = "support/router.rs"]
mod router;

use router::{RouterProcess, BIN};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, ClientOptions};

/// Starts the router and waits until it listens.
fn router(dir: &Path, journal: &Path, sync: &str) -> RouterProcess {
    RouterProcess::spawn(
        Command::new(BIN)
            .args(["--dir", &dir.display().to_string(), "router", "--no-tcp", "--journal"])
            .arg(journal)
            .args(["--sync", sync]),
    )
}

fn opts(dir: &Path, name: &str) -> ClientOptions {
    ClientOptions {
        name: name.into(),
        dir: dir.into(),
        reconnect_interval: Duration::from_millis(20),
        guaranteed_window: 2000,
        ..ClientOptions::default()
    }
}

/// Publishes sequence numbers 0, 1, … on `topic` every 100 µs until
/// `stop`, then waits for every acknowledgement; returns how many were
/// acknowledged (messages 0 to N-1).
fn publisher(dir: &Path, topic: String, stop: &AtomicBool) -> u64 {
    guaranteed::publish_paced(
        Client::connect("ipc", opts(dir, &topic)).unwrap(),
        &topic,
        Duration::from_micros(100),
        stop,
    )
}

/// What a durable subscriber saw: per topic, (sequence, redelivered) in
/// arrival order; and the loss events.
#[derive(Debug, Default)]
struct Seen {
    by_topic: HashMap<String, Vec<(u64, bool)>>,
    losses: u64,
}

fn subscriber(dir: &Path, name: &str, ack_delay: Duration, seen: &Mutex<Seen>, stop: &AtomicBool) {
    let mut c = Client::connect("ipc", opts(dir, name)).unwrap();
    c.subscribe_durable("orders/>", name).unwrap();
    let mut pending: std::collections::VecDeque<(u32, u64, Instant)> = Default::default();
    while !stop.load(Ordering::Relaxed) {
        let mut got = Vec::new();
        let n = c.poll(
            |e| match e {
                ClientEvent::Message(m) if m.is_guaranteed() => {
                    let seq = u64::from_le_bytes(m.payload[..8].try_into().unwrap());
                    got.push((m.topic.to_owned(), seq, m.is_redelivered(), m.subscription.unwrap(), m.sequence));
                }
                ClientEvent::Lost { .. } => seen.lock().unwrap().losses += 1,
                _ => {}
            },
            256,
        );
        let mut s = seen.lock().unwrap();
        for (topic, seq, redelivered, sub, at) in got {
            s.by_topic.entry(topic).or_default().push((seq, redelivered));
            pending.push_back((sub, at, Instant::now()));
        }
        drop(s);
        let mut last = None;
        while pending.front().is_some_and(|p| p.2.elapsed() >= ack_delay) {
            last = pending.pop_front();
        }
        if let Some((sub, at, _)) = last {
            c.ack(sub, at);
        }
        if n == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

#[test]
fn no_acknowledged_message_is_lost_across_kill_9_of_the_router() {
    let cycles: u32 = std::env::var("TICKWIRE_CRASH_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let sync = std::env::var("TICKWIRE_CRASH_SYNC").unwrap_or_else(|_| "os".into());
    let base = std::env::temp_dir().join(format!("tw-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (dir, journal) = (base.join("shm"), base.join("journal"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut r = router(&dir, &journal, &sync);

    let stop_pub = Arc::new(AtomicBool::new(false));
    let stop_sub = Arc::new(AtomicBool::new(false));
    let seen: Vec<Arc<Mutex<Seen>>> = (0..2).map(|_| Arc::default()).collect();
    let subs: Vec<_> = (0..2)
        .map(|j| {
            let (d, stop, s) = (dir.clone(), Arc::clone(&stop_sub), Arc::clone(&seen[j]));
            // The second acknowledges 30 ms late: a slow consumer.
            let delay = Duration::from_millis(if j == 0 { 0 } else { 30 });
            std::thread::spawn(move || subscriber(&d, &format!("d{j}"), delay, &s, &stop))
        })
        .collect();

    // The durable subscriptions exist before anything is published.
    let until = Instant::now() + Duration::from_secs(20);
    while !journal.join("durables.json").exists()
        || std::fs::read_to_string(journal.join("durables.json")).unwrap_or_default().matches("\"name\"").count() < 2
    {
        assert!(Instant::now() < until, "the durable subscriptions were not made");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pubs: Vec<_> = (0..3)
        .map(|i| {
            let (d, stop) = (dir.clone(), Arc::clone(&stop_pub));
            std::thread::spawn(move || (format!("orders/p{i}"), publisher(&d, format!("orders/p{i}"), &stop)))
        })
        .collect();
    // Random moments, from a seed printed for a rerun.
    let mut seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    eprintln!("crash test: {cycles} cycles, sync {sync}, seed {seed}");
    for _ in 0..cycles {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(100 + seed % 400));
        r.stop(); // SIGKILL
        r = router(&dir, &journal, &sync);
    }
    std::thread::sleep(Duration::from_millis(300));
    stop_pub.store(true, Ordering::Relaxed);
    let acked: HashMap<String, u64> = pubs.into_iter().map(|t| t.join().unwrap()).collect();

    // Every subscriber catches up with every acknowledged message.
    let until = Instant::now() + Duration::from_secs(60);
    let caught_up = |s: &Seen| {
        acked.iter().all(|(t, &n)| s.by_topic.get(t).is_some_and(|v| v.iter().map(|x| x.0 + 1).max() >= Some(n)))
    };
    while !seen.iter().all(|s| caught_up(&s.lock().unwrap())) {
        if Instant::now() > until {
            let progress: Vec<Vec<(String, u64, usize)>> = seen
                .iter()
                .map(|s| {
                    let s = s.lock().unwrap();
                    let mut v: Vec<_> = s
                        .by_topic
                        .iter()
                        .map(|(t, x)| (t.clone(), x.iter().map(|y| y.0 + 1).max().unwrap_or(0), x.len()))
                        .collect();
                    v.sort();
                    v
                })
                .collect();
            panic!("subscribers did not catch up: acked {acked:?}; (topic, delivered up to, deliveries): {progress:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    stop_sub.store(true, Ordering::Relaxed);
    for t in subs {
        t.join().unwrap();
    }
    let _ = Command::new("kill").args(["-INT", &r.child.id().to_string()]).status();
    r.child.wait().unwrap();

    let total: u64 = acked.values().sum();
    assert!(total > 1000, "the publishers published: {acked:?}");
    for (j, s) in seen.iter().enumerate() {
        let s = s.lock().unwrap();
        assert_eq!(s.losses, 0);
        for (topic, &n) in &acked {
            guaranteed::check(&format!("subscriber d{j}"), topic, &s.by_topic[topic], n);
        }
        let redelivered: usize = s.by_topic.values().map(|v| v.iter().filter(|x| x.1).count()).sum();
        eprintln!("subscriber d{j}: {redelivered} flagged redeliveries");
    }
    // Stored once: no (publisher, sequence) twice in the journal.
    let (j, rec) = tickwire_journal::Journal::open(tickwire_journal::JournalConfig {
        sync: tickwire_journal::SyncPolicy::Os,
        ..tickwire_journal::JournalConfig::new(&journal)
    })
    .unwrap();
    eprintln!("journal: {rec}");
    let mut once = HashSet::new();
    let mut reader = tickwire_journal::Reader::new(j.first());
    while let tickwire_journal::Read::Record(r) = reader.next(&j, u64::MAX).unwrap() {
        assert!(once.insert((r.publisher(), r.publisher_sequence())), "stored twice: {r:?}");
    }
    assert!(once.len() as u64 >= total, "{} stored, {total} acknowledged", once.len());
    eprintln!(
        "crash test: {total} messages acknowledged across {cycles} kills, every one delivered to both subscribers"
    );
    drop(j);
    let _ = std::fs::remove_dir_all(&base);
}
