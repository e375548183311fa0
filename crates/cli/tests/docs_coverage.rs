//! Documented commands that no other test ran: each runs here as the
//! documents show it, bounded (`crates/cli/src/doc_tests.rs` fails the
//! build for a documented subcommand no test under crates/*/tests/ runs).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

/// docs/lab.md and docs/PERFORMANCE.md: `tickwire lab topic-match`, small:
/// one round, 10 and 1,000 unrelated subscriptions, one JSON row each.
#[test]
fn lab_topic_match_prints_a_row_per_size() {
    let dir = format!("/dev/shm/tw-docs-topic-match-{}", std::process::id());
    let out = Command::new(BIN)
        .args(["--dir", &dir])
        .args(["lab", "topic-match", "--unrelated", "10,1000", "--rounds", "1", "--json"])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).expect(l)).collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    for (row, unrelated) in rows.iter().zip([10, 1000]) {
        assert_eq!(row["unrelated"], unrelated, "{row}");
        for key in ["cached_ns", "unwanted_ns", "uncached_ns"] {
            assert!(row[key].as_f64().is_some_and(|ns| ns > 0.0), "{key} in {row}");
        }
    }
}

/// docs/lab.md: `tickwire lab bindings`, Rust alone (bindings/python's
/// tests run it with the C and Python examples): one round, the Rust lab's
/// row, its ratio to itself 1.
#[test]
fn lab_bindings_without_c_or_python_prints_the_rust_row() {
    let dir = format!("/dev/shm/tw-docs-bindings-{}", std::process::id());
    let out = Command::new(BIN)
        .args(["--dir", &dir])
        .args(["lab", "bindings", "--count", "2000", "--rounds", "1", "--json"])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value = serde_json::from_str(stdout.trim()).expect(&stdout);
    let rows = r["pingpong"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{r}");
    assert_eq!(rows[0]["path"], "rust lab");
    assert!(rows[0]["median_p50_ns"].as_u64().is_some_and(|ns| ns > 0), "{r}");
    assert_eq!(rows[0]["p50_vs_rust"], 1.0);
    assert_eq!(r["throughput"].as_array().map(Vec::len), Some(0), "{r}");
}

/// docs/lab.md: `tickwire lab fsync --on DIR`, small: one JSON row of as
/// many samples as asked, nothing left in DIR; a directory that cannot be
/// made is named.
#[test]
fn lab_fsync_measures_the_disk_and_leaves_nothing() {
    let dir = std::env::temp_dir().join(format!("tw-docs-fsync-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new(BIN)
        .args(["lab", "fsync", "--on"])
        .arg(&dir)
        .args(["--count", "50", "--size", "256", "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).expect(l)).collect();
    assert_eq!(rows.len(), 1, "{stdout}");
    assert_eq!(
        (rows[0]["mode"].as_str(), rows[0]["count"].as_u64(), rows[0]["size"].as_u64()),
        (Some("fsync"), Some(50), Some(256))
    );
    assert!(
        rows[0]["p50_ns"].as_u64().is_some_and(|ns| ns > 0) && rows[0]["max_ns"].as_u64() >= rows[0]["p50_ns"].as_u64(),
        "{stdout}"
    );
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert!(left.is_empty(), "the probe's file is removed: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);

    let out =
        Command::new(BIN).args(["lab", "fsync", "--on", "/proc/tw-no-such-dir", "--count", "5"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("/proc/tw-no-such-dir"), "{stderr}");
    let out = Command::new(BIN).args(["lab", "fsync", "--size", "2MiB"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("1 MiB"), "a block past the limit is refused: {stderr}");
}
