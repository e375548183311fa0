//! `lab bindings`: tickwire from C and from Python against the Rust lab,
//! interleaved in rounds on the same CPUs.
//!
//! Each round runs, in order:
//! * the Rust lab's 64-byte ping-pong over shared memory (the log's own
//!   appender and reader, [`ipc::pingpong_histogram`]): the reference;
//! * the C example `examples/c/pingpong.c` (`--c`), its `pong` on the remote
//!   CPU and its `ping` on the local one, through the C library;
//! * the Python example `examples/python/pingpong.py` (`--python`), the
//!   same, with the empty Python loop it times beside (the interpreter's
//!   floor);
//! * publishing throughput over shared memory, 64-byte messages to a
//!   subscriber in this process on the remote CPU: a Rust publication's
//!   offer loop (the reference) and Python's `publish_many`
//!   (`examples/python/throughput.py`).
//!
//! A round's figures are the programs' own p50 and p99 (each prints them);
//! the run's are the medians over the rounds, and every ratio is to the
//! Rust figure of the same run.

use crate::base::output::print::Common;
use crate::base::output::report::median;
use crate::paths::ipc::{self, IpcOptions};
use crate::paths::sockets::Wait;
use crate::LabError;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tickwire_driver::{Channel, Event, OfferError, Publication, Subscription};
use tickwire_shm::Context;

/// The examples' message size.
pub const SIZE: usize = 64;
/// How long any one program of a round may take.
const LIMIT: Duration = Duration::from_secs(120);

/// A `lab bindings` run.
#[derive(Debug, Clone, clap::Args)]
pub struct Bindings {
    #[command(flatten)]
    pub common: Common,
    /// The compiled examples/c/pingpong.c (make install-c, then cc; docs/c.md); without it, no C rows.
    #[arg(long)]
    pub c: Option<PathBuf>,
    /// A Python interpreter with the tickwire package installed (make python: target/py-venv/bin/python);
    /// without it, no Python rows.
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Where pingpong.py and throughput.py are.
    #[arg(long, default_value = "examples/python")]
    pub examples: PathBuf,
    /// Round trips per round and program.
    #[arg(long, default_value_t = 100_000)]
    pub count: u64,
    /// Messages published per round and publisher (Rust's offer loop, Python's publish_many).
    #[arg(long, default_value_t = 2_000_000)]
    pub messages: u64,
    /// Payloads per publish_many call.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// Interleaved rounds.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Where the shared-memory files go (a directory per program, removed
    /// after it).
    #[arg(skip)]
    pub dir: PathBuf,
}

/// One program's ping-pong, over the rounds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PingRow {
    /// `rust lab`, `c example`, `python example`, `python empty loop`.
    pub path: String,
    /// Each round's p50, in ns.
    pub p50_ns: Vec<u64>,
    /// Each round's p99, in ns.
    pub p99_ns: Vec<u64>,
    /// Median over the rounds of `p50_ns`.
    pub median_p50_ns: u64,
    /// Median over the rounds of `p99_ns`.
    pub median_p99_ns: u64,
    /// `median_p50_ns` over the Rust lab's.
    pub p50_vs_rust: f64,
    /// `median_p99_ns` over the Rust lab's.
    pub p99_vs_rust: f64,
}

/// One publisher's throughput, over the rounds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RateRow {
    /// `rust offer` or `python publish_many`.
    pub path: String,
    /// Each round's rate at the subscriber (first to last message), msg/s.
    pub msgs_per_s: Vec<f64>,
    /// Median over the rounds.
    pub median_msgs_per_s: f64,
    /// `median_msgs_per_s` over the Rust publisher's.
    pub vs_rust: f64,
}

/// What `lab bindings` found.
#[derive(Debug, Clone, Serialize)]
pub struct BindingsResult {
    /// Rounds run.
    pub rounds: usize,
    /// Round trips per round and program.
    pub count: u64,
    /// Ping-pong rows, the Rust lab's first.
    pub pingpong: Vec<PingRow>,
    /// Throughput rows, the Rust publisher's first.
    pub throughput: Vec<RateRow>,
}

/// What the examples print (pingpong: `{"messages", "p50_ns", "p99_ns"}`,
/// Python adds its loop's).
#[derive(Debug, Deserialize)]
struct Printed {
    p50_ns: u64,
    p99_ns: u64,
    #[serde(default)]
    loop_p50_ns: Option<u64>,
    #[serde(default)]
    loop_p99_ns: Option<u64>,
}

/// A program's directory, removed on every way out.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child killed on every way out that did not wait for it.
struct Killed(Option<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn werr(e: impl std::fmt::Display) -> LabError {
    LabError::Worker(e.to_string())
}

/// `program args...` pinned to `cpu` (taskset, from util-linux).
fn pinned(cpu: usize, program: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("taskset");
    c.arg("-c").arg(cpu.to_string()).arg(program).args(args);
    c
}

/// Waits for `child` to end within `LIMIT`, killing it otherwise; its
/// standard output.
fn finish(mut child: Child, what: &str) -> Result<String, LabError> {
    let until = Instant::now() + LIMIT;
    loop {
        if let Some(status) = child.try_wait().map_err(werr)? {
            let out = child.wait_with_output().map_err(werr)?;
            if !status.success() {
                return Err(werr(format!("{what}: {status}: {}", String::from_utf8_lossy(&out.stderr).trim())));
            }
            return String::from_utf8(out.stdout).map_err(werr);
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            return Err(werr(format!("{what}: still running after {LIMIT:?}: killed")));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn spawn(mut cmd: Command, what: &str) -> Result<Child, LabError> {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| werr(format!("{what}: {e}")))
}

/// One ping-pong between two processes of `program` (`head` before `ping
/// DIR N` / `pong DIR N`), in a directory of its own.
fn external_pingpong(b: &Bindings, program: &Path, head: &[&str], tag: &str) -> Result<Printed, LabError> {
    let dir = Scratch(b.dir.join(format!("{tag}-{}", crate::run_tag())));
    let (d, n) = (dir.0.display().to_string(), b.count.to_string());
    let args = |role| [head, &[role, d.as_str(), n.as_str()]].concat();
    let pong = spawn(pinned(b.common.cpus.remote, program, &args("pong")), &format!("{tag} pong"))?;
    let ping = spawn(pinned(b.common.cpus.local, program, &args("ping")), &format!("{tag} ping"));
    let result = ping.and_then(|p| finish(p, &format!("{tag} ping")));
    let pong = finish(pong, &format!("{tag} pong"));
    drop(dir);
    let out = result?;
    pong?;
    serde_json::from_str(out.trim()).map_err(|e| werr(format!("{tag} ping printed {out:?}: {e}")))
}

/// Every message of `sub` until `total` came (bounded by `LIMIT`); the
/// rate from the first to the last.
fn drain(sub: &mut Subscription, total: u64, what: &str) -> Result<f64, LabError> {
    let (mut got, mut first) = (0u64, None::<(Instant, u64)>);
    let until = Instant::now() + LIMIT;
    let mut failed = None;
    while got < total {
        sub.poll(
            |e| match e {
                Event::Message(_) => got += 1,
                Event::Lost { from, to, .. } => failed = Some(format!("{what}: stream bytes {from}..{to} lost")),
                _ => {}
            },
            4096,
        )
        .map_err(werr)?;
        if let Some(f) = failed.take() {
            return Err(werr(f));
        }
        if got > 0 && first.is_none() {
            // The clock starts here, with what this first poll took.
            first = Some((Instant::now(), got));
        }
        if Instant::now() > until {
            return Err(werr(format!("{what}: {got} of {total} messages within {LIMIT:?}")));
        }
    }
    let Some((t0, before)) = first else { return Ok(0.0) };
    let secs = t0.elapsed().as_secs_f64();
    Ok(if secs > 0.0 { (total - before) as f64 / secs } else { 0.0 })
}

/// A subscription on `ipc:bulk` in `ctx`, once its publication exists.
fn subscribe(ctx: &Context, what: &str) -> Result<Subscription, LabError> {
    let ch: Channel = "ipc:bulk".parse().map_err(werr)?;
    let until = Instant::now() + LIMIT;
    loop {
        match Subscription::open(ctx, &ch, 1) {
            Ok(s) => return Ok(s),
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => return Err(werr(format!("{what}: ipc:bulk: {e}"))),
        }
    }
}

/// The reference: a Rust publication offering `messages` on `ipc:bulk`
/// from a thread on the local CPU, drained here on the remote one.
fn rust_rate(b: &Bindings) -> Result<f64, LabError> {
    let dir = Scratch(b.dir.join(format!("rs-{}", crate::run_tag())));
    let ctx = Context::new(&dir.0)?;
    let ch: Channel = "ipc:bulk".parse().map_err(werr)?;
    let mut publication = Publication::open(&ctx, &ch, 1).map_err(werr)?;
    let (n, local) = (b.messages, b.common.cpus.local);
    // Set when the draining side gives up, so the publisher does too.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let publisher = std::thread::spawn(move || -> Result<(), LabError> {
        tickwire_agent::pin_current_thread(local).map_err(werr)?;
        let mut msg = [0u8; SIZE];
        let until = Instant::now() + LIMIT;
        for i in 0..n {
            msg[..8].copy_from_slice(&i.to_le_bytes());
            loop {
                match publication.offer(&msg) {
                    Ok(_) => break,
                    Err(OfferError::BackPressured | OfferError::NotConnected)
                        if Instant::now() < until && !stopped.load(std::sync::atomic::Ordering::Relaxed) =>
                    {
                        std::hint::spin_loop()
                    }
                    Err(e) => return Err(werr(format!("rust offer: {e}"))),
                }
            }
        }
        publication.close(Duration::ZERO).map_err(werr)?;
        Ok(())
    });
    let rate = tickwire_agent::pin_current_thread(b.common.cpus.remote)
        .map_err(werr)
        .and_then(|()| subscribe(&ctx, "rust offer"))
        .and_then(|mut sub| drain(&mut sub, n, "rust offer"));
    if rate.is_err() {
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
    let published = publisher.join().map_err(|_| werr("rust offer: the publisher panicked"))?;
    rate.and_then(|r| published.map(|()| r))
}

/// Python's `publish_many` (examples/python/throughput.py) on the local
/// CPU, drained here on the remote one.
fn python_rate(b: &Bindings, python: &Path) -> Result<f64, LabError> {
    let dir = Scratch(b.dir.join(format!("py-{}", crate::run_tag())));
    let ctx = Context::new(&dir.0)?;
    let script = b.examples.join("throughput.py").display().to_string();
    let (d, n, batch) = (dir.0.display().to_string(), b.messages.to_string(), b.batch.to_string());
    let mut child =
        Killed(Some(spawn(pinned(b.common.cpus.local, python, &[&script, &d, &n, &batch]), "python publish_many")?));
    tickwire_agent::pin_current_thread(b.common.cpus.remote).map_err(werr)?;
    let rate =
        subscribe(&ctx, "python publish_many").and_then(|mut s| drain(&mut s, b.messages, "python publish_many"))?;
    if let Some(c) = child.0.take() {
        finish(c, "python publish_many")?;
    }
    Ok(rate)
}

fn ping_row(path: &str, rounds: &[(u64, u64)], rust: Option<&PingRow>) -> PingRow {
    let p50: Vec<u64> = rounds.iter().map(|r| r.0).collect();
    let p99: Vec<u64> = rounds.iter().map(|r| r.1).collect();
    let med = |v: &[u64]| median(v.iter().map(|&x| x as f64).collect()).round() as u64;
    let (m50, m99) = (med(&p50), med(&p99));
    let (r50, r99) = rust.map_or((m50, m99), |r| (r.median_p50_ns, r.median_p99_ns));
    PingRow {
        path: path.into(),
        p50_ns: p50,
        p99_ns: p99,
        median_p50_ns: m50,
        median_p99_ns: m99,
        p50_vs_rust: m50 as f64 / r50.max(1) as f64,
        p99_vs_rust: m99 as f64 / r99.max(1) as f64,
    }
}

/// Runs the rounds.
///
/// # Errors
/// A program that fails, prints what it should not, or outlives its
/// limit; a lost message.
pub fn run(b: &Bindings) -> Result<BindingsResult, LabError> {
    if b.count < 100 || b.messages < 2 || b.rounds == 0 || b.batch == 0 {
        return Err(LabError::Usage(
            "lab bindings: --count of 100 or more, --messages of 2 or more, --rounds and --batch of 1 or more".into(),
        ));
    }
    let (mut rust, mut c, mut py, mut py_loop) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut rust_rates, mut py_rates) = (Vec::new(), Vec::new());
    let script = b.examples.join("pingpong.py").display().to_string();
    let bar = crate::progress(b.rounds as u64, "bindings");
    for _ in 0..b.rounds {
        if crate::stop_requested() {
            break;
        }
        let h = ipc::pingpong_histogram(&IpcOptions {
            count: b.count,
            warmup: b.count / 10,
            size: SIZE,
            duration: Duration::ZERO,
            // The examples open their channels with the driver's default log:
            // the same size here, so only the binding differs.
            capacity: tickwire_shm::LogConfig::default().capacity,
            cpus: b.common.cpus,
            dir: b.dir.clone(),
            wait: Wait::Spin,
        })?;
        rust.push((h.value_at_quantile(0.5), h.value_at_quantile(0.99)));
        if let Some(bin) = &b.c {
            let r = external_pingpong(b, bin, &[], "c")?;
            c.push((r.p50_ns, r.p99_ns));
        }
        if let Some(python) = &b.python {
            let r = external_pingpong(b, python, &[script.as_str()], "python")?;
            py.push((r.p50_ns, r.p99_ns));
            py_loop.push((r.loop_p50_ns.unwrap_or(0), r.loop_p99_ns.unwrap_or(0)));
            rust_rates.push(rust_rate(b)?);
            py_rates.push(python_rate(b, python)?);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    if rust.is_empty() {
        return Err(LabError::Usage("lab bindings: stopped before a round ended".into()));
    }
    let reference = ping_row("rust lab", &rust, None);
    let mut pingpong = vec![reference.clone()];
    for (path, rounds) in [("c example", &c), ("python example", &py), ("python empty loop", &py_loop)] {
        if !rounds.is_empty() {
            pingpong.push(ping_row(path, rounds, Some(&reference)));
        }
    }
    let mut throughput = Vec::new();
    if !rust_rates.is_empty() {
        let floor = median(rust_rates.clone());
        for (path, rates) in [("rust offer", rust_rates), ("python publish_many", py_rates)] {
            let m = median(rates.clone());
            throughput.push(RateRow {
                path: path.into(),
                msgs_per_s: rates,
                median_msgs_per_s: m,
                vs_rust: m / floor.max(1.0),
            });
        }
    }
    Ok(BindingsResult { rounds: rust.len(), count: b.count, pingpong, throughput })
}

/// Prints the result as a table, or as one JSON object.
///
/// # Errors
/// JSON encoding.
pub fn print(r: &BindingsResult, json: bool) -> Result<(), LabError> {
    if json {
        println!("{}", serde_json::to_string(r).map_err(werr)?);
        return Ok(());
    }
    println!(
        "bindings: {SIZE} B ping-pong over shared memory, half round trip, {} round trips a round, medians of {} interleaved rounds",
        r.count, r.rounds
    );
    println!("{:<18} {:>8} {:>8} {:>9} {:>9}", "ping-pong", "p50 ns", "p99 ns", "p50/rust", "p99/rust");
    for p in &r.pingpong {
        println!(
            "{:<18} {:>8} {:>8} {:>8.2}x {:>8.2}x",
            p.path, p.median_p50_ns, p.median_p99_ns, p.p50_vs_rust, p.p99_vs_rust
        );
    }
    if !r.throughput.is_empty() {
        println!("{:<20} {:>14} {:>9}", "publishing (ipc)", "msg/s", "vs rust");
        for t in &r.throughput {
            println!("{:<20} {:>14.0} {:>8.2}x", t.path, t.median_msgs_per_s, t.vs_rust);
        }
    }
    Ok(())
}
