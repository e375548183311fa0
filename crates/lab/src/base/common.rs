//! What every layer shares: the lab's error, the two CPUs of a run, scratch
//! names, progress bars, and the stop flag.

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

/// A unique scratch name for one run's files.
pub fn run_tag() -> String {
    format!("lab{}x{}", std::process::id(), tickwire_shm::os::monotonic_ns() % 1_000_000)
}

/// Whether Ctrl-C asked the run to stop (checked between rounds and steps,
/// so what was measured so far is still reported): the process's one stop
/// flag, set by the handler [`crate::request::run`] installs
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
