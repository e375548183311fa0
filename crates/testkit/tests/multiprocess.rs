//! Publisher and subscribers in separate processes (the `tw-testkit` binary).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tickwire_shm::{Context, Event, LogConfig, ReaderOptions, ShmError};

const KIT: &str = env!("CARGO_BIN_EXE_tw-testkit");

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tw-mp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn spawn(args: &[&str]) -> Child {
    Command::new(KIT).args(args).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().unwrap()
}

fn json(child: Child) -> serde_json::Value {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "helper failed: {:?}", out.status);
    let text = String::from_utf8(out.stdout).unwrap();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

fn d(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn ordering_across_processes_with_varying_sizes() {
    let dd = dir("order");
    let sub = spawn(&["subscribe", d(&dd), "o", "1", "200000"]);
    let publ = spawn(&["publish", d(&dd), "o", "1", "200000", "0", "65536"]);
    let p = json(publ);
    let s = json(sub);
    assert_eq!(s["received"], 200000, "{s}");
    assert_eq!(s["error_count"], 0, "{s}");
    assert_eq!(s["lost_notices"], 0);
    assert!(p["back_pressured"].as_u64().unwrap() > 0, "a 64 KiB ring must have pushed back: {p}");
}

#[test]
fn one_mebibyte_messages_are_fragmented_and_reassembled() {
    let dd = dir("frag");
    let sub = spawn(&["subscribe", d(&dd), "f", "1", "20"]);
    // 4 MiB ring with 64 KiB frames: each message is 17 fragments.
    let publ = spawn(&["publish", d(&dd), "f", "1", "20", "1048576", "4194304"]);
    json(publ);
    let s = json(sub);
    assert_eq!(s["received"], 20, "{s}");
    assert_eq!(s["bytes"], 20 * 1048576);
    assert_eq!(s["error_count"], 0, "{s}");
}

#[test]
fn two_subscribers_at_different_speeds_both_get_everything() {
    let dd = dir("speeds");
    let fast = spawn(&["subscribe", d(&dd), "s", "1", "3000"]);
    let slow = spawn(&["subscribe", d(&dd), "s", "1", "3000", "tethered", "200"]);
    let publ = spawn(&["publish", d(&dd), "s", "1", "3000", "200", "65536", "5000", "2"]);
    let p = json(publ);
    for s in [json(fast), json(slow)] {
        assert_eq!(s["received"], 3000, "{s}");
        assert_eq!(s["error_count"], 0, "{s}");
    }
    assert!(p["back_pressured"].as_u64().unwrap() > 0, "the slow one held the publisher back: {p}");
}

/// 200-byte payloads make 232-byte frames, 256 bytes of stream each.
const FRAME_256: u64 = 256;

#[test]
fn lossy_subscriber_slow_between_polls_never_holds_the_publisher() {
    let dd = dir("lossy");
    let sub = spawn(&["subscribe", d(&dd), "l", "1", "50000", "lossy", "2000", "between"]);
    let publ = spawn(&["publish", d(&dd), "l", "1", "50000", "200", "65536"]);
    let p = json(publ);
    let s = json(sub);
    assert_eq!(s["error_count"], 0, "pattern checks catch torn or reordered reads: {s}");
    assert!(s["lost_notices"].as_u64().unwrap() > 0, "{s}");
    let (received, lost_bytes) = (s["received"].as_u64().unwrap(), s["lost_bytes"].as_u64().unwrap());
    assert_eq!(received * FRAME_256 + lost_bytes, 50000 * FRAME_256, "every message delivered or reported lost: {s}");
    assert!(p["evictions"].as_u64().unwrap() > 0, "{p}");
    // Only a poll in progress (64 fast frames) can make the publisher wait.
    assert!(p["back_pressured"].as_u64().unwrap() < 50000, "{p}");
}

#[test]
fn lossy_subscriber_slow_inside_its_handler_is_never_torn() {
    // While a handler runs the publisher may not overwrite what it reads, so
    // it waits (documented); it can only move the subscriber on between polls.
    // Every poll that delivers is followed by a 1 ms sleep outside poll (every
    // 4th left a subscriber that joined late with no pause at all), a
    // window the back-pressured publisher (spinning on its rescan) evicts in;
    // if one window is missed, the next of some twenty gets it. What must hold
    // besides: exact accounting, nothing torn or reordered.
    let dd = dir("lossy2");
    let sub = spawn(&[
        "subscribe",
        d(&dd),
        "l",
        "1",
        "20000",
        "lossy",
        "20",
        "inside",
        "--pause-every",
        "1",
        "--pause-us",
        "1000",
    ]);
    let publ = spawn(&["publish", d(&dd), "l", "1", "20000", "200", "65536"]);
    let p = json(publ);
    let s = json(sub);
    assert_eq!(s["error_count"], 0, "pattern checks catch torn or reordered reads: {s}");
    assert!(s["pauses"].as_u64().unwrap() > 0, "the subscriber paused between polls: {s}");
    assert!(p["evictions"].as_u64().unwrap() > 0, "a pause between polls must end in an eviction: {p} {s}");
    let (received, lost_bytes) = (s["received"].as_u64().unwrap(), s["lost_bytes"].as_u64().unwrap());
    assert!(s["lost_notices"].as_u64().unwrap() > 0 && lost_bytes > 0, "the eviction is reported as loss: {s}");
    assert_eq!(lost_bytes % FRAME_256, 0, "loss is whole frames: {s}");
    assert_eq!(received * FRAME_256 + lost_bytes, 20000 * FRAME_256, "every message delivered or reported lost: {s}");
    assert_eq!(s["last"], 19999, "the last message is never lost: {s}");
}

#[test]
fn publisher_killed_mid_claim_does_not_wedge_subscribers() {
    let dd = dir("kill");
    let ctx = Context::new(&dd).unwrap();
    let mut hang = spawn(&["claim-and-hang", d(&dd), "k", "1", "100", "200"]);
    let start = Instant::now();
    let mut s = loop {
        match ctx.reader("k", 1, ReaderOptions::default()) {
            Ok(s) => break s,
            Err(ShmError::NoPublisher { .. }) => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => panic!("{e}"),
        }
    };
    let mut line = String::new();
    BufReader::new(hang.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "claimed");
    Command::new("kill").args(["-9", &hang.id().to_string()]).status().unwrap();
    hang.wait().unwrap();
    let mut got = 0;
    while !(got == 100 && s.counters().get(tickwire_shm::counters::subscriber::UNBLOCKED) == 1) {
        s.poll(
            |e| {
                if let Event::Message(_) = e {
                    got += 1
                }
            },
            64,
        )
        .unwrap();
        assert!(start.elapsed() < Duration::from_secs(20), "wedged: got {got}");
        std::hint::spin_loop();
    }
    assert!(!s.is_publisher_alive());
    // The stale file is replaced by a new publisher, and a subscriber follows it.
    let mut p = ctx.appender("k", 1, &LogConfig::with_capacity(1 << 16)).unwrap();
    let mut s2 = ctx.reader("k", 1, ReaderOptions::default()).unwrap();
    p.offer(b"after restart").unwrap();
    let mut v = Vec::new();
    s2.poll(
        |e| {
            if let Event::Message(m) = e {
                v.push(m.payload.to_vec())
            }
        },
        8,
    )
    .unwrap();
    assert_eq!(v, vec![b"after restart".to_vec()]);
}

#[test]
fn a_live_publisher_stalled_mid_claim_is_waited_for_not_padded() {
    let dd = dir("stall");
    let ctx = Context::new(&dd).unwrap();
    let cfg = LogConfig { unblock_timeout: Duration::from_millis(50), ..LogConfig::with_capacity(1 << 16) };
    let mut p = ctx.appender("st", 1, &cfg).unwrap();
    let mut s = ctx.reader("st", 1, ReaderOptions::default()).unwrap();
    let mut c = p.try_claim(16).unwrap();
    c.buffer().fill(1);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        assert_eq!(s.poll(|_| panic!("nothing committed yet"), 8).unwrap(), 0);
    }
    assert_eq!(s.counters().get(tickwire_shm::counters::subscriber::UNBLOCKED), 0, "alive: never padded");
    c.commit();
    p.offer(b"next").unwrap();
    let mut v = Vec::new();
    while v.len() < 2 {
        s.poll(
            |e| {
                if let Event::Message(m) = e {
                    v.push(m.payload.to_vec())
                }
            },
            8,
        )
        .unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
    }
    assert_eq!(v, vec![vec![1u8; 16], b"next".to_vec()]);
}

#[test]
fn stale_files_of_dead_processes_are_detected_and_cleaned() {
    let dd = dir("stale");
    let mut child = spawn(&["publisher-then-sleep", d(&dd), "z", "1"]);
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    Command::new("kill").args(["-9", &child.id().to_string()]).status().unwrap();
    child.wait().unwrap();
    let log = dd.join("z-1.log");
    let counters = dd.join(format!("counters-{}.twc", child.id()));
    assert!(log.exists() && counters.exists());
    let ctx = Context::new(dd.join("elsewhere")).unwrap(); // a context in another dir cleans nothing here
    assert!(matches!(
        tickwire_shm::LogReader::open(&dd, "z", 1, ReaderOptions::default(), ctx.counters()),
        Err(ShmError::Stale { .. })
    ));
    std::fs::write(dd.join("foreign.log"), b"some other program's file, not ours").unwrap();
    let report = tickwire_shm::clean(&dd).unwrap();
    assert!(!log.exists() && !counters.exists(), "{report:?}");
    assert!(dd.join("foreign.log").exists(), "foreign files are reported, never removed");
    assert!(report.iter().any(|r| !r.removed && r.reason.contains("not a tickwire file")));
}
