//! The far side of each measurement: a separate process started as
//! `tickwire lab worker ROLE`, where ROLE is a [`Job`] serialized as one
//! JSON argument. Each role pins itself, does its part, may print lines the
//! measuring side reads while it runs (`listening ADDR`), and prints one
//! result line last.

use super::common::LabError;
use super::output::report::ThroughputRow;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a worker waits for a silent peer before giving up.
pub(crate) const IDLE_LIMIT: Duration = Duration::from_secs(30);

/// What a worker process does, with everything it needs to do it: the
/// far side of one measurement, sent to `tickwire lab worker ROLE` as one
/// JSON object, its fields and `"role": ROLE`. Each job lives beside the
/// code it runs; [`crate::modes::run_worker`] lists them all.
pub trait Job: Serialize + DeserializeOwned {
    /// The job's name in the argument (`"role"`), unique in the lab.
    const ROLE: &'static str;

    /// Runs the job in the worker process; returns the result line to print.
    ///
    /// # Errors
    /// Set-up failures, or a peer silent for 30 s.
    fn run(self) -> Result<String, LabError>;
}

/// The one argument that carries `job`: its fields and `"role"`.
pub fn job_arg<J: Job>(job: &J) -> String {
    let mut v = serde_json::to_value(job).unwrap_or_default();
    if let Some(map) = v.as_object_mut() {
        map.insert("role".into(), J::ROLE.into());
    }
    v.to_string()
}

/// A worker's argument, read as far as its role: the role and the fields.
///
/// # Errors
/// [`LabError::Usage`] quoting the argument if it is not a JSON object with
/// a string `"role"`.
pub fn parse_role(arg: &str) -> Result<(String, serde_json::Value), LabError> {
    let bad = |why: &str| LabError::Usage(format!("worker: bad role {arg:?}: {why}"));
    let mut v: serde_json::Value = serde_json::from_str(arg).map_err(|e| bad(&e.to_string()))?;
    let map = v.as_object_mut().ok_or_else(|| bad("not a JSON object"))?;
    let role = match map.remove("role") {
        Some(serde_json::Value::String(r)) => r,
        _ => return Err(bad("no \"role\"")),
    };
    Ok((role, v))
}

/// The job of role `J::ROLE` from the fields [`parse_role`] left.
///
/// # Errors
/// [`LabError::Usage`] naming the role and what was wrong with its fields.
pub fn parse_job<J: Job>(fields: serde_json::Value) -> Result<J, LabError> {
    serde_json::from_value(fields).map_err(|e| LabError::Usage(format!("worker: bad role {:?}: {e}", J::ROLE)))
}

/// Parses a worker's JSON result line (`what` names the worker in the error).
///
/// # Errors
/// [`LabError::Worker`] quoting the line.
pub(crate) fn parse_report<T: serde::de::DeserializeOwned>(what: &str, line: &str) -> Result<T, LabError> {
    serde_json::from_str(line).map_err(|e| LabError::Worker(format!("bad {what} output {line:?}: {e}")))
}

/// In a worker: reads the line the measuring side sends with
/// [`WorkerProcess::write_line`] and takes what follows `prefix`.
///
/// # Errors
/// [`LabError::Worker`] if stdin closes first or the line is not `prefix ...`.
pub(crate) fn read_stdin_line(prefix: &str) -> Result<String, LabError> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    line.trim()
        .strip_prefix(prefix)
        .map(|v| v.trim().to_owned())
        .ok_or_else(|| LabError::Worker(format!("expected {prefix:?} on stdin, got {:?}", line.trim())))
}

/// A worker process killed on drop unless it exited.
#[derive(Debug)]
#[must_use = "the worker is killed when this is dropped"]
pub struct WorkerProcess {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: Option<std::io::BufReader<std::process::ChildStdout>>,
}

impl WorkerProcess {
    /// Starts `tickwire lab worker ROLE` from the current executable (or
    /// `$TICKWIRE_EXE`).
    ///
    /// # Errors
    /// If the executable cannot be spawned.
    pub fn spawn<J: Job>(job: &J) -> Result<Self, LabError> {
        Self::spawn_in(None, job)
    }

    /// Starts the worker inside network namespace `netns` (`ip netns exec`).
    ///
    /// # Errors
    /// If the executable cannot be spawned.
    pub fn spawn_in<J: Job>(netns: Option<&str>, job: &J) -> Result<Self, LabError> {
        let exe =
            std::env::var_os("TICKWIRE_EXE").map(std::path::PathBuf::from).map_or_else(std::env::current_exe, Ok)?;
        let mut cmd = match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let mut child = cmd
            .arg("lab")
            .arg("worker")
            .arg(job_arg(job))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(std::io::BufReader::new);
        Ok(Self { child, stdin, stdout })
    }

    /// Tells the running worker one more thing (a line on its stdin, read
    /// with `read_stdin_line`), e.g. an address known only now.
    ///
    /// # Errors
    /// [`LabError::Worker`] if the worker is gone.
    pub fn write_line(&mut self, line: &str) -> Result<(), LabError> {
        use std::io::Write;
        let stdin = self.stdin.as_mut().ok_or_else(|| LabError::Worker("stdin already closed".into()))?;
        writeln!(stdin, "{line}").and_then(|()| stdin.flush()).map_err(|e| LabError::Worker(format!("stdin: {e}")))
    }

    /// Reads one line the worker printed (e.g. the port it bound), waiting
    /// at most until the worker exits.
    ///
    /// # Errors
    /// [`LabError::Worker`] if the worker exited without printing one.
    pub fn read_line(&mut self) -> Result<String, LabError> {
        use std::io::BufRead;
        let mut line = String::new();
        let n = self.stdout.as_mut().map_or(Ok(0), |s| s.read_line(&mut line))?;
        if n == 0 {
            return Err(LabError::Worker("exited before reporting".into()));
        }
        Ok(line.trim().to_owned())
    }

    /// Reads the worker's `listening ADDR` line and parses ADDR.
    ///
    /// # Errors
    /// [`LabError::Worker`] if the line is missing or malformed.
    pub fn read_listening<T: std::str::FromStr>(&mut self) -> Result<T, LabError> {
        let line = self.read_line()?;
        line.strip_prefix("listening ")
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| LabError::Worker(format!("unexpected worker output {line:?}")))
    }

    /// Waits for the worker to exit (bounded by `timeout`) and returns the
    /// last line it printed.
    ///
    /// # Errors
    /// [`LabError::Timeout`] or [`LabError::Worker`] if it failed.
    pub fn finish(mut self, timeout: Duration) -> Result<String, LabError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                let mut out = String::new();
                if let Some(mut s) = self.stdout.take() {
                    use std::io::Read;
                    s.read_to_string(&mut out)?;
                }
                if !status.success() {
                    return Err(LabError::Worker(format!("exited with {status}")));
                }
                return Ok(out.lines().last().unwrap_or("").to_owned());
            }
            if Instant::now() > deadline {
                return Err(LabError::Timeout("worker did not exit".into()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A sink's watch over its idle turns: a turn that found nothing spins
/// once, and past [`IDLE_LIMIT`] of idle turns in a row the
/// sink gives up (the clock is read once per 4096 idle turns).
#[derive(Debug, Default)]
pub(crate) struct IdleWatch {
    turns: u32,
    since: Option<Instant>,
}

impl IdleWatch {
    /// A turn found work; true if the turns before it were idle.
    pub(crate) fn busy(&mut self) -> bool {
        let was_idle = self.turns != 0;
        self.turns = 0;
        self.since = None;
        was_idle
    }

    /// A turn found nothing: spins once.
    ///
    /// # Errors
    /// [`LabError::Timeout`](LabError::Timeout) naming `what` past
    /// the limit.
    pub(crate) fn idle(&mut self, what: &str) -> Result<(), LabError> {
        std::hint::spin_loop();
        // The idle spell's start, kept until work comes (not reset when
        // the count of turns wraps).
        let since = *self.since.get_or_insert_with(Instant::now);
        self.turns = self.turns.wrapping_add(1);
        if self.turns % 4096 == 0 && since.elapsed() > IDLE_LIMIT {
            let limit = IDLE_LIMIT.as_secs();
            return Err(LabError::Timeout(format!("no {what} for {limit} s")));
        }
        Ok(())
    }
}

/// A sink worker's result line: what it counted, as a JSON [`ThroughputRow`].
pub(crate) fn sink_report(count: u64, lost: u64, first: Option<Instant>) -> String {
    let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    let row = ThroughputRow {
        count,
        lost,
        duration_s: (secs * 1e6).round() / 1e6,
        msgs_per_s: if secs > 0.0 { (count as f64 / secs).round() } else { 0.0 },
        ..ThroughputRow::default()
    };
    serde_json::to_string(&row).unwrap_or_default()
}
