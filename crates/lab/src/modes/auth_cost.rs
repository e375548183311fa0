//! What a shared key costs reliable UDP: every datagram carries an
//! HMAC-SHA256 MAC and is checked against a replay window. Interleaved in rounds, each
//! round measures, at one message size:
//!
//! 1. ping-pong over plain kernel UDP, spinning (the floor);
//! 2. reliable UDP ping-pong without a key, then with one;
//! 3. plain UDP throughput with `sendmmsg`/`recvmmsg` (the floor);
//! 4. reliable UDP throughput without a key, then with one.
//!
//! The cost is reported as keyed against unkeyed (the same run, the same
//! rounds), with both beside kernel UDP.

use crate::base::common::{parse_duration, parse_size};
use crate::base::output::print::Common;
use crate::base::output::report::{histogram, median, ratio, round3};
use crate::paths::rudp::{self, RudpThroughput};
use crate::paths::sockets::{self, Proto, SockOptions, Wait};
use crate::LabError;
use hdrhistogram::Histogram;
use std::path::PathBuf;
use std::time::Duration;

/// `lab auth-cost`.
#[derive(Debug, Clone, clap::Args)]
pub struct AuthCost {
    #[command(flatten)]
    pub common: Common,
    /// Message size in bytes (at least 8).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    pub size: usize,
    /// Round trips recorded per round, per path.
    #[arg(long, default_value_t = 20_000)]
    pub count: u64,
    /// Round trips before recording, per round and path.
    #[arg(long, default_value_t = 2_000)]
    pub warmup: u64,
    /// Throughput per round, per path.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Interleaved rounds, each: kernel UDP, reliable UDP, keyed reliable UDP.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Where the temporary key goes.
    #[arg(skip)]
    pub dir: PathBuf,
}

/// One path's ping-pong: half round trips, nanoseconds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PingRow {
    /// `udp` (the floor), `rudp`, or `rudp+mac`.
    pub path: &'static str,
    /// Round trips recorded.
    pub count: u64,
    /// Percentiles of the half round trip.
    pub p50_ns: u64,
    /// 99th.
    pub p99_ns: u64,
    /// 99.9th.
    pub p999_ns: u64,
    /// Largest.
    pub max_ns: u64,
}

/// One path's throughput, median of the rounds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RateRow {
    /// `udp` (the floor), `rudp`, or `rudp+mac`.
    pub path: &'static str,
    /// Messages per second, median round.
    pub msgs_per_s: f64,
    /// Messages never delivered (must be 0 for reliable UDP).
    pub missing: u64,
}

/// The run's results.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AuthCostResult {
    /// Payload bytes.
    pub size: usize,
    /// Rounds run.
    pub rounds: usize,
    /// Ping-pong per path.
    pub pingpong: Vec<PingRow>,
    /// Throughput per path.
    pub throughput: Vec<RateRow>,
    /// Keyed over unkeyed p50 half round trip.
    pub mac_pingpong_p50_ratio: f64,
    /// Keyed over unkeyed p99.
    pub mac_pingpong_p99_ratio: f64,
    /// Keyed over unkeyed throughput, the median of the per-round ratios.
    pub mac_throughput_ratio: f64,
}

/// Removes the temporary key however the run ends.
struct KeyGuard(PathBuf);
impl Drop for KeyGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn werr(e: impl std::fmt::Display) -> LabError {
    LabError::Worker(e.to_string())
}

fn ping_row(path: &'static str, h: &Histogram<u64>) -> PingRow {
    PingRow {
        path,
        count: h.len(),
        p50_ns: h.value_at_quantile(0.5),
        p99_ns: h.value_at_quantile(0.99),
        p999_ns: h.value_at_quantile(0.999),
        max_ns: h.max(),
    }
}

/// Runs the rounds.
///
/// # Errors
/// Socket, worker or key-file failures.
pub fn run(a: &AuthCost) -> Result<AuthCostResult, LabError> {
    if a.size < 8 {
        return Err(LabError::Usage("auth-cost needs messages of at least 8 bytes".into()));
    }
    std::fs::create_dir_all(&a.dir).map_err(werr)?;
    let key = KeyGuard(a.dir.join(format!("auth-cost-{}.key", std::process::id())));
    tickwire_driver::write_key(&key.0.to_string_lossy(), true).map_err(werr)?;
    let keyed = format!("auth={}", key.0.display());
    let rounds = a.rounds.max(1);
    let (mut floor_h, mut plain_h, mut mac_h) = (histogram(), histogram(), histogram());
    let (mut floor_r, mut plain_r, mut mac_r, mut ratios) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut missing = [0u64; 3];
    let bar = crate::progress(rounds as u64, &format!("auth-cost {} B", a.size));
    for _ in 0..rounds {
        if crate::stop_requested() {
            break;
        }
        let udp = SockOptions {
            proto: Proto::Udp,
            wait: Wait::Spin,
            count: a.count,
            warmup: a.warmup,
            size: a.size,
            cpus: a.common.cpus,
            netns: false,
            time_limit: None,
        };
        floor_h.add(sockets::pingpong_histogram(&udp)?).map_err(werr)?;
        plain_h
            .add(rudp::pingpong_histogram(a.size, a.count, a.warmup, a.common.cpus, None, "", false)?)
            .map_err(werr)?;
        mac_h
            .add(rudp::pingpong_histogram(a.size, a.count, a.warmup, a.common.cpus, None, &keyed, false)?)
            .map_err(werr)?;
        let f: RudpThroughput = rudp::raw_throughput(a.size, a.duration, a.common.cpus)?;
        let p = rudp::throughput(a.size, a.duration, a.common.cpus, "")?;
        let m = rudp::throughput(a.size, a.duration, a.common.cpus, &keyed)?;
        for (i, r) in [&f, &p, &m].iter().enumerate() {
            missing[i] += r.missing + r.lost_events;
        }
        ratios.push(m.msgs_per_s / p.msgs_per_s.max(1.0));
        floor_r.push(f.msgs_per_s);
        plain_r.push(p.msgs_per_s);
        mac_r.push(m.msgs_per_s);
        bar.inc(1);
    }
    bar.finish_and_clear();
    if plain_h.is_empty() {
        return Err(LabError::Usage("stopped before anything was measured".into()));
    }
    let pingpong = vec![ping_row("udp", &floor_h), ping_row("rudp", &plain_h), ping_row("rudp+mac", &mac_h)];
    Ok(AuthCostResult {
        size: a.size,
        rounds: floor_r.len(),
        mac_pingpong_p50_ratio: ratio(pingpong[2].p50_ns, pingpong[1].p50_ns),
        mac_pingpong_p99_ratio: ratio(pingpong[2].p99_ns, pingpong[1].p99_ns),
        pingpong,
        throughput: vec![
            RateRow { path: "udp", msgs_per_s: median(floor_r), missing: missing[0] },
            RateRow { path: "rudp", msgs_per_s: median(plain_r), missing: missing[1] },
            RateRow { path: "rudp+mac", msgs_per_s: median(mac_r), missing: missing[2] },
        ],
        mac_throughput_ratio: round3(median(ratios)),
    })
}

/// Prints the result as a table, or as one JSON object.
///
/// # Errors
/// A result that cannot be serialised.
pub fn print(r: &AuthCostResult, json: bool) -> Result<(), LabError> {
    if json {
        println!("{}", serde_json::to_string(r).map_err(werr)?);
        return Ok(());
    }
    let us = |ns: u64| format!("{:.2}", ns as f64 / 1000.0);
    println!("auth-cost: {} B messages, {} interleaved rounds (floor: kernel UDP, spinning)", r.size, r.rounds);
    println!(
        "{:<10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "ping-pong", "count", "p50 us", "p99 us", "p99.9 us", "max us", "p50/udp"
    );
    let floor = r.pingpong[0].p50_ns;
    for p in &r.pingpong {
        let vs = p.p50_ns as f64 / floor.max(1) as f64;
        println!(
            "{:<10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8.2}x",
            p.path,
            p.count,
            us(p.p50_ns),
            us(p.p99_ns),
            us(p.p999_ns),
            us(p.max_ns),
            vs
        );
    }
    println!("{:<10} {:>14} {:>9} {:>9}", "throughput", "msg/s", "missing", "vs udp");
    let floor = r.throughput[0].msgs_per_s;
    for t in &r.throughput {
        println!("{:<10} {:>14.0} {:>9} {:>8.2}x", t.path, t.msgs_per_s, t.missing, t.msgs_per_s / floor.max(1.0));
    }
    println!(
        "the key's cost: ping-pong p50 {:.3}x, p99 {:.3}x; throughput {:.3}x (keyed / unkeyed, same rounds)",
        r.mac_pingpong_p50_ratio, r.mac_pingpong_p99_ratio, r.mac_throughput_ratio
    );
    Ok(())
}
