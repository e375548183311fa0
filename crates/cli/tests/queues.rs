//! `tickwire queue create|list|browse|delete` through the real router
//! binary, under its users' ACLs: a user who may publish on
//! `_sys/queue/>` manages queues, one who may not is refused; an
//! exclusive queue feeds its first consumer alone, and the next takes
//! over when it is killed.

#[path = "support/cmd.rs"]
mod cmd;
#[path = "support/router.rs"]
mod router;

use router::{RouterProcess, BIN};
use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn scratch(name: &str) -> String {
    let d = std::env::temp_dir().join(format!("tw-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d.display().to_string()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `tickwire --dir D ARGS --router ipc --user USER`, the password in the
/// environment.
fn as_user(d: &str, user: &str, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(["--dir", d]).args(args).args(["--router", "ipc", "--user", user, "--wait", "10s"]);
    c.env("TICKWIRE_PASSWORD", format!("{user}-secret")).stdin(Stdio::null());
    c
}

fn run(d: &str, user: &str, args: &[&str]) -> Output {
    as_user(d, user, args).output().unwrap()
}

/// What a consumer printed until killed: the payloads of `orders/eu`.
fn killed(mut c: Child) -> Vec<String> {
    let _ = c.kill();
    let mut out = String::new();
    if let Some(mut o) = c.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    let _ = c.wait();
    out.lines().filter_map(|l| l.strip_prefix("orders/eu ").map(str::to_owned)).collect()
}

/// Runs `queue list --json` until `pred` holds of its queues (5 s at most).
fn list_until(d: &str, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let out = run(d, "ops", &["queue", "list", "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if pred(&v["queues"]) || Instant::now() > until {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn publish(d: &str, from: u32, n: u32) {
    let lines: String = (from..from + n).map(|i| format!("order {i}\n")).collect();
    let mut p = as_user(d, "desk", &["pub", "--topic", "orders/eu", "--stdin", "--guaranteed"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut p.stdin.take().unwrap(), lines.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    assert!(out.status.success() && text(&out.stderr).contains(&format!("acknowledged {n}")), "{}", text(&out.stderr));
}

#[test]
fn queues_are_managed_from_the_command_line_under_the_acls_and_an_exclusive_consumer_hands_over() {
    let d = scratch("queues");
    let config = format!("{d}/router.toml");
    let user = |name: &str, publish: &str, subscribe: &str| {
        let hash = cmd::hash_password(&format!("{name}-secret"));
        format!(
            "[[users]]\nname = \"{name}\"\npassword_hash = \"{hash}\"\npublish = [{publish}]\nsubscribe = [{subscribe}]\n\n"
        )
    };
    let toml = user("ops", "\"_sys/queue/>\", \"orders/>\"", "\"orders/>\"")
        + &user("desk", "\"orders/>\"", "\"orders/>\"")
        + &user("peek", "\"_sys/queue/>\"", "\"fx/>\"");
    std::fs::write(&config, toml).unwrap();
    let journal = format!("{d}/journal");
    let _r = RouterProcess::start(&["--dir", &d, "--config", &config, "router", "--no-tcp", "--journal", &journal]);

    // desk may not manage queues; ops may.
    let create = ["queue", "create", "gw", "--topic", "orders/>", "--exclusive", "--max-depth", "1000"];
    let refused = run(&d, "desk", &create);
    assert!(!refused.status.success(), "{}", text(&refused.stdout));
    println!("desk: {}", text(&refused.stderr).trim());
    assert!(text(&refused.stderr).contains("may not publish on _sys/queue/create"), "{}", text(&refused.stderr));
    let made = run(&d, "ops", &create);
    assert!(made.status.success(), "{}", text(&made.stderr));
    let shown = text(&made.stdout);
    assert!(shown.contains("gw") && shown.contains("exclusive, max depth 1000 then reject"), "{shown}");

    publish(&d, 1, 20);
    let v = list_until(&d, |q| q[0]["depth"] == 20);
    assert_eq!((v["queues"][0]["depth"].as_u64(), v["queues"][0]["consumers"].as_u64()), (Some(20), Some(0)), "{v}");
    // Browsing shows payloads: only to a user who may read them.
    let peek = run(&d, "peek", &["queue", "browse", "gw"]);
    assert!(text(&peek.stderr).contains("may not read every topic orders/> matches"), "{}", text(&peek.stderr));
    let browsed = run(&d, "ops", &["queue", "browse", "gw", "--count", "3"]);
    let lines: Vec<String> = text(&browsed.stdout).lines().skip(1).map(str::to_owned).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0].ends_with("order 1") && lines[2].ends_with("order 3"), "oldest first: {lines:?}");

    // The first consumer takes everything; the second waits.
    let consumer = || {
        as_user(&d, "desk", &["sub", "--topic", "orders/>", "--durable-queue", "gw", "--print", "--duration", "60s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let first = consumer();
    list_until(&d, |q| q[0]["depth"] == 0);
    let second = consumer();
    list_until(&d, |q| q[0]["consumers"] == 2);
    let busy = run(&d, "ops", &["queue", "delete", "gw"]);
    assert!(text(&busy.stderr).contains("2 consumers bound"), "{}", text(&busy.stderr));
    publish(&d, 21, 5);
    list_until(&d, |q| q[0]["depth"] == 0);
    let got_first = killed(first);
    let want: Vec<String> = (1..=25).map(|i| format!("order {i}")).collect();
    assert_eq!(got_first, want, "the exclusive consumer had all of them, in order");

    // Killed: the second takes over.
    list_until(&d, |q| q[0]["consumers"] == 1);
    publish(&d, 26, 5);
    list_until(&d, |q| q[0]["depth"] == 0);
    let got_second = killed(second);
    let want: Vec<String> = (26..=30).map(|i| format!("order {i}")).collect();
    assert_eq!(got_second, want, "the next consumer took over");

    list_until(&d, |q| q[0]["consumers"] == 0);
    let deleted = run(&d, "ops", &["queue", "delete", "gw"]);
    assert!(text(&deleted.stdout).contains("deleted queue gw"), "{}", text(&deleted.stderr));
    let v = list_until(&d, |q| q.as_array().is_none_or(Vec::is_empty));
    assert!(v.get("queues").is_none(), "{v}");
}
