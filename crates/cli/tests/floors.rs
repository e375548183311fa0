//! Floors that are floors (issue 40): the product beside its floor for a
//! short run, each ratio on the right side of 1 with the noise margin
//! (latency p50 at least 0.95x the floor's, throughput at most 1.05x),
//! both given their share of the cache-line reference, and under
//! `--strict`, which would fail the run otherwise; in one of three
//! attempts (this VM's noise), so a floor beaten every time fails.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

/// Attempts at each check: this VM's host pauses its vCPUs for up to
/// milliseconds, and a short run's rounds vary by several times (CI saw a
/// throughput round at 4.4x its floor's, the median at 1.47x, the floor's
/// batch search picking 4). A floor that is not a floor for the work is
/// beaten in every attempt; noise is not.
const ATTEMPTS: usize = 3;

/// The run's JSON rows, or why it failed (`--strict`: a row beat its floor).
fn lab(name: &str, args: &[&str]) -> Result<Vec<serde_json::Value>, String> {
    let dir = format!("/dev/shm/tw-floors-{name}-{}", std::process::id());
    let out = Command::new(BIN).args(["--dir", &dir, "lab"]).args(args).args(["--json", "--strict"]).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(stdout.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).expect(l)).collect())
}

/// `check` passes in one of [`ATTEMPTS`] attempts; else every attempt's
/// reason.
fn in_one_attempt(check: impl Fn() -> Result<(), String>) {
    let mut why = Vec::new();
    for _ in 0..ATTEMPTS {
        match check() {
            Ok(()) => return,
            Err(e) => why.push(e),
        }
    }
    panic!("beaten in every one of {ATTEMPTS} attempts:\n{}", why.join("\n---\n"));
}

/// One test, the two runs in turn: both spin on CPUs 0 and 1, and side by
/// side they would measure each other.
#[test]
fn ipc_pingpong_and_throughput_are_no_faster_than_their_ring_floors() {
    in_one_attempt(pingpong);
    in_one_attempt(throughput);
}

fn pingpong() -> Result<(), String> {
    let rows =
        lab("pingpong", &["pingpong", "--transport", "ipc", "--size", "64", "--count", "40000", "--rounds", "4"])?;
    let product = rows.iter().find(|r| r["floor_probe"].is_string()).expect("a row with its floor");
    let ratio = product["ratio_p50"].as_f64().unwrap();
    if ratio < 0.95 || product.get("floor_beaten").is_some() {
        return Err(format!("ipc ping-pong at {ratio}x its raw-ring floor: {product}"));
    }
    Ok(())
}

fn throughput() -> Result<(), String> {
    let rows =
        lab("throughput", &["throughput", "--transport", "ipc", "--size", "32", "--duration", "1s", "--rounds", "2"])?;
    let product = rows.iter().find(|r| r["ratio"].is_number()).expect("a row with its floor");
    let ratio = product["ratio"].as_f64().unwrap();
    if ratio > 1.05 || product.get("floor_beaten").is_some() {
        return Err(format!("ipc throughput at {ratio}x its slot-ring floor: {product}"));
    }
    // Its floor is the slot ring (each message visible on its own, as the
    // log commits every frame); the batched ring is a reference beside it.
    let floor = rows.iter().find(|r| r["probe"] == "slot_ring_throughput").expect("the floor's row");
    assert_eq!(product["floor_msgs_per_s"], floor["msgs_per_s"], "the ratio is to the slot ring: {product}");
    let batched = rows.iter().find(|r| r["probe"] == "raw_ring_throughput").expect("the batched reference's row");
    assert_eq!(batched["mode"], "reference", "{batched}");
    assert!(product["of_batched_ring"].as_f64().is_some_and(|s| s > 0.0), "{product}");
    // All carry their share of the line reference (measured in the same
    // rounds; reported, not judged: it is not a proven bound), and none is
    // marked for passing it.
    for row in [product, floor, batched] {
        let share = row["of_line_limit"].as_f64().unwrap_or_else(|| panic!("no line-limit share: {row}"));
        assert!(share > 0.0, "no share of the cache-line reference: {row}");
        assert!(row.get("floor_beaten").is_none(), "{row}");
    }
    assert!(rows.iter().any(|r| r["probe"] == "cacheline_stream"), "the limit's own row");
    Ok(())
}
