//! Floors that are floors (issue 40): the product beside its floor for a
//! short run, each ratio on the right side of 1 with the noise margin
//! (latency p50 at least 0.95x the floor's, throughput at most 1.05x),
//! both given their share of the cache-line reference, and under
//! `--strict`, which would fail the run otherwise.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

fn lab(name: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let dir = format!("/dev/shm/tw-floors-{name}-{}", std::process::id());
    let out = Command::new(BIN).args(["--dir", &dir, "lab"]).args(args).args(["--json", "--strict"]).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).expect(l)).collect()
}

/// One test, the two runs in turn: both spin on CPUs 0 and 1, and side by
/// side they would measure each other.
#[test]
fn ipc_pingpong_and_throughput_are_no_faster_than_their_raw_ring_floors() {
    pingpong();
    throughput();
}

fn pingpong() {
    let rows =
        lab("pingpong", &["pingpong", "--transport", "ipc", "--size", "64", "--count", "40000", "--rounds", "4"]);
    let product = rows.iter().find(|r| r["floor_probe"].is_string()).expect("a row with its floor");
    let ratio = product["ratio_p50"].as_f64().unwrap();
    assert!(ratio >= 0.95, "ipc ping-pong at {ratio}x its raw-ring floor: {product}");
    assert!(product.get("floor_beaten").is_none(), "{product}");
}

fn throughput() {
    let rows =
        lab("throughput", &["throughput", "--transport", "ipc", "--size", "32", "--duration", "1s", "--rounds", "2"]);
    let product = rows.iter().find(|r| r["ratio"].is_number()).expect("a row with its floor");
    let ratio = product["ratio"].as_f64().unwrap();
    assert!(ratio <= 1.05, "ipc throughput at {ratio}x its raw-ring floor: {product}");
    assert!(product.get("floor_beaten").is_none(), "{product}");
    // Both carry their share of the line reference (measured in the same
    // rounds; reported, not judged: it is not a proven bound), and the
    // floor is not marked for passing it.
    let floor = rows.iter().find(|r| r["probe"] == "raw_ring_throughput").expect("the floor's row");
    for row in [product, floor] {
        let share = row["of_line_limit"].as_f64().unwrap_or_else(|| panic!("no line-limit share: {row}"));
        assert!(share > 0.0, "no share of the cache-line reference: {row}");
        assert!(row.get("floor_beaten").is_none(), "{row}");
    }
    assert!(rows.iter().any(|r| r["probe"] == "cacheline_stream"), "the limit's own row");
}
