//! Descriptors running out (issue 42, item 4), with the real router under
//! `RLIMIT_NOFILE` 256 (`prlimit`) and 400 connections that say nothing
//! (`limits.hello_timeout` 60 s, so they stay):
//! * with nothing else holding descriptors, the default
//!   `limits.max_connections` (256 less 64 = 192) refuses the rest with
//!   CLOSE (`Limit`) before the descriptors run out;
//! * with 120 descriptors inherited from its parent (a leak the share
//!   cannot know of), `accept` fails with EMFILE and the router refuses
//!   with its spare descriptor.
//!
//! Either way: at most a log line a second about it, little CPU (no spin
//! on a failing `accept`), a new client refused with a reason within 2 s,
//! and a fresh login within 1 s once the 400 go. The figures are printed
//! (`cargo test -p tickwire-cli --test limits -- --nocapture`).

#[path = "support/router.rs"]
mod router;

use router::{RouterProcess, BIN};
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, ClientOptions};

const FLOOD: usize = 400;

struct Router {
    process: RouterProcess,
    dir: String,
    addr: SocketAddr,
}

impl Drop for Router {
    fn drop(&mut self) {
        self.process.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The router under `RLIMIT_NOFILE` 256, with `leaked` descriptors open
/// from its parent (a shell opens them without close-on-exec).
fn start(name: &str, leaked: usize) -> Router {
    let dir = std::env::temp_dir().join(format!("tw-cli-limits-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("router.toml");
    std::fs::write(&config, "[router]\nipc = false\n[router.limits]\nhello_timeout = \"60s\"\n").unwrap();
    let dir = dir.display().to_string();
    let leak = format!("for fd in $(seq 10 {}); do eval \"exec $fd</dev/null\"; done", 9 + leaked);
    let script = format!("{leak}; exec prlimit --nofile=256:256 \"$0\" \"$@\"");
    let process = RouterProcess::spawn(
        Command::new("bash")
            .args(["-c", &script, BIN, "--dir", &dir, "--config", &config.display().to_string()])
            .args(["router", "--listen", "tcp://127.0.0.1:0"])
            .env("RUST_LOG", "info"),
    );
    let addr = process.tcp.expect("the router's listening line names its tcp:// address");
    Router { process, dir, addr }
}

impl Router {
    /// Its CPU time so far (user and system).
    fn cpu(&self) -> Duration {
        Duration::from_secs_f64(self.process.cpu_seconds())
    }

    /// Its stderr lines about refused connections, with when each came.
    fn refusal_lines(&self) -> Vec<(Instant, String)> {
        self.process
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, l)| l.contains("refused") && l.contains("connection(s)"))
            .cloned()
            .collect()
    }

    /// Its `router-accept` counters from `tickwire stat --json`.
    fn counts(&self) -> serde_json::Value {
        let out = Command::new(BIN).args(["--dir", &self.dir, "stat", "--json"]).output().unwrap();
        let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let row = rows.as_array().unwrap().iter().find(|r| r["side"] == "router-accept").cloned();
        row.unwrap_or_else(|| panic!("no router-accept row: {rows}"))["counters"].clone()
    }
}

/// Polls a new client until its session ends or `wait` passes; returns
/// the reason and how long it took.
fn refused_client(addr: SocketAddr, wait: Duration) -> Option<(String, Duration)> {
    let opts = ClientOptions { name: "late".into(), ..ClientOptions::default() };
    let start = Instant::now();
    let mut c = Client::connect(&format!("tcp://{addr}"), opts).unwrap();
    while start.elapsed() < wait {
        let mut reason = None;
        c.poll(
            |e| {
                if let ClientEvent::Disconnected { reason: r } = e {
                    reason = Some(r.to_owned());
                }
            },
            16,
        );
        if let Some(r) = reason {
            return Some((r, start.elapsed()));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    None
}

/// What one flood did.
struct Flood {
    /// Connections closed by the router with CLOSE (Limit), and those
    /// still open, 1 s after the last was made.
    refused: usize,
    open: usize,
    /// How long the connections took to make (the listener's backlog
    /// overflowing shows as a second: SYNs dropped and sent again).
    made_in: Duration,
}

/// Makes `FLOOD` connections that say nothing, then tells refused from
/// open: a refused one has CLOSE (Limit) and the end of its stream.
fn flood(addr: SocketAddr) -> (Vec<TcpStream>, Flood) {
    let mut streams = Vec::with_capacity(FLOOD);
    let start = Instant::now();
    for k in 0..FLOOD {
        let s =
            TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap_or_else(|e| panic!("connection {k}: {e}"));
        s.set_nonblocking(true).unwrap();
        streams.push(s);
    }
    let made_in = start.elapsed();
    std::thread::sleep(Duration::from_secs(1));
    let (mut refused, mut open) = (0, 0);
    let mut buf = [0u8; 512];
    for s in &mut streams {
        let mut heard = Vec::new();
        let ended = loop {
            match s.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => heard.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break false,
                Err(_) => break true,
            }
        };
        if ended {
            // The CLOSE frame: [len u32][kind 9][flags][topic len][value 7]...
            assert!(heard.len() > 20 && heard[4] == 9 && heard[8] == 7, "not a CLOSE (Limit): {heard:?}");
            refused += 1;
        } else {
            open += 1;
        }
    }
    (streams, Flood { refused, open, made_in })
}

fn run(name: &str, leaked: usize, counter: &str, reason_says: &str) {
    let r = start(name, leaked);
    let (cpu0, t0) = (r.cpu(), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let idle = (r.cpu() - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64();

    let started = Instant::now();
    let (streams, f) = flood(r.addr);
    // Held at the limit for 3 s: what does refusing cost?
    let (cpu1, t1) = (r.cpu(), Instant::now());
    let (reason, took) = refused_client(r.addr, Duration::from_secs(2)).expect("a new client refused within 2 s");
    std::thread::sleep(Duration::from_secs(3).saturating_sub(t1.elapsed()));
    let held = (r.cpu() - cpu1).as_secs_f64() / t1.elapsed().as_secs_f64();
    let counts = r.counts();

    drop(streams);
    let gone = Instant::now();
    let opts = ClientOptions { name: "fresh".into(), ..ClientOptions::default() };
    let mut fresh = Client::connect(&format!("tcp://{}", r.addr), opts).unwrap();
    let login = fresh.wait_connected(Duration::from_secs(1)).map(|()| gone.elapsed());
    let lines = r.refusal_lines();
    let span = started.elapsed().as_secs_f64();

    println!(
        "{name}: RLIMIT_NOFILE 256, {leaked} descriptors inherited, {FLOOD} connections made in {:?}: {} open, \
         {} refused (CLOSE Limit); a new client refused in {took:?}: {reason}",
        f.made_in, f.open, f.refused
    );
    println!(
        "{name}: router CPU {:.1}% of wall idle, {:.1}% held at the limit; {} log lines about it in {span:.1} s; \
         fresh login {login:?} after the {FLOOD} went; counters {counts}",
        idle * 100.0,
        held * 100.0,
        lines.len()
    );
    for (t, l) in &lines {
        println!("  +{:.2} s {l}", t.duration_since(started).as_secs_f64());
    }
    assert!(reason.contains("(Limit)") && reason.contains(reason_says), "{reason}");
    assert!(f.refused > 0 && f.open + f.refused == FLOOD, "{} open, {} refused", f.open, f.refused);
    assert!(counts[counter].as_u64().unwrap() >= f.refused as u64, "{counter}: {counts}");
    assert!(held < 0.3, "the router burned {:.0}% of a CPU held at the limit", held * 100.0);
    assert!(!lines.is_empty() && lines.len() as f64 <= span + 2.0, "{} lines in {span:.1} s", lines.len());
    login.unwrap_or_else(|e| panic!("no fresh login within 1 s of the {FLOOD} leaving: {e}"));
}

#[test]
fn descriptors_running_out_refuse_clearly_at_a_line_a_second_without_spinning() {
    if Command::new("prlimit").arg("--version").output().is_err() {
        tickwire_testkit::skip("prlimit (util-linux) is not installed");
        return;
    }
    run("share", 0, "refused_max_connections", "too many connections: 192 (limits.max_connections)");
    run("emfile", 120, "refused_no_descriptors", "out of file descriptors (RLIMIT_NOFILE)");
}
