//! The physical reference beside the floors: whole cache lines streamed one
//! way between the two pinned CPUs ([`LineStream`]), in bytes per second,
//! and the message rate that allows at a message size (every byte of every
//! message has to cross; nothing else does). The rings move at least a
//! 64-byte slot per message and tickwire's log a header besides, so a row
//! above it is a measurement to distrust. It is a measurement itself, as noisy as
//! the floors on this VM, and by bytes it is loose for small messages: a
//! ring moving 32-byte messages in 64-byte slots would need twice the line
//! rate to pass it.

use super::streaming::{BestBatch, Trials};
use crate::base::output::report::ThroughputRow;
use crate::{spin_until, Cpus, LabError, WorkerProcess};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tickwire_agent::pin_current_thread;
use tickwire_shm::floor::{Line, LineStream};

/// The probe's name in rows.
pub const PROBE: &str = "cacheline_stream";

/// Lines in the stream: 256 KiB, as deep as the rings, so the figure is
/// the transfer between the cores and not a trip to memory.
const LINES: usize = 4096;

/// The value that ends a stream.
const STOP: u64 = u64::MAX;

/// Lines the reader takes at a time, tried in turn; the fastest is the
/// limit (the row's `batch`).
pub const BATCHES: [u64; 5] = [1, 8, 32, 128, 512];

/// Lines written between two looks at the clock; every batch divides it,
/// so the stop lines fill one whole batch the reader waits for.
const BURST: u64 = 4096;

const _: () = {
    let mut i = 0;
    while i < BATCHES.len() {
        assert!(BURST % BATCHES[i] == 0 && BATCHES[i] as usize <= LINES / 2);
        i += 1;
    }
};

/// Streams cache lines for `duration` at the fastest of [`BATCHES`] (each
/// tried in three passes of a tenth of it, 30 to 100 ms, its fastest pass
/// kept, the first time a process asks);
/// the row's `msgs_per_s` is lines per second, `bytes_per_s` 64 times
/// that, `size` 64.
///
/// # Errors
/// Set-up failures, or a sink that stalls or does not finish.
pub fn stream(cpus: Cpus, dir: &Path, duration: Duration) -> Result<ThroughputRow, LabError> {
    let batch =
        BEST_BATCH.find(cpus, &BATCHES, duration, |b, trial| Ok(stream_batched(cpus, dir, trial, b)?.msgs_per_s))?;
    stream_batched(cpus, dir, duration, batch)
}

/// The search for the best batch, by CPU pair.
static BEST_BATCH: BestBatch<Cpus> = BestBatch::new();

/// This process's batch trials: each batch of lines a read waited for, and
/// the lines a second it moved (batch 1 is a reader on every line's stamp,
/// as a log reader on each frame's commit word).
pub fn batch_trials() -> Trials {
    BEST_BATCH.trials()
}

/// Streams cache lines for `duration`, read `batch` at a time.
fn stream_batched(cpus: Cpus, dir: &Path, duration: Duration, batch: u64) -> Result<ThroughputRow, LabError> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{}.lines", crate::run_tag()));
    let mut lines = LineStream::create(&path, LINES)?;
    let worker = WorkerProcess::spawn(&LineSink { path: path.clone(), cpu: cpus.remote, batch });
    let worker = match worker {
        Ok(w) => w,
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
    };
    let sent = produce(&mut lines, cpus.local, duration, batch);
    let line = sent.and_then(|sent| Ok((sent, worker.finish(Duration::from_secs(10) + duration)?)));
    let _ = std::fs::remove_file(&path);
    let (sent, line) = line?;
    let mut row: ThroughputRow = crate::base::worker::parse_report("line sink", &line)?;
    // Lines written and not read (torn ones are counted by the sink).
    row.lost += sent.saturating_sub(row.count + row.lost);
    row.mode = "floor".into();
    row.transport = "shm".into();
    row.probe = Some(PROBE.into());
    row.size = 64;
    row.bytes_per_s = row.msgs_per_s * 64.0;
    row.cpus = cpus.to_string();
    row.batch = Some(batch);
    Ok(row)
}

/// Writes lines until `duration` has passed, then a batch of stop lines.
fn produce(lines: &mut LineStream, cpu: usize, duration: Duration, batch: u64) -> Result<u64, LabError> {
    pin_current_thread(cpu)?;
    let start = Instant::now();
    let mut value = 0u64;
    while start.elapsed() < duration {
        for _ in 0..BURST {
            if !lines.try_write(value) {
                let mut watch = super::worker::IdleWatch::default();
                while !lines.try_write(value) {
                    watch.idle("room in the line stream (its reader stalled)")?;
                }
            }
            value += 1;
        }
    }
    for _ in 0..batch {
        spin_until(Duration::from_secs(10), "line stream stop", || lines.try_write(STOP).then_some(()))?;
    }
    Ok(value)
}

/// The limit's row at a message size: the messages per second the line
/// rate allows when only the messages' own bytes cross (`line`'s bytes per
/// second over `size`).
pub fn at_size(line: &ThroughputRow, size: usize) -> ThroughputRow {
    let mut row = line.clone();
    row.size = size;
    row.msgs_per_s = (line.bytes_per_s / size.max(1) as f64).round();
    row
}

/// Worker job [`LineSink`]: reads the stream
/// `batch` lines at a time until the stop batch; a torn line is counted
/// lost.
pub(crate) fn line_sink(path: &Path, cpu: usize, batch: u64) -> Result<String, LabError> {
    let mut lines = LineStream::open(path)?;
    pin_current_thread(cpu)?;
    let (mut count, mut torn) = (0u64, 0u64);
    let mut first: Option<Instant> = None;
    let mut watch = super::worker::IdleWatch::default();
    loop {
        match lines.try_read(batch) {
            Line::Read { last: STOP, .. } => break,
            Line::Read { torn: t, .. } => {
                count += batch;
                torn += t;
                watch.busy();
                if first.is_none() {
                    first = Some(Instant::now());
                }
            }
            Line::Empty => watch.idle("cache lines")?,
        }
    }
    Ok(super::worker::sink_report(count, torn, first))
}

/// Worker job: reads a stream of cache lines (the line-transfer limit).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct LineSink {
    pub path: PathBuf,
    pub cpu: usize,
    pub batch: u64,
}

impl crate::base::worker::Job for LineSink {
    const ROLE: &'static str = "line-sink";

    fn run(self) -> Result<String, LabError> {
        line_sink(&self.path, self.cpu, self.batch)
    }
}
