//! No client can crash the router through its shared memory (issue 44,
//! item 3): the logs of a session are sealed memfds handed over the login
//! socket, so a client that tries to truncate one, the log into the router
//! or the router's log out to it, is refused by the kernel (`EPERM`), and
//! the router and every other client go on. (Were a file the router maps
//! ever shrunk, the router would end that session only:
//! `tickwire_shm::os::untrusted`, tested in the shm crate.)
//!
//! Two `tickwire sub --router ipc` processes are the victims; a publisher
//! and a subscriber in this process are the pair that must lose nothing
//! while the victims' logs are attacked. The logs are reached as the
//! victims themselves could reach them, through `/proc/PID/map_files`
//! (which needs root: the test runs as root).

#[path = "support/router.rs"]
mod router;

use router::{RouterProcess, BIN};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, ClientOptions, PublishError};

/// Messages the pair's publisher sends, one every 100 µs.
const MESSAGES: u64 = 20_000;

fn opts(dir: &Path, name: &str) -> ClientOptions {
    ClientOptions { name: name.into(), dir: dir.into(), ..ClientOptions::default() }
}

/// The memfd logs `pid` maps, by name (`tw-router-in-ID`, `tw-router-out-ID`),
/// each with its `/proc/PID/map_files` entry.
fn logs_of(pid: u32) -> Vec<(String, PathBuf)> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mut out = Vec::new();
    for l in maps.lines() {
        let Some(at) = l.find("/memfd:tw-router-") else { continue };
        let name = l[at + "/memfd:".len()..].trim_end_matches(" (deleted)").to_owned();
        let range = l.split_whitespace().next().unwrap();
        out.push((name, PathBuf::from(format!("/proc/{pid}/map_files/{range}"))));
    }
    out
}

/// A `tickwire sub --router ipc` on the pair's topic, once both its logs
/// are mapped; returns it and them.
// Returned to the caller, which kills it and waits for it.
#[allow(clippy::zombie_processes)]
fn victim(dir: &Path) -> (Child, Vec<(String, PathBuf)>) {
    let d = dir.display().to_string();
    let mut child = Command::new(BIN)
        .args(["--dir", &d, "sub", "--router", "ipc", "--topic", "md/pair", "--count", "100000000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let logs = logs_of(child.id());
        if logs.iter().any(|l| l.0.starts_with("tw-router-in-"))
            && logs.iter().any(|l| l.0.starts_with("tw-router-out-"))
        {
            return (child, logs);
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the victim mapped no log pair within 10 s: {logs:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Tries to truncate the log `name`, as its client could; returns why not.
fn truncate(logs: &[(String, PathBuf)], prefix: &str) -> std::io::Error {
    let (name, path) = logs.iter().find(|l| l.0.starts_with(prefix)).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let len = f.metadata().unwrap().len();
    let e = f.set_len(0).expect_err("a log the router maps was truncated");
    assert_eq!(f.metadata().unwrap().len(), len, "{name}");
    println!("truncating {name} ({len} bytes): {e}");
    e
}

#[test]
fn a_client_cannot_shrink_a_log_the_router_maps_and_the_others_lose_nothing() {
    if !tickwire_testkit::is_root() {
        return tickwire_testkit::skip("it needs root (/proc/PID/map_files)");
    }
    let dir = std::env::temp_dir().join(format!("tw-cli-truncated-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.display().to_string();
    let mut r = RouterProcess::start(&["--dir", &d, "router", "--no-tcp"]);

    let mut sub = Client::connect("ipc", opts(&dir, "pair-sub")).unwrap();
    sub.wait_connected(Duration::from_secs(5)).unwrap();
    sub.subscribe("md/pair").unwrap();
    let (mut v1, logs1) = victim(&dir);
    let (mut v2, logs2) = victim(&dir);
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
    let mut refused = Vec::new();
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
            refused.push(truncate(&logs1, "tw-router-in-"));
            truncated = 1;
        } else if truncated == 1 && next >= MESSAGES / 2 {
            refused.push(truncate(&logs2, "tw-router-out-"));
            truncated = 2;
        }
        if n == 0 {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    publisher.join().unwrap();
    assert!(r.is_running(), "the router died: {:?}", r.child.try_wait());
    assert_eq!((next, lost), (MESSAGES, 0), "the pair's subscriber got {next} of {MESSAGES}, {lost} losses");
    assert_eq!(truncated, 2);
    for e in &refused {
        assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
    }
    // The victims are still served: no session ended, nothing truncated.
    for v in [&mut v1, &mut v2] {
        assert!(v.try_wait().unwrap().is_none(), "a victim ended: {:?}", v.try_wait());
        let _ = v.kill();
        let _ = v.wait();
    }
    let lines = r.lines.lock().unwrap().clone();
    assert!(!lines.iter().any(|(_, l)| l.contains("was truncated")), "{lines:?}");
    drop(sub);
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
