//! docs/operations.md, run: a router with TLS, users and metrics on host A,
//! a subscriber, publishers and `curl` on host B. The two hosts are network
//! namespaces joined by a veth pair (10.77.0.1/24 and 10.77.0.2/24), each
//! with its own working directory and its own /dev/shm (a directory of the
//! real one bound over it, as `ip netns exec` gives each process a mount
//! namespace of its own), so nothing is sent outside them and nothing in
//! the host's /dev/shm/tickwire is touched. The page's blocks marked with a
//! comment (`<!-- on A -->`, `<!-- expect: stdout -->`, ... : the table at
//! the end of the page) are run and checked in order. Needs root.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");
const PAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/operations.md");

/// Binds the host's /dev/shm directory ($1) over /dev/shm, enters its
/// working directory ($2) and runs the rest.
const HOST_SHELL: &str = r#"mount --bind "$1" /dev/shm && cd "$2" && shift 2 && exec "$@""#;

// ---------------------------------------------------------------- the page

/// What a marked block of the page asks for.
#[derive(Debug)]
enum Step {
    /// `sh -e` on a host; `refused`: it must fail.
    Run { host: usize, script: String, refused: bool },
    /// One command left running.
    Start { host: usize, command: String },
    /// The files an `scp FILES HOST:` line names, from A to B.
    Copy { files: Vec<String> },
    /// Lines to see (`kind` as in the marker).
    Expect { kind: String, lines: Vec<String> },
}

fn host(name: &str) -> usize {
    match name {
        "A" => 0,
        "B" => 1,
        _ => panic!("operations.md: no host {name:?} (A or B)"),
    }
}

/// The marked blocks of the page, in order. A comment that is not a marker,
/// or a marker not followed by a fenced block, is an error (so a typo does
/// not silently leave a block untested).
fn steps(page: &str) -> Vec<Step> {
    let mut out = Vec::new();
    let lines: Vec<&str> = page.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim();
        i += 1;
        let Some(marker) = t.strip_prefix("<!--").and_then(|r| r.strip_suffix("-->")).map(str::trim) else {
            continue;
        };
        while i < lines.len() && lines[i].trim().is_empty() {
            i += 1;
        }
        assert!(
            i < lines.len() && lines[i].trim_start().starts_with("```"),
            "operations.md:{i}: the marker {marker:?} is not followed by a fenced block"
        );
        i += 1;
        let mut block = Vec::new();
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            block.push(lines[i].to_owned());
            i += 1;
        }
        i += 1;
        let text = block.join("\n") + "\n";
        let step = if let Some(kind) = marker.strip_prefix("expect:") {
            Step::Expect { kind: kind.trim().to_owned(), lines: block }
        } else if marker == "copy from A to B" {
            let words: Vec<String> = text.split_whitespace().map(str::to_owned).collect();
            assert!(
                words.len() >= 3 && words[0] == "scp" && words.last().unwrap().ends_with(':'),
                "operations.md: a copy block is one `scp FILES HOST:` line: {text}"
            );
            Step::Copy { files: words[1..words.len() - 1].to_vec() }
        } else if let Some(rest) = marker.strip_prefix("on ") {
            match rest.split_once(", ") {
                None => Step::Run { host: host(rest), script: text, refused: false },
                Some((h, "refused")) => Step::Run { host: host(h), script: text, refused: true },
                Some((h, "keeps running")) => {
                    let command = text.trim().to_owned();
                    assert!(
                        !command.contains('\n'),
                        "operations.md: a block that keeps running is one command: {text}"
                    );
                    Step::Start { host: host(h), command }
                }
                Some(_) => panic!("operations.md: unknown marker {marker:?}"),
            }
        } else {
            panic!("operations.md: unknown marker {marker:?}");
        };
        out.push(step);
    }
    out
}

// ---------------------------------------------------------------- the hosts

/// Two namespaces joined by veth, their working directories and /dev/shm
/// directories; all removed on drop, whatever happened.
struct Hosts {
    ns: [String; 2],
    work: [PathBuf; 2],
    shm: [PathBuf; 2],
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip (iproute2)");
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

impl Hosts {
    fn new() -> Self {
        let pid = std::process::id();
        let h = Hosts {
            ns: [format!("tw-ops-{pid}-a"), format!("tw-ops-{pid}-b")],
            work: [0, 1].map(|i| std::env::temp_dir().join(format!("tw-ops-{pid}-{}", ["a", "b"][i]))),
            shm: [0, 1].map(|i| PathBuf::from(format!("/dev/shm/tw-ops-{pid}-{}", ["a", "b"][i]))),
        };
        for d in h.work.iter().chain(&h.shm) {
            let _ = std::fs::remove_dir_all(d);
            std::fs::create_dir_all(d).unwrap();
        }
        let dev = [format!("twops{pid}a"), format!("twops{pid}b")];
        ip(&["netns", "add", &h.ns[0]]);
        ip(&["netns", "add", &h.ns[1]]);
        ip(&["link", "add", &dev[0], "netns", &h.ns[0], "type", "veth", "peer", "name", &dev[1], "netns", &h.ns[1]]);
        for (i, addr) in ["10.77.0.1/24", "10.77.0.2/24"].into_iter().enumerate() {
            ip(&["-n", &h.ns[i], "addr", "add", addr, "dev", &dev[i]]);
            ip(&["-n", &h.ns[i], "link", "set", "lo", "up"]);
            ip(&["-n", &h.ns[i], "link", "set", &dev[i], "up"]);
        }
        h
    }

    /// `sh -ec SCRIPT` on host `i`, in a process group of its own.
    fn command(&self, i: usize, script: &str) -> Command {
        let bin_dir = Path::new(BIN).parent().unwrap();
        let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[i], "sh", "-c", HOST_SHELL, "sh"])
            .arg(&self.shm[i])
            .arg(&self.work[i])
            .args(["sh", "-ec", script])
            .env("PATH", path)
            .env_remove("TICKWIRE_CONFIG")
            .env_remove("TICKWIRE_PASSWORD")
            .env_remove("TICKWIRE_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        c
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for ns in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        for d in self.work.iter().chain(&self.shm) {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Signals the process group `child` leads (whatever it started, too).
fn kill_group(child: &Child, signal: &str) {
    let _ = Command::new("kill").args(["-s", signal, "--", &format!("-{}", child.id())]).stderr(Stdio::null()).status();
}

/// A finished block: status, stdout, stderr.
struct Ran {
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
}

/// Runs `script` on host `i`, killing it (and whatever it started) after
/// `limit`.
fn run(hosts: &Hosts, i: usize, script: &str, limit: Duration) -> Ran {
    let mut child = hosts.command(i, script).spawn().unwrap();
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = r.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > limit {
            kill_group(&child, "KILL");
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Ran { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() }
}

/// A command left running on a host, its output read line by line.
struct Live {
    command: String,
    child: Child,
    stdout: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
    /// Every stderr line read so far.
    said: Vec<String>,
}

impl Live {
    fn start(hosts: &Hosts, i: usize, command: &str) -> Self {
        let mut child = hosts.command(i, &format!("exec {command}")).spawn().unwrap();
        let lines = |r: Box<dyn Read + Send>| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                for l in BufReader::new(r).lines().map_while(Result::ok) {
                    let _ = tx.send(l);
                }
            });
            rx
        };
        let stdout = lines(Box::new(child.stdout.take().unwrap()));
        let stderr = lines(Box::new(child.stderr.take().unwrap()));
        Self { command: command.to_owned(), child, stdout, stderr, said: Vec::new() }
    }

    /// Waits (20 s at most) for a stderr line containing `text`, already
    /// read or new.
    fn says(&mut self, text: &str) -> String {
        if let Some(l) = self.said.iter().find(|l| l.contains(text)) {
            return l.clone();
        }
        let until = Instant::now() + Duration::from_secs(20);
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match self.stderr.recv_timeout(left) {
                Ok(l) => {
                    self.said.push(l.clone());
                    if l.contains(text) {
                        return l;
                    }
                }
                Err(_) => break,
            }
        }
        panic!("`{}` said no line containing {text:?}; it said:\n{}", self.command, self.said.join("\n"));
    }

    /// The next stdout line, within 10 s.
    fn line(&self) -> String {
        self.stdout
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("`{}` printed no line within 10 s ({e})", self.command))
    }

    /// SIGINT (Ctrl-C), then its exit (10 s at most) and everything it
    /// printed after what was read: (status, stdout lines, stderr lines).
    fn interrupt(&mut self) -> (ExitStatus, Vec<String>, Vec<String>) {
        let _ = Command::new("kill").args(["-s", "INT", &self.child.id().to_string()]).status();
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "`{}` did not stop within 10 s of SIGINT", self.command);
            std::thread::sleep(Duration::from_millis(10));
        };
        // The readers end once the pipes close (the process is gone).
        let rest = |rx: &mpsc::Receiver<String>| {
            let mut v = Vec::new();
            while let Ok(l) = rx.recv_timeout(Duration::from_secs(2)) {
                v.push(l);
            }
            v
        };
        let (out, err) = (rest(&self.stdout), rest(&self.stderr));
        self.said.extend(err.iter().cloned());
        (status, out, err)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        kill_group(&self.child, "KILL");
        let _ = self.child.wait();
    }
}

/// What a command left running is, by its words.
fn role(command: &str) -> &'static str {
    let words: Vec<&str> = command.split_whitespace().collect();
    match words.get(..2) {
        Some([_, "sub"]) => "subscriber",
        _ if words.contains(&"router") => "router",
        _ => panic!("operations.md: a block that keeps running is a router or a subscriber: {command}"),
    }
}

// ---------------------------------------------------------------- the walk

/// The processes a walk started, then its hosts: dropped in this order, so
/// every process is killed before its namespace goes.
struct Walk {
    running: HashMap<&'static str, Live>,
    hosts: Hosts,
}

#[test]
fn the_operations_walkthrough_across_two_hosts() {
    if !tickwire_testkit::is_root() {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED the_operations_walkthrough_across_two_hosts: it needs root (network namespaces, veth, mount)"
        );
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI runs as root: this test must not be skipped there");
        return;
    }
    let started = Instant::now();
    let page = std::fs::read_to_string(PAGE).unwrap();
    let steps = steps(&page);
    let kinds: Vec<String> = steps
        .iter()
        .map(|s| match s {
            Step::Run { host, refused, .. } => format!("run {host} {refused}"),
            Step::Start { host, command } => format!("start {host} {}", role(command)),
            Step::Copy { .. } => "copy".into(),
            Step::Expect { kind, .. } => format!("expect {kind}"),
        })
        .collect();
    // What the page must keep doing for this test to mean anything.
    for needed in [
        "run 0 false",
        "start 0 router",
        "copy",
        "start 1 subscriber",
        "run 1 false",
        "run 1 true",
        "expect router log",
        "expect subscriber output",
        "expect stderr",
        "expect stdout",
        "expect subscriber stops",
        "expect router stops",
    ] {
        assert!(kinds.iter().any(|k| k == needed), "operations.md has no {needed:?} step; it has {kinds:?}");
    }
    let metrics_counted = steps.iter().any(|s| match s {
        Step::Expect { kind, lines } if kind == "stdout" => lines.iter().any(|l| {
            l.starts_with("tickwire_router_messages_in_total")
                && l.rsplit(' ').next().and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n > 0)
        }),
        _ => false,
    });
    assert!(metrics_counted, "operations.md shows no metrics page with the messages counted");

    let mut walk = Walk { running: HashMap::new(), hosts: Hosts::new() };
    let mut last: Option<(usize, String, Ran)> = None;
    for step in steps {
        match step {
            Step::Run { host, script, refused } => {
                let ran = run(&walk.hosts, host, &script, Duration::from_secs(60));
                let ok = ran.status.is_some_and(|s| s.success());
                assert!(
                    ran.status.is_some() && ok != refused,
                    "on {}: expected {} from\n{script}\nstatus {:?}\nstdout:\n{}\nstderr:\n{}",
                    ["A", "B"][host],
                    if refused { "a failure" } else { "success" },
                    ran.status,
                    ran.stdout,
                    ran.stderr
                );
                last = Some((host, script, ran));
            }
            Step::Start { host, command } => {
                let role = role(&command);
                let mut live = Live::start(&walk.hosts, host, &command);
                live.says(if role == "router" { "router listening" } else { "subscribed to" });
                walk.running.insert(role, live);
            }
            Step::Copy { files } => {
                for f in files {
                    std::fs::copy(walk.hosts.work[0].join(&f), walk.hosts.work[1].join(&f))
                        .unwrap_or_else(|e| panic!("copying {f} from A to B: {e}"));
                }
            }
            Step::Expect { kind, lines } => expect(&mut walk, &kind, &lines, &mut last),
        }
    }
    assert!(walk.running.is_empty(), "still running after the page's last step: {:?}", walk.running.keys());
    drop(walk);
    let _ = writeln!(std::io::stderr(), "operations walkthrough: {:.1} s", started.elapsed().as_secs_f64());
}

/// Checks one `<!-- expect: KIND -->` block.
fn expect(walk: &mut Walk, kind: &str, lines: &[String], last: &mut Option<(usize, String, Ran)>) {
    let running = |walk: &mut Walk, role: &str| -> Live {
        walk.running.remove(role).unwrap_or_else(|| panic!("`expect: {kind}` but no {role} is running"))
    };
    match kind {
        "router log" => {
            let live = walk.running.get_mut("router").expect("`expect: router log` but no router is running");
            for l in lines {
                live.says(l);
            }
        }
        "subscriber output" => {
            let live = walk.running.get("subscriber").expect("`expect: subscriber output` but no subscriber runs");
            for l in lines {
                assert_eq!(&live.line(), l, "the subscriber on B");
            }
        }
        "subscriber stops" | "router stops" => {
            let role = if kind == "router stops" { "router" } else { "subscriber" };
            let mut live = running(walk, role);
            let (status, out, err) = live.interrupt();
            assert!(
                status.success(),
                "the {role} exited with {status} after SIGINT; it said:\n{}",
                live.said.join("\n")
            );
            assert!(out.is_empty(), "the {role} printed more than the page shows: {out:?}");
            for l in lines {
                assert!(err.iter().any(|e| e == l), "the {role} did not say {l:?} on SIGINT; it said {err:?}");
            }
        }
        "stderr" => {
            let (_, script, ran) = last.as_ref().expect("`expect: stderr` with no block run before it");
            for l in lines {
                assert!(
                    ran.stderr.lines().any(|e| e == l),
                    "`{}` did not say {l:?}; its stderr:\n{}",
                    script.trim(),
                    ran.stderr
                );
            }
        }
        "stdout" => {
            // Counters reach the metrics within a few tens of ms: retried.
            let (host, script, _) = last.take().expect("`expect: stdout` with no block run before it");
            let until = Instant::now() + Duration::from_secs(10);
            loop {
                let ran = run(&walk.hosts, host, &script, Duration::from_secs(20));
                let got: Vec<&str> = ran.stdout.lines().collect();
                if got == lines {
                    *last = Some((host, script, ran));
                    break;
                }
                assert!(
                    Instant::now() < until,
                    "`{}` printed\n{}\nnot\n{}\n(stderr: {})",
                    script.trim(),
                    ran.stdout,
                    lines.join("\n"),
                    ran.stderr
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        _ => panic!("operations.md: unknown expectation {kind:?}"),
    }
}
