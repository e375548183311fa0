//! `tickwire request`, `tickwire reply` and `tickwire sub --queue` through
//! the real router binary: no responders (exit status 3, at once), a queue
//! group of responders answering each request once, and a queue group of
//! subscribers of which one is killed with -9: the others take every
//! message from then on, and the counts add up.

#[path = "support/router.rs"]
mod router;

use router::{RouterProcess, BIN};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn scratch(name: &str) -> String {
    let d = std::env::temp_dir().join(format!("tw-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d.display().to_string()
}

fn spawn(args: &[&str]) -> Child {
    Command::new(BIN).args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// Waits up to `limit` for `child`; kills it past that.
fn finish(mut child: Child, limit: Duration) -> Output {
    let until = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn requests_get_no_responders_at_once_and_one_answer_each_from_a_queue_group_of_responders() {
    let d = scratch("request");
    let mut r = RouterProcess::start(&["--dir", &d, "router", "--no-tcp"]);
    let ask = |count: &str| {
        let t = Instant::now();
        let out = Command::new(BIN)
            .args(["--dir", &d, "request", "--router", "ipc", "--topic", "rfq/eu/VOD", "--data", "buy 100"])
            .args(["--count", count, "--timeout", "5s"])
            .output()
            .unwrap();
        (out, t.elapsed())
    };
    let (out, took) = ask("1");
    println!("no responders: {:?} in {took:?}: {}", out.status.code(), text(&out.stderr).trim());
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("no responders"), "{}", text(&out.stderr));

    let responders: Vec<Child> = (0..2)
        .map(|_| {
            spawn(&[
                "--dir",
                &d,
                "reply",
                "--router",
                "ipc",
                "--topic",
                "rfq/>",
                "--queue",
                "pricers",
                "--exec",
                "printf 'quote for %s' \"$(cat)\"",
                "--duration",
                "8s",
            ])
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let (out, took) = ask("20");
    let replies = text(&out.stdout);
    println!("20 requests in {took:?}; first reply {:?}", replies.lines().next());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(replies.lines().count(), 20, "{replies}");
    assert!(replies.lines().all(|l| l == "quote for buy 100"), "{replies}");
    let mut answered = 0;
    for c in responders {
        let out = finish(c, Duration::from_secs(20));
        let err = text(&out.stderr);
        println!("responder: {}", err.trim());
        let n: u64 = err
            .split("answered ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{err}"));
        assert!(n > 0, "each responder of the group took some: {err}");
        answered += n;
    }
    assert_eq!(answered, 20, "each request answered once");
    r.stop();
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_queue_group_member_killed_with_9_gets_nothing_more_and_the_others_take_every_message() {
    let d = scratch("queue-kill");
    let mut r = RouterProcess::start(&["--dir", &d, "router", "--no-tcp"]);
    let member = || {
        spawn(&[
            "--dir",
            &d,
            "sub",
            "--router",
            "ipc",
            "--topic",
            "orders/>",
            "--queue",
            "gateways",
            "--duration",
            "10s",
        ])
    };
    let mut members: Vec<Child> = (0..4).map(|_| member()).collect();
    std::thread::sleep(Duration::from_secs(1));
    let mut killed = members.remove(1);
    killed.kill().unwrap();
    let _ = killed.wait();
    // The router sees the dead member's log go (its process gone).
    std::thread::sleep(Duration::from_secs(1));
    let n = 30_000;
    let publ = Command::new(BIN)
        .args(["--dir", &d, "pub", "--router", "ipc", "--topic", "orders/eu", "--count", &n.to_string()])
        .args(["--rate", "20k"])
        .output()
        .unwrap();
    assert!(publ.status.success(), "{}", text(&publ.stderr));
    let mut total = 0u64;
    for c in members {
        let out = finish(c, Duration::from_secs(30));
        let err = text(&out.stderr);
        let got: u64 = err
            .split("received ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{err}"));
        println!("member: received {got}");
        assert!(got > n / 4, "each survivor takes its share: {got} of {n}");
        total += got;
    }
    assert_eq!(total, n, "the three survivors got every message, each once");
    r.stop();
    let _ = std::fs::remove_dir_all(&d);
}
