//! `lab fsync`: the disk's own durability floor. Each sample is one small
//! `pwrite` and one `fdatasync` on a file of the probe's own in the
//! directory under test, the work a journal does to make one batch
//! durable; nothing tickwire writes durably can be acknowledged faster
//! (`lab guaranteed` measures the same probe in its rounds, beside each
//! sync policy).

use crate::base::common::parse_size;
use crate::base::host::machine::Machine;
use crate::base::output::print::{self, Common};
use crate::base::output::report::LatencyRow;
use crate::base::output::Measured;
use crate::LabError;
use hdrhistogram::Histogram;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};
use tickwire_shm::os::monotonic_ns;

/// A run of `lab fsync`.
#[derive(Debug, Clone, clap::Args)]
pub struct Fsync {
    #[command(flatten)]
    pub common: Common,
    /// Directory on the disk under test (a tmpfs such as /dev/shm makes
    /// every fdatasync free; the probe's file is made and removed there).
    #[arg(long, default_value = ".")]
    pub on: PathBuf,
    /// Samples (pwrite + fdatasync each).
    #[arg(long, default_value_t = 1_000)]
    pub count: usize,
    /// Bytes written before each fdatasync.
    #[arg(long, default_value = "128", value_parser = parse_size)]
    pub size: usize,
    /// Also write the histogram as an HdrHistogram interval log.
    #[arg(long)]
    pub hlog: Option<PathBuf>,
    /// Write an SVG plot of the percentile distribution.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

fn err(what: &str, path: &Path, e: impl std::fmt::Display) -> LabError {
    LabError::Failed(format!("{what} {}: {e}", path.display()))
}

/// Records `n` × (a `size`-byte `pwrite` at the next offset, `fdatasync`)
/// on a file of its own in `dir`, removed after.
///
/// # Errors
/// [`LabError::Failed`] naming the file that could not be made or synced.
pub fn probe(dir: &Path, n: usize, size: usize, into: &mut Histogram<u64>) -> Result<(), LabError> {
    std::fs::create_dir_all(dir).map_err(|e| err("directory", dir, e))?;
    let path = dir.join(format!("fsync-probe-{}", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| err("fsync probe", &path, e))?;
    let block = vec![0x5au8; size.max(1)];
    let mut result = Ok(());
    for i in 0..n {
        let t = monotonic_ns();
        if let Err(e) = f.write_all_at(&block, (i * block.len()) as u64).and_then(|()| f.sync_data()) {
            result = Err(err("fsync probe", &path, e));
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
    if o.count == 0 {
        return Err(LabError::Usage("--count must be at least 1".into()));
    }
    let machine = Machine::detect();
    tickwire_agent::pin_current_thread(o.common.cpus.local)?;
    let (start, t) = (SystemTime::now(), Instant::now());
    let mut hist = tickwire_latency::histogram();
    probe(&o.on, o.count, o.size, &mut hist)?;
    let elapsed = t.elapsed();
    let mut row = LatencyRow::from_histogram("fsync", "disk", o.size, &hist);
    row.probe = Some("pwrite_fdatasync".into());
    row.machine = machine.summary();
    row.cpus = o.common.cpus.local.to_string();
    row.clock = "CLOCK_MONOTONIC (vDSO), around each pwrite and its fdatasync".into();
    row.achieved_rate = Some((hist.len() as f64 / elapsed.as_secs_f64().max(1e-9)).round());
    let measured = [Measured { row, hist, start, elapsed }];
    let out = o.common.output(&o.hlog, &o.plot);
    if out.format == print::Format::Table {
        println!("fsync on {}: {} × ({} B pwrite + fdatasync), one after another", o.on.display(), o.count, o.size);
    }
    print::latency_and_files(&measured, &out, &machine, "pwrite + fdatasync latency by percentile")
}
