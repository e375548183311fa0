//! What every open-loop run shares: pause recording and the two
//! distributions (hiccup-aware, as jHiccup is).
//!
//! Each pinned, spinning side of an open-loop run calls
//! [`PauseRecorder::tick`] on every turn of its loop. A gap between two
//! turns longer than [`PAUSE_THRESHOLD_NS`] is a pause: the side was not
//! running (the host descheduled the vCPU, an interrupt, a stall). Both
//! sides' pauses are on CLOCK_MONOTONIC, shared by the processes of one
//! host. The receiving side keeps each message's intended send time and
//! arrival ([`Samples`]) and, at the end, splits them into two
//! distributions: every message, and the messages whose flight overlapped no
//! pause of either side. The full one is what a user of this machine sees;
//! the pause-free one is what the code can be held to on it.

use crate::base::host::machine::Machine;
use crate::base::output::report::{histogram, LatencyRow};
use crate::base::output::Measured;
use crate::{Cpus, LabError};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

/// A gap in a spinning loop longer than this is a pause (20 µs).
pub const PAUSE_THRESHOLD_NS: u64 = 20_000;

/// [`publish`] stops a sender this far behind schedule after the end (1 s).
pub const LATE_LIMIT_NS: u64 = 1_000_000_000;

/// A sender behind schedule offers this many messages between drives of its path.
pub const CATCH_UP_BATCH: u64 = 16;

/// Records the gaps in one spinning loop's progress.
#[derive(Debug)]
pub struct PauseRecorder {
    last: u64,
    pauses: Vec<(u64, u64)>,
}

impl PauseRecorder {
    /// Starts recording at `now` (CLOCK_MONOTONIC ns).
    pub fn new(now: u64) -> Self {
        Self { last: now, pauses: Vec::with_capacity(4096) }
    }

    /// One turn of the loop at `now`.
    #[inline]
    pub fn tick(&mut self, now: u64) {
        if now.saturating_sub(self.last) > PAUSE_THRESHOLD_NS && self.pauses.len() < 1 << 20 {
            self.pauses.push((self.last, now));
        }
        self.last = now;
    }

    /// The pauses, `(start, end)` in ns.
    pub fn into_pauses(self) -> Vec<(u64, u64)> {
        self.pauses
    }
}

/// The sending end of an open-loop stream, driven by [`publish`].
pub trait Offer {
    /// Offers one message: whether it was taken (false: back-pressured,
    /// [`publish`] tries again).
    ///
    /// # Errors
    /// The path failed.
    fn offer(&mut self, msg: &[u8]) -> Result<bool, LabError>;

    /// Called on every turn of the sending loop (after a send, while
    /// waiting for the next send time, between retries): drive a transport
    /// that needs it, collect reflections.
    ///
    /// # Errors
    /// The path failed.
    #[inline]
    fn work(&mut self) -> Result<(), LabError> {
        std::hint::spin_loop();
        Ok(())
    }
}

/// A closure is a path that needs no driving.
impl<F: FnMut(&[u8]) -> Result<bool, LabError>> Offer for F {
    #[inline]
    fn offer(&mut self, msg: &[u8]) -> Result<bool, LabError> {
        self(msg)
    }
}

/// What [`publish`] did.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Published {
    /// Messages sent.
    pub sent: u64,
    /// Seconds from the first intended send time to the end.
    pub secs: f64,
}

/// The sending side of an open-loop run, on the calling (pinned) thread:
/// message *i* is due at `t0 + i / rate` and carries that intended time
/// (`stamp`), whenever it actually goes. `path` takes the messages
/// ([`Offer`]). Every turn of the loop ticks `pauses` and calls
/// [`Offer::work`]. Stops at `duration` (a sender still behind schedule
/// [`LATE_LIMIT_NS`] after it sends less than `rate * duration`), or at Ctrl-C.
///
/// # Errors
/// `offer`'s errors, or a receiver that takes nothing for 10 s.
pub fn publish(
    rate: u64,
    size: usize,
    duration: Duration,
    pauses: &mut PauseRecorder,
    path: &mut impl Offer,
) -> Result<Published, LabError> {
    use tickwire_shm::os::monotonic_ns;
    let mut msg = vec![0u8; size.max(16)];
    let interval = 1e9 / rate.max(1) as f64;
    let t0 = monotonic_ns() + 1_000_000;
    let end = t0 + duration.as_nanos() as u64;
    let mut sent = 0u64;
    loop {
        let intended = t0 + (sent as f64 * interval) as u64;
        if intended >= end || (sent % 1024 == 0 && crate::stop_requested()) {
            break;
        }
        let mut now = monotonic_ns();
        if now >= end + LATE_LIMIT_NS {
            // Still behind schedule a second after the end: the path does
            // not sustain the rate; what is left is not sent (the achieved
            // rate says so). A sender late by a pause catches up first, and
            // those late messages are measured.
            break;
        }
        while now < intended {
            pauses.tick(now);
            path.work()?;
            now = monotonic_ns();
        }
        tickwire_wire::stamp::write(&mut msg, sent, intended);
        let stuck = Instant::now();
        // Late, but the intended time stays in the message.
        while !path.offer(&msg)? {
            pauses.tick(monotonic_ns());
            if stuck.elapsed() > Duration::from_secs(10) {
                return Err(LabError::Timeout("receiver stuck for 10 s".into()));
            }
            path.work()?;
        }
        // On schedule, the wait above drives the path before the next
        // message. Behind schedule, the next one is due at once: offer up to
        // `CATCH_UP_BATCH` before driving it, so a transport that packs
        // and batches (reliable UDP) catches up as it would in production
        // (Aeron's smart batching).
        if sent % CATCH_UP_BATCH == CATCH_UP_BATCH - 1 {
            path.work()?;
        }
        pauses.tick(monotonic_ns());
        sent += 1;
    }
    Ok(Published { sent, secs: monotonic_ns().saturating_sub(t0) as f64 / 1e9 })
}

/// Hands one side's pauses to the other: written to `path` by the side
/// that finishes first, read (waiting for it) by the side that splits.
///
/// # Errors
/// The file cannot be written.
pub fn write_pauses(path: &Path, pauses: &[(u64, u64)]) -> Result<(), LabError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(pauses).map_err(|e| LabError::Worker(e.to_string()))?)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Reads (and removes) the other side's pauses, waiting up to 10 s for them.
///
/// # Errors
/// [`LabError::Timeout`] if they never come, [`LabError::Worker`] if malformed.
pub fn read_pauses(path: &Path) -> Result<Vec<(u64, u64)>, LabError> {
    let start = Instant::now();
    loop {
        match std::fs::read(path) {
            Ok(b) => {
                let _ = std::fs::remove_file(path);
                return serde_json::from_slice(&b)
                    .map_err(|e| LabError::Worker(format!("{}: bad pause list: {e}", path.display())));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(LabError::Worker(format!("{}: {e}", path.display()))),
        }
    }
}

/// Count, total and longest of a set of pauses (after merging overlaps).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseSummary {
    /// Pauses (either side; overlapping ones count once).
    pub count: u64,
    /// Their total length, ns.
    pub total_ns: u64,
    /// The longest, ns.
    pub max_ns: u64,
}

impl PauseSummary {
    /// Adds another run's pauses.
    pub fn add(&mut self, o: &PauseSummary) {
        self.count += o.count;
        self.total_ns += o.total_ns;
        self.max_ns = self.max_ns.max(o.max_ns);
    }
}

/// Which of an open-loop run's two distributions a row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distribution {
    /// Every message.
    All,
    /// Messages whose flight overlapped no pause.
    PauseFree,
}

/// Marks `row` as holding `d` of a run whose floor probe (if a floor row) is
/// `probe`: the distribution, the probe label the table shows
/// (`raw_ring pause-free`, or `pause-free` for tickwire's own row), and the
/// run's pauses and excluded messages.
pub fn mark(row: &mut LatencyRow, d: Distribution, probe: Option<&str>, pauses: &PauseSummary, excluded: u64) {
    row.probe = match (probe, d) {
        (Some(p), Distribution::PauseFree) => Some(format!("{p} pause-free")),
        (None, Distribution::PauseFree) => Some("pause-free".into()),
        (p, Distribution::All) => p.map(str::to_owned),
    };
    row.distribution = Some(if d == Distribution::All { "all" } else { "pause_free" }.into());
    row.pauses = Some(pauses.count);
    row.pause_total_ns = Some(pauses.total_ns);
    row.pause_max_ns = Some(pauses.max_ns);
    row.excluded = Some(excluded);
}

/// Sorts and merges overlapping pauses.
pub fn merge(mut pauses: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    pauses.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(pauses.len());
    for (s, e) in pauses {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Each message's intended send time and arrival, kept by the receiver.
#[derive(Debug)]
pub struct Samples(Vec<(u64, u64)>);

/// The two distributions of an open-loop run.
#[derive(Debug)]
pub struct Split {
    /// Every message.
    pub all: Histogram<u64>,
    /// Messages whose flight overlapped no pause.
    pub pause_free: Histogram<u64>,
    /// Messages left out of `pause_free`.
    pub excluded: u64,
    /// The pauses of both sides.
    pub pauses: PauseSummary,
}

impl Samples {
    /// Room for `expected` messages (capped: beyond it, samples still count
    /// in the full distribution through [`Samples::push`]'s growth).
    pub fn with_capacity(expected: usize) -> Self {
        Self(Vec::with_capacity(expected.min(64 << 20)))
    }

    /// Messages kept so far.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none arrived yet.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A message intended at `intended` arrived at `now`.
    #[inline]
    pub fn push(&mut self, intended: u64, now: u64) {
        self.0.push((intended, now));
    }

    /// `msg`, stamped with its intended send time ([`tickwire_wire::stamp`]),
    /// arrived just now.
    #[inline]
    pub fn arrived(&mut self, msg: &[u8]) {
        let now = tickwire_shm::os::monotonic_ns();
        self.push(tickwire_wire::stamp::intended_ns(msg).unwrap_or(now), now);
    }

    /// [`Samples::split`] over this side's pauses (`mine`) and the other
    /// side's, read from `peer` ([`read_pauses`]).
    ///
    /// # Errors
    /// The other side's pauses never came, or are malformed.
    pub fn split_with_peer(&self, mut mine: Vec<(u64, u64)>, peer: &Path) -> Result<Split, LabError> {
        mine.extend(read_pauses(peer)?);
        Ok(self.split(mine))
    }

    /// Splits into the full and the pause-free distribution.
    pub fn split(&self, pauses: Vec<(u64, u64)>) -> Split {
        let pauses = merge(pauses);
        let mut all = histogram();
        let mut pause_free = histogram();
        let mut excluded = 0;
        for &(intended, arrived) in &self.0 {
            let latency = arrived.saturating_sub(intended).max(1);
            all.saturating_record(latency);
            // The first pause that ends at or after the send; the flight
            // overlaps it if it starts before the arrival.
            let i = pauses.partition_point(|&(_, end)| end < intended);
            if pauses.get(i).is_some_and(|&(start, _)| start <= arrived) {
                excluded += 1;
            } else {
                pause_free.saturating_record(latency);
            }
        }
        let summary = PauseSummary {
            count: pauses.len() as u64,
            total_ns: pauses.iter().map(|(s, e)| e - s).sum(),
            max_ns: pauses.iter().map(|(s, e)| e - s).max().unwrap_or(0),
        };
        Split { all, pause_free, excluded, pauses: summary }
    }
}

/// What a receiving worker reports for an open-loop run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SinkReport {
    /// Messages received.
    pub received: u64,
    /// The full distribution (base64 V2 histogram).
    pub histogram: String,
    /// The pause-free distribution.
    pub pause_free: String,
    /// Messages left out of it.
    pub excluded: u64,
    /// Both sides' pauses.
    pub pauses: PauseSummary,
}

impl SinkReport {
    /// The report of one side's split, to hand to another process.
    pub fn of(s: &Split) -> Self {
        SinkReport {
            received: s.all.len(),
            histogram: crate::base::output::encode_histogram(&s.all),
            pause_free: crate::base::output::encode_histogram(&s.pause_free),
            excluded: s.excluded,
            pauses: s.pauses,
        }
    }

    /// The result line of a receiver that has its samples, its own pauses
    /// and (from `path`) the sender's.
    ///
    /// # Errors
    /// The sender's pauses never came, or the report cannot be encoded.
    pub fn from_run(samples: &Samples, mine: Vec<(u64, u64)>, path: &Path) -> Result<String, LabError> {
        let r = Self::of(&samples.split_with_peer(mine, path)?);
        serde_json::to_string(&r).map_err(|e| LabError::Worker(e.to_string()))
    }
}

/// What a run's rows say besides their distributions.
#[derive(Debug, Clone, Copy)]
pub struct RunShape {
    /// Payload bytes.
    pub size: usize,
    /// Offered rate, messages per second.
    pub rate: u64,
    /// Deliveries per message sent (subscribers each message reaches).
    pub fan: u64,
    /// Where the sides ran.
    pub cpus: Cpus,
}

/// One path's results over all rounds of an open-loop run.
#[derive(Debug)]
pub struct RunTotals {
    all: Histogram<u64>,
    pause_free: Histogram<u64>,
    excluded: u64,
    pauses: PauseSummary,
    sent: u64,
    received: u64,
    secs: f64,
}

impl Default for RunTotals {
    fn default() -> Self {
        Self::new()
    }
}

impl RunTotals {
    /// Nothing yet.
    pub fn new() -> Self {
        Self {
            all: histogram(),
            pause_free: histogram(),
            excluded: 0,
            pauses: PauseSummary::default(),
            sent: 0,
            received: 0,
            secs: 0.0,
        }
    }

    /// Adds a round: what the sender published and the receiver's report line.
    ///
    /// # Errors
    /// The line is not a [`SinkReport`].
    pub fn add(&mut self, p: Published, line: &str) -> Result<(), LabError> {
        self.add_report(p, &crate::base::worker::parse_report("sink", line)?)
    }

    /// Adds a round: what the sender published and the receiver's report.
    ///
    /// # Errors
    /// A histogram in the report is malformed.
    pub fn add_report(&mut self, p: Published, r: &SinkReport) -> Result<(), LabError> {
        let add = |to: &mut Histogram<u64>, h: &str| -> Result<(), LabError> {
            to.add(crate::base::output::decode_histogram(h)?).map_err(|e| LabError::Worker(e.to_string()))
        };
        add(&mut self.all, &r.histogram)?;
        add(&mut self.pause_free, &r.pause_free)?;
        self.excluded += r.excluded;
        self.pauses.add(&r.pauses);
        self.sent += p.sent;
        self.received += r.received;
        self.secs += p.secs;
        Ok(())
    }

    /// Messages sent and received so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.sent, self.received)
    }

    /// The full and the pause-free rows.
    pub fn rows(
        &self,
        mode: &str,
        transport: &str,
        probe: Option<&str>,
        shape: &RunShape,
        m: &Machine,
        wall: SystemTime,
    ) -> [Measured; 2] {
        let row = |h: &Histogram<u64>, d: Distribution| {
            let mut row = LatencyRow::from_histogram(mode, transport, shape.size, h);
            mark(&mut row, d, probe, &self.pauses, self.excluded);
            row.clock = "CLOCK_MONOTONIC in both processes, from the intended send time".into();
            row.offered_rate = Some(shape.rate as f64);
            row.achieved_rate = Some((self.sent as f64 / self.secs.max(1e-9)).round());
            row.lost = (self.sent * shape.fan).saturating_sub(self.received);
            row.cpus = shape.cpus.to_string();
            row.machine = m.summary();
            Measured { row, hist: h.clone(), start: wall, elapsed: Duration::from_secs_f64(self.secs) }
        };
        [row(&self.all, Distribution::All), row(&self.pause_free, Distribution::PauseFree)]
    }
}

/// What a sweep round's sink reports.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReflectorReport {
    /// Messages received.
    pub received: u64,
    /// First to last, seconds.
    pub seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_in_flight_during_a_pause_leaves_the_pause_free_distribution() {
        let mut s = Samples::with_capacity(4);
        s.push(100, 200); // before the pause
        s.push(900, 5_000); // sent before, arrived during
        s.push(2_000, 2_100); // inside
        s.push(10_000, 10_050); // after
        let split = s.split(vec![(1_000, 3_000), (2_500, 4_000)]);
        assert_eq!((split.all.len(), split.pause_free.len(), split.excluded), (4, 2, 2));
        assert_eq!(split.pauses, PauseSummary { count: 1, total_ns: 3_000, max_ns: 3_000 });
        assert_eq!(split.pause_free.max(), 100);
    }

    #[test]
    fn the_recorder_keeps_only_gaps_over_the_threshold() {
        let mut r = PauseRecorder::new(0);
        for t in [10, 5_000, 5_010, 60_000, 60_100] {
            r.tick(t);
        }
        assert_eq!(r.into_pauses(), vec![(5_010, 60_000)]);
    }
}
