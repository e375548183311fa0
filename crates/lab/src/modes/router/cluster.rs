//! `tickwire lab cluster`: a router cluster (issue 35) across network
//! namespaces, beside a floor measured in the same run.
//!
//! The network: three namespaces, one per router (A, B, C), each joined by
//! a veth pair to a bridge in a fourth, the hub
//! ([`NetnsStar`], names carrying the pid: a killed run's are removed by
//! `tickwire clean` and at the start of the next `lab cluster`; its router
//! hosts end when their stdin closes, its forwarders after 30 s of
//! silence). The lab never
//! enters a namespace itself (the lab crate has no unsafe code, and
//! `setns` would be): the measuring side is worker role
//! [`ClusterSpec`], started in the hub with `ip netns exec`,
//! so every client socket the harness holds is the hub's, and reaches a
//! router over that router's veth. A message from a publisher on A to a
//! subscriber on B crosses: hub → A (veth), A → B (the cluster's link,
//! through the bridge), B → hub (veth).
//!
//! The routers: the lab's router host ([`super::host`], a
//! `tickwire_router::Server` in a worker process) started in each router's
//! namespace with cluster settings ([`HostNet`]): cluster `lab`, a shared
//! secret written for the run (mode 600), each told of A. The run waits
//! until every router's status (`router-status.json`) shows a link up to
//! each of the others.
//!
//! CPUs: the harness (every client session on one thread, open loop, as in
//! `lab router`) on `cpus.local`; all three routers (each one thread: its
//! cluster agent runs on its routing agent's, `thread = "auto"`) and the
//! floor's forwarders on `cpus.remote`. Three routers cannot spin on one
//! CPU, so a router here waits as soon as a duty cycle finds nothing
//! (`idle = "wait"`: in `ppoll` on its sockets and doorbell, woken by its
//! data), and a forwarder blocks in `read`. Yielding was tried first:
//! under EEVDF a yield need not hand the CPU to the side with work. On a
//! machine with a CPU per router both would be spinning; what sharing one
//! CPU costs is in the figures, on both sides of the ratio.
//!
//! Two parts, each rate `rounds` rounds:
//! * latency (`rates`): one publisher on A, one subscriber on B (topic
//!   `md/topic0000`); each round a floor round then a cluster round. The
//!   floor is the same schedule from the hub through a plain TCP
//!   forwarder in A's namespace and one in B's back to the hub
//!   ([`relay`]), which only copy.
//! * delivered rate (`spread_rates`): the `lab router` scenario
//!   (`publishers` × `subscribers`, one to one or `--fanout`): publisher
//!   `i` on router `i % 3`; subscriber `j` on router `(j + 1) % 3` (one to
//!   one: each message crosses a link) or `j % 3` (fan-out); each round a
//!   round on one router alone (a fourth router host, in A's namespace, no
//!   cluster) then a cluster round.

use super::harness::Harness;
use super::host::{HostNet, HostReport, HostSpec};
use super::relay;
use crate::base::common::{parse_duration, parse_rate, parse_size};
use crate::base::host::machine::Machine;
use crate::base::host::netns::NetnsStar;
use crate::base::openloop::{RunShape, RunTotals, SinkReport};
use crate::base::output::print::Common;
use crate::base::output::report::{ratio, table, LatencyRow};
use crate::{LabError, WorkerProcess};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// Where every router takes links, in its namespace.
const CLUSTER_PORT: u16 = 7700;
/// How long the links may take to come up.
const LINKS_TIMEOUT: Duration = Duration::from_secs(30);

/// A `lab cluster` run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
pub struct ClusterLab {
    #[command(flatten)]
    pub common: Common,
    /// One-way latency, one publisher on router A to one subscriber on router B: offered rates, each in turn.
    #[arg(long = "rate", value_name = "RATE", default_value = "10k", value_delimiter = ',', value_parser = parse_rate)]
    pub rates: Vec<u64>,
    /// Delivered rate of the publishers x subscribers scenario spread over the three routers, against one router
    /// alone: offered rates, all publishers together, each in turn (none: skipped).
    #[arg(long = "spread-rate", value_name = "SPREAD_RATE", value_delimiter = ',', value_parser = parse_rate)]
    pub spread_rates: Vec<u64>,
    /// Spread scenario: every subscriber on md/> (each message delivered to all), instead of one topic each.
    #[arg(long)]
    pub fanout: bool,
    /// Spread scenario: publishers, each on its own 12-byte topic.
    #[arg(long, default_value_t = 10)]
    pub publishers: usize,
    /// Spread scenario: subscribers (one per publisher, or any number with --fanout).
    #[arg(long, default_value_t = 10)]
    pub subscribers: usize,
    /// Payload bytes (at least 16).
    #[arg(long, default_value = "100", value_parser = parse_size)]
    pub size: usize,
    /// How long each rate publishes through the cluster, over all its rounds.
    #[arg(long, default_value = "6s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Rounds per rate: a floor (or one-router) round then a cluster round, this many times.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Bytes of each client's log.
    #[arg(long = "capacity", value_name = "CAPACITY", default_value = "4MiB", value_parser = parse_size)]
    pub log_bytes: usize,
    /// Where the run's files go.
    #[arg(skip)]
    pub dir: PathBuf,
}

/// The namespaces, as the measuring worker is told them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSpec {
    /// The run.
    pub lab: ClusterLab,
    /// The hub's address (the harness's side of every veth).
    pub hub_addr: String,
    /// Each router's namespace and address: A, B, C.
    pub routers: Vec<(String, String)>,
    /// The run's directory (routers' directories, the secret).
    pub run_dir: PathBuf,
}

/// Runs `o`: makes the namespaces, runs the measuring worker in the hub
/// (it prints the tables), removes everything.
///
/// # Errors
/// Bad parameters, namespaces that cannot be made (not root), a worker
/// that fails.
pub fn run(o: &ClusterLab) -> Result<(), LabError> {
    if o.size < 16 || o.rates.iter().chain(&o.spread_rates).any(|&r| r == 0) || o.rates.is_empty() {
        return Err(LabError::Usage("lab cluster needs --size >= 16 and rates above zero".into()));
    }
    if o.publishers == 0 || (!o.fanout && o.publishers != o.subscribers) {
        return Err(LabError::Usage("lab cluster: one subscriber per publisher, or --fanout".into()));
    }
    if o.rounds == 0 || o.rounds > 1000 || o.rates.iter().chain(&o.spread_rates).any(|&r| r > 10_000_000) {
        return Err(LabError::Usage("lab cluster needs --rounds 1 to 1000 and rates of 10M msg/s or less".into()));
    }
    let _ = crate::base::host::netns::clean_stale();
    let run_dir = o.dir.join(format!("{}-cluster", crate::run_tag()));
    let result = (|| {
        std::fs::create_dir_all(&run_dir)?;
        let star = NetnsStar::create(3)?;
        let spec = ClusterSpec {
            lab: o.clone(),
            hub_addr: star.hub_addr.clone(),
            routers: star.leaves.clone(),
            run_dir: run_dir.clone(),
        };
        let exe = std::env::var_os("TICKWIRE_EXE").map(PathBuf::from).map_or_else(std::env::current_exe, Ok)?;
        // Its tables go straight to our standard output.
        let mut child = Command::new("ip")
            .args(["netns", "exec", &star.hub])
            .arg(exe)
            .args(["lab", "worker"])
            .arg(crate::base::worker::job_arg(&spec))
            .stdin(Stdio::null())
            .spawn()?;
        let status = child.wait()?;
        drop(star);
        match status.success() {
            true => Ok(()),
            false => Err(LabError::Worker(format!("lab cluster's measuring side exited with {status}"))),
        }
    })();
    let _ = std::fs::remove_dir_all(&run_dir);
    result
}

/// A router host in a namespace, and its client URL.
struct Routed {
    process: WorkerProcess,
    uri: String,
}

fn start_router(spec: &ClusterSpec, k: usize, cluster: bool, secret: &Path) -> Result<Routed, LabError> {
    let (ns, ip) = &spec.routers[k % spec.routers.len()];
    let name = if cluster { format!("lab-{}", ["a", "b", "c"][k % 3]) } else { "lab-single".into() };
    let dir = spec.run_dir.join(&name);
    std::fs::create_dir_all(&dir)?;
    let a = &spec.routers[0].1;
    let net = HostNet {
        router: name,
        ip: ip.clone(),
        cluster: cluster.then(|| {
            (format!("tcp://{ip}:{CLUSTER_PORT}"), vec![format!("tcp://{a}:{CLUSTER_PORT}")], secret.to_owned())
        }),
    };
    let host = HostSpec {
        dir,
        cpu: spec.lab.common.cpus.remote,
        tcp: true,
        tls: None,
        log_bytes: spec.lab.log_bytes,
        secure: false,
        journal: None,
        nats: false,
        ha: None,
        net: Some(net),
    };
    let mut process = WorkerProcess::spawn_in(Some(ns), &host)?;
    let line = process.read_line()?;
    let addr = line.strip_prefix("listening ").ok_or_else(|| LabError::Worker(format!("router host said {line:?}")))?;
    Ok(Routed { uri: format!("tcp://{addr}"), process })
}

/// Waits until every cluster router's status shows a link up to each other.
fn wait_links(dirs: &[PathBuf]) -> Result<(), LabError> {
    let start = Instant::now();
    loop {
        let up = dirs.iter().all(|d| {
            let text = std::fs::read_to_string(d.join("router-status.json")).unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            let links = v["cluster"]["links"].as_array().cloned().unwrap_or_default();
            links.len() == dirs.len() - 1 && links.iter().all(|l| l["state"] == "up")
        });
        if up {
            return Ok(());
        }
        if start.elapsed() > LINKS_TIMEOUT {
            return Err(LabError::Timeout("the cluster's links never all came up".into()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Worker job [`ClusterSpec`]: in the hub namespace, the
/// whole measurement; prints the tables and returns an empty line.
pub(crate) fn measure(spec: &ClusterSpec) -> Result<String, LabError> {
    let o = &spec.lab;
    let machine = Machine::detect();
    let secret = spec.run_dir.join("cluster.secret");
    {
        // Made its owner's alone from the start, and not guessable.
        use std::io::{Read, Write};
        use std::os::unix::fs::OpenOptionsExt;
        let mut bytes = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        let text: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&secret)?;
        f.write_all(text.as_bytes())?;
    }
    let mut routers = (0..3).map(|k| start_router(spec, k, true, &secret)).collect::<Result<Vec<_>, _>>()?;
    let dirs: Vec<PathBuf> = ["lab-a", "lab-b", "lab-c"].iter().map(|n| spec.run_dir.join(n)).collect();
    wait_links(&dirs)?;
    let base = tickwire_client::ClientOptions {
        dir: spec.run_dir.clone(),
        log_bytes: o.log_bytes,
        batching: tickwire_client::Batching { window: Duration::from_micros(10), ..tickwire_client::Batching::SMART },
        ..tickwire_client::ClientOptions::default()
    };
    let pauses = spec.run_dir.join("router.pauses");
    println!("machine: {}", machine.summary());
    println!(
        "router cluster of 3 (lab-a, lab-b, lab-c), each in its own network namespace on a bridge; every client \
         session on one thread on CPU {} in the hub namespace; the three routers (sleeping when idle) and the \
         floor's forwarders on CPU {}; {} B messages",
        o.common.cpus.local, o.common.cpus.remote, o.size
    );
    // Part 1: latency, A to B, beside the forwarders.
    println!();
    println!("one-way latency, 1 publisher on lab-a -> 1 subscriber on lab-b (md/topic0000)");
    println!("floor (same schedule, interleaved in rounds): hub -> TCP forwarder in lab-a's namespace -> TCP forwarder in lab-b's -> hub, copying only");
    let (a_uri, b_uri) = (routers[0].uri.clone(), routers[1].uri.clone());
    let mut h = Harness::connect_at((&[&a_uri], &[&b_uri]), &base, false)?;
    let hub = spec.hub_addr.as_str();
    let (a, b) = (&spec.routers[0], &spec.routers[1]);
    for &rate in &o.rates {
        let per_round = per_round(o);
        let wall = SystemTime::now();
        let (mut mine, mut floor) = (RunTotals::new(), RunTotals::new());
        let (mut discarded, mut hosts) = (0, HostReport::default());
        for _ in 0..o.rounds.max(1) {
            if crate::stop_requested() {
                break;
            }
            let (p, r) = relay::floor_round(hub, (&a.0, &a.1), (&b.0, &b.1), (rate, o.size, per_round), o.common.cpus)?;
            floor.add_report(p, &r)?;
            let (ra, rest) = routers.split_at_mut(1);
            let mut pair = [&mut ra[0].process, &mut rest[0].process];
            let r = h.round_many((rate, o.size, per_round), o.common.cpus, &mut pair, &pauses)?;
            mine.add_report(r.published, &SinkReport::of(&r.split))?;
            discarded += r.discarded;
            hosts.add(&r.host);
        }
        let shape = RunShape { size: o.size, rate, fan: 1, cpus: o.common.cpus };
        let [mut all, mut free] = mine.rows("cluster", "tcp", None, &shape, &machine, wall);
        let [f_all, f_free] = floor.rows("floor", "tcp", Some("forward_tcp x2"), &shape, &machine, wall);
        // A floor that did not keep the rate is no floor: no ratio to it.
        let floor_kept = sustained(&f_all.row, 0);
        if floor_kept {
            all.row = all.row.with_floor(&f_all.row);
            free.row = free.row.with_floor(&f_free.row);
        }
        let rows = [all.row, free.row, f_all.row, f_free.row];
        println!();
        print_rate(rate, &rows[0], discarded, &hosts);
        println!("{}", side_line("floor", &rows[2], 0, if floor_kept { "" } else { ": no ratio to it" }));
        print!("{}", table(&rows));
        if floor_kept {
            for (label, m, f) in [("all", &rows[0], &rows[2]), ("pause-free", &rows[1], &rows[3])] {
                println!("{}", ratio_line(label, m, f));
            }
        }
    }
    h.close();
    // Part 2: the spread scenario's delivered rate, beside one router.
    if !o.spread_rates.is_empty() {
        spread(o, spec, &mut routers, &secret, &base, &pauses, &machine)?;
    }
    for r in routers {
        r.process.stop_host()?;
    }
    Ok(String::new())
}

fn per_round(o: &ClusterLab) -> Duration {
    (o.duration / o.rounds.max(1) as u32).max(Duration::from_millis(50))
}

/// The spread scenario at every `spread_rates` rate: the cluster and one
/// router alone, interleaved.
fn spread(
    o: &ClusterLab,
    spec: &ClusterSpec,
    routers: &mut [Routed],
    secret: &Path,
    base: &tickwire_client::ClientOptions,
    pauses: &Path,
    machine: &Machine,
) -> Result<(), LabError> {
    let mut single = start_router(spec, 0, false, secret)?;
    let uris: Vec<&str> = routers.iter().map(|r| r.uri.as_str()).collect();
    let pubs: Vec<&str> = (0..o.publishers).map(|i| uris[i % 3]).collect();
    let shift = usize::from(!o.fanout);
    let subs: Vec<&str> = (0..o.subscribers).map(|j| uris[(j + shift) % 3]).collect();
    let mut hc = Harness::connect_at((&pubs, &subs), base, o.fanout)?;
    let one = vec![single.uri.as_str(); o.publishers.max(o.subscribers)];
    let mut hs = Harness::connect_at((&one[..o.publishers], &one[..o.subscribers]), base, o.fanout)?;
    println!();
    let scenario = match o.fanout {
        true => format!("fan-out: {} publishers, {} subscribers each on md/>", o.publishers, o.subscribers),
        false => {
            format!("{} publishers each on its own topic, {} subscribers one topic each", o.publishers, o.subscribers)
        }
    };
    println!(
        "delivered rate, {scenario}: publisher i on router i%3, subscriber j on router {} (cluster), against the \
         same clients all on one router alone (lab-single, in lab-a's namespace), interleaved in rounds",
        if o.fanout { "j%3" } else { "(j+1)%3" }
    );
    for &rate in &o.spread_rates {
        let per_round = per_round(o);
        let wall = SystemTime::now();
        let (mut clu, mut one_t) = (RunTotals::new(), RunTotals::new());
        let (mut d_clu, mut d_one, mut hosts) = (0, 0, HostReport::default());
        for _ in 0..o.rounds.max(1) {
            if crate::stop_requested() {
                break;
            }
            let r = hs.round((rate, o.size, per_round), o.common.cpus, &mut single.process, pauses)?;
            one_t.add_report(r.published, &SinkReport::of(&r.split))?;
            d_one += r.discarded;
            let mut all: Vec<&mut WorkerProcess> = routers.iter_mut().map(|r| &mut r.process).collect();
            let r = hc.round_many((rate, o.size, per_round), o.common.cpus, &mut all, pauses)?;
            clu.add_report(r.published, &SinkReport::of(&r.split))?;
            d_clu += r.discarded;
            hosts.add(&r.host);
        }
        let shape = RunShape { size: o.size, rate, fan: hc.fan, cpus: o.common.cpus };
        let [mut c_all, c_free] = clu.rows("cluster", "tcp", None, &shape, machine, wall);
        let [s_all, s_free] = one_t.rows("router", "tcp", None, &shape, machine, wall);
        c_all.row = c_all.row.with_floor(&s_all.row);
        let rows = [c_all.row, c_free.row, s_all.row, s_free.row];
        println!();
        print_rate(rate, &rows[0], d_clu, &hosts);
        println!("{}", side_line("one router", &rows[2], d_one, ""));
        print!("{}", table(&rows));
        println!("{}", ratio_line("all, cluster / one router", &rows[0], &rows[2]));
    }
    hc.close();
    hs.close();
    single.process.stop_host()
}

/// What the side a run is compared with achieved: `LABEL: achieved R
/// msg/s, L deliveries lost, D discarded; sustained` (or `NOT
/// sustained` and `unkept`).
fn side_line(label: &str, row: &LatencyRow, discarded: u64, unkept: &str) -> String {
    format!(
        "{label}: achieved {:.0} msg/s, {} deliveries lost, {discarded} discarded; {}",
        row.achieved_rate.unwrap_or(0.0),
        row.lost,
        if sustained(row, discarded) { "sustained".to_owned() } else { format!("NOT sustained{unkept}") }
    )
}

fn sustained(row: &LatencyRow, discarded: u64) -> bool {
    row.lost == 0 && discarded == 0 && row.achieved_rate.unwrap_or(0.0) >= row.offered_rate.unwrap_or(f64::MAX) * 0.99
}

fn print_rate(rate: u64, row: &LatencyRow, discarded: u64, hosts: &HostReport) {
    println!(
        "offered {rate} msg/s, achieved {:.0}, {} deliveries lost, {discarded} discarded; {}; the cluster's \
         routers: {} messages in, {} deliveries, {} reads + {} writes of client sockets",
        row.achieved_rate.unwrap_or(0.0),
        row.lost,
        if sustained(row, discarded) { "sustained" } else { "NOT sustained" },
        hosts.round_messages,
        hosts.round_deliveries,
        hosts.reads,
        hosts.writes
    );
}

/// The ratios of the percentiles, the absolute values beside them.
fn ratio_line(label: &str, m: &LatencyRow, f: &LatencyRow) -> String {
    if m.count == 0 || f.count == 0 {
        return format!("{label}: no messages in one of them");
    }
    format!(
        "{label}: p50 {:.2}x ({} / {} ns), p99 {:.2}x ({} / {} ns), p99.9 {:.2}x ({} / {} ns), max {:.2}x ({} / {} ns)",
        ratio(m.p50_ns, f.p50_ns),
        m.p50_ns,
        f.p50_ns,
        ratio(m.p99_ns, f.p99_ns),
        m.p99_ns,
        f.p99_ns,
        ratio(m.p999_ns, f.p999_ns),
        m.p999_ns,
        f.p999_ns,
        ratio(m.max_ns, f.max_ns),
        m.max_ns,
        f.max_ns
    )
}

impl WorkerProcess {
    /// Ends a router host: `stop`, then its exit (10 s at most).
    fn stop_host(mut self) -> Result<(), LabError> {
        self.write_line("stop")?;
        self.finish(Duration::from_secs(10)).map(|_| ())
    }
}

impl crate::base::worker::Job for ClusterSpec {
    const ROLE: &'static str = "cluster";

    fn run(self) -> Result<String, LabError> {
        measure(&self)
    }
}
