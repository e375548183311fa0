//! `tickwire lab transfer --json`, shared by the system tests of reliable
//! UDP (`rudp.rs`) and of AF_XDP (`xdp.rs`).

use std::process::Command;

/// Runs `tickwire lab transfer --json --timeout 60s ARGS`; returns its report.
pub fn transfer(args: &str) -> serde_json::Value {
    let line = format!("lab transfer --json --timeout 60s {args}");
    let out = Command::new(env!("CARGO_BIN_EXE_tickwire")).args(line.split_whitespace()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{line}\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}
