//! `lab fsync`: the disk's own durability floor. Each sample is one small
//! `pwrite` and one `fdatasync` on a file of the probe's own in the
//! directory under test, the work a journal does to make one batch
//! durable; nothing tickwire writes durably can be acknowledged faster
//! (`lab guaranteed` measures the same probe in its rounds, beside each
//! sync policy).

use crate::base::common::parse_size;
use crate::base::host::machine::Machine;
use crate::base::output::print::{self, Format, Output};
use crate::base::output::report::LatencyRow;
use crate::base::output::Measured;
use crate::LabError;
use hdrhistogram::Histogram;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime};
use tickwire_shm::os::monotonic_ns;

/// Largest `--size`.
pub const MAX_SIZE: usize = 1 << 20;
/// Most `--count`.
pub const MAX_COUNT: u64 = 1_000_000;
/// The probe's file never grows past this: writes wrap to its start.
const MAX_FILE: u64 = 64 << 20;

/// A run of `lab fsync`.
#[derive(Debug, Clone, clap::Args)]
pub struct Fsync {
    /// An existing directory on the disk under test (a tmpfs such as
    /// /dev/shm makes every fdatasync free); the probe's file is made new
    /// there and removed after.
    #[arg(long, default_value = ".")]
    pub on: PathBuf,
    /// Samples (a pwrite and its fdatasync each), 1 to 1,000,000.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=MAX_COUNT))]
    pub count: u64,
    /// Bytes written before each fdatasync, 1 B to 1 MiB.
    #[arg(long, default_value = "128", value_parser = parse_block)]
    pub size: usize,
    /// The CPU the probe runs on.
    #[arg(long, default_value_t = 0)]
    pub cpu: usize,
    /// Print JSON (one object per row); same as --format json.
    #[arg(long)]
    pub json: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write the histogram as an HdrHistogram interval log.
    #[arg(long)]
    pub hlog: Option<PathBuf>,
    /// Write an SVG plot of the percentile distribution.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

fn parse_block(s: &str) -> Result<usize, String> {
    match parse_size(s)? {
        n if (1..=MAX_SIZE).contains(&n) => Ok(n),
        n => Err(format!("{n} bytes is not within 1 B to 1 MiB")),
    }
}

fn failed(what: &str, path: &Path, e: impl std::fmt::Display) -> LabError {
    LabError::File(format!("{what} {}: {e}", path.display()))
}

/// Records up to `n` × (a `size`-byte `pwrite`, `fdatasync`) on a file of
/// its own, made new in `dir` (which must exist) and removed after; stops
/// early, with what it measured, when Ctrl-C asks.
///
/// # Errors
/// [`LabError::File`] naming the file that could not be made, written or
/// synced.
pub fn probe(dir: &Path, n: u64, size: usize, into: &mut Histogram<u64>) -> Result<(), LabError> {
    // A name no earlier probe of this process used: a file a failed
    // removal left behind does not stop the next probe.
    static PROBES: AtomicU64 = AtomicU64::new(0);
    let name = format!("fsync-probe-{}-{}", std::process::id(), PROBES.fetch_add(1, Ordering::Relaxed));
    let path = dir.join(name);
    let f = std::fs::OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| failed("cannot make the fsync probe's file", &path, e))?;
    let block = vec![0x5au8; size.clamp(1, MAX_SIZE)];
    let wrap = (MAX_FILE / block.len() as u64).max(1);
    let mut result = Ok(());
    for i in 0..n {
        if crate::stop_requested() {
            break;
        }
        let t = monotonic_ns();
        let at = (i % wrap) * block.len() as u64;
        if let Err(e) = f.write_all_at(&block, at).and_then(|()| f.sync_data()) {
            result = Err(failed("fsync probe", &path, e));
            break;
        }
        let _ = into.record(monotonic_ns() - t);
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    result
}

/// Measures and prints the probe.
///
/// # Errors
/// The probe's, and files that cannot be written.
pub fn run(o: &Fsync) -> Result<(), LabError> {
    if !o.on.is_dir() {
        return Err(LabError::Usage(format!("--on {}: not an existing directory", o.on.display())));
    }
    let machine = Machine::detect();
    tickwire_agent::pin_current_thread(o.cpu)?;
    let (start, t) = (SystemTime::now(), Instant::now());
    let mut hist = tickwire_latency::histogram();
    probe(&o.on, o.count, o.size, &mut hist)?;
    let elapsed = t.elapsed();
    let samples = hist.len();
    let mut row = LatencyRow::from_histogram("fsync", "disk", o.size, &hist);
    row.probe = Some("pwrite_fdatasync".into());
    row.machine = machine.summary();
    row.cpus = o.cpu.to_string();
    row.clock = "CLOCK_MONOTONIC (vDSO), around each pwrite and its fdatasync".into();
    row.achieved_rate = Some((hist.len() as f64 / elapsed.as_secs_f64().max(1e-9)).round());
    let measured = [Measured { row, hist, start, elapsed }];
    for dir in [&o.hlog, &o.plot].into_iter().flatten().filter_map(|p| p.parent()) {
        let _ = std::fs::create_dir_all(dir);
    }
    let format = if o.json { Format::Json } else { o.format };
    let out = Output { format, hlog: o.hlog.clone(), plot: o.plot.clone() };
    if format == Format::Table {
        println!("fsync on {}: {} × ({} B pwrite + fdatasync), one after another", o.on.display(), samples, o.size);
    }
    print::latency_and_files(&measured, &out, &machine, "pwrite + fdatasync latency by percentile")
}
