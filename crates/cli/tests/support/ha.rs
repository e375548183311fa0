//! What the high-availability tests share: a group member (the real
//! router binary, optionally inside a network namespace), the durable
//! consumer that records what it gets, each member's journal history, and
//! the wait for a leader.
#![allow(dead_code)] // each test file uses some of it

use super::router::{RouterProcess, BIN};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, ClientOptions};

/// The line a router writes when it becomes its group's leader.
pub const LEADS: &str = "ha: this router leads its group";

/// One member of a group: its id, its directories under `base`, its
/// client listener, every member's `ID=HOST:PORT`.
pub struct Member {
    pub id: u64,
    pub base: PathBuf,
    pub client: String,
    pub peers: Vec<String>,
    /// The network namespace it runs in (`ip netns exec`), if any.
    pub netns: Option<String>,
    /// A config file it reads (`TICKWIRE_CONFIG`), under the flags.
    pub config: Option<PathBuf>,
    pub process: Option<RouterProcess>,
}

impl Member {
    pub fn journal(&self) -> PathBuf {
        self.base.join(format!("j{}", self.id))
    }

    pub fn start(&mut self) {
        let dir = self.base.join(format!("shm{}", self.id));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, BIN]);
                c
            }
            None => Command::new(BIN),
        };
        cmd.args(["--dir", &dir.display().to_string(), "router", "--no-ipc", "--listen", &self.client, "--journal"])
            .arg(self.journal())
            .args(["--sync", "os", "--ha-group", "crash", "--ha-node", &self.id.to_string()]);
        for p in &self.peers {
            cmd.args(["--ha-peer", p]);
        }
        if let Some(c) = &self.config {
            cmd.env("TICKWIRE_CONFIG", c);
        }
        self.process = Some(RouterProcess::spawn(cmd.env("RUST_LOG", "info")));
    }

    /// Whether it runs and its last word on leading was that it leads.
    pub fn leads(&self) -> bool {
        self.leading_line().is_some_and(|(_, l)| l.contains(LEADS))
    }

    /// Its last line on leading (it leads, or no longer does), and when.
    pub fn leading_line(&self) -> Option<(Instant, String)> {
        let p = self.process.as_ref()?;
        let lines = p.lines.lock().unwrap();
        lines.iter().rev().find(|(_, l)| l.contains("leads its group")).cloned()
    }

    /// Stops it with SIGINT and waits for it.
    pub fn stop_cleanly(&mut self) {
        if let Some(mut p) = self.process.take() {
            let _ = Command::new("kill").args(["-INT", &p.child.id().to_string()]).status();
            p.child.wait().unwrap();
        }
    }
}

/// Three members on loopback ports under `base` (not started), and the
/// group's URL list.
pub fn loopback_group(base: &Path) -> (Vec<Member>, String) {
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let peers: Vec<String> = ports.iter().enumerate().map(|(i, p)| format!("{}=127.0.0.1:{}", i + 1, p.1)).collect();
    let group = ports.iter().map(|p| format!("tcp://127.0.0.1:{}", p.0)).collect::<Vec<_>>().join(",");
    let members = ports
        .iter()
        .enumerate()
        .map(|(i, p)| Member {
            id: i as u64 + 1,
            base: base.to_path_buf(),
            client: format!("tcp://127.0.0.1:{}", p.0),
            peers: peers.clone(),
            netns: None,
            config: None,
            process: None,
        })
        .collect();
    (members, group)
}

/// A fresh directory for a test's members, `tw-ha-NAME-PID` in the
/// temporary directory.
pub fn fresh_base(name: &str) -> PathBuf {
    let base = std::env::temp_dir().join(format!("tw-ha-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    base
}

/// Starts every member and waits (10 s at most) for one to lead; returns
/// its index.
pub fn start_all(members: &mut [Member]) -> usize {
    for m in members.iter_mut() {
        m.start();
    }
    leader(members, Duration::from_secs(10)).expect("no leader elected")
}

/// The member that leads, waited for up to `within`.
pub fn leader(members: &[Member], within: Duration) -> Option<usize> {
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

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A client that retries fast, with a window of 2000 guaranteed publishes.
pub fn opts(name: &str) -> ClientOptions {
    ClientOptions {
        name: name.into(),
        reconnect_interval: Duration::from_millis(20),
        guaranteed_window: 2000,
        ..ClientOptions::default()
    }
}

/// Per topic, (sequence, redelivered) in arrival order.
pub type Seen = HashMap<String, Vec<(u64, bool)>>;

/// A durable subscriber of `orders/>` (`queue`: a consumer of the durable
/// queue `q`) on `group`, acknowledging each delivery, until `stop`.
pub fn consumer(group: &str, name: &str, queue: bool, seen: &Mutex<Seen>, stop: &AtomicBool) {
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

/// A journal's (topic, payload's sequence) in journal order.
pub fn history(journal: &Path) -> Vec<(String, u64)> {
    let (j, _) = tickwire_journal::Journal::open(tickwire_journal::JournalConfig {
        sync: tickwire_journal::SyncPolicy::Os,
        ..tickwire_journal::JournalConfig::new(journal)
    })
    .unwrap();
    let mut out = Vec::new();
    let mut reader = tickwire_journal::Reader::new(j.first());
    while let tickwire_journal::Read::Record(r) = reader.next(&j, u64::MAX).unwrap() {
        let seq = r.payload().get(..8).map_or(u64::MAX, |b| u64::from_le_bytes(b.try_into().unwrap()));
        out.push((r.topic().to_owned(), seq));
    }
    out
}

/// Every member's journal (the members stopped): each message once, at
/// least `acked` messages, and one history (each a prefix of the longest).
pub fn check_histories(members: &[Member], acked: u64) -> Vec<Vec<(String, u64)>> {
    let histories: Vec<Vec<(String, u64)>> = members.iter().map(|m| history(&m.journal())).collect();
    for (m, h) in members.iter().zip(&histories) {
        let once: std::collections::HashSet<&(String, u64)> = h.iter().collect();
        assert_eq!(once.len(), h.len(), "member {}: a message stored twice", m.id);
        assert!(h.len() as u64 >= acked, "member {}: {} stored, {acked} acknowledged", m.id, h.len());
    }
    let shortest = histories.iter().map(Vec::len).min().unwrap();
    for h in &histories[1..] {
        assert_eq!(h[..shortest], histories[0][..shortest], "the members' journals differ");
    }
    histories
}

/// Milliseconds since the Unix epoch.
pub fn epoch_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// The member's group status from its `router-status.json`: (applied
/// index, commit index, when the file was written in ms since the epoch).
/// What it holds may be up to about two seconds older than that (the
/// routing agent describes itself once a second, the file is written once
/// a second).
pub fn group_status(m: &Member) -> Option<(u64, u64, u64)> {
    let v = status_json(m)?;
    let g = &v["journal"]["ha"]["group"];
    Some((g["applied"].as_u64()?, g["commit"].as_u64()?, v["as_of_ms"].as_u64()?))
}

/// The member's `router-status.json`.
pub fn status_json(m: &Member) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(m.base.join(format!("shm{}/router-status.json", m.id))).ok()?;
    serde_json::from_str(&text).ok()
}

/// Waits (up to `within`) until each member of `who` has applied what the
/// group committed, as statuses describing the group after `since_ms`
/// say; returns how long it took.
pub fn wait_caught_up(members: &[Member], who: &[usize], since_ms: u64, within: Duration) -> Duration {
    let (start, fresh) = (Instant::now(), since_ms + 2100);
    loop {
        let statuses: Vec<Option<(u64, u64, u64)>> =
            members.iter().map(group_status).map(|s| s.filter(|s| s.2 >= fresh)).collect();
        if let Some(commit) = statuses.iter().flatten().map(|s| s.1).max() {
            if who.iter().all(|&i| statuses[i].is_some_and(|s| s.0 >= commit)) {
                return start.elapsed();
            }
        }
        if start.elapsed() >= within {
            let all: Vec<String> = members
                .iter()
                .map(|m| {
                    std::fs::read_to_string(m.base.join(format!("shm{}/router-status.json", m.id))).unwrap_or_default()
                })
                .map(|s| {
                    serde_json::from_str::<serde_json::Value>(&s).map(|v| v["journal"]["ha"].to_string()).unwrap_or(s)
                })
                .collect();
            panic!("members {who:?} did not catch up within {within:?}: {all:#?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
