//! System tests of reliable UDP: `tickwire lab transfer` between worker
//! processes, on loopback and across network namespaces (created and removed
//! by the command), with the built-in loss injection.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

#[path = "support/ratios.rs"]
mod ratios;
use ratios::{carried_floor, pause_free_ratios_to, ratios_to, rounds_to, throughput_ratio};

#[path = "support/transfer.rs"]
mod support;
use support::transfer;

fn exact(r: &serde_json::Value) {
    assert_eq!(r["identical"], true, "{r}");
    assert_eq!(r["in_order"], true, "{r}");
    assert_eq!(r["lost_events"], 0, "{r}");
    assert_eq!(r["bytes_received"], r["bytes_sent"], "{r}");
    for rec in r["receivers"].as_array().unwrap() {
        assert_eq!(rec["messages"], r["sender"]["messages"], "exactly once: {r}");
    }
}

#[test]
fn ten_mib_with_one_fixed_gap_costs_one_nak_and_one_retransmission() {
    // `make test` runs test binaries side by side on two CPUs, where a repair
    // queued behind a full 1 MiB window can take longer than the default
    // 10 ms first retry; this test is about the cost of one gap, so it gives
    // the retry room (retries have their own test below).
    for netns in ["", "--netns"] {
        let r = transfer(&format!(
            "--bytes 10MiB {netns} --param send-data-drop=5000000-5000001 --param nak-retry-initial=200ms"
        ));
        exact(&r);
        assert_eq!(r["datagrams_dropped"], 1, "{r}");
        assert_eq!(r["naks_sent"], 1, "{netns}: {r}");
        assert_eq!(r["retransmits"], 1, "{netns}: {r}");
    }
}

#[test]
fn seeded_random_loss_with_reorder_and_duplication_is_repaired_exactly() {
    for (loss, netns) in [(0.01, ""), (0.05, "--netns"), (0.20, ""), (0.20, "--netns")] {
        let r = transfer(&format!("--bytes 4MiB {netns} --loss {loss} --reorder 0.01 --duplicate 0.01 --seed 7"));
        exact(&r);
        assert!(r["retransmits"].as_u64().unwrap() > 0, "{r}");
        assert!(r["receivers"][0]["duplicates"].as_u64().unwrap() > 0, "{r}");
    }
}

#[test]
fn lost_naks_are_retried_until_the_repair_comes() {
    let r = transfer("--bytes 2MiB --netns --param send-data-loss=0.05 --param send-control-loss=0.5 --seed 3");
    exact(&r);
    let rec = &r["receivers"][0];
    assert!(rec["nak_retries"].as_u64().unwrap() > 0, "{r}");
    assert!(rec["control_dropped"].as_u64().unwrap() > 0, "{r}");
}

/// Four receivers NAK each loss, yet the sender retransmits about once per
/// lost datagram: at most 1.5 per loss, plus one for each NAK retry of the
/// receiver that retried most (a retry is a repair that came late, as when
/// the host pauses a vCPU past the sender's linger; the receivers' retries
/// of one gap suppress each other, so the most any one made bounds them).
#[test]
fn multicast_nak_suppression_keeps_retransmissions_near_one_per_loss() {
    let r = transfer("--bytes 4MiB --netns --receivers 4 --param send-data-loss=0.02 --seed 5");
    exact(&r);
    assert_eq!(r["receivers"].as_array().unwrap().len(), 4);
    let ratio = r["retransmits_per_loss"].as_f64().unwrap();
    let dropped = r["datagrams_dropped"].as_f64().unwrap();
    let retries =
        r["receivers"].as_array().unwrap().iter().map(|x| x["nak_retries"].as_u64().unwrap()).max().unwrap_or(0);
    let allowed = 1.5 * dropped + retries as f64;
    assert!(
        ratio > 0.0 && ratio * dropped <= allowed,
        "{ratio} retransmissions per lost datagram, {retries} late repairs at most: {r}"
    );
    let suppressed: u64 =
        r["receivers"].as_array().unwrap().iter().map(|x| x["naks_suppressed"].as_u64().unwrap()).sum();
    assert!(suppressed > 0, "{r}");
}

#[test]
fn a_gap_beyond_the_retention_is_reported_lost_and_the_stream_goes_on() {
    // The receiver waits 50 ms before NAKing; meanwhile the sender (64 KiB
    // retention, receiver window 1 MiB) has moved far past the gap.
    let params = "--param retention=64k --param max-message=16k --param nak-delay=50ms";
    let r = transfer(&format!("--bytes 4MiB {params} --param send-data-drop=1000000-1000001"));
    let rec = &r["receivers"][0];
    assert_eq!(rec["lost_events"], 1, "{r}");
    let lost = rec["lost_bytes"].as_u64().unwrap();
    assert!(lost > 0 && lost <= 1408, "one datagram's worth: {r}");
    assert_eq!(r["identical"], false);
    // It went on: everything but the (at most two, 4 KiB) messages with a
    // fragment in the lost datagram arrived.
    let missing = r["bytes_sent"].as_u64().unwrap() - r["bytes_received"].as_u64().unwrap();
    assert!(missing > 0 && missing <= 8192, "{r}");
    assert_eq!(rec["messages"].as_u64().unwrap() + 1, r["sender"]["messages"].as_u64().unwrap(), "{r}");
    assert_eq!(r["sender"]["drained"], true, "{r}");
}

#[test]
fn tail_loss_followed_by_silence_is_found_by_heartbeat() {
    let probe = transfer("--bytes 200k --max-size 100");
    let end = probe["sender"]["final_position"].as_u64().unwrap();
    let r = transfer(&format!("--bytes 200k --max-size 100 --param send-data-drop={}-{end}", end - 3000));
    exact(&r);
    assert!(r["datagrams_dropped"].as_u64().unwrap() >= 2, "{r}");
    assert!(r["sender"]["heartbeats"].as_u64().unwrap() > 0, "{r}");
    assert!(r["naks_sent"].as_u64().unwrap() >= 1, "{r}");
}

#[test]
fn several_receivers_without_namespaces_is_a_clear_error() {
    let out = Command::new(BIN).args(["lab", "transfer", "--receivers", "2"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--netns"));
}

fn json_lines(line: &str) -> Vec<serde_json::Value> {
    let out = Command::new(BIN).args(line.split_whitespace()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{line}\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

#[test]
fn lab_measures_rudp_pingpong_against_kernel_udp_throughput_and_oneway_under_loss() {
    let rows = json_lines("lab pingpong --transport rudp --count 3000 --warmup 200 --rounds 2 --json");
    let r = rows.iter().find(|r| r["mode"] == "pingpong").unwrap();
    assert_eq!(r["transport"], "rudp");
    assert!(r["p50_ns"].as_u64().unwrap() > 0, "{r}");
    match rows.iter().find(|r| r["mode"] == "floor") {
        Some(floor) => ratios_to(r, floor),
        None => carried_floor(r),
    }
    // Interleaved with plain UDP moving the same packed datagrams (sendmmsg/recvmmsg).
    let t = json_lines("lab throughput --transport rudp --size 64 --duration 1s --rounds 2 --json");
    assert_eq!((t[0]["transport"].as_str(), t[1]["probe"].as_str()), (Some("rudp"), Some("sendmmsg_recvmmsg")));
    assert!(t[0]["count"].as_u64().unwrap() > 10_000, "{}", t[0]);
    assert_eq!(t[0]["lost"], 0, "{}", t[0]);
    assert!(t[1]["count"].as_u64().unwrap() > 10_000, "{t:?}");
    throughput_ratio(&t[0], &t[1]);
    let o = &json_lines("lab oneway --transport rudp --rate 20k --duration 1s --loss 0.01 --json")[0];
    assert_eq!(o["transport"], "rudp");
    assert_eq!(o["lost"], 0, "every message arrives despite the loss: {o}");
    assert!(o["count"].as_u64().unwrap() >= 19_000, "{o}");
}

/// Issue 11: `lab transfer --seed 7` once failed 2 runs in 200 with "worker
/// did not exit": the closing sender stopped after one END_OF_STREAM
/// heartbeat, and when that datagram was lost (a full receive buffer at the
/// end of a burst) the receiver waited for an end it never heard. A closing
/// sender now waits for every receiver's STATUS saying it delivered the end,
/// heartbeating until then. 200 runs, as the issue asks.
#[test]
fn two_hundred_seeded_transfers_all_end() {
    for i in 0..200 {
        let r = transfer("--bytes 1MiB --seed 7");
        exact(&r);
        assert_eq!(r["sender"]["drained"], true, "run {i}: {r}");
    }
}

/// Issue 18: one-way and rate sweep over the network, each reliable-UDP
/// round interleaved with a kernel-UDP round at the same rate and size.
#[test]
fn oneway_and_sweep_over_the_network_carry_a_kernel_udp_floor() {
    let kinds = |rows: &[serde_json::Value]| -> Vec<(String, String, String)> {
        rows.iter()
            .map(|r| {
                let s = |k: &str| r[k].as_str().unwrap_or("").to_owned();
                (s("mode"), s("transport"), s("distribution"))
            })
            .collect()
    };
    let k = |m: &str, t: &str, d: &str| (m.to_owned(), t.to_owned(), d.to_owned());
    let o = json_lines("lab oneway --transport rudp --rate 20k --duration 400ms --rounds 2 --json");
    assert_eq!(
        kinds(&o),
        [
            k("oneway", "rudp", "all"),
            k("oneway", "rudp", "pause_free"),
            k("floor", "udp", "all"),
            k("floor", "udp", "pause_free")
        ]
    );
    for r in &o {
        assert_eq!(r["lost"], 0, "{r}");
        assert_eq!(
            r["count"].as_u64().unwrap()
                + r["excluded"].as_u64().unwrap() * u64::from(r["distribution"] == "pause_free"),
            8_000,
            "{r}"
        );
    }
    ratios_to(&o[0], &o[2]);
    pause_free_ratios_to(&o[1], &o[3]);
    let t = json_lines("lab oneway --transport tcp --rate 20k --duration 200ms --rounds 1 --json");
    assert_eq!(kinds(&t), [k("oneway", "tcp", "all"), k("oneway", "tcp", "pause_free")]);
    assert_eq!((t[0]["count"].as_u64(), t[0]["lost"].as_u64()), (Some(4_000), Some(0)), "{}", t[0]);

    let s = json_lines("lab sweep-rate --transport rudp --rates 10k,20k --step 300ms --reflect-every 10 --json");
    let per_rate = [
        k("sweep-rate", "rudp", "all"),
        k("sweep-rate", "rudp", "pause_free"),
        k("floor", "udp", "all"),
        k("floor", "udp", "pause_free"),
    ];
    assert_eq!(kinds(&s), [per_rate.clone(), per_rate].concat());
    for (chunk, rate) in s.chunks(4).zip([10_000.0, 20_000.0]) {
        for r in chunk.iter().step_by(2) {
            assert_eq!(r["offered_rate"].as_f64(), Some(rate), "{r}");
            assert_eq!(r["lost"], 0, "{r}");
            // 1 in 10 of rate * 0.3 s comes back (give or take the edges).
            assert!((r["count"].as_f64().unwrap() - rate * 0.03).abs() <= 3.0, "{r}");
        }
        ratios_to(&chunk[0], &chunk[2]);
        ratios_to(&chunk[1], &chunk[3]);
    }
}

/// A sweep names the highest rate each path sustained and stops past it;
/// across namespaces it leaves none behind.
#[test]
fn a_udp_sweep_across_namespaces_stops_past_what_it_sustains() {
    let out = Command::new(BIN)
        .args(["lab", "sweep-rate", "--transport", "udp", "--netns", "--rates", "10k,50M,100M", "--step", "200ms"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("udp: highest rate sustained 10000 msg/s"), "{stdout}");
    assert!(
        stdout.contains("   50000000 ") && !stdout.contains("100000000"),
        "ran past the first unsustained rate: {stdout}"
    );
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let left = String::from_utf8_lossy(&ns.stdout).lines().filter(|l| l.starts_with("tw")).count();
    assert_eq!(left, 0, "namespaces left behind: {}", String::from_utf8_lossy(&ns.stdout));
}

/// A fresh key in a directory of its own (removed by the caller).
fn keyfile(tag: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("tickwire-rudp-key-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("key");
    let out = Command::new(BIN).arg("keygen").arg(&key).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (dir, key.display().to_string())
}

/// Issue 16: with a shared key every datagram carries a MAC; loss,
/// reorder and duplication across namespaces are still repaired exactly.
#[test]
fn a_keyed_transfer_with_loss_across_namespaces_is_exact() {
    let (dir, key) = keyfile("transfer");
    let r = transfer(&format!(
        "--bytes 4MiB --netns --loss 0.05 --reorder 0.01 --duplicate 0.01 --seed 9 --param auth={key}"
    ));
    exact(&r);
    assert!(r["retransmits"].as_u64().unwrap() > 0, "{r}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `tickwire keygen` writes a key only its owner can read and will not
/// overwrite one; a subscriber with another key joins nothing and says
/// what it dropped; a key readable by others is refused by name.
#[test]
fn keygen_and_a_wrong_key_are_named() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, key) = keyfile("wrong");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let again = Command::new(BIN).args(["keygen", &key]).output().unwrap();
    assert!(!again.status.success() && String::from_utf8_lossy(&again.stderr).contains("exists"));
    let other = dir.join("other").display().to_string();
    assert!(Command::new(BIN).args(["keygen", &other]).status().unwrap().success());
    let port = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let chan = |k: &str| format!("--channel=udp://127.0.0.1:{port}?auth={k}");
    let sub = Command::new(BIN)
        .args(["sub", &chan(&other), "--duration", "1500ms"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let publ = Command::new(BIN).args(["pub", &chan(&key), "--count", "10", "--wait", "700ms"]).output().unwrap();
    assert!(!publ.status.success(), "a publisher with another key found a subscriber");
    let sub = sub.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&sub.stderr);
    assert!(err.contains("received 0 messages") && err.contains("unauthenticated="), "{err}");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let open = Command::new(BIN).args(["sub", &chan(&key), "--duration", "100ms"]).output().unwrap();
    let err = String::from_utf8_lossy(&open.stderr);
    assert!(!open.status.success() && err.contains(&key) && err.contains("chmod 600"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `lab auth-cost`, briefly: every path measured, nothing lost, ratios
/// present, and the temporary key removed.
#[test]
fn lab_auth_cost_measures_every_path_and_leaves_no_key() {
    let dir = std::env::temp_dir().join(format!("tickwire-auth-cost-{}", std::process::id()));
    let line =
        format!("lab auth-cost --json --rounds 1 --count 2000 --warmup 200 --duration 200ms --dir {}", dir.display());
    let out = Command::new(BIN).args(line.split_whitespace()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{line}\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let paths =
        |k: &str| r[k].as_array().unwrap().iter().map(|p| p["path"].as_str().unwrap().to_owned()).collect::<Vec<_>>();
    assert_eq!(paths("pingpong"), ["udp", "rudp", "rudp+mac"], "{r}");
    assert_eq!(paths("throughput"), ["udp", "rudp", "rudp+mac"], "{r}");
    assert_eq!(r["rounds"], 1, "{r}");
    let n = |x: &serde_json::Value, k: &str| x[k].as_f64().unwrap_or_else(|| panic!("no {k} in {x}"));
    for p in r["pingpong"].as_array().unwrap() {
        assert_eq!(p["count"], 2000, "{r}");
        assert!(0.0 < n(p, "p50_ns") && n(p, "p50_ns") <= n(p, "p99_ns"), "{r}");
        assert!(n(p, "p99_ns") <= n(p, "p999_ns") && n(p, "p999_ns") <= n(p, "max_ns"), "{r}");
    }
    for t in r["throughput"].as_array().unwrap() {
        assert_eq!(t["missing"], 0, "{r}");
        // 200 ms of 64-byte messages: a thousand a second at least, 10 GB/s at most.
        assert!(n(t, "msgs_per_s") >= 1_000.0 && n(t, "msgs_per_s") * 64.0 <= 1e10, "{r}");
    }
    // The ratios are of the rows above (rudp+mac over rudp; one round, so
    // the median of the per-round throughput ratios is that round's).
    let (ping, tput) = (&r["pingpong"], &r["throughput"]);
    for (k, exact) in [
        ("mac_pingpong_p50_ratio", n(&ping[2], "p50_ns") / n(&ping[1], "p50_ns")),
        ("mac_pingpong_p99_ratio", n(&ping[2], "p99_ns") / n(&ping[1], "p99_ns")),
        ("mac_throughput_ratio", n(&tput[2], "msgs_per_s") / n(&tput[1], "msgs_per_s")),
    ] {
        assert!(rounds_to(n(&r, k), exact), "{k} {}, the rows say {exact}: {r}", n(&r, k));
    }
    let left: Vec<_> =
        std::fs::read_dir(&dir).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(!left.iter().any(|n| n.to_string_lossy().ends_with(".key")), "{left:?}");
    let _ = std::fs::remove_dir_all(dir);
}
