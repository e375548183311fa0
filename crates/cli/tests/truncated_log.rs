//! No client can crash the router through its shared memory (issue 44,
//! item 3): a client's log truncated while the router has it mapped, the
//! log into the router or the router's log out to it, ends that client's
//! session with the reason, and the router and every other client go on.
//!
//! Two `tickwire sub --router ipc` processes are the victims; a publisher
//! and a subscriber in this process are the pair that must lose nothing
//! while the victims' logs are truncated under the router.

#[path = "support/router.rs"]
mod router;

use router::{RouterProcess, BIN};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, ClientOptions, PublishError};

/// Messages the pair's publisher sends, one every 100 µs.
const MESSAGES: u64 = 20_000;

fn opts(dir: &Path, name: &str) -> ClientOptions {
    ClientOptions { name: name.into(), dir: dir.into(), ..ClientOptions::default() }
}

/// Names in `dir` starting with `prefix`.
fn names(dir: &Path, prefix: &str) -> HashSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

/// The file starting with `prefix` that is not in `before`, once there.
fn new_file(dir: &Path, prefix: &str, before: &HashSet<String>) -> PathBuf {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(n) = names(dir, prefix).difference(before).next() {
            return dir.join(n);
        }
        assert!(Instant::now() < until, "no new {prefix}* in {} within 10 s", dir.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A `tickwire sub --router ipc` on the pair's topic; returns it and its
/// log into the router and the router's log out to it.
fn victim(dir: &Path) -> (Child, PathBuf, PathBuf) {
    let (ins, outs) = (names(dir, "tw-router-in-"), names(dir, "tw-router-out-"));
    let d = dir.display().to_string();
    let child = Command::new(BIN)
        .args(["--dir", &d, "sub", "--router", "ipc", "--topic", "md/pair", "--count", "100000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let into = new_file(dir, "tw-router-in-", &ins);
    let out = new_file(dir, "tw-router-out-", &outs);
    (child, into, out)
}

fn truncate(path: &Path) {
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(0).unwrap();
}

#[test]
fn a_client_log_truncated_under_the_router_ends_that_session_only_and_the_others_lose_nothing() {
    let dir = std::env::temp_dir().join(format!("tw-cli-truncated-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.display().to_string();
    let mut r = RouterProcess::start(&["--dir", &d, "router", "--no-tcp"]);

    let mut sub = Client::connect("ipc", opts(&dir, "pair-sub")).unwrap();
    sub.wait_connected(Duration::from_secs(5)).unwrap();
    sub.subscribe("md/pair").unwrap();
    let (mut v1, into1, _) = victim(&dir);
    let (mut v2, _, out2) = victim(&dir);
    // Both victims subscribed: the router writes to their logs too.
    std::thread::sleep(Duration::from_millis(300));

    let pub_dir = dir.clone();
    let publisher = std::thread::spawn(move || {
        let mut c = Client::connect("ipc", opts(&pub_dir, "pair-pub")).unwrap();
        c.wait_connected(Duration::from_secs(5)).unwrap();
        let start = Instant::now();
        let mut seq = 0u64;
        while seq < MESSAGES {
            if Instant::now() < start + Duration::from_micros(100 * seq) {
                c.poll(|_| {}, 64);
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
            match c.publish("md/pair", &seq.to_le_bytes()) {
                Ok(()) => seq += 1,
                Err(PublishError::BackPressured) => std::thread::sleep(Duration::from_micros(100)),
                Err(e) => panic!("publish {seq}: {e}"),
            }
        }
        c.flush().unwrap();
        // Stay until the subscriber has it all (the session's end would
        // not lose it, but the test says when it is over).
        std::thread::sleep(Duration::from_secs(2));
    });

    let mut next = 0u64;
    let mut lost = 0u64;
    let mut truncated = 0;
    let until = Instant::now() + Duration::from_secs(30);
    while next < MESSAGES && Instant::now() < until {
        let n = sub.poll(
            |e| match e {
                ClientEvent::Message(m) => {
                    let seq = u64::from_le_bytes(m.payload[..8].try_into().unwrap());
                    assert_eq!(seq, next, "the pair's subscriber got message {seq} where {next} was due");
                    next += 1;
                }
                ClientEvent::Lost { .. } => lost += 1,
                _ => {}
            },
            256,
        );
        // A quarter and half way through: one victim's log into the
        // router, then the router's log out to the other.
        if truncated == 0 && next >= MESSAGES / 4 {
            truncate(&into1);
            truncated = 1;
        } else if truncated == 1 && next >= MESSAGES / 2 {
            truncate(&out2);
            truncated = 2;
        }
        if n == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    publisher.join().unwrap();
    assert!(r.is_running(), "the router died: {:?}", r.child.try_wait());
    assert_eq!((next, lost), (MESSAGES, 0), "the pair's subscriber got {next} of {MESSAGES}, {lost} losses");
    for which in ["into the router", "out of the router"] {
        let line = r.wait_for_line(&format!("log {which} was truncated"), Duration::from_secs(5));
        let line = line.unwrap_or_else(|| panic!("no line about the log {which}: {:?}", r.lines.lock().unwrap()));
        println!("router: {line}");
    }
    // The victims are gone: each touched its own truncated log (SIGBUS,
    // status 74 with the file named) or was closed by the router.
    for v in [&mut v1, &mut v2] {
        let _ = v.kill();
        let _ = v.wait();
    }
    drop(sub);
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
