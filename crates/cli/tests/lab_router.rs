//! `tickwire lab router` end to end: the Solace scenario through a real
//! router process, over shared memory and TCP, one to one and fan-out,
//! with its forwarding floor, and nothing left behind; `lab request`, round
//! trips beside two one-way hops through the same router.

use std::process::Command;
use std::sync::Mutex;

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

#[path = "support/ratios.rs"]
mod ratios;
use ratios::{pause_free_ratios_to, ratios_to};

/// Each run pins spinning processes to CPUs 0 and 1: one at a time, or two
/// runs share the CPUs and neither keeps its schedule.
static CPUS: Mutex<()> = Mutex::new(());

fn dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("tw-labrouter-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn lab(d: &std::path::Path, args: &str) -> (String, String) {
    run(d, &["lab", "router"], args)
}

/// `tickwire COMMAND ARGS` (`lab router` or `lab request`).
fn run(d: &std::path::Path, command: &[&str], args: &str) -> (String, String) {
    let _cpus = CPUS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let out = Command::new(BIN).arg("--dir").arg(d).args(command).args(args.split_whitespace()).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into());
    assert!(out.status.success(), "{command:?} {args}: {stderr}\n{stdout}");
    (stdout, stderr)
}

fn json_rows(stdout: &str) -> Vec<serde_json::Value> {
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

/// Nothing of the run is left in its directory but the counters file.
fn nothing_left(d: &std::path::Path) {
    let left: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "counters")
        .collect();
    assert!(left.is_empty(), "left behind in {}: {left:?}", d.display());
}

#[test]
fn shared_memory_one_to_one_has_both_distributions_and_its_ring_floor() {
    let d = dir("ipc");
    let (out, _) = lab(&d, "--rate 20k --duration 400ms --rounds 2 --json");
    let rows = json_rows(&out);
    assert_eq!(rows.len(), 4, "{out}");
    let (all, free, floor) = (&rows[0], &rows[1], &rows[2]);
    assert_eq!((all["mode"].as_str(), all["transport"].as_str()), (Some("router"), Some("shm")), "{all}");
    assert_eq!(all["distribution"], "all");
    assert_eq!(free["distribution"], "pause_free");
    assert_eq!(floor["probe"], "forward_ring", "{floor}");
    // 20k msg/s for two rounds of 200 ms: 8,000 messages, one delivery each.
    assert_eq!(all["count"], 8_000, "{all}");
    assert_eq!(all["lost"], 0, "{all}");
    assert_eq!(floor["count"], 8_000, "{floor}");
    assert_eq!(all["floor_probe"], "forward_ring", "{all}");
    ratios_to(all, floor);
    pause_free_ratios_to(free, &rows[3]);
    let (min, p50, max) =
        (all["min_ns"].as_u64().unwrap(), all["p50_ns"].as_u64().unwrap(), all["max_ns"].as_u64().unwrap());
    assert!(0 < min && min <= p50 && p50 <= max, "{all}");
    nothing_left(&d);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn tcp_fan_out_delivers_every_message_to_every_subscriber() {
    let d = dir("tcp");
    let (out, _) = lab(
        &d,
        "--transport tcp --fanout --publishers 2 --subscribers 3 --rate 10k --duration 300ms --rounds 1 --json",
    );
    let rows = json_rows(&out);
    assert_eq!(rows.len(), 4, "{out}");
    let (all, floor) = (&rows[0], &rows[2]);
    assert_eq!(all["transport"], "tcp", "{all}");
    // 3,000 messages, each to all three subscribers of md/>.
    assert_eq!(all["count"], 9_000, "{all}");
    assert_eq!(all["lost"], 0, "{all}");
    assert_eq!(floor["probe"], "forward_tcp", "{floor}");
    assert_eq!(floor["count"], 3_000, "{floor}");
    nothing_left(&d);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_table_says_how_the_run_was_driven_and_which_rates_were_sustained() {
    let d = dir("table");
    let (out, _) = lab(&d, "--rate 5k,10k --duration 200ms --rounds 1 --publishers 3 --subscribers 3");
    for want in [
        "3 publishers each on its own topic, 3 subscribers on one topic each",
        "every client session on one thread on CPU 0",
        "a raw ring to a thread on the router's CPU",
        "offered 5000 msg/s",
        "offered 10000 msg/s",
        "forward-ring floor",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    // The last line names the highest rate whose own line says sustained
    // (which rates this VM sustains in 200 ms depends on its pauses: CI
    // saw 10k achieved at 98.9%, under the 99% a sustained rate needs).
    let verdicts: Vec<(u64, bool)> = out
        .lines()
        .filter_map(|l| {
            let rate = l.strip_prefix("offered ")?.split(' ').next()?.parse().ok()?;
            Some((rate, !l.contains("NOT sustained") && l.contains("sustained")))
        })
        .collect();
    assert_eq!(verdicts.iter().map(|v| v.0).collect::<Vec<_>>(), [5000, 10000], "{out}");
    let want = match verdicts.iter().rfind(|v| v.1) {
        Some((rate, _)) => format!("highest rate sustained: {rate} msg/s"),
        None => "no offered rate was sustained".to_owned(),
    };
    assert!(out.contains(&want), "missing {want:?} in\n{out}");
    nothing_left(&d);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_bad_scenario_is_refused_by_name() {
    let d = dir("bad");
    let out = Command::new(BIN)
        .arg("--dir")
        .arg(&d)
        .args(["lab", "router", "--publishers", "2", "--subscribers", "3", "--duration", "100ms"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    // (Refused before anything spins: no need for the CPUs.)
    assert!(err.contains("one subscriber per publisher"), "{err}");
    let out = Command::new(BIN).arg("--dir").arg(&d).args(["lab", "router", "--transport", "udp"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("'udp'") && err.contains("ipc, tcp, tls"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}

/// `lab guaranteed` end to end, briefly: one case per sync policy asked
/// for, every figure present, the journal and the router's files removed.
#[test]
fn guaranteed_reports_peak_and_latency_beside_the_fsync_floor_and_leaves_nothing() {
    let (d, journals) = (dir("guaranteed"), dir("guaranteed-journals"));
    std::fs::create_dir_all(&journals).unwrap();
    let _cpus = CPUS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let out = Command::new(BIN)
        .arg("--dir")
        .arg(&d)
        .args(["lab", "guaranteed", "--sync", "os,fsync", "--publishers", "2", "--rate", "5k"])
        .args(["--duration", "600ms", "--rounds", "1", "--json", "--journal-dir"])
        .arg(&journals)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let rows = json_rows(&stdout);
    assert_eq!(rows.iter().map(|r| r["sync"].as_str().unwrap()).collect::<Vec<_>>(), ["os", "fsync"], "{stdout}");
    for r in &rows {
        assert!(r["peak_rates"][0].as_f64().unwrap() > 0.0, "{r}");
        // 5k msg/s for 300 ms: 1,500 acknowledged and delivered.
        assert_eq!((r["ack"]["count"].as_u64(), r["deliver"]["count"].as_u64()), (Some(1500), Some(1500)), "{r}");
        assert!(r["fsync"]["count"].as_u64() == Some(200) && r["fsync"]["p50"].as_u64() > Some(0), "{r}");
    }
    nothing_left(&d);
    assert_eq!(std::fs::read_dir(&journals).unwrap().count(), 0, "journals left behind");
    let _ = std::fs::remove_dir_all(&journals);
}

/// `lab guaranteed --group`: a group of three routers measured in the
/// same rounds as the single router, every figure present, its leader
/// named, every member's journal and directory removed.
#[test]
fn guaranteed_with_a_group_measures_it_beside_the_single_router_and_leaves_nothing() {
    let (d, journals) = (dir("guaranteed-group"), dir("guaranteed-group-journals"));
    std::fs::create_dir_all(&journals).unwrap();
    let _cpus = CPUS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let out = Command::new(BIN)
        .arg("--dir")
        .arg(&d)
        .args(["lab", "guaranteed", "--group", "--sync", "os", "--publishers", "2", "--rate", "5k"])
        .args(["--duration", "600ms", "--rounds", "1", "--json", "--journal-dir"])
        .arg(&journals)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let r = &json_rows(&stdout)[0];
    let g = &r["group"];
    assert!((1..=3).contains(&g["leader"].as_u64().unwrap()), "{r}");
    assert!(g["peak_rates"][0].as_f64().unwrap() > 0.0, "{r}");
    // 5k msg/s for 300 ms, through the group too: 1,500 acknowledged and delivered.
    assert_eq!((g["ack"]["count"].as_u64(), g["deliver"]["count"].as_u64()), (Some(1500), Some(1500)), "{r}");
    assert_eq!(r["ack"]["count"].as_u64(), Some(1500), "{r}");
    nothing_left(&d);
    assert_eq!(std::fs::read_dir(&journals).unwrap().count(), 0, "journals left behind");
    let _ = std::fs::remove_dir_all(&journals);
}

/// `lab guaranteed --consumers 3`: a durable queue's three consumers share
/// every message (each delivered once, to one of them), and the queue's
/// journal goes with the run.
#[test]
fn guaranteed_through_a_durable_queue_spreads_every_message_over_its_consumers() {
    let (d, journals) = (dir("guaranteed-queue"), dir("guaranteed-queue-journals"));
    std::fs::create_dir_all(&journals).unwrap();
    let _cpus = CPUS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let out = Command::new(BIN)
        .arg("--dir")
        .arg(&d)
        .args(["lab", "guaranteed", "--sync", "group", "--publishers", "2", "--consumers", "3", "--rate", "5k"])
        .args(["--duration", "600ms", "--rounds", "1", "--json", "--journal-dir"])
        .arg(&journals)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let r = &json_rows(&stdout)[0];
    assert_eq!(r["consumers"], 3, "{r}");
    assert_eq!((r["ack"]["count"].as_u64(), r["deliver"]["count"].as_u64()), (Some(1500), Some(1500)), "{r}");
    let per: Vec<u64> = r["per_consumer"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    let peak = r["peak_rates"][0].as_f64().unwrap() * 0.3;
    let total: u64 = per.iter().sum();
    // The probe, the peak's messages and the latency phase's 1,500: each
    // delivered once (a redelivery is not counted), spread over all three.
    assert!(per.len() == 3 && per.iter().all(|&n| n > total / 10), "{per:?}");
    assert!(total as f64 >= 1_501.0 + peak * 0.5, "{total} deliveries for a peak of {peak} messages: {r}");
    nothing_left(&d);
    assert_eq!(std::fs::read_dir(&journals).unwrap().count(), 0, "journals left behind");
    let _ = std::fs::remove_dir_all(&journals);
}

#[test]
fn request_round_trips_over_shared_memory_and_tcp_sit_beside_two_one_way_hops() {
    for transport in ["ipc", "tcp"] {
        let d = dir(&format!("request-{transport}"));
        let args = format!(
            "--transport {transport} --rate 10k --duration 400ms --rounds 2 --publishers 2 --subscribers 2 --json"
        );
        let (out, _) = run(&d, &["lab", "request"], &args);
        let rows = json_rows(&out);
        assert_eq!(rows.len(), 4, "{out}");
        let (all, floor) = (&rows[0], &rows[2]);
        assert_eq!(all["mode"], "request", "{all}");
        assert_eq!(floor["probe"], "2x_one_way", "{floor}");
        // 10k requests a second for two rounds of 200 ms: 4,000 round trips.
        assert_eq!(all["count"], 4_000, "{transport}: {all}");
        assert_eq!(all["lost"], 0, "{transport}: every request answered: {all}");
        // A round trip takes longer than one hop: the floor's median, which
        // is two hops, halved.
        let (rtt, hops) = (all["p50_ns"].as_u64().unwrap(), floor["p50_ns"].as_u64().unwrap());
        assert!(rtt > hops / 2, "{transport}: round trip {rtt} ns, two hops {hops} ns");
        assert!(all["ratio_p50"].as_f64().is_some(), "{all}");
        nothing_left(&d);
        let _ = std::fs::remove_dir_all(&d);
    }
}
