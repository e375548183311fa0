//! The `tickwire` binary end to end: pub/sub round trip, stat, generated
//! messages verified, bad input, a closed stdout. The lab's commands:
//! tests/lab.rs.

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

#[path = "support/cmd.rs"]
mod cmd;
use cmd::{dir, run, run_line};

#[test]
fn pub_and_sub_round_trip_lines_and_stat_sees_them() {
    use std::io::{BufRead, Write};
    let d = dir("pubsub");
    let mut sub = Command::new(BIN)
        .args([
            "--dir",
            &d,
            "sub",
            "--channel",
            "ipc:demo",
            "--stream",
            "7",
            "--print",
            "--count",
            "3",
            "--idle",
            "park",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut publ = Command::new(BIN)
        .args(["--dir", &d, "pub", "--channel", "ipc:demo", "--stream", "7", "--stdin", "--topic", "md/x"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first line only, with the publisher's stdin kept open: both
    // processes are alive (pub waits for the subscriber before it sends).
    let mut stdin = publ.stdin.take().unwrap();
    writeln!(stdin, "one").unwrap();
    let mut lines = std::io::BufReader::new(sub.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "md/x one");

    // stat, while they run, sees both processes, their counters and the stream
    // (the line is printed inside the subscriber's poll, its counters are
    // stored when the poll returns: asked again for up to 2 s).
    let (s, p) = (sub.id(), publ.id());
    let mut out = String::new();
    for _ in 0..40 {
        let (ok, o, err) = run(&["--dir", &d, "stat"]);
        assert!(ok, "{err}");
        out = o;
        if out.matches(" messages=1 ").count() >= 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let after = |head: &str| out.split(head).nth(1).and_then(|rest| rest.lines().nth(1)).unwrap_or_default();
    assert!(
        after(&format!("process {s} (alive)")).trim_start().starts_with("sub demo-7 ")
            && after(&format!("process {s} (alive)")).contains(" messages=1 "),
        "the subscriber's counters: {out}"
    );
    assert!(
        after(&format!("process {p} (alive)")).trim_start().starts_with("pub demo-7 ")
            && after(&format!("process {p} (alive)")).contains(" messages=1 "),
        "the publisher's counters: {out}"
    );
    assert!(out.contains("stream demo-7 session "), "{out}");
    assert!(out.contains(&format!(": publisher pid {p} (alive)")), "{out}");
    assert!(out.contains(&format!("subscriber pid {s} (alive) position ")), "{out}");

    writeln!(stdin, "two\nthree").unwrap();
    drop(stdin);
    let rest: Vec<String> = lines.map(Result::unwrap).collect();
    assert_eq!(rest, ["md/x two", "md/x three"]);
    assert!(publ.wait().unwrap().success());
    let s = sub.wait_with_output().unwrap();
    assert!(s.status.success(), "{}", String::from_utf8_lossy(&s.stderr));
    // Once both ended, stat finds nobody (and nothing DEAD left behind).
    let (ok, out, _) = run(&["--dir", &d, "stat"]);
    assert!(ok && out.contains("no tickwire processes") && !out.contains("DEAD"), "{out}");
}

#[test]
fn generated_messages_are_verified_end_to_end() {
    let d = dir("gen");
    let sub = Command::new(BIN)
        .args(["--dir", &d, "sub", "--stream", "3", "--count", "100000", "--verify", "--idle", "spin"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (ok, _, err) = run_line(&format!("--dir {d} pub --stream 3 --count 100000 --size 48"));
    assert!(ok, "{err}");
    let s = sub.wait_with_output().unwrap();
    let e = String::from_utf8_lossy(&s.stderr);
    assert!(s.status.success(), "{e}");
    assert!(e.contains("received 100000 messages") && e.contains("sequence gaps 0"), "{e}");
}

#[test]
fn bad_input_is_a_clear_error_not_a_panic() {
    let (ok, _, err) = run(&["lab", "pingpong", "--size", "12q"]);
    assert!(!ok && err.contains("bad size unit"), "{err}");
    let (ok, _, err) = run(&["pub", "--duration", "5 parsecs"]);
    assert!(!ok && err.contains("bad duration"), "{err}");
    let (ok, _, err) = run(&["lab", "pingpong", "--transport", "carrier-pigeon", "--count", "10"]);
    assert!(!ok && err.contains("is not one of ipc, udp, tcp, rudp, xdp"), "{err}");
    let d = dir("badcfg");
    std::fs::create_dir_all(&d).unwrap();
    let cfg = format!("{d}/t.toml");
    std::fs::write(&cfg, "[log]\ncapacity = \"3MiB\"\n").unwrap();
    let (ok, _, err) = run(&["--config", &cfg, "stat"]);
    assert!(!ok && err.contains("power of two"), "{err}");
    std::fs::write(format!("{d}/junk-1.log"), b"not ours").unwrap();
    let (ok, out, _) = run(&["--dir", &d, "stat"]);
    assert!(ok && out.contains("not a tickwire file"), "{out}");
    assert!(!err.contains("panicked"));
}

#[test]
fn a_closed_stdout_ends_quietly_instead_of_panicking() {
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    // Like `tickwire lab floor | head -1`: the reader takes the first line
    // and goes; the floor's next rows are written after the pipe closed.
    let d = dir("pipe");
    let mut child = Command::new(BIN)
        .args(["--dir", &d, "lab", "floor", "--count", "20000", "--duration", "200ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(!first.is_empty(), "a first line");
    // The reader (and with it the pipe's only read end) is gone here.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // tickwire's own status: a clean exit, or SIGPIPE's default action as
    // `cat` or `seq` end; not a panic (101) nor an error exit.
    assert!(
        out.status.success() || out.status.signal() == Some(13),
        "tickwire ended with {:?} on a closed stdout: {err}",
        out.status
    );
    assert!(!err.contains("panicked") && !err.to_lowercase().contains("broken pipe"), "{err}");
}
