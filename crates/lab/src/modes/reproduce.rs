//! `tickwire lab reproduce --out DIR`: every measurement of the papers, with
//! their parameters scaled to this machine (the scaling is stated in the
//! report), written to DIR/report.md beside the published figures, with our
//! ratio to this machine's floor, plus SVG plots.

use crate::base::floor::{self, FloorOptions};
use crate::base::host::machine::Machine;
use crate::base::output::plots;
use crate::base::output::print::Common;
use crate::base::output::report::LatencyRow;
use crate::base::output::Measured;
use crate::modes::oneway::{self, OneWay};
use crate::modes::pingpong::{self, PingPong, Transport};
use crate::modes::sweep::{self, Sweep};
use crate::modes::tick_to_trade::{self, TickToTrade};
use crate::paths::sockets::Wait;
use crate::{Cpus, LabError};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A reproduce run.
#[derive(Debug, Clone, clap::Args)]
pub struct Reproduce {
    /// Output directory for report.md and the plots.
    #[arg(long)]
    pub out: PathBuf,
    /// CPUs for the measuring and far sides.
    #[arg(long, default_value = "0,1", value_parser = Cpus::parse)]
    pub cpus: Cpus,
    /// Allow both sides on one CPU (see `lab pingpong --help`).
    #[arg(long)]
    pub share_cpu: bool,
    /// Seconds instead of about a minute (a smoke test; figures are not meaningful).
    #[arg(long)]
    pub quick: bool,
    /// Directory for shared files.
    #[arg(skip)]
    pub dir: PathBuf,
}

struct Scale {
    count: u64,
    block_count: u64,
    size_count: u64,
    sizes: Vec<usize>,
    rates: Vec<u64>,
    step: Duration,
    oneway: Duration,
    oneway_rates: Vec<u64>,
    t2t_runs: u64,
    floor_tp: Duration,
}

impl Scale {
    fn new(quick: bool) -> Self {
        if quick {
            Self {
                count: 2_000,
                block_count: 500,
                size_count: 1_000,
                sizes: vec![64, 1472],
                rates: vec![10_000, 50_000],
                step: Duration::from_millis(200),
                oneway: Duration::from_millis(200),
                oneway_rates: vec![50_000],
                t2t_runs: 1_000,
                floor_tp: Duration::from_millis(200),
            }
        } else {
            Self {
                count: 200_000,
                block_count: 20_000,
                size_count: 50_000,
                sizes: vec![64, 128, 256, 512, 1024, 1472],
                rates: vec![10_000, 100_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000],
                step: Duration::from_secs(1),
                oneway: Duration::from_secs(5),
                oneway_rates: vec![100_000, 1_000_000],
                t2t_runs: 25_000,
                floor_tp: Duration::from_secs(3),
            }
        }
    }
}

/// A published row: label and (min, median, mean, p99, p99.9, max, std) in
/// nanoseconds, `None` where the paper gives no figure.
type Published = (&'static str, [Option<f64>; 7]);

fn us(v: f64) -> Option<f64> {
    Some(v * 1000.0)
}

fn cell(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x:.0}"))
}

fn table(out: &mut String, published: &[Published], ours: &[(String, &LatencyRow)], floor_p50: u64) {
    out.push_str("| source | Min | Median | Mean | 99th | 99.9th | Max | STD | median / floor |\n");
    out.push_str("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (label, v) in published {
        let _ = writeln!(
            out,
            "| {label} (published) | {} | {} | {} | {} | {} | {} | {} | |",
            cell(v[0]),
            cell(v[1]),
            cell(v[2]),
            cell(v[3]),
            cell(v[4]),
            cell(v[5]),
            cell(v[6])
        );
    }
    for (label, r) in ours {
        let _ = writeln!(
            out,
            "| **{label}** (this machine) | {} | {} | {:.0} | {} | {} | {} | {:.0} | {:.1}x |",
            r.min_ns,
            r.p50_ns,
            r.mean_ns,
            r.p99_ns,
            r.p999_ns,
            r.max_ns,
            r.std_ns,
            // Always the floor printed at the top of the report (raw ring,
            // 64 B), so every ratio can be checked against rows on the page.
            r.p50_ns as f64 / floor_p50.max(1) as f64
        );
    }
    out.push('\n');
}

/// The report being written, and what every section needs.
struct Report<'a> {
    r: &'a Reproduce,
    s: Scale,
    machine: &'a Machine,
    md: String,
    /// The raw ring's median half round trip, measured first.
    floor_p50: u64,
}

/// Runs everything and writes the report; returns the report's path.
///
/// # Errors
/// Any measurement failing, or the output directory not writable.
pub fn run(r: &Reproduce, machine: &Machine) -> Result<PathBuf, LabError> {
    std::fs::create_dir_all(&r.out)?;
    let mut rep = Report { r, s: Scale::new(r.quick), machine, md: String::new(), floor_p50: 0 };
    rep.preamble();
    // Progress on stderr when it is a terminal; Ctrl-C writes what was
    // measured so far, marked as partial.
    let bar = crate::progress(7, "reproduce");
    let step = |bar: &indicatif::ProgressBar, what: &str| {
        bar.inc(1);
        bar.set_message(format!("reproduce: {what}"));
        crate::stop_requested()
    };
    bar.set_message("reproduce: the floor");
    rep.floor()?;
    if !step(&bar, "exhibits 1 and 2, tables 1 and 2") {
        let pp = rep.exhibits_1_2_and_tables()?;
        if !step(&bar, "exhibit 3 (latency against size)") {
            rep.exhibit_3()?;
        }
        if !step(&bar, "exhibit 4 (latency against rate)") {
            rep.exhibit_4()?;
        }
        let mut ow = Vec::new();
        if !step(&bar, "paper 001 (one-way, 10x10x10)") {
            ow = rep.paper_001()?;
        }
        if !step(&bar, "paper 004 (tick-to-trade)") {
            rep.paper_004()?;
        }
        if !step(&bar, "distributions") {
            rep.distributions(&pp, ow.first())?;
        }
    }
    bar.finish_and_clear();
    if crate::stop_requested() {
        rep.md.push_str("\n**Stopped with Ctrl-C: the sections above are all that was measured.**\n");
    }
    let path = report_path(&r.out);
    std::fs::write(&path, rep.md)?;
    Ok(path)
}

/// The ping-pongs several sections share.
struct PingPongs {
    tcp_spin: Measured,
    udp_spin: Measured,
    ipc: Measured,
}

impl Report<'_> {
    fn preamble(&mut self) {
        let (r, machine) = (self.r, self.machine);
        let md = &mut self.md;
        let _ = writeln!(md, "# tickwire lab reproduce\n");
        let _ = writeln!(md, "Machine: {}\n", machine.summary());
        let _ = writeln!(
            md,
            "CPUs {} (measuring side) and {} (far side), both busy-spinning unless a row says block. \
             Kernel paths are loopback on one host; the papers used two servers, 10GbE NICs, a switch and \
             kernel bypass. Ratios to this machine's floor (the raw shared-memory ring, same run) are what \
             carries across machines.{}\n",
            r.cpus.local,
            r.cpus.remote,
            if r.quick {
                " **Quick mode: counts and durations cut to a smoke test; figures are not meaningful.**"
            } else {
                ""
            }
        );
    }

    fn table(&mut self, published: &[Published], ours: &[(String, &LatencyRow)]) {
        table(&mut self.md, published, ours, self.floor_p50);
    }

    fn floor(&mut self) -> Result<(), LabError> {
        let fo = FloorOptions {
            count: self.s.count,
            warmup: 1_000,
            size: 64,
            duration: self.s.floor_tp,
            cpus: self.r.cpus,
            dir: self.r.dir.clone(),
        };
        let cl = floor::cacheline(&fo)?;
        let rr = floor::raw_ring(&fo)?;
        let tp = crate::base::streaming::slot_ring_throughput(&fo)?;
        self.floor_p50 = rr.p50_ns;
        self.md.push_str("## The floor\n\n");
        self.table(&[], &[("cache-line ping-pong".into(), &cl), ("raw SPSC ring, 64 B".into(), &rr)]);
        let _ = writeln!(
            self.md,
            "Slot ring streaming (each message visible on its own), 64 B: {:.0} msg/s.\n",
            tp.msgs_per_s
        );
        Ok(())
    }

    fn pingpong(&self, transport: Transport, wait: Wait, size: usize, count: u64) -> Result<Measured, LabError> {
        let p = PingPong {
            common: Common::on(self.r.cpus),
            transport,
            size,
            params: Vec::new(),
            xdp_mode: "auto".into(),
            sizes: Vec::new(),
            count,
            duration: None,
            warmup: 1_000.min(count),
            spin: wait == Wait::Spin,
            block: wait == Wait::Block,
            capacity: 1 << 20,
            // IPC is within a few times the floor, so placement changes matter:
            // interleave its own floor. Kernel paths are tens of times slower.
            no_floor: transport != Transport::Ipc,
            rounds: 5,
            hlog: None,
            netns: false,
            plot: None,
            dir: self.r.dir.clone(),
        };
        Ok(pingpong::run(&p, self.machine)?.0)
    }

    fn exhibits_1_2_and_tables(&mut self) -> Result<PingPongs, LabError> {
        let tcp_spin = self.pingpong(Transport::Tcp, Wait::Spin, 64, self.s.count)?;
        let tcp_block = self.pingpong(Transport::Tcp, Wait::Block, 64, self.s.block_count)?;
        let udp_spin = self.pingpong(Transport::Udp, Wait::Spin, 64, self.s.count)?;
        let udp_block = self.pingpong(Transport::Udp, Wait::Block, 64, self.s.block_count)?;
        let ipc = self.pingpong(Transport::Ipc, Wait::Spin, 64, self.s.count)?;
        self.md.push_str("## Exhibit 1 (papers 000 and 002): half-round-trip TCP latency, 64 bytes (ns)\n\n");
        self.table(
            &[
                (
                    "000 kernel, back to back",
                    [Some(7518.0), Some(7987.0), Some(8114.0), Some(10332.0), None, None, Some(490.0)],
                ),
                (
                    "000 OpenOnload, back to back",
                    [Some(2997.0), Some(3103.0), Some(3122.0), Some(3376.0), None, None, Some(91.0)],
                ),
                (
                    "000 OpenOnload, switch",
                    [Some(3546.0), Some(3679.0), Some(3695.0), Some(3925.0), None, None, Some(79.0)],
                ),
                (
                    "002 OpenOnload, back to back",
                    [Some(3963.0), Some(4092.0), Some(4122.0), Some(4616.0), None, Some(10957.0), Some(105.0)],
                ),
            ],
            &[
                ("kernel TCP, loopback, spin".into(), &tcp_spin.row),
                ("kernel TCP, loopback, block".into(), &tcp_block.row),
                ("tickwire IPC (shared memory)".into(), &ipc.row),
            ],
        );
        self.md.push_str("## Exhibit 2 (paper 000): half-round-trip UDP latency, 64 bytes (ns)\n\n");
        self.table(
            &[
                (
                    "000 OpenOnload, back to back",
                    [Some(2866.0), Some(2967.0), Some(2976.0), Some(3244.0), None, None, Some(82.0)],
                ),
                (
                    "000 OpenOnload, switch",
                    [Some(3370.0), Some(3483.0), Some(3496.0), Some(3714.0), None, None, Some(78.0)],
                ),
            ],
            &[
                ("kernel UDP, loopback, spin".into(), &udp_spin.row),
                ("kernel UDP, loopback, block".into(), &udp_block.row),
                ("tickwire IPC (shared memory)".into(), &ipc.row),
            ],
        );
        self.md.push_str("## Tables 1 and 2 (paper 003): 64-byte application-to-application latency (ns)\n\n");
        self.md.push_str("Paper 003 calls these one-way; they are half round trips in method.\n\n");
        self.table(
            &[
                ("003 kernel UDP, back to back", [us(5.483), us(5.648), us(5.667), us(6.383), None, None, us(0.121)]),
                (
                    "003 WireDirect UDP, back to back",
                    [us(2.826), us(2.918), us(2.920), us(2.997), None, None, us(0.031)],
                ),
                ("003 kernel TCP, back to back", [us(6.141), us(6.343), us(6.358), us(6.733), None, None, us(0.106)]),
                (
                    "003 WireDirect TOE, back to back",
                    [us(3.322), us(3.460), us(3.467), us(3.465), None, None, us(0.080)],
                ),
            ],
            &[
                ("kernel UDP, loopback, spin".into(), &udp_spin.row),
                ("kernel TCP, loopback, spin".into(), &tcp_spin.row),
            ],
        );
        Ok(PingPongs { tcp_spin, udp_spin, ipc })
    }

    fn exhibit_3(&mut self) -> Result<(), LabError> {
        // Exhibit 3: latency against size.
        self.md.push_str(
            "## Exhibit 3 (papers 000 and 002): half-round-trip latency against message size (ns, median)\n\n",
        );
        self.md.push_str("| size | UDP spin | TCP spin | UDP / floor |\n| ---: | ---: | ---: | ---: |\n");
        let (mut udp_pts, mut tcp_pts) = (Vec::new(), Vec::new());
        for &size in &self.s.sizes {
            let u = self.pingpong(Transport::Udp, Wait::Spin, size, self.s.size_count)?;
            let t = self.pingpong(Transport::Tcp, Wait::Spin, size, self.s.size_count)?;
            let _ = writeln!(
                self.md,
                "| {size} | {} | {} | {:.1}x |",
                u.row.p50_ns,
                t.row.p50_ns,
                u.row.p50_ns as f64 / self.floor_p50.max(1) as f64
            );
            udp_pts.push((size as f64, u.row.p50_ns as f64 / 1000.0));
            tcp_pts.push((size as f64, t.row.p50_ns as f64 / 1000.0));
        }
        plots::lines(
            &self.r.out.join("latency-vs-size.svg"),
            "Half-round-trip latency against message size (median)",
            "message size (bytes)",
            &[("UDP, kernel, spin".into(), udp_pts), ("TCP, kernel, spin".into(), tcp_pts)],
            false,
        )
        .map_err(LabError::Output)?;
        self.md.push_str("\n![latency against size](latency-vs-size.svg)\n\n");
        Ok(())
    }

    fn exhibit_4(&mut self) -> Result<(), LabError> {
        // Exhibit 4: latency against rate, over each transport, each beside
        // its open-loop floor at the same rates (kernel UDP and TCP are
        // their own).
        self.md.push_str(
            "## Exhibit 4 (papers 000 and 002): round-trip latency and achieved rate against target rate\n\n",
        );
        self.md.push_str(
            "One message in 100 reflected, open loop, round trip from each message's intended send time. Each rate \
             gives every reflected message and the pause-free ones (those whose flight overlapped no pause over \
             20 us on either side; the pauses are this host's). The floor is measured at each rate just after: a raw \
             shared-memory ring for IPC, plain kernel UDP for reliable UDP. A sweep stops at the first rate a path \
             does not sustain.\n\n",
        );
        self.md.push_str(
            "| path | target msg/s | achieved msg/s | lost | RTT p50 (ns) | RTT p99 (ns) | RTT p99.9 (ns) | pause-free p99 | pause-free p99.9 | p50 / floor | pauses (total ms) |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
        );
        let mut all_rows = Vec::new();
        for transport in [Transport::Ipc, Transport::Udp, Transport::Tcp, Transport::Rudp] {
            let rows = sweep::run(
                &Sweep {
                    transport,
                    netns: false,
                    rates: self.s.rates.clone(),
                    size: 64,
                    step: self.s.step,
                    reflect_every: 100,
                    sustain: 0.95,
                    common: Common::on(self.r.cpus),
                    dir: self.r.dir.clone(),
                    capacity: 4 << 20,
                    plot: None,
                    hlog: None,
                },
                self.machine,
            )?;
            for pair in rows.chunks(2) {
                let (all, free) = (&pair[0], pair.get(1).unwrap_or(&pair[0]));
                let path = if all.mode == "floor" { format!("{} floor", all.transport) } else { all.transport.clone() };
                let _ = writeln!(
                    self.md,
                    "| {path} | {:.0} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} ({:.1}) |",
                    all.offered_rate.unwrap_or(0.0),
                    all.achieved_rate.unwrap_or(0.0),
                    all.lost,
                    all.p50_ns,
                    all.p99_ns,
                    all.p999_ns,
                    free.p99_ns,
                    free.p999_ns,
                    all.ratio_p50.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x")),
                    all.pauses.unwrap_or(0),
                    all.pause_total_ns.unwrap_or(0) as f64 / 1e6
                );
            }
            all_rows.extend(rows);
        }
        self.md.push('\n');
        for (name, mode) in [
            ("ipc", "sweep-rate"),
            ("shm", "floor"),
            ("udp", "sweep-rate"),
            ("tcp", "sweep-rate"),
            ("rudp", "sweep-rate"),
        ] {
            let label = if mode == "floor" { "raw ring (floor)".to_owned() } else { name.to_owned() };
            let _ = match crate::base::output::report::highest_sustained(&all_rows, name, mode, 0.95) {
                Some(r) => {
                    writeln!(self.md, "- {label}: highest rate sustained {:.0} msg/s", r.offered_rate.unwrap_or(0.0))
                }
                None => writeln!(self.md, "- {label}: no rate sustained"),
            };
        }
        let series = |name: &str| -> Vec<&LatencyRow> {
            all_rows
                .iter()
                .filter(|r| r.transport == name && r.mode != "floor" && r.distribution.as_deref() != Some("pause_free"))
                .collect()
        };
        let mut lines = Vec::new();
        for name in ["ipc", "udp", "tcp", "rudp"] {
            let rows = series(name);
            let pts = |f: fn(&LatencyRow) -> u64| -> Vec<(f64, f64)> {
                rows.iter().map(|r| (r.offered_rate.unwrap_or(1.0), f(r) as f64 / 1000.0)).collect()
            };
            lines.push((format!("{name} RTT p50"), pts(|r| r.p50_ns)));
            lines.push((format!("{name} RTT p99"), pts(|r| r.p99_ns)));
        }
        plots::lines(
            &self.r.out.join("latency-vs-rate.svg"),
            "Round-trip latency against target message rate",
            "target rate (messages per second)",
            &lines,
            true,
        )
        .map_err(LabError::Output)?;
        self.md.push_str("\n![latency against rate](latency-vs-rate.svg)\n\n");
        Ok(())
    }

    fn paper_001(&mut self) -> Result<Vec<(String, Measured)>, LabError> {
        // Paper 001: one-way, 10 publishers, 10 topics, 10 subscribers, 100 B.
        self.md.push_str(
            "## Paper 001: one-way latency, 10 publishers, 10 topics, 10 subscribers, 100-byte messages (ns)\n\n",
        );
        let _ = writeln!(
            self.md,
            "Open loop from each message's intended send time; {:?} per rate here against 10 minutes in the paper.\n",
            self.s.oneway
        );
        let mut ow = Vec::new();
        for &rate in &self.s.oneway_rates {
            let mut rows = oneway::run(
                &OneWay {
                    transport: Transport::Ipc,
                    netns: false,
                    params: Vec::new(),
                    loss: 0.0,
                    rate,
                    size: 100,
                    duration: self.s.oneway,
                    publishers: 10,
                    subscribers: 10,
                    topics: 10,
                    common: Common::on(self.r.cpus),
                    dir: self.r.dir.clone(),
                    capacity: 4 << 20,
                    rounds: 5,
                    stall_every: 0,
                    stall_for: Duration::ZERO,
                    hlog: None,
                    plot: None,
                },
                self.machine,
            )?
            .into_iter();
            // The full distribution (what a user of this host sees), then the pause-free one.
            for (m, label) in rows.by_ref().zip(["", ", pause-free"]) {
                ow.push((format!("tickwire IPC at {rate} msg/s{label}"), m));
            }
        }
        let ow_rows: Vec<(String, &LatencyRow)> = ow.iter().map(|(l, m)| (l.clone(), &m.row)).collect();
        self.table(
            &[
                ("001 Solace router, 1M msg/s", [None, None, us(28.0), None, us(32.0), None, None]),
                ("001 Solace router, 5M msg/s", [None, None, us(39.0), None, us(48.0), None, None]),
            ],
            &ow_rows,
        );
        Ok(ow)
    }

    fn paper_004(&mut self) -> Result<(), LabError> {
        // Paper 004: tick-to-trade.
        let (kernel, user) = tick_to_trade::run(
            &TickToTrade {
                runs: self.s.t2t_runs,
                warmup: 1_000.min(self.s.t2t_runs),
                tick_size: 64,
                order_size: 400,
                common: Common::on(self.r.cpus),
                plot: None,
                hlog: None,
                dir: self.r.dir.clone(),
            },
            self.machine,
        )?;
        let _ = writeln!(
            self.md,
            "## Paper 004: tick-to-trade, 64-byte UDP tick in, 400-byte TCP order out, {} runs (ns)\n",
            self.s.t2t_runs
        );
        let mut t2t: Vec<(String, &LatencyRow)> = Vec::new();
        if let Some(k) = &kernel {
            t2t.push(("kernel software timestamps, loopback".into(), &k.row));
        }
        t2t.push(("user-space clock, loopback".into(), &user.row));
        self.table(
            &[
                ("004 CSPi ARC E-Class", [us(1.675), us(1.757), us(1.770), us(2.004), None, us(2.757), us(0.052)]),
                ("004 SolarFlare Flareon", [us(2.150), us(2.234), us(2.245), us(2.457), None, us(3.297), us(0.049)]),
            ],
            &t2t,
        );
        Ok(())
    }

    fn distributions(&mut self, pp: &PingPongs, one_way: Option<&(String, Measured)>) -> Result<(), LabError> {
        let mut dist: Vec<(String, &hdrhistogram::Histogram<u64>)> = vec![
            ("tickwire IPC ping-pong".into(), &pp.ipc.hist),
            ("kernel UDP ping-pong, spin".into(), &pp.udp_spin.hist),
            ("kernel TCP ping-pong, spin".into(), &pp.tcp_spin.hist),
        ];
        if let Some((label, m)) = one_way {
            dist.push((format!("{label} (one way)"), &m.hist));
        }
        plots::percentiles(&self.r.out.join("percentiles.svg"), "Latency by percentile", &dist)
            .map_err(LabError::Output)?;
        self.md.push_str("## Distributions\n\n![percentiles](percentiles.svg)\n\n");
        self.md.push_str(
            "The upper percentiles of the one-way and rate runs carry this VM's millisecond pauses \
             (see `tickwire lab doctor`); a closed-loop ping-pong hides them.\n",
        );
        Ok(())
    }
}

/// Where a report for `out` lands.
pub fn report_path(out: &Path) -> PathBuf {
    out.join("report.md")
}
