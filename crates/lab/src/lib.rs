//! # tickwire-lab: the latency lab
//!
//! Every performance figure tickwire states is produced here, against a
//! baseline measured in the same run: the machine's *floor* (a cache-line
//! ping-pong and a raw shared-memory ring between the two pinned CPUs).
//!
//! The crate is grouped by concern:
//!
//! * [`request`]: the typed request a command hands over ([`request::Request`])
//!   and [`request::run`], which measures and prints it.
//! * [`transports`]: what the lab can drive: the floor probes, tickwire IPC,
//!   plain kernel sockets, reliable UDP.
//! * [`modes`]: the measurements: ping-pong, one-way, rate sweep,
//!   tick-to-trade, transfer, and `reproduce`, which runs them all.
//! * [`output`]: rows and tables, JSON, CSV, HdrHistogram logs, sockperf's
//!   block, SVG plots.
//! * [`host`]: the machine: doctor, machine facts, network namespaces.
//! * [`worker`]: the far side of each measurement, a separate process
//!   (`tickwire lab worker ROLE`) pinned to its own CPU, started with a
//!   typed [`worker::Role`].
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
//! let mut h = tickwire_lab::output::report::histogram();
//! for ns in [900u64, 1_000, 1_100, 50_000] {
//!     h.record(ns).unwrap();
//! }
//! let row = tickwire_lab::output::report::LatencyRow::from_histogram("pingpong", "ipc", 64, &h);
//! assert!(row.p50_ns >= 1_000 && row.max_ns >= 49_000);
//! println!("{}", tickwire_lab::output::report::table(&[row]));
//! ```
#![forbid(unsafe_code)]

pub mod host;
pub mod modes;
pub mod output;
pub mod request;
pub mod transports;
pub mod worker;

pub use worker::{Role, WorkerProcess};

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
    /// A result file (interval log, plot, report) could not be written.
    #[error("{0}")]
    Output(String),
    /// The run completed but its check failed (e.g. a transfer arrived altered).
    #[error("{0}")]
    Failed(String),
}

/// Where the two sides of a measurement run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cpus {
    /// The measuring side (ping, publisher).
    pub local: usize,
    /// The far side (pong, subscriber) in the worker process.
    pub remote: usize,
}

/// `local,remote`, as every row and report prints it.
impl std::fmt::Display for Cpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{},{}", self.local, self.remote)
    }
}

impl Default for Cpus {
    fn default() -> Self {
        Self { local: 0, remote: 1 }
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
    let mut h = output::report::histogram();
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

/// Whether Ctrl-C asked the run to stop (checked between rounds and steps,
/// so what was measured so far is still reported): the process's one stop
/// flag, set by the handler [`request::run`] installs
/// ([`tickwire_agent::stop`]).
pub use tickwire_agent::stop::requested as stop_requested;

/// Workers ignore Ctrl-C: the terminal sends it to the whole process group,
/// and the measuring process decides when its workers stop.
pub fn ignore_ctrl_c() {
    tickwire_shm::os::ignore_sigint();
}

/// A progress bar on stderr for `total` units, drawn only when stderr is a
/// terminal (hidden otherwise, e.g. in tests and pipes).
pub fn progress(total: u64, what: &str) -> indicatif::ProgressBar {
    progress_styled(total, what, "{msg} [{bar:30}] {pos}/{len} {elapsed_precise} (eta {eta})")
}

/// [`progress`] for a byte count: bytes done, total, current rate.
pub fn progress_bytes(total: u64, what: &str) -> indicatif::ProgressBar {
    progress_styled(
        total,
        what,
        "{msg} [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} {elapsed_precise} (eta {eta})",
    )
}

fn progress_styled(total: u64, what: &str, template: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(total);
    pb.set_style(
        indicatif::ProgressStyle::with_template(template)
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
