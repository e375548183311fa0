//! What every layer shares: the lab's error, the two CPUs of a run, scratch
//! names, progress bars, the stop flag, and the command line's numbers
//! with suffixes: one parser of each, for the lab's options and the CLI's
//! (which imports them from here): sizes (`64`, `64k`, `64KiB`, `16MiB`;
//! k/M/G are binary), rates (`100k`, `1M`, `2.5M`; decimal), durations
//! (`100us`, `5s`, `2m`, via humantime), and pairs of CPUs.

use std::time::Duration;
use tickwire_driver::units::SizeError;

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
    /// A file the run measures on (e.g. `lab fsync`'s probe) could not be
    /// made, written or synced; the message names it.
    #[error("{0}")]
    File(String),
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

impl Cpus {
    /// Parses `LOCAL,REMOTE` (the `--cpus` value), checking that this
    /// process may run on both.
    ///
    /// # Errors
    /// A message naming the bad CPU ([`parse_cpu_pair`]).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (local, remote) = parse_cpu_pair(s)?;
        Ok(Self { local, remote })
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

/// Parses a byte size. `k`, `K`, `KB`, `KiB` all mean 1024.
///
/// # Errors
/// A message naming the bad input.
pub fn parse_size(s: &str) -> Result<usize, String> {
    tickwire_driver::units::parse_size(s).map_err(|e| match e {
        SizeError::Number => format!("bad size {s:?}: expected e.g. 64, 64k, 16MiB"),
        SizeError::Unit => format!("bad size unit in {s:?}: use k, M, G (KiB, MiB, GiB)"),
        SizeError::Overflow => format!("size {s:?} overflows"),
    })
}

/// Parses a rate in messages per second: `100k` = 100,000; `1M` = 1,000,000.
///
/// # Errors
/// A message naming the bad input.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().trim_end_matches("/s");
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("bad rate {s:?}: expected e.g. 100k, 1M"))?;
    let mult = match unit {
        "" => 1e0,
        "k" | "K" => 1e3,
        "m" | "M" => 1e6,
        "g" | "G" => 1e9,
        _ => return Err(format!("bad rate unit in {s:?}: use k, M, G")),
    };
    let v = n * mult;
    if !v.is_finite() || !(1.0..=1e12).contains(&v) {
        return Err(format!("rate {s:?} out of range"));
    }
    Ok(v.round() as u64)
}

/// The longest duration any option takes (a year): longer ones would
/// overflow a deadline (`now + duration`) and are surely a typo.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses a duration: `100us`, `5s`, `1m30s`; at most [`MAX_DURATION`].
///
/// # Errors
/// A message naming the bad input.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d =
        tickwire_driver::units::parse_duration(s).map_err(|e| format!("bad duration {s:?}: {e} (e.g. 100us, 5s)"))?;
    if d > MAX_DURATION {
        return Err(format!("duration {s:?} is over the limit of 365 days"));
    }
    Ok(d)
}

/// Parses a pair of CPUs `LOCAL,REMOTE` for the two spinning sides of a
/// measurement and checks that this process may run on both (the CPUs of
/// its affinity mask: those that exist and its cgroup's cpuset allows).
///
/// # Errors
/// A message naming the CPU and listing the allowed ones.
pub fn parse_cpu_pair(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s.split_once(',').ok_or_else(|| format!("bad CPU list {s:?}: expected two CPUs, e.g. 0,1"))?;
    let allowed = tickwire_agent::allowed_cpus();
    let cpu = |x: &str| -> Result<usize, String> {
        let c = x.trim().parse::<usize>().map_err(|_| format!("bad CPU {x:?} in {s:?}: expected e.g. 0,1"))?;
        if !allowed.contains(&c) {
            return Err(format!(
                "CPU {c} does not exist or is not allowed for this process (allowed: {})",
                tickwire_agent::cpu_list(&allowed)
            ));
        }
        Ok(c)
    };
    Ok((cpu(a)?, cpu(b)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_errors_name_the_input() {
        // The parser itself is tested in tickwire_driver::units; here, the messages.
        assert_eq!(parse_size("16MiB"), Ok(16 << 20));
        assert!(parse_size("12q").unwrap_err().contains("bad size unit in \"12q\""));
        assert!(parse_size("").unwrap_err().contains("expected e.g. 64"));
        assert!(parse_size("999999999999G").unwrap_err().contains("overflows"));
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100k"), Ok(100_000));
        assert_eq!(parse_rate("1M"), Ok(1_000_000));
        assert_eq!(parse_rate("2.5M"), Ok(2_500_000));
        assert_eq!(parse_rate("500"), Ok(500));
        assert_eq!(parse_rate("1.5k"), Ok(1_500), "decimal with a suffix");
        assert_eq!(parse_rate("1.5k/s"), Ok(1_500));
        assert!(parse_rate("1.5x").unwrap_err().contains("use k, M, G"));
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("fast").is_err());
    }

    #[test]
    fn duration_errors_name_the_input() {
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        assert!(parse_duration("5 parsecs").unwrap_err().contains("bad duration \"5 parsecs\""));
    }
}
