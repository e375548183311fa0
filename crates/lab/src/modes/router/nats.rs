//! `lab router --nats`: NATS rounds beside the native ones, through the
//! same router's NATS listener, with the real NATS Go client
//! (github.com/nats-io/nats.go) as load generator.
//!
//! The generator is tools/nats-lab (Go): one process, pinned to the
//! harness's CPU (it inherits the affinity of the thread that starts it),
//! that holds P publisher and S subscriber connections for the whole run,
//! in the same shape as the native harness (subscriber *i* on
//! `nt.topicNNNN` of publisher *i*, or every one on `nt.>`: topics of the
//! native ones' length, `nt/topic0000`, that the native clients on
//! `md/...` never share), and runs a
//! round on each `round RATE DURATION_NS PATH` line: open loop, message
//! *i* due at `t0 + i / rate` from publisher `i % P`, stamped as
//! [`tickwire_wire::stamp`] does, on CLOCK_MONOTONIC. It writes each
//! delivery's intended send time and arrival to PATH ([`read_samples`])
//! and prints a [`GoRound`] line. Its own loop records no pauses: the
//! pause-free distribution of a NATS round leaves out only the router's.

use crate::base::openloop::Samples;
use crate::LabError;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// The NATS clients' subjects' first token (`nt.topic0000`: the native
/// clients' topics are `md/topic0000`, the same length).
pub const SUBJECT_PREFIX: &str = "nt";

/// The Go client the generator is built with (tools/nats-lab/go.mod).
pub const NATS_GO_VERSION: &str = "github.com/nats-io/nats.go v1.55.0";

/// Where the generator's source is, from this crate's (the workspace's
/// tools/nats-lab).
fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/nats-lab")
}

/// The generator's binary: `given` (`--nats-lab`), else
/// `$TICKWIRE_NATS_LAB`, else built now from tools/nats-lab into
/// target/go-bin/nats-lab with the Go toolchain (`go` on the PATH, or
/// /usr/local/go/bin/go; `go build` rebuilds only what changed).
///
/// # Errors
/// [`LabError::Usage`] naming what is missing: the given binary, or Go,
/// or the source; [`LabError::Worker`] if `go build` fails.
pub fn harness_binary(given: Option<&Path>) -> Result<PathBuf, LabError> {
    let given = given.map(Path::to_owned).or_else(|| std::env::var_os("TICKWIRE_NATS_LAB").map(PathBuf::from));
    if let Some(bin) = given {
        return match bin.is_file() {
            true => Ok(bin),
            false => Err(LabError::Usage(format!(
                "lab router --nats: the NATS load generator {} (--nats-lab or TICKWIRE_NATS_LAB) does not exist; \
                 scripts/nats-lab.sh builds it",
                bin.display()
            ))),
        };
    }
    let src = source_dir();
    if !src.join("go.mod").is_file() {
        return Err(LabError::Usage(format!(
            "lab router --nats needs the NATS load generator: pass --nats-lab PATH (or TICKWIRE_NATS_LAB), \
             built from tools/nats-lab (not found at {})",
            src.display()
        )));
    }
    let go = go_toolchain().ok_or_else(|| {
        LabError::Usage(
            "lab router --nats needs Go to build its NATS load generator (tools/nats-lab, on nats.go): no `go` \
             on the PATH nor /usr/local/go/bin/go; install Go (https://go.dev/dl), or pass a built one with \
             --nats-lab PATH (or TICKWIRE_NATS_LAB)"
                .into(),
        )
    })?;
    let out = src.join("../../target/go-bin/nats-lab");
    let built = Command::new(&go)
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(&src)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| LabError::Worker(format!("{}: {e}", go.display())))?;
    if !built.success() {
        return Err(LabError::Worker(format!("go build of {} failed ({built})", src.display())));
    }
    Ok(out)
}

/// `go` on the PATH, else Go's default install directory.
fn go_toolchain() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("go"))
        .chain(std::iter::once(PathBuf::from("/usr/local/go/bin/go")))
        .find(|p| p.is_file())
}

/// What the generator says after a round.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GoRound {
    /// Messages published.
    pub sent: u64,
    /// Seconds from the first intended send time to the end of sending.
    pub secs: f64,
    /// Deliveries recorded (the samples file's records).
    pub received: u64,
    /// The most a message went after its intended time, ns.
    pub late_max_ns: u64,
}

/// The samples file of a round: 16-byte records, each the intended send
/// time then the arrival, u64 little-endian ns on CLOCK_MONOTONIC.
///
/// # Errors
/// A length that is not a whole number of records.
pub fn read_samples(bytes: &[u8]) -> Result<Samples, LabError> {
    if bytes.len() % 16 != 0 {
        return Err(LabError::Worker(format!("NATS samples: {} bytes is not a whole number of records", bytes.len())));
    }
    let mut s = Samples::with_capacity(bytes.len() / 16);
    for r in bytes.chunks_exact(16) {
        let word = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().unwrap_or_default());
        s.push(word(0), word(8));
    }
    Ok(s)
}

/// The generator, connected, for a whole run.
pub(crate) struct GoHarness {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl GoHarness {
    /// Starts `bin` against `url` (from the calling thread: pin it first)
    /// and waits until every subscription carries messages.
    ///
    /// # Errors
    /// The binary does not start, or exits before it says `ready`.
    pub(crate) fn start(
        bin: &Path,
        url: &str,
        (publishers, subscribers): (usize, usize),
        fanout: bool,
        size: usize,
    ) -> Result<Self, LabError> {
        let mut cmd = Command::new(bin);
        cmd.args(["-url", url, "-prefix", SUBJECT_PREFIX])
            .args(["-publishers", &publishers.to_string(), "-subscribers", &subscribers.to_string()])
            .args(["-size", &size.to_string()]);
        if fanout {
            cmd.arg("-fanout");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| LabError::Worker(format!("{}: {e}", bin.display())))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(LabError::Worker("nats-lab: no pipes".into()));
        };
        let mut h = Self { child, stdin, stdout: BufReader::new(stdout) };
        match h.read_line()?.as_str() {
            "ready" => Ok(h),
            other => Err(LabError::Worker(format!("nats-lab said {other:?}, not ready"))),
        }
    }

    fn read_line(&mut self) -> Result<String, LabError> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
            return Err(LabError::Worker(format!("nats-lab exited ({status}); its errors are above")));
        }
        Ok(line.trim().to_owned())
    }

    /// One round; its samples are read from (and left in) `path`.
    ///
    /// # Errors
    /// The generator failed, or its output is malformed.
    pub(crate) fn round(&mut self, rate: u64, duration: Duration, path: &Path) -> Result<(GoRound, Samples), LabError> {
        let line = format!("round {rate} {} {}", duration.as_nanos(), path.display());
        writeln!(self.stdin, "{line}").and_then(|()| self.stdin.flush())?;
        let r: GoRound = crate::base::worker::parse_report("nats-lab", &self.read_line()?)?;
        let samples = read_samples(&std::fs::read(path)?)?;
        if samples.len() as u64 != r.received {
            return Err(LabError::Worker(format!(
                "nats-lab: {} samples in the file, {} said",
                samples.len(),
                r.received
            )));
        }
        Ok((r, samples))
    }

    /// Closes the connections and waits for the generator to exit.
    pub(crate) fn stop(mut self) -> Result<(), LabError> {
        writeln!(self.stdin, "stop").and_then(|()| self.stdin.flush())?;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait()? {
                return match status.success() {
                    true => Ok(()),
                    false => Err(LabError::Worker(format!("nats-lab exited with {status}"))),
                };
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(LabError::Timeout("nats-lab did not exit".into()))
    }
}

impl Drop for GoHarness {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_samples_file_is_read_as_intended_then_arrival() {
        let mut bytes = Vec::new();
        for (intended, arrived) in [(1_000u64, 3_000u64), (2_000, 2_500), (u64::MAX - 5, u64::MAX)] {
            bytes.extend(intended.to_le_bytes());
            bytes.extend(arrived.to_le_bytes());
        }
        let s = read_samples(&bytes).unwrap();
        assert_eq!(s.len(), 3);
        let split = s.split(Vec::new());
        assert_eq!((split.all.len(), split.all.min(), split.all.max()), (3, 5, 2_000));
        // A torn record is refused, an empty file is no deliveries.
        let e = read_samples(&bytes[..20]).unwrap_err().to_string();
        assert!(e.contains("20 bytes"), "{e}");
        assert!(read_samples(&[]).unwrap().is_empty());
    }

    #[test]
    fn the_round_line_parses() {
        let r: GoRound = crate::base::worker::parse_report(
            "nats-lab",
            r#"{"sent":50000,"secs":1.000035,"received":49990,"late_max_ns":1992934}"#,
        )
        .unwrap();
        assert_eq!(r, GoRound { sent: 50_000, secs: 1.000035, received: 49_990, late_max_ns: 1_992_934 });
        assert!(crate::base::worker::parse_report::<GoRound>("nats-lab", "ready").is_err());
    }

    #[test]
    fn a_missing_generator_is_named() {
        let e = harness_binary(Some(Path::new("/nonexistent/nats-lab"))).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/nats-lab") && e.contains("scripts/nats-lab.sh"), "{e}");
    }
}
