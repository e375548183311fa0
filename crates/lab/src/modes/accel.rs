//! `lab accel`: an unmodified program's UDP ping-pong, under `tickwire
//! accel` and not, across a veth pair between two network namespaces (made
//! and removed by the run), interleaved in rounds on the same CPUs.
//!
//! The program is Debian's `sockperf` (`server` in namespace a on the
//! remote CPU, `ping-pong` in b on the local one), the same binary four
//! ways in each round, and tickwire's own AF_XDP ping-pong a fifth:
//! * `kernel, spinning`: `--nonblocked`, sockperf loops on `recvfrom`
//!   returning `EAGAIN`: the floor, the kernel's best for this work;
//! * `kernel, blocking`: sockperf's default;
//! * `accel, spinning`: both ends under `tickwire accel`, `--nonblocked`:
//!   the same loop, on the library's receive;
//! * `accel, blocking`: both ends under `tickwire accel`, the library
//!   spinning `--spin-us` before it blocks;
//! * `tickwire xdp, spinning`: `lab pingpong --transport xdp`'s workers on
//!   the same pair: AF_XDP without interception, what the library's
//!   calls cost is the accelerated rows over this one.
//!
//! A round's figures are sockperf's own (half round trips: p50, p99,
//! max), and the histogram's for the fifth; the run's are the medians
//! over the rounds, each with its ratio to the kernel spinning and to
//! tickwire's AF_XDP in the same run.

use crate::base::host::netns::NetnsPair;
use crate::base::output::print::Common;
use crate::base::output::report::median;
use crate::LabError;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How a row's ping-pong runs.
#[derive(Debug, Clone, Copy)]
enum Way {
    /// sockperf, under `tickwire accel` or not, spinning or blocking.
    Sockperf { accel: bool, spin: bool },
    /// tickwire's AF_XDP ping-pong workers.
    TickwireXdp,
}

/// The ways, in the order each round runs them; the first is the floor.
const PATHS: [(&str, Way); 5] = [
    ("kernel, spinning", Way::Sockperf { accel: false, spin: true }),
    ("kernel, blocking", Way::Sockperf { accel: false, spin: false }),
    ("accel, spinning", Way::Sockperf { accel: true, spin: true }),
    ("accel, blocking", Way::Sockperf { accel: true, spin: false }),
    ("tickwire xdp, spinning", Way::TickwireXdp),
];
/// Where [`Way::TickwireXdp`] is in [`PATHS`].
const XDP_ROW: usize = 4;

/// A `lab accel` run.
#[derive(Debug, Clone, clap::Args)]
pub struct Accel {
    #[command(flatten)]
    pub common: Common,
    /// Datagram sizes, bytes (comma-separated).
    #[arg(long = "size", value_name = "SIZE", value_delimiter = ',', default_value = "64")]
    pub sizes: Vec<usize>,
    /// Seconds per measurement (sockperf's -t).
    #[arg(long, default_value_t = 2)]
    pub seconds: u64,
    /// Interleaved rounds.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// tickwire accel --spin-us for the blocking rows.
    #[arg(long, default_value_t = 100)]
    pub spin_us: u64,
    /// Where the accelerated programs' counters files go: a directory of
    /// the run's own in it, removed at the end (a server is killed, so its
    /// file would stay).
    #[arg(skip)]
    pub dir: PathBuf,
}

/// One way at one size, over the rounds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AccelRow {
    /// `kernel, spinning`, `kernel, blocking`, `accel, spinning`, `accel,
    /// blocking`, `tickwire xdp, spinning`.
    pub path: String,
    /// Datagram size, bytes.
    pub size: usize,
    /// Each round's p50, p99 and max half round trip, ns.
    pub p50_ns: Vec<u64>,
    pub p99_ns: Vec<u64>,
    pub max_ns: Vec<u64>,
    /// Round trips each round.
    pub round_trips: Vec<u64>,
    /// Medians over the rounds.
    pub median_p50_ns: u64,
    pub median_p99_ns: u64,
    /// Over the kernel spinning's medians at this size.
    pub ratio_p50: f64,
    pub ratio_p99: f64,
    /// Over tickwire's own AF_XDP ping-pong's medians at this size.
    pub vs_xdp_p50: f64,
    pub vs_xdp_p99: f64,
}

/// What one sockperf client printed.
#[derive(Debug, Clone, Copy)]
struct Measured {
    p50_ns: u64,
    p99_ns: u64,
    max_ns: u64,
    round_trips: u64,
}

/// The number after `key` on the line holding it.
fn after(out: &str, key: &str) -> Option<f64> {
    let line = out.lines().find(|l| l.contains(key))?;
    let rest = &line[line.find(key)? + key.len()..];
    rest.trim_start_matches([' ', '=']).split(|c: char| !(c.is_ascii_digit() || c == '.')).next()?.parse().ok()
}

fn parse(out: &str) -> Option<Measured> {
    let us = |key: &str| after(out, key).map(|v| (v * 1000.0).round() as u64);
    Some(Measured {
        p50_ns: us("percentile 50.000")?,
        p99_ns: us("percentile 99.000")?,
        max_ns: us("<MAX> observation")?,
        round_trips: after(out, "ReceivedMessages=")? as u64,
    })
}

/// `PROGRAM ARGS` in namespace `ns` on `cpu`, under `tickwire accel` on
/// `dev` if `accel`.
fn command(
    ns: &str,
    cpu: usize,
    accel: Option<(&str, u64)>,
    dir: &Path,
    program: &[String],
) -> Result<Command, LabError> {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "taskset", "-c", &cpu.to_string()]);
    if let Some((dev, spin)) = accel {
        let me = std::env::current_exe().map_err(|e| LabError::Usage(format!("this binary's path: {e}")))?;
        c.arg(me).arg("--dir").arg(dir);
        c.args(["accel", "--interface", dev, "--spin-us", &spin.to_string(), "--"]);
    }
    c.args(program).stdin(Stdio::null());
    Ok(c)
}

/// A child killed and reaped when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The run's directory of counters files, removed on every way out.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One measurement: a server, then the client; sockperf's figures.
fn sockperf(a: &Accel, pair: &NetnsPair, dir: &Path, port: u16, size: usize, way: Way) -> Result<Measured, LabError> {
    let Way::Sockperf { accel, spin } = way else { return tickwire_xdp(a, pair, size) };
    let port = port.to_string();
    let mut server =
        vec!["sockperf".into(), "server".into(), "-i".into(), pair.a_addr.clone(), "-p".into(), port.clone()];
    let mut client: Vec<String> =
        ["sockperf", "ping-pong", "-i", &pair.a_addr, "-p", &port, "-t"].iter().map(|s| (*s).to_owned()).collect();
    client.extend([a.seconds.to_string(), "-m".into(), size.to_string()]);
    if spin {
        server.push("--nonblocked".into());
        client.push("--nonblocked".into());
    }
    let on = |dev: &str| accel.then(|| (dev.to_owned(), a.spin_us));
    let a_dev = on(&pair.a_dev);
    let b_dev = on(&pair.b_dev);
    let mut s = command(&pair.a, a.common.cpus.remote, a_dev.as_ref().map(|(d, s)| (d.as_str(), *s)), dir, &server)?;
    let started = s.stdout(Stdio::null()).stderr(Stdio::null()).spawn();
    let _server = Reaped(started.map_err(|e| LabError::Usage(format!("sockperf (Debian's sockperf): {e}")))?);
    std::thread::sleep(Duration::from_millis(300));
    let mut c = command(&pair.b, a.common.cpus.local, b_dev.as_ref().map(|(d, s)| (d.as_str(), *s)), dir, &client)?;
    let out = c.output().map_err(|e| LabError::Usage(format!("sockperf: {e}")))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    parse(&text).ok_or_else(|| LabError::Usage(format!("sockperf printed no figures: {}", text.trim())))
}

/// tickwire's AF_XDP ping-pong on the pair for the same time.
fn tickwire_xdp(a: &Accel, pair: &NetnsPair, size: usize) -> Result<Measured, LabError> {
    let limit = Duration::from_secs(a.seconds);
    let h = crate::paths::xdp::pingpong_on(pair, Some("auto"), size, u64::MAX / 2, 1000, a.common.cpus, Some(limit))?;
    Ok(Measured {
        p50_ns: h.value_at_quantile(0.5),
        p99_ns: h.value_at_quantile(0.99),
        max_ns: h.max(),
        round_trips: h.len(),
    })
}

/// Runs the rounds.
///
/// # Errors
/// [`LabError::Usage`]: no namespaces (not root), no sockperf, a run
/// that printed no figures.
pub fn run(a: &Accel) -> Result<Vec<AccelRow>, LabError> {
    if a.sizes.is_empty() || a.rounds == 0 || a.seconds == 0 {
        return Err(LabError::Usage("lab accel needs sizes, rounds and seconds".into()));
    }
    if let Some(s) = a.sizes.iter().find(|s| !(8..=1472).contains(*s)) {
        return Err(LabError::Usage(format!("size {s} out of range (8..=1472: one AF_XDP frame)")));
    }
    let pair = NetnsPair::create()?;
    let scratch = Scratch(a.dir.join(format!("lab-accel-{}", std::process::id())));
    let mut rows: Vec<AccelRow> = Vec::new();
    for &size in &a.sizes {
        for (path, _) in PATHS {
            rows.push(AccelRow { path: path.into(), size, ..AccelRow::default() });
        }
    }
    let mut port = 11_000u16;
    for _ in 0..a.rounds {
        for (i, &size) in a.sizes.iter().enumerate() {
            for (k, (_, way)) in PATHS.iter().enumerate() {
                port += 1;
                let m = sockperf(a, &pair, &scratch.0, port, size, *way)?;
                let r = &mut rows[i * PATHS.len() + k];
                r.p50_ns.push(m.p50_ns);
                r.p99_ns.push(m.p99_ns);
                r.max_ns.push(m.max_ns);
                r.round_trips.push(m.round_trips);
            }
        }
    }
    let med = |v: &[u64]| median(v.iter().map(|&x| x as f64).collect()).round() as u64;
    for r in &mut rows {
        r.median_p50_ns = med(&r.p50_ns);
        r.median_p99_ns = med(&r.p99_ns);
    }
    for chunk in rows.chunks_mut(PATHS.len()) {
        let of = |r: &AccelRow| (r.median_p50_ns.max(1) as f64, r.median_p99_ns.max(1) as f64);
        let ((p50, p99), (x50, x99)) = (of(&chunk[0]), of(&chunk[XDP_ROW]));
        let ratio = |v: u64, to: f64| (v as f64 / to * 1000.0).round() / 1000.0;
        for r in chunk {
            (r.ratio_p50, r.ratio_p99) = (ratio(r.median_p50_ns, p50), ratio(r.median_p99_ns, p99));
            (r.vs_xdp_p50, r.vs_xdp_p99) = (ratio(r.median_p50_ns, x50), ratio(r.median_p99_ns, x99));
        }
    }
    Ok(rows)
}

/// Prints the rows: a table, or one JSON object each.
///
/// # Errors
/// [`LabError::Usage`] if a row cannot be written as JSON.
pub fn print(a: &Accel, rows: &[AccelRow], json: bool) -> Result<(), LabError> {
    if json {
        for r in rows {
            println!("{}", serde_json::to_string(r).map_err(|e| LabError::Usage(e.to_string()))?);
        }
        return Ok(());
    }
    println!(
        "sockperf ping-pong across a veth pair, half round trips; medians of {} interleaved rounds of {} s \
         (client on CPU {}, server on CPU {}); ratios to the kernel spinning (x) and to tickwire's AF_XDP (xdp x)",
        a.rounds, a.seconds, a.common.cpus.local, a.common.cpus.remote
    );
    println!(
        "{:>6}  {:<22} {:>10} {:>10} {:>8} {:>8} {:>8} {:>8}  p50 per round (us)",
        "size", "path", "p50", "p99", "x p50", "x p99", "xdp x50", "xdp x99"
    );
    for r in rows {
        let rounds: Vec<String> = r.p50_ns.iter().map(|n| format!("{:.2}", *n as f64 / 1000.0)).collect();
        println!(
            "{:>6}  {:<22} {:>7.2} us {:>7.2} us {:>7.2}x {:>7.2}x {:>7.2}x {:>7.2}x  {}",
            r.size,
            r.path,
            r.median_p50_ns as f64 / 1000.0,
            r.median_p99_ns as f64 / 1000.0,
            r.ratio_p50,
            r.ratio_p99,
            r.vs_xdp_p50,
            r.vs_xdp_p99,
            rounds.join(" ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockperf_s_summary_is_read_in_nanoseconds() {
        let out = "sockperf: [Valid Duration] RunTime=1.550 sec; SentMessages=150180; ReceivedMessages=150180\n\
                   sockperf: ---> <MAX> observation = 1588.979\n\
                   sockperf: ---> percentile 99.000 =    6.872\n\
                   sockperf: ---> percentile 50.000 =    4.938\n";
        let m = parse(out).unwrap();
        assert_eq!((m.p50_ns, m.p99_ns, m.max_ns, m.round_trips), (4938, 6872, 1_588_979, 150_180));
        assert!(parse("sockperf: No messages were received from the server.").is_none());
    }
}
