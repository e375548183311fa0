//! `tickwire lab guaranteed`: guaranteed publishing through the router, for
//! each sync policy, beside the disk's own fsync latency measured in the
//! same run.
//!
//! The router ([`super::host`], with a journal in `dir`, which must be on
//! the disk under test: tmpfs makes every fsync free) spins on
//! `cpus.remote`; one thread on `cpus.local` drives P publishers, each on
//! its own topic, and one durable subscriber on `md/>` that acknowledges
//! what it receives at once. Each round, in this order:
//! 1. **floor**: 200 × (`pwrite` 128 bytes, `fdatasync`) on a file beside
//!    the journal: the disk's fsync latency now;
//! 2. **peak**: the publishers publish as fast as their windows allow
//!    (closed loop: a publisher whose window is full waits for
//!    acknowledgements) for `duration / rounds`; the rate is the messages
//!    acknowledged over the time until the last acknowledgement;
//! 3. **latency**: open loop at `rate` (all publishers together; message
//!    *i* due at `t0 + i / rate`, on publisher `i % P`):
//!    publish-to-acknowledgement (from the intended time to the poll that
//!    sees the acknowledgement) and publish-to-delivery (to the durable
//!    subscriber's callback).
//!
//! With `consumers` above zero the durable subscriber is replaced by that
//! many consumers of a durable queue on `md/>`, competing; each
//! acknowledges every delivery on its own (a queue's acknowledgement names
//! one delivery), and the catch-up rate is the queue's rate out.

use super::group::{Group, GroupFigures};
use super::host::{HostReport, HostSpec};
use crate::base::common::{parse_duration, parse_rate, parse_size};
use crate::base::output::print::Common;
use crate::base::output::report::Quantiles;
use crate::{LabError, WorkerProcess};
use hdrhistogram::Histogram;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tickwire_agent::pin_current_thread;
use tickwire_client::{Client, ClientEvent, ClientOptions, PublishError};
use tickwire_latency::histogram;
use tickwire_shm::os::monotonic_ns;
use tickwire_wire::stamp;

/// A `lab guaranteed` run.
#[derive(Debug, Clone, clap::Args)]
pub struct GuaranteedLab {
    #[command(flatten)]
    pub common: Common,
    /// Sync policies, each measured in turn.
    #[arg(long = "sync", value_name = "SYNC", default_value = "os,group,fsync", value_delimiter = ',',
          value_parser = ["os", "group", "fsync"])]
    pub syncs: Vec<String>,
    /// Publisher counts, each measured in turn.
    #[arg(long, default_value = "1,10", value_delimiter = ',')]
    pub publishers: Vec<usize>,
    /// Consume through a durable queue with this many competing consumers, each acknowledging every delivery,
    /// instead of one durable subscription.
    #[arg(long, default_value_t = 0)]
    pub consumers: usize,
    /// Payload bytes (at least 16).
    #[arg(long, default_value = "100", value_parser = parse_size)]
    pub size: usize,
    /// The latency phase's offered rate, all publishers together.
    #[arg(long, default_value = "20k", value_parser = parse_rate)]
    pub rate: u64,
    /// Peak and latency phases together, per case, over all rounds.
    #[arg(long, default_value = "6s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Rounds per case: fsync floor, peak, latency.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Where the journals go: a directory on the disk under test (not tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    pub journal_dir: PathBuf,
    /// Also a high-availability group of three routers on loopback (the clients on its leader), in the same rounds.
    #[arg(long)]
    pub group: bool,
    /// Where the router's shared-memory files go.
    #[arg(skip)]
    pub shm_dir: PathBuf,
}

/// One case's results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GuaranteedResult {
    /// Sync policy.
    pub sync: String,
    /// Publishers.
    pub publishers: usize,
    /// Consumers of a durable queue (0: one durable subscription).
    pub consumers: usize,
    /// First deliveries each consumer received (a queue's spread).
    pub per_consumer: Vec<u64>,
    /// The disk's fsync latency, in the same rounds.
    pub fsync: Quantiles,
    /// Acknowledged messages per second at peak, per round.
    pub peak_rates: Vec<f64>,
    /// The durable subscriber's deliveries per second while it caught up
    /// after each peak, per round.
    pub delivery_rates: Vec<f64>,
    /// Publish to acknowledgement at `rate`.
    pub ack: Quantiles,
    /// Publish to delivery at `rate`.
    pub deliver: Quantiles,
    /// Latency-phase messages that could not go out on time (a full window).
    pub late: u64,
    /// The latency phase's offered rate.
    pub rate: u64,
    /// The router's report at the end.
    pub host: HostReport,
    /// The group's figures, with `--group`.
    pub group: Option<GroupFigures>,
}

impl GuaranteedResult {
    /// The median peak rate.
    pub fn peak(&self) -> f64 {
        crate::base::output::report::median(self.peak_rates.clone())
    }
}

fn err(what: &str, e: impl std::fmt::Display) -> LabError {
    LabError::Worker(format!("{what}: {e}"))
}

/// Runs every case.
///
/// # Errors
/// Bad parameters, a router or client that fails to start, a phase that
/// does not finish.
pub fn run(o: &GuaranteedLab) -> Result<Vec<GuaranteedResult>, LabError> {
    if o.size < stamp::LEN || o.rate == 0 || o.publishers.contains(&0) {
        return Err(LabError::Usage("lab guaranteed needs --size >= 16, a rate and publishers above zero".into()));
    }
    let mut out = Vec::new();
    for sync in &o.syncs {
        for &p in &o.publishers {
            if crate::stop_requested() {
                return Ok(out);
            }
            out.push(one_case(o, sync, p)?);
        }
    }
    Ok(out)
}

fn one_case(o: &GuaranteedLab, sync: &str, publishers: usize) -> Result<GuaranteedResult, LabError> {
    let tag = crate::run_tag();
    let journal = o.journal_dir.join(format!("{tag}-journal-{sync}-{publishers}"));
    let dir = o.shm_dir.join(format!("{tag}-guaranteed"));
    let clients_on = std::cell::Cell::new(0);
    let result = (|| {
        let spec = HostSpec {
            dir: dir.clone(),
            cpu: o.common.cpus.remote,
            tcp: false,
            tls: None,
            log_bytes: 4 << 20,
            secure: false,
            journal: Some((journal.clone(), sync.to_owned())),
            nats: false,
            ha: None,
            net: None,
        };
        let mut host = WorkerProcess::spawn(&spec)?;
        let listening = host.read_line()?;
        if listening != "listening ipc" {
            return Err(LabError::Worker(format!("router host said {listening:?}")));
        }
        let mut h = Harness::connect(&dir, publishers, o.consumers)?;
        let mut group = match o.group {
            true => {
                let g = Group::start(&dir, &journal, sync, o.common.cpus.remote)?;
                clients_on.set(g.leader_id());
                let gh = Harness::connect(g.leader_dir(), publishers, o.consumers)?;
                let figures = GroupFigures { leader: g.leader_id(), ..GroupFigures::default() };
                Some((g, gh, figures, histogram(), histogram()))
            }
            false => None,
        };
        pin_current_thread(o.common.cpus.local)?;
        let rounds = o.rounds.max(1);
        let phase = (o.duration / (2 * rounds as u32)).max(Duration::from_millis(100));
        let (mut fsync, mut ack, mut deliver) = (histogram(), histogram(), histogram());
        let mut r = GuaranteedResult {
            sync: sync.to_owned(),
            publishers,
            consumers: o.consumers,
            per_consumer: Vec::new(),
            fsync: Quantiles::default(),
            peak_rates: Vec::new(),
            delivery_rates: Vec::new(),
            ack: Quantiles::default(),
            deliver: Quantiles::default(),
            late: 0,
            rate: o.rate,
            host: HostReport::default(),
            group: None,
        };
        let bar = crate::progress(rounds as u64, &format!("guaranteed, sync {sync}, {publishers} publisher(s)"));
        std::fs::create_dir_all(&journal).map_err(|e| err("journal directory", e))?;
        for _ in 0..rounds {
            if crate::stop_requested() {
                break;
            }
            crate::modes::fsync::probe(&journal, 200, 128, &mut fsync)?;
            host.write_line("wake")?;
            let (peak, delivery) = h.peak(o.size, phase)?;
            r.peak_rates.push(peak);
            r.delivery_rates.push(delivery);
            r.late += h.latency((o.rate, o.size, phase), &mut ack, &mut deliver)?;
            r.host = sleep(&mut host, &o.shm_dir)?;
            // The group in the same round, the single router asleep.
            if let Some((g, gh, f, gack, gdeliver)) = &mut group {
                g.leader_host().write_line("wake")?;
                let (peak, delivery) = gh.peak(o.size, phase)?;
                f.peak_rates.push(peak);
                f.delivery_rates.push(delivery);
                f.late += gh.latency((o.rate, o.size, phase), gack, gdeliver)?;
                f.host = sleep(g.leader_host(), &o.shm_dir)?;
            }
            bar.inc(1);
        }
        bar.finish_and_clear();
        r.per_consumer = h.per.clone();
        h.close();
        if let Some((g, gh, mut f, gack, gdeliver)) = group {
            gh.close();
            (f.ack, f.deliver) = (Quantiles::of(&gack), Quantiles::of(&gdeliver));
            r.group = Some(f);
            g.stop()?;
        }
        host.write_line("stop")?;
        host.finish(Duration::from_secs(30))?;
        (r.fsync, r.ack, r.deliver) = (Quantiles::of(&fsync), Quantiles::of(&ack), Quantiles::of(&deliver));
        Ok(r)
    })();
    // Which case, and where the group's leadership was.
    let result = result.map_err(|e| {
        let group = match o.group {
            true => format!("{} (clients on m{})", super::group::roles(&dir), clients_on.get()),
            false => String::new(),
        };
        LabError::Worker(format!("sync {sync}, {publishers} publisher(s){group}: {e}"))
    });
    // This run's files only.
    let _ = std::fs::remove_dir_all(&journal);
    let _ = std::fs::remove_dir_all(&dir);
    for i in 1..=super::group::MEMBERS {
        let _ = std::fs::remove_dir_all(format!("{}-m{i}", journal.display()));
        let _ = std::fs::remove_dir_all(format!("{}-m{i}", dir.display()));
    }
    result
}

/// Puts a router host to sleep and returns its report.
fn sleep(host: &mut WorkerProcess, shm_dir: &Path) -> Result<HostReport, LabError> {
    let pauses = shm_dir.join(format!("{}-guaranteed.pauses", crate::run_tag()));
    host.write_line(&format!("sleep {}", pauses.display()))?;
    let report = host.read_line()?;
    let _ = std::fs::remove_file(&pauses);
    serde_json::from_str(&report).map_err(|e| err("router report", e))
}

/// The publishers and the durable subscriber (or the queue's consumers),
/// on one thread.
struct Harness {
    pubs: Vec<Client>,
    topics: Vec<String>,
    /// The durable subscriber, or the queue's consumers, each with its
    /// subscription id.
    subs: Vec<(Client, u32)>,
    /// A queue's consumers (each delivery acknowledged alone).
    queue: bool,
    /// First deliveries received, since connecting.
    delivered: u64,
    /// See `delivered`, per consumer.
    per: Vec<u64>,
    /// Sequences to acknowledge (kept: no allocation per poll).
    to_ack: Vec<u64>,
}

impl Harness {
    fn connect(dir: &Path, publishers: usize, consumers: usize) -> Result<Self, LabError> {
        let opts = |name: String| ClientOptions {
            name,
            dir: dir.to_owned(),
            log_bytes: 4 << 20,
            guaranteed_window: (16_384 / publishers).max(256),
            ..ClientOptions::default()
        };
        let mut subs = Vec::new();
        for i in 0..consumers.max(1) {
            let mut c = Client::connect("ipc", opts(format!("lab-durable-{i}"))).map_err(|e| err("subscriber", e))?;
            let id = if consumers == 0 {
                c.subscribe_durable("md/>", "lab")
            } else {
                c.subscribe_durable_queue("md/>", "lab")
            }
            .map_err(|e| err("subscriber", e))?;
            c.wait_connected(Duration::from_secs(10)).map_err(|e| err("subscriber", e))?;
            subs.push((c, id));
        }
        let mut pubs = Vec::with_capacity(publishers);
        for i in 0..publishers {
            let mut c = Client::connect("ipc", opts(format!("lab-pub-{i}"))).map_err(|e| err("publisher", e))?;
            c.wait_connected(Duration::from_secs(10)).map_err(|e| err("publisher", e))?;
            pubs.push(c);
        }
        let topics = (0..publishers).map(crate::modes::oneway::topic).collect();
        let per = vec![0; subs.len()];
        let mut h = Self { pubs, topics, subs, queue: consumers > 0, delivered: 0, per, to_ack: Vec::new() };
        // The durable subscription is bound once a probe reaches it.
        let mut probe = [0u8; stamp::LEN];
        stamp::write(&mut probe, u64::MAX, 0);
        h.pubs[0].publish_guaranteed(&h.topics[0], &probe).map_err(|e| err("probe", e))?;
        let until = Instant::now() + Duration::from_secs(10);
        let mut seen = false;
        while !seen {
            if Instant::now() > until {
                return Err(LabError::Worker("the durable subscription never received the probe".into()));
            }
            h.pubs[0].poll(|_| {}, 64);
            h.poll_sub(|_| seen = true);
        }
        // And acknowledged: the first round counts from here.
        h.settle()?;
        Ok(h)
    }

    /// Polls the subscriber: `each` gets every guaranteed first delivery's
    /// payload; everything received is acknowledged.
    fn poll_sub(&mut self, mut each: impl FnMut(&[u8])) -> usize {
        let mut n = 0;
        for (k, (sub, id)) in self.subs.iter_mut().enumerate() {
            let to_ack = &mut self.to_ack;
            let (delivered, per) = (&mut self.delivered, &mut self.per[k]);
            n += sub.poll(
                |e| {
                    if let ClientEvent::Message(m) = e {
                        if m.is_guaranteed() {
                            if !m.is_redelivered() {
                                *delivered += 1;
                                *per += 1;
                                each(m.payload);
                            }
                            to_ack.push(m.sequence);
                        }
                    }
                },
                256,
            );
            // A durable subscription's acknowledgement covers everything
            // before it; a queue's names one delivery.
            if !self.queue {
                self.to_ack.drain(..self.to_ack.len().saturating_sub(1));
            }
            for seq in self.to_ack.drain(..) {
                sub.ack(*id, seq);
            }
        }
        n
    }

    fn acked(&self) -> u64 {
        self.pubs.iter().map(Client::acknowledged).sum()
    }

    /// Waits (10 s at most) until every publish is acknowledged.
    fn settle(&mut self) -> Result<(), LabError> {
        let until = Instant::now() + Duration::from_secs(10);
        while self.pubs.iter().any(|p| p.unacknowledged() > 0) {
            if Instant::now() > until {
                return Err(LabError::Worker("guaranteed publishes not acknowledged within 10 s".into()));
            }
            for p in &mut self.pubs {
                p.poll(|_| {}, 256);
            }
            self.poll_sub(|_| {});
        }
        Ok(())
    }

    /// Closed loop for `d`: every publisher fills its window, again and
    /// again. Returns messages acknowledged per second, and the durable
    /// subscriber's deliveries per second until it has them all (the
    /// latency phase starts with no backlog).
    fn peak(&mut self, size: usize, d: Duration) -> Result<(f64, f64), LabError> {
        let (before, delivered_before) = (self.acked(), self.delivered);
        let start = Instant::now();
        let mut msg = vec![0u8; size];
        let mut seq = 0u64;
        while start.elapsed() < d {
            for i in 0..self.pubs.len() {
                for _ in 0..64 {
                    stamp::write(&mut msg, seq, 0);
                    match self.pubs[i].publish_guaranteed(&self.topics[i], &msg) {
                        Ok(_) => seq += 1,
                        Err(PublishError::WindowFull(_)) => break,
                        Err(e) => return Err(err("publish", e)),
                    }
                }
                self.pubs[i].poll(|_| {}, 256);
            }
            self.poll_sub(|_| {});
        }
        self.settle()?;
        let secs = start.elapsed().as_secs_f64();
        let acked = self.acked() - before;
        let until = Instant::now() + Duration::from_secs(120);
        while self.delivered - delivered_before < acked {
            if Instant::now() > until {
                let got = self.delivered - delivered_before;
                return Err(LabError::Worker(format!("the durable subscriber got {got} of {acked} in 120 s")));
            }
            self.poll_sub(|_| {});
        }
        Ok((acked as f64 / secs, acked as f64 / start.elapsed().as_secs_f64()))
    }

    /// Open loop at `rate` for `d`: publish-to-acknowledgement into `ack`,
    /// publish-to-delivery into `deliver`. Returns the messages that went
    /// out late (a full window).
    fn latency(
        &mut self,
        (rate, size, d): (u64, usize, Duration),
        ack: &mut Histogram<u64>,
        deliver: &mut Histogram<u64>,
    ) -> Result<u64, LabError> {
        let p = self.pubs.len();
        let mut waiting: Vec<VecDeque<(u64, u64)>> = vec![VecDeque::new(); p];
        let mut msg = vec![0u8; size];
        let total = (rate as f64 * d.as_secs_f64()) as u64;
        let t0 = monotonic_ns() + 1_000_000;
        let (mut i, mut late) = (0u64, 0u64);
        let until = Instant::now() + d + Duration::from_secs(10);
        let mut delivered = 0u64;
        while (i < total || waiting.iter().any(|w| !w.is_empty()) || delivered < total) && Instant::now() < until {
            let now = monotonic_ns();
            if i < total {
                let due = t0 + i * 1_000_000_000 / rate;
                if now >= due {
                    let k = (i % p as u64) as usize;
                    stamp::write(&mut msg, i, due);
                    match self.pubs[k].publish_guaranteed(&self.topics[k], &msg) {
                        Ok(seq) => {
                            waiting[k].push_back((seq, due));
                            late += u64::from(now - due > 1_000_000);
                            i += 1;
                        }
                        Err(PublishError::WindowFull(_)) => {}
                        Err(e) => return Err(err("publish", e)),
                    }
                }
            }
            for (k, c) in self.pubs.iter_mut().enumerate() {
                c.poll(|_| {}, 256);
                let a = c.acknowledged();
                let now = monotonic_ns();
                while waiting[k].front().is_some_and(|w| w.0 <= a) {
                    if let Some((_, due)) = waiting[k].pop_front() {
                        let _ = ack.record(now.saturating_sub(due));
                    }
                }
            }
            self.poll_sub(|payload| {
                if let Some(t) = stamp::intended_ns(payload).filter(|&t| t >= t0) {
                    let _ = deliver.record(monotonic_ns().saturating_sub(t));
                    delivered += 1;
                }
            });
        }
        if i < total || delivered < total {
            return Err(LabError::Worker(format!(
                "latency phase at {rate} msg/s: {i} of {total} published, {delivered} delivered within 10 s of its end"
            )));
        }
        Ok(late)
    }

    fn close(self) {
        for c in self.pubs {
            c.close();
        }
        for (c, _) in self.subs {
            c.close();
        }
    }
}

/// Prints the results as a table (or one JSON object per case).
///
/// # Errors
/// JSON that cannot be written.
pub fn print(results: &[GuaranteedResult], json: bool) -> Result<(), LabError> {
    if json {
        for r in results {
            println!("{}", serde_json::to_string(r).map_err(|e| LabError::Usage(e.to_string()))?);
        }
        return Ok(());
    }
    let us = |ns: u64| ns as f64 / 1e3;
    println!(
        "{:<6} {:>4} {:>5}  {:>21}  {:>12}  {:>12}  {:>27}  {:>8}  {:>27}",
        "sync",
        "pubs",
        "queue",
        "fsync p50/p99 (µs)",
        "peak msg/s",
        "durable /s",
        "to ack p50/p99/p99.9 (µs)",
        "ack/fsync",
        "to delivery p50/p99/p99.9"
    );
    for r in results {
        let ratio = if r.fsync.p50 > 0 { r.ack.p50 as f64 / r.fsync.p50 as f64 } else { 0.0 };
        println!(
            "{:<6} {:>4} {:>5}  {:>10.1}/{:<10.1}  {:>12.0}  {:>12.0}  {:>8.1}/{:>8.1}/{:>9.1}  {:>7.2}x  {:>8.1}/{:>8.1}/{:>9.1}",
            r.sync,
            r.publishers,
            if r.consumers == 0 { "-".to_owned() } else { format!("{}c", r.consumers) },
            us(r.fsync.p50),
            us(r.fsync.p99),
            r.peak(),
            crate::base::output::report::median(r.delivery_rates.clone()),
            us(r.ack.p50),
            us(r.ack.p99),
            us(r.ack.p999),
            ratio,
            us(r.deliver.p50),
            us(r.deliver.p99),
            us(r.deliver.p999)
        );
        if let Some(g) = &r.group {
            super::group::print_row(g, r.peak(), r.ack.p50);
        }
    }
    if let Some(r) = results.first().filter(|r| r.consumers > 0) {
        println!(
            "(queue: a durable queue with {} consumers instead of one durable subscription; \
             deliveries per consumer {:?})",
            r.consumers, r.per_consumer
        );
    }
    if let Some(r) = results.first() {
        println!(
            "(latency at {} msg/s, open loop; peak: closed loop, acknowledged messages per second, median of {} rounds)",
            r.rate,
            r.peak_rates.len()
        );
    }
    Ok(())
}
