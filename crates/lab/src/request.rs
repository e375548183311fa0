//! The `tickwire lab` subcommands, [`Request`], and [`run`], which checks,
//! measures and prints one. clap parses the command line straight into
//! the options each mode takes (each derives `clap::Args` in its mode's
//! file); the CLI adds the shared-memory directory
//! ([`Request::with_dir`]) and does nothing else. Every decision about
//! what to measure, which floor to measure beside it and what to print is
//! made here.

use crate::base::common::parse_duration;
use crate::base::floor::{self, FloorOptions};
use crate::base::host::doctor::{hiccups, Doctor};
use crate::base::host::machine::Machine;
use crate::base::output::print::{self, Common, Format, Hiccups, Output};
use crate::base::output::report::{highest_sustained, LatencyRow};
use crate::base::output::{plots, Measured};
use crate::base::{line_limit, streaming};
use crate::modes::accel::Accel;
use crate::modes::auth_cost::AuthCost;
use crate::modes::bindings::Bindings;
use crate::modes::fsync::Fsync;
use crate::modes::matching::TopicMatch;
use crate::modes::oneway::OneWay;
use crate::modes::pingpong::PingPong;
use crate::modes::reproduce::Reproduce;
use crate::modes::router::{cluster::ClusterLab, guaranteed::GuaranteedLab, RouterLab};
use crate::modes::sweep::Sweep;
use crate::modes::throughput::Throughput;
use crate::modes::tick_to_trade::TickToTrade;
use crate::modes::transfer::Transfer;
use crate::paths::Transport;
use crate::{Cpus, LabError};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// One lab command (`tickwire lab <mode>`), parsed by clap straight into
/// the options each mode takes.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Request {
    /// The machine's floor: cache-line and raw-ring ping-pong, slot-ring throughput (and the batched ring and cache-line stream beside it).
    Floor {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        options: FloorOptions,
        /// Also write the latency histograms to an HdrHistogram interval log.
        #[arg(long)]
        hlog: Option<PathBuf>,
    },
    /// Half-round-trip latency by message size (ipc, udp, tcp).
    Pingpong(PingPong),
    /// One-way streaming throughput with every message checked.
    Throughput(Throughput),
    /// One-way latency at a fixed offered rate, open loop (coordinated-omission free).
    Oneway(OneWay),
    /// Inspect the machine for latency pitfalls; change nothing unless --apply.
    Doctor(DoctorOptions),
    /// Round-trip latency against message rate (Exhibit 4), up to the highest sustained rate.
    SweepRate(Sweep),
    /// UDP tick in, TCP order out, timed with kernel timestamps (paper 004).
    TickToTrade(TickToTrade),
    /// Every measurement of the papers, into DIR/report.md with plots.
    Reproduce(Reproduce),
    /// Send a generated stream over reliable UDP under chosen loss, and check it arrived intact.
    Transfer(Transfer),
    /// The router's topic lookup with few and with many unrelated subscriptions.
    TopicMatch(TopicMatch),
    /// The Solace scenario (paper 001) through the router, beside its forwarding floor.
    Router(RouterLab),
    /// Request/reply round trips through the router at fixed rates (each publisher a requester, the
    /// subscriber of its topic answering at once), beside two one-way hops through the same router.
    Request(RouterLab),
    /// A router cluster of three across network namespaces: one-way latency from a publisher on one router to a
    /// subscriber on another beside two TCP forwarders, and the spread scenario's rate beside one router (root).
    Cluster(ClusterLab),
    /// The disk's durability floor: a small pwrite and an fdatasync, one after another, on the disk under test.
    Fsync(Fsync),
    /// Guaranteed publishing through the router per sync policy: peak rate, publish-to-ack and -delivery latency, beside this disk's fsync.
    Guaranteed(GuaranteedLab),
    /// What a shared key (auth=FILE: a MAC on every datagram) costs reliable UDP: ping-pong and throughput, keyed and not, beside kernel UDP.
    AuthCost(AuthCost),
    /// The C and Python examples' shared-memory ping-pong and Python's publish_many, beside the Rust lab's, in the same rounds.
    Bindings(Bindings),
    /// sockperf's UDP ping-pong across a veth pair under `tickwire accel` and not, spinning and blocking, in the same rounds (root).
    Accel(Accel),
    /// Internal: the far side of a measurement.
    #[command(hide = true)]
    Worker {
        /// The job, as the JSON the measuring side wrote.
        role: String,
    },
}

/// `lab doctor`.
#[derive(Debug, Clone, clap::Args)]
pub struct DoctorOptions {
    /// CPUs to probe for hiccups.
    #[arg(long, default_value = "0,1", value_parser = Cpus::parse)]
    pub cpus: Cpus,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the suggested settings (root only), saving the current ones first.
    #[arg(long, conflicts_with = "restore")]
    pub apply: bool,
    /// Where --apply saves the current settings.
    #[arg(long, default_value = "tickwire-doctor-restore.json")]
    pub restore_file: PathBuf,
    /// Put back the settings saved by --apply.
    #[arg(long)]
    pub restore: Option<PathBuf>,
    /// How long to probe each CPU for hiccups (0s: skip).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub hiccup: Duration,
}

impl Request {
    /// The request with `dir`, where shared files go (the CLI's
    /// configured directory), filled in for the modes that use one.
    pub fn with_dir(mut self, dir: PathBuf) -> Self {
        match &mut self {
            Request::Floor { options, .. } => options.dir = dir,
            Request::Pingpong(r) => r.dir = dir,
            Request::Throughput(r) => r.dir = dir,
            Request::Oneway(r) => r.dir = dir,
            Request::SweepRate(r) => r.dir = dir,
            Request::TickToTrade(r) => r.dir = dir,
            Request::Reproduce(r) => r.dir = dir,
            Request::Transfer(r) => r.dir = dir,
            Request::Router(r) | Request::Request(r) => r.dir = dir,
            Request::Cluster(r) => r.dir = dir,
            Request::Guaranteed(r) => r.shm_dir = dir,
            Request::AuthCost(r) => r.dir = dir,
            Request::Bindings(r) => r.dir = dir,
            Request::Accel(r) => r.dir = dir,
            Request::Doctor(_) | Request::TopicMatch(_) | Request::Fsync(_) | Request::Worker { .. } => {}
        }
        self
    }

    /// The options every measuring command shares.
    fn common(&self) -> Option<&Common> {
        Some(match self {
            Request::Floor { common, .. } => common,
            Request::Pingpong(r) => &r.common,
            Request::Throughput(r) => &r.common,
            Request::Oneway(r) => &r.common,
            Request::SweepRate(r) => &r.common,
            Request::TickToTrade(r) => &r.common,
            Request::Router(r) | Request::Request(r) => &r.common,
            Request::Cluster(r) => &r.common,
            Request::Guaranteed(r) => &r.common,
            Request::AuthCost(r) => &r.common,
            Request::Bindings(r) => &r.common,
            Request::Accel(r) => &r.common,
            Request::Reproduce(_)
            | Request::Doctor(_)
            | Request::Transfer(_)
            | Request::TopicMatch(_)
            | Request::Fsync(_)
            | Request::Worker { .. } => return None,
        })
    }

    /// The CPUs of a command whose two sides spin, and whether sharing one
    /// CPU was asked for.
    fn spinning_sides(&self) -> Option<(Cpus, bool)> {
        if let Request::Reproduce(r) = self {
            return Some((r.cpus, r.share_cpu));
        }
        self.common().map(|c| (c.cpus, c.share_cpu))
    }
}

/// Runs the request: measures, prints on stdout, writes the files asked for.
/// Ctrl-C stops a measuring run after its current round with the partial
/// results printed; workers ignore it (their parent decides).
///
/// # Errors
/// Bad combinations ([`LabError::Usage`]): among them both spinning sides
/// on one CPU without `--share-cpu`; set-up and worker failures; files
/// that cannot be written; and, with `--strict`, a row that beat its floor
/// ([`LabError::Failed`]).
pub fn run(request: Request) -> Result<(), LabError> {
    if let Some((cpus, false)) = request.spinning_sides() {
        if cpus.local == cpus.remote {
            return Err(LabError::Usage(format!(
                "--cpus {cpus}: both sides of the measurement spin, and two spinning sides on one CPU take \
                 turns by the scheduler's time slice (milliseconds per message, runs of hours); give two \
                 CPUs, or add --share-cpu to measure that anyway"
            )));
        }
    }
    let strict = request.common().is_some_and(|c| c.strict);
    if matches!(request, Request::Worker { .. }) {
        crate::ignore_ctrl_c();
    } else {
        // The first Ctrl-C (or SIGTERM, SIGHUP) asks for a graceful stop,
        // the second exits at once (130).
        let _ = tickwire_agent::stop::StopSignals::command()
            .saying("\ntickwire lab: stopping after the current round (Ctrl-C again to quit now)")
            .install();
    }
    measure(request)?;
    if strict && crate::output::report::floor_beaten() {
        return Err(LabError::Failed(
            "--strict: a row beat its floor (marked FLOOR BEATEN above): the probe is not a floor for \
             this work, so its ratios mean nothing; see docs/PERFORMANCE.md, floors"
                .into(),
        ));
    }
    Ok(())
}

/// Measures and prints one request.
fn measure(request: Request) -> Result<(), LabError> {
    match request {
        Request::Worker { role } => {
            println!("{}", crate::modes::run_worker(&role)?);
            Ok(())
        }
        Request::Floor { common, mut options, hlog } => {
            options.cpus = common.cpus;
            run_floor(&options, &common.output(&hlog, &None))
        }
        Request::Pingpong(p) => run_pingpong(&p),
        Request::Throughput(t) => crate::modes::throughput::run(&t),
        Request::Oneway(o) => run_oneway(&o),
        Request::SweepRate(sweep) => run_sweep(&sweep),
        Request::TickToTrade(t) => run_tick_to_trade(&t),
        Request::Reproduce(r) => {
            let path = crate::modes::reproduce::run(&r, &Machine::detect())?;
            println!("wrote {} (plots beside it)", path.display());
            Ok(())
        }
        Request::Transfer(t) => run_transfer(&t),
        Request::Doctor(d) => run_doctor(&d),
        Request::TopicMatch(t) => run_topic_match(&t.unrelated, t.rounds, t.json),
        Request::Router(run) => run_router(&run),
        Request::Request(mut run) => {
            run.request = true;
            run_router(&run)
        }
        Request::Cluster(run) => crate::modes::router::cluster::run(&run),
        Request::Fsync(run) => crate::modes::fsync::run(&run),
        Request::Guaranteed(run) => {
            let results = crate::modes::router::guaranteed::run(&run)?;
            crate::modes::router::guaranteed::print(&results, run.common.json)
        }
        Request::AuthCost(run) => {
            let results = crate::modes::auth_cost::run(&run)?;
            crate::modes::auth_cost::print(&results, run.common.json)
        }
        Request::Bindings(run) => {
            let results = crate::modes::bindings::run(&run)?;
            crate::modes::bindings::print(&results, run.common.json)
        }
        Request::Accel(run) => {
            let rows = crate::modes::accel::run(&run)?;
            crate::modes::accel::print(&run, &rows, run.common.json)
        }
    }
}

fn run_router(run: &RouterLab) -> Result<(), LabError> {
    let output = run.common.output(&run.hlog, &run.plot);
    let machine = Machine::detect();
    let results = crate::modes::router::run(run, &machine)?;
    crate::modes::router::report::print(run, &results, &output, &machine)
}

fn run_topic_match(sizes: &[usize], rounds: usize, json: bool) -> Result<(), LabError> {
    let rows = crate::modes::matching::run(sizes, rounds, 1_000_000)?;
    if json {
        for r in &rows {
            println!("{}", serde_json::to_string(r).map_err(|e| LabError::Usage(e.to_string()))?);
        }
        return Ok(());
    }
    let base = rows[0];
    println!(
        "topic lookup, ns per call (median of {rounds} interleaved rounds; ratio to {} unrelated)",
        base.unrelated
    );
    println!("{:>10}  {:>16}  {:>16}  {:>16}", "unrelated", "cached", "nobody wants", "uncached (trie)");
    for r in &rows {
        println!(
            "{:>10}  {:>8.1} ({:>4.2}x)  {:>8.1} ({:>4.2}x)  {:>8.1} ({:>4.2}x)",
            r.unrelated,
            r.cached_ns,
            r.cached_ns / base.cached_ns,
            r.unwanted_ns,
            r.unwanted_ns / base.unwanted_ns,
            r.uncached_ns,
            r.uncached_ns / base.uncached_ns
        );
    }
    Ok(())
}

/// A short raw-ring floor (100,000 round trips, milliseconds) measured just
/// before a run, so that every report carries its floor ratio.
fn quick_floor(cpus: Cpus, dir: &Path) -> Result<LatencyRow, LabError> {
    let fo =
        FloorOptions { count: 100_000, warmup: 5_000, size: 64, duration: Duration::ZERO, cpus, dir: dir.to_owned() };
    floor::raw_ring(&fo)
}

fn run_floor(o: &FloorOptions, out: &Output) -> Result<(), LabError> {
    let machine = Machine::detect();
    let start = SystemTime::now();
    let t = std::time::Instant::now();
    let clh = floor::cacheline_histogram(o)?;
    let rrh = floor::raw_ring_histogram(o)?;
    let elapsed = t.elapsed();
    let measured = |hist: hdrhistogram::Histogram<u64>, probe: &str, size: usize| {
        let mut row = floor::row(probe, size, o.cpus, &hist);
        row.machine = machine.summary();
        Measured { row, hist, start, elapsed }
    };
    let m = [measured(clh, "cacheline", 8), measured(rrh, "raw_ring", o.size)];
    print::hlog(out, &m)?;
    // The floor has no percentile plot and no sockperf block: its table is the point.
    let format = if out.format == Format::Sockperf { Format::Table } else { out.format };
    if format == Format::Table {
        println!("machine: {}", machine.summary());
        print!("{}", crate::base::output::report::table(&[m[0].row.clone(), m[1].row.clone()]));
    } else {
        print::latency(&m, format, &machine);
    }
    let mut tp = streaming::slot_ring_throughput(o)?;
    let mut batched = streaming::raw_ring_throughput(o)?;
    batched.mode = "reference".into();
    let limit = line_limit::at_size(&line_limit::stream(o.cpus, &o.dir, o.duration)?, tp.size);
    // One measurement of each, one after the other: reported, not judged
    // (`lab throughput --transport ipc` interleaves them in rounds).
    tp.line_share(&limit);
    batched.line_share(&limit);
    if format != Format::Csv {
        print::throughput(&[tp, batched, limit], format);
    }
    if format == Format::Table {
        let show =
            |v: Vec<(u64, f64)>| v.iter().map(|(b, r)| format!("{b}: {:.1}M", r / 1e6)).collect::<Vec<_>>().join(", ");
        println!("raw ring, messages per tail publish tried (msg/s): {}", show(streaming::batch_trials()));
        println!("cache lines, lines per read tried (lines/s): {}", show(line_limit::batch_trials()));
    }
    Ok(())
}

fn run_pingpong(base: &PingPong) -> Result<(), LabError> {
    let out = &base.common.output(&base.hlog, &base.plot);
    if base.netns && base.transport == Transport::Ipc {
        return Err(LabError::Usage("--netns applies to udp and tcp (ipc is shared memory on one host)".into()));
    }
    let machine = Machine::detect();
    let sizes = if base.sizes.is_empty() { vec![base.size] } else { base.sizes.clone() };
    let mut measured = Vec::new();
    for size in sizes {
        if crate::stop_requested() {
            break;
        }
        let (row, floor_row) = crate::modes::pingpong::run(&PingPong { size, ..base.clone() }, &machine)?;
        measured.push(row);
        // The floor's own row is shown in tables; JSON/CSV rows carry its figures.
        if let (Some(f), Format::Table | Format::Sockperf) = (floor_row, out.format) {
            measured.push(f);
        }
    }
    print::latency(&measured, out.format, &machine);
    print::hlog(out, &measured)?;
    let Some(path) = &out.plot else { return Ok(()) };
    let mine: Vec<&Measured> = measured.iter().filter(|m| m.row.mode == "pingpong").collect();
    if mine.len() < 2 {
        return print::distribution(path, "Half-round-trip latency by percentile", &measured);
    }
    let line = |f: fn(&LatencyRow) -> u64| -> Vec<(f64, f64)> {
        mine.iter().map(|m| (m.row.size as f64, f(&m.row) as f64 / 1000.0)).collect()
    };
    let name = base.transport.name();
    plots::lines(
        path,
        &format!("Half-round-trip latency against message size ({name})"),
        "message size (bytes)",
        &[(format!("{name} p50"), line(|r| r.p50_ns)), (format!("{name} p99"), line(|r| r.p99_ns))],
        false,
    )
    .map_err(LabError::Output)
}

fn check_probability(what: &str, p: f64) -> Result<(), LabError> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(LabError::Usage(format!("{what} must be within [0, 1], got {p}")))
    }
}

fn run_oneway(run: &OneWay) -> Result<(), LabError> {
    check_probability("--loss", run.loss)?;
    if (run.loss > 0.0 || !run.params.is_empty()) && run.transport != Transport::Rudp {
        return Err(LabError::Usage("--loss and --param apply to rudp".into()));
    }
    let output = run.common.output(&run.hlog, &run.plot);
    let machine = Machine::detect();
    let m = crate::modes::oneway::run(run, &machine)?;
    if output.format == Format::Table {
        let r = &m[0].row;
        let floor = match run.transport {
            _ if run.publishers != 1 || run.subscribers != 1 => "; no floor (the floor is one to one, this run is not)",
            Transport::Ipc => ", each a raw-ring round at the same rate and size, then a tickwire round",
            Transport::Rudp => ", each a kernel UDP round at the same rate and size, then a reliable UDP round",
            Transport::Udp | Transport::Tcp | Transport::Xdp => " (kernel sockets: the floor itself)",
        };
        println!(
            "{} {}: offered {:.0} msg/s, achieved {:.0} msg/s, lost {}; {} publisher(s) on one thread (CPU {}), {} \
             subscriber(s) on one thread (CPU {}), {} topic(s); latency from the intended send time; {} rounds{floor}",
            run.transport.name(),
            if run.netns {
                "across a veth pair"
            } else if run.transport == Transport::Ipc {
                "on one host"
            } else {
                "on loopback"
            },
            r.offered_rate.unwrap_or(0.0),
            r.achieved_rate.unwrap_or(0.0),
            r.lost,
            run.publishers,
            run.common.cpus.local,
            run.subscribers,
            run.common.cpus.remote,
            run.topics,
            run.rounds.max(1),
        );
        if run.loss > 0.0 {
            println!("loss injected: {} of the datagrams each end sends, repaired by NAK", run.loss);
        }
        println!("{}", print::pauses_line(r));
    }
    print::latency_and_files(&m, &output, &machine, "One-way latency by percentile (from the intended send time)")
}

fn run_sweep(sweep: &Sweep) -> Result<(), LabError> {
    let out = &sweep.common.output(&sweep.hlog, &sweep.plot);
    let machine = Machine::detect();
    let measured = crate::modes::sweep::run_measured(sweep, &machine)?;
    print::hlog(out, &measured)?;
    let rows: Vec<LatencyRow> = measured.into_iter().map(|m| m.row).collect();
    if let Some(path) = &out.plot {
        sweep_plots(path, &rows)?;
    }
    print::sweep(&rows, out.format, &machine, sweep.reflect_every);
    if out.format == Format::Table {
        let mut paths = vec![(sweep.transport.name(), "sweep-rate")];
        match sweep.transport {
            Transport::Ipc => paths.push(("shm", "floor")),
            Transport::Rudp => paths.push(("udp", "floor")),
            Transport::Udp | Transport::Tcp | Transport::Xdp => {}
        }
        for (transport, mode) in paths {
            let path = if mode == "floor" { format!("{transport} (floor)") } else { transport.to_owned() };
            match highest_sustained(&rows, transport, mode, sweep.sustain) {
                Some(r) => println!(
                    "{path}: highest rate sustained {:.0} msg/s (achieved {:.0}, at least {:.0}% of target, none lost)",
                    r.offered_rate.unwrap_or(0.0),
                    r.achieved_rate.unwrap_or(0.0),
                    sweep.sustain * 100.0
                ),
                None => println!(
                    "{path}: no rate was sustained (achieved below {:.0}% of target, or lost messages)",
                    sweep.sustain * 100.0
                ),
            }
        }
    }
    Ok(())
}

/// RTT percentiles against target rate at `path`, and achieved against
/// target beside it (`<name>-achieved.svg`).
fn sweep_plots(path: &Path, rows: &[LatencyRow]) -> Result<(), LabError> {
    let of = |floor: bool, free: bool, f: fn(&LatencyRow) -> f64| -> Vec<(f64, f64)> {
        rows.iter()
            .filter(|r| (r.mode == "floor") == floor && (r.distribution.as_deref() == Some("pause_free")) == free)
            .map(|r| (r.offered_rate.unwrap_or(1.0), f(r)))
            .collect()
    };
    let pick = |f: fn(&LatencyRow) -> f64| of(false, false, f);
    let name = rows.iter().find(|r| r.mode != "floor").map_or("", |r| r.transport.as_str());
    let mut lines = vec![
        (format!("{name} RTT p50"), pick(|r| r.p50_ns as f64 / 1000.0)),
        (format!("{name} RTT p99"), pick(|r| r.p99_ns as f64 / 1000.0)),
        (format!("{name} RTT p99.9"), pick(|r| r.p999_ns as f64 / 1000.0)),
        (format!("{name} RTT p99 pause-free"), of(false, true, |r| r.p99_ns as f64 / 1000.0)),
        (format!("{name} RTT p99.9 pause-free"), of(false, true, |r| r.p999_ns as f64 / 1000.0)),
    ];
    if let Some(f) = rows.iter().find(|r| r.mode == "floor") {
        let floor = format!("{} floor", f.transport);
        lines.push((format!("{floor} RTT p50"), of(true, false, |r| r.p50_ns as f64 / 1000.0)));
        lines.push((format!("{floor} RTT p99 pause-free"), of(true, true, |r| r.p99_ns as f64 / 1000.0)));
    }
    plots::lines(
        path,
        "Round-trip latency against target message rate",
        "target rate (messages per second)",
        &lines,
        true,
    )
    .map_err(LabError::Output)?;
    let stem = path.file_stem().map_or_else(|| "sweep".into(), |s| s.to_string_lossy().into_owned());
    plots::lines_with(
        &path.with_file_name(format!("{stem}-achieved.svg")),
        "Achieved against target message rate",
        "target rate (messages per second)",
        "messages per second",
        &[
            ("achieved".into(), pick(|r| r.achieved_rate.unwrap_or(0.0).max(1.0))),
            ("target".into(), pick(|r| r.offered_rate.unwrap_or(1.0))),
        ],
        true,
    )
    .map_err(LabError::Output)
}

fn run_tick_to_trade(t: &TickToTrade) -> Result<(), LabError> {
    let out = &t.common.output(&t.hlog, &t.plot);
    let machine = Machine::detect();
    let f = quick_floor(t.common.cpus, &t.dir)?;
    let (mut kernel, mut user) = crate::modes::tick_to_trade::run(t, &machine)?;
    user.row = user.row.clone().with_floor(&f);
    if let Some(k) = kernel.as_mut() {
        k.row = k.row.clone().with_floor(&f);
    }
    if kernel.is_none() && out.format == Format::Table {
        println!("(no kernel timestamps on this system: user-space clock only)");
    }
    let measured: Vec<Measured> = kernel.into_iter().chain(std::iter::once(user)).collect();
    print::latency_and_files(&measured, out, &machine, "Tick-to-trade by percentile")
}

fn run_transfer(t: &Transfer) -> Result<(), LabError> {
    check_probability("--loss", t.loss)?;
    check_probability("--reorder", t.reorder)?;
    check_probability("--duplicate", t.duplicate)?;
    let r = crate::modes::transfer::run(t)?;
    crate::modes::transfer::print(&r, t.json);
    if !r.identical && r.lost_events == 0 {
        return Err(LabError::Failed("the received stream differs from the sent one, and no loss was reported".into()));
    }
    Ok(())
}

fn run_doctor(d: &DoctorOptions) -> Result<(), LabError> {
    let doctor = Doctor::default();
    if let Some(file) = &d.restore {
        for s in doctor.restore(file).map_err(LabError::Usage)? {
            println!("restored {} = {}", s.path, s.old);
        }
        return Ok(());
    }
    let findings = doctor.inspect();
    let mut probes = Vec::new();
    if !d.hiccup.is_zero() {
        for cpu in [d.cpus.local, d.cpus.remote] {
            let (max, over_100us, over_1ms) = hiccups(cpu, d.hiccup)?;
            probes.push(Hiccups { cpu, over: d.hiccup, max, over_100us, over_1ms });
        }
    }
    print::doctor(&findings, &probes, d.json);
    if d.apply {
        let restore_file = &d.restore_file;
        let saved = doctor.apply(&findings, restore_file).map_err(LabError::Usage)?;
        println!(
            "applied {} settings; undo with: tickwire lab doctor --restore {}",
            saved.len(),
            restore_file.display()
        );
    }
    Ok(())
}
