//! What the `tickwire` binary's end-to-end tests share: a scratch
//! directory, a run of the binary, and the checks of a lab row.
#![allow(dead_code)] // each test file uses some of them

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

pub fn dir(name: &str) -> String {
    let d = std::env::temp_dir().join(format!("tw-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d.display().to_string()
}

pub fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// `run` with the arguments written as one command line (no quoting).
pub fn run_line(line: &str) -> (bool, String, String) {
    run(&line.split_whitespace().collect::<Vec<_>>())
}

pub fn rows(stdout: &str) -> Vec<serde_json::Value> {
    stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

pub fn ordered(r: &serde_json::Value) {
    let v = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("missing {k} in {r}"));
    assert!(v("min_ns") <= v("p50_ns") && v("p50_ns") <= v("p90_ns") && v("p90_ns") <= v("p99_ns"), "{r}");
    assert!(v("p99_ns") <= v("p999_ns") && v("p999_ns") <= v("p9999_ns") && v("p9999_ns") <= v("max_ns"), "{r}");
    let mean = r["mean_ns"].as_f64().unwrap();
    assert!(mean >= v("min_ns") as f64 && mean <= v("max_ns") as f64, "{r}");
    // A standard deviation is at most half the range (Popoviciu), and is 0
    // only when every sample is the same.
    let (std, range) = (r["std_ns"].as_f64().unwrap(), (v("max_ns") - v("min_ns")) as f64);
    assert!(std <= range / 2.0 * 1.001 + 1.0 && (std > 0.0) == (range > 0.0), "std_ns {std}: {r}");
}

/// The argon2id hash `tickwire router hash-password` prints for `password`.
pub fn hash_password(password: &str) -> String {
    use std::io::Write;
    let mut p = Command::new(BIN)
        .args(["router", "hash-password"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    p.stdin.take().unwrap().write_all(format!("{password}\n").as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}
