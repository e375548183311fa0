//! The lab's kernel-UDP ping-pong must agree with sockperf's at the median
//! (±10%), spinning and blocking. `make test` installs sockperf; without it
//! this test prints a visible `SKIPPED:` line (and fails under CI).
//!
//! Both tools are run alternately, nine times each, pinned like the lab
//! (measuring side on CPU 0, far side on CPU 1), and the medians of their
//! medians are compared: single pairs scatter by ±20% on this kind of VM as
//! the host moves the vCPUs, but no systematic offset remains (a run of nine
//! pairs gave a ratio of 1.001). A real bias fails it: the first version of
//! the lab, using connected sockets, measured 10-23% below sockperf.

use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether a UDP socket is bound to 127.0.0.1:`port` (`/proc/net/udp`).
fn bound(port: u16) -> bool {
    let want = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/udp")
        .is_ok_and(|t| t.lines().any(|l| l.split_whitespace().nth(1) == Some(want.as_str())))
}

/// sockperf's median round trip in µs, on a free port; None if its
/// server did not answer (the port, free when found, was taken before
/// the server bound it: the caller tries another).
fn sockperf_try(block: bool) -> Option<f64> {
    let port = free_udp_port();
    let mode: &[&str] = if block { &[] } else { &["--nonblocked"] };
    let mut server = Command::new("taskset")
        .args(["-c", "1", "sockperf", "server", "-i", "127.0.0.1", "-p", &port.to_string()])
        .args(mode)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !bound(port) && start.elapsed() < Duration::from_secs(5) && server.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = Command::new("taskset")
        .args(["-c", "0", "sockperf", "ping-pong", "-i", "127.0.0.1", "-p", &port.to_string(), "-m", "64", "-t", "1"])
        .args(mode)
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let p50 = text.lines().find(|l| l.contains("percentile 50.000")).and_then(|l| l.rsplit('=').next());
    match p50.and_then(|v| v.trim().parse().ok()) {
        Some(v) => Some(v),
        None if text.contains("No messages were received from the server") => None,
        None => panic!("no median in sockperf output:\n{text}"),
    }
}

fn sockperf_p50_us(block: bool) -> f64 {
    (0..3).find_map(|_| sockperf_try(block)).expect("sockperf's server answered on none of 3 free ports")
}

fn lab_p50_us(block: bool) -> f64 {
    let dir = std::env::temp_dir().join(format!("tw-sockperf-{}", std::process::id()));
    let count = if block { "12000" } else { "150000" };
    let mut args = vec!["--dir", dir.to_str().unwrap(), "lab", "pingpong", "--transport", "udp", "--size", "64"];
    args.extend_from_slice(&["--count", count, "--warmup", "2000", "--rounds", "1", "--no-floor", "--json"]);
    if block {
        args.push("--block");
    }
    let out = Command::new(BIN).args(&args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["p50_ns"].as_f64().unwrap() / 1000.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A UDP port free on 127.0.0.1 now: sockperf's server takes a port and
/// does not say which one it bound, so a socket bound to port 0 finds one
/// (and is closed for sockperf to take it).
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn compare(block: bool) -> (f64, Vec<f64>, Vec<f64>) {
    let (mut s, mut l) = (Vec::new(), Vec::new());
    for _ in 0..9 {
        s.push(sockperf_p50_us(block));
        l.push(lab_p50_us(block));
    }
    (median(l.clone()) / median(s.clone()), s, l)
}

#[test]
fn lab_udp_pingpong_agrees_with_sockperf_at_the_median() {
    if !have("sockperf") || !have("taskset") {
        tickwire_testkit::skip("sockperf or taskset is not installed (make test installs them)");
        return;
    }
    for block in [false, true] {
        let (mut ratio, mut s, mut l) = compare(block);
        // Two retries: the host can move the vCPUs in the middle of a
        // comparison (seen: 1.207 once, then 1.0x on the rerun).
        for _ in 0..2 {
            if (ratio - 1.0).abs() <= 0.10 {
                break;
            }
            (ratio, s, l) = compare(block);
        }
        let mode = if block { "block" } else { "spin" };
        eprintln!("{mode}: sockperf p50 {s:?} us, lab p50 {l:?} us, ratio of medians {ratio:.3}");
        assert!((ratio - 1.0).abs() <= 0.10, "{mode}: lab/sockperf median ratio {ratio:.3} is outside ±10%");
    }
}
