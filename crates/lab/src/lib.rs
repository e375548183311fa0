//! # tickwire-lab: the latency lab
//!
//! Every performance figure tickwire states is produced here, against a
//! baseline measured in the same run: the machine's *floor* (a cache-line
//! ping-pong and a raw shared-memory ring between the two pinned CPUs).
//!
//! * [`floor`]: the floor probes.
//! * [`doctor`]: machine settings that cost latency, with `--apply` and a way back.
//! * [`ipc`]: half-round-trip ping-pong and streaming throughput over the
//!   tickwire shared-memory transport.
//! * [`oneway`]: one-way latency at a fixed offered rate, open loop, from
//!   each message's intended send time (free of coordinated omission).
//! * [`sweep`]: latency against message rate (Exhibit 4): open-loop stream,
//!   one message in N reflected, up to the highest rate the path sustains.
//! * [`tick_to_trade`]: UDP tick in, TCP order out, timed with kernel
//!   software timestamps (the method of paper 004).
//! * [`sockets`]: the same ping-pong over plain kernel UDP and TCP sockets
//!   (spinning on non-blocking sockets, or blocking), the baseline the
//!   network transports will be compared with.
//! * [`reproduce`]: all of the above with the papers' parameters, into a
//!   report with the published figures beside ours and SVG plots.
//! * [`report`]: statistics from an HdrHistogram, the papers' table, JSON.
//! * [`output`]: CSV, HdrHistogram interval logs, sockperf's percentile block.
//! * [`machine`]: what every report says about the machine and the clock.
//! * [`worker`]: the far side of each measurement, run as a separate process
//!   (`tickwire lab worker ...`) pinned to its own CPU.
//!
//! Latency is recorded in nanoseconds into an HdrHistogram with three
//! significant digits; half round trip = round trip / 2, as in the papers.
//!
//! # Examples
//!
//! Every mode ends in [`report::LatencyRow`]s computed from a histogram; the
//! same rows feed the table, JSON, CSV and plots:
//!
//! ```
//! let mut h = tickwire_lab::report::histogram();
//! for ns in [900u64, 1_000, 1_100, 50_000] {
//!     h.record(ns).unwrap();
//! }
//! let row = tickwire_lab::report::LatencyRow::from_histogram("pingpong", "ipc", 64, &h);
//! assert!(row.p50_ns >= 1_000 && row.max_ns >= 49_000);
//! println!("{}", tickwire_lab::report::table(&[row]));
//! ```
#![forbid(unsafe_code)]

pub mod doctor;
pub mod floor;
pub mod ipc;
pub mod machine;
pub mod netns;
pub mod oneway;
pub mod output;
pub mod pingpong;
pub mod plots;
pub mod report;
pub mod reproduce;
pub mod rudp;
pub mod sockets;
pub mod sweep;
pub mod tick_to_trade;
pub mod transfer;
pub mod worker;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Errors from lab runs.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Shared-memory set-up failed.
    #[error(transparent)]
    Shm(#[from] tickwire_shm::ShmError),
    /// The other side did not answer in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The worker process failed.
    #[error("worker: {0}")]
    Worker(String),
    /// Pinning failed.
    #[error(transparent)]
    Agent(#[from] tickwire_agent::AgentError),
    /// I/O.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
}

/// Where the two sides of a measurement run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cpus {
    /// The measuring side (ping, publisher).
    pub local: usize,
    /// The far side (pong, subscriber) in the worker process.
    pub remote: usize,
}

impl Default for Cpus {
    fn default() -> Self {
        Self { local: 0, remote: 1 }
    }
}

/// A worker process killed on drop unless it exited.
#[derive(Debug)]
pub struct WorkerProcess {
    child: Child,
    stdout: Option<std::io::BufReader<std::process::ChildStdout>>,
}

impl WorkerProcess {
    /// Starts `tickwire lab worker <args>` from the current executable.
    ///
    /// # Errors
    /// If the executable cannot be spawned.
    pub fn spawn(args: &[String]) -> Result<Self, LabError> {
        Self::spawn_in(None, args)
    }

    /// Starts the worker inside network namespace `netns` (`ip netns exec`).
    ///
    /// # Errors
    /// If the executable cannot be spawned.
    pub fn spawn_in(netns: Option<&str>, args: &[String]) -> Result<Self, LabError> {
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
        let mut child =
            cmd.arg("lab").arg("worker").args(args).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn()?;
        let stdout = child.stdout.take().map(std::io::BufReader::new);
        Ok(Self { child, stdout })
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

/// Spins until `f` returns `Some`, failing after `timeout`. The clock is
/// first read after 4096 fruitless spins, so a wait that succeeds quickly
/// costs no clock read (this sits inside timed round trips).
///
/// # Errors
/// [`LabError::Timeout`] naming `what`.
#[inline]
pub fn spin_until<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> Result<T, LabError> {
    let mut n = 0u32;
    let mut start: Option<Instant> = None;
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        n = n.wrapping_add(1);
        if n % 4096 == 0 {
            match start {
                None => start = Some(Instant::now()),
                Some(t) if t.elapsed() > timeout => return Err(LabError::Timeout(what.to_owned())),
                Some(_) => {}
            }
        }
        std::hint::spin_loop();
    }
}

/// Bounds a measuring loop by `warmup + count` iterations and, optionally,
/// by a time limit that starts when recording starts (warm-up is not
/// counted). The clock is read only every 256 recorded iterations.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    warmup: u64,
    count: u64,
    limit: Option<Duration>,
    deadline: Option<Instant>,
}

impl Budget {
    /// `warmup + count` iterations, and at most `limit` of recording.
    pub fn new(warmup: u64, count: u64, limit: Option<Duration>) -> Self {
        Self { warmup, count, limit, deadline: None }
    }

    /// Whether iteration `i` should run.
    #[inline]
    pub fn keep_going(&mut self, i: u64) -> bool {
        if i >= self.warmup.saturating_add(self.count) {
            return false;
        }
        let Some(limit) = self.limit else { return true };
        if i < self.warmup || (i - self.warmup) % 256 != 0 {
            return true;
        }
        let now = Instant::now();
        let deadline = *self.deadline.get_or_insert(now + limit);
        now < deadline
    }
}

/// Times `exchange(i)` (one round trip: send message `i`, wait for its echo)
/// for `warmup + count` iterations or until `limit` of recording has passed,
/// and records half of each round trip after the warm-up.
///
/// # Errors
/// The first error `exchange` returns.
pub fn round_trips(
    warmup: u64,
    count: u64,
    limit: Option<Duration>,
    mut exchange: impl FnMut(u64) -> Result<(), LabError>,
) -> Result<hdrhistogram::Histogram<u64>, LabError> {
    let mut h = report::histogram();
    let mut budget = Budget::new(warmup, count, limit);
    let mut i = 0;
    while budget.keep_going(i) {
        let t0 = Instant::now();
        exchange(i)?;
        let rtt = t0.elapsed().as_nanos() as u64;
        if i >= warmup {
            h.saturating_record(rtt / 2);
        }
        i += 1;
    }
    Ok(h)
}

/// A unique scratch name for one run's files.
pub fn run_tag() -> String {
    format!("lab{}x{}", std::process::id(), tickwire_shm::os::monotonic_ns() % 1_000_000)
}

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether Ctrl-C asked the run to stop (checked between rounds and steps,
/// so what was measured so far is still reported).
pub fn stop_requested() -> bool {
    STOP.load(std::sync::atomic::Ordering::Relaxed)
}

/// Installs the Ctrl-C handler of the measuring process: the first Ctrl-C
/// asks for a graceful stop, the second exits at once.
pub fn install_ctrl_c() {
    let _ = ctrlc::set_handler(|| {
        if STOP.swap(true, std::sync::atomic::Ordering::Relaxed) {
            std::process::exit(130);
        }
        eprintln!("\ntickwire lab: stopping after the current round (Ctrl-C again to quit now)");
    });
}

/// Workers ignore Ctrl-C: the terminal sends it to the whole process group,
/// and the measuring process decides when its workers stop.
pub fn ignore_ctrl_c() {
    tickwire_shm::os::ignore_sigint();
}

/// A progress bar on stderr for `total` units, drawn only when stderr is a
/// terminal (hidden otherwise, e.g. in tests and pipes).
pub fn progress(total: u64, what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(total);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed_precise} (eta {eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what.to_owned());
    pb
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_bounds_by_count_and_by_time_after_warmup() {
        let mut b = Budget::new(3, 5, None);
        assert_eq!((0..100).take_while(|&i| b.keep_going(i)).count(), 8);

        // A slow warm-up does not eat the time limit: it starts at the first recorded iteration.
        let mut b = Budget::new(2, u64::MAX / 2, Some(Duration::from_millis(30)));
        assert!(b.keep_going(0));
        std::thread::sleep(Duration::from_millis(50));
        assert!(b.keep_going(1));
        assert!(b.keep_going(2), "recording starts now");
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.keep_going(3), "the clock is read only every 256 iterations");
        assert!(!b.keep_going(2 + 256), "past the limit");
    }
}
