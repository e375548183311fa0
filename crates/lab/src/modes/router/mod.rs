//! `tickwire lab router`: the Solace scenario of paper 001 through
//! tickwire's router, with its forwarding floor in the same run.
//!
//! The scenario: P publishers, each on its own 12-byte topic
//! (`md/topic0000`...), S subscribers, 100-byte messages, one-way latency
//! from the publish call's intended time to the subscriber's callback, open
//! loop at a fixed aggregate rate. One to one: each subscriber on one topic
//! (P = S). Fan-out: every subscriber on `md/>`, each message delivered S
//! times.
//!
//! On two CPUs: the router ([`host`], a `tickwire_router::Server` in a
//! worker process) spins on `cpus.remote`; the [`harness`] drives every
//! client session from one thread on `cpus.local`, as its module says.
//!
//! Every rate is `rounds` rounds, each a floor round then a router round.
//! The floor is the same harness schedule through a forwarder on the
//! router's CPU that does nothing but copy: over shared memory a raw ring
//! into a thread that copies each message into a second raw ring
//! ([`floor::ring_sweep`] reflecting every message); over TCP a kernel TCP
//! connection into a process that writes each message back
//! ([`network::round`] reflecting every message). No topics, no clients.
//! While the floor runs, the router sleeps; its clients stay connected for
//! the whole run, and the router reports its memory after every round.
//!
//! With `--nats` (over TCP) the router also listens for NATS clients, and
//! every round ends with a NATS round: the same scenario, schedule and
//! stamps from the real NATS Go client ([`nats`], tools/nats-lab) on the
//! harness's CPU, through the same router, reported beside the native
//! rows with its ratio to them.
//!
//! [`report`] prints what a run measured.

pub mod cluster;
pub mod group;
pub mod guaranteed;
pub mod harness;
pub mod host;
pub mod nats;
pub mod relay;
pub mod report;

use crate::base::common::{parse_duration, parse_rate, parse_size};
use crate::base::floor;
use crate::base::host::machine::Machine;
use crate::base::openloop::{Published, RunShape, RunTotals, SinkReport};
use crate::base::output::print::Common;
use crate::base::output::Measured;
use crate::modes::network::{self, NetRound};
use crate::paths::Transport;
use crate::{LabError, WorkerProcess};
use host::{HostReport, HostSpec};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

/// A `lab router` (and `lab request`) run.
#[derive(Debug, Clone, clap::Args)]
pub struct RouterLab {
    #[command(flatten)]
    pub common: Common,
    /// Clients over ipc (shared memory), tcp or tls (loopback; a self-signed certificate made for the run).
    #[arg(long, default_value = "ipc", value_parser = ["ipc", "tcp", "tls"])]
    pub transport: String,
    /// TCP clients hold messages published within this long of their link's last write and send them together (0: one write per message).
    #[arg(long, default_value = "10us", value_parser = parse_duration)]
    pub batch_window: Duration,
    /// Every subscriber on md/> (each message delivered to all), instead of one topic each.
    #[arg(long)]
    pub fanout: bool,
    /// Also measure a second router with a user, topic ACLs and the metrics endpoint on, interleaved in the same rounds.
    #[arg(long)]
    pub secure: bool,
    /// Offered rates in messages per second, all publishers together, each measured in turn (e.g. 1M,5M).
    #[arg(long = "rate", value_name = "RATE", default_value = "1M", value_delimiter = ',', value_parser = parse_rate)]
    pub rates: Vec<u64>,
    /// Payload bytes (at least 16).
    #[arg(long, default_value = "100", value_parser = parse_size)]
    pub size: usize,
    /// Publishers, each on its own 12-byte topic.
    #[arg(long, default_value_t = 10)]
    pub publishers: usize,
    /// Subscribers (one per publisher, or any number with --fanout).
    #[arg(long, default_value_t = 10)]
    pub subscribers: usize,
    /// How long each rate publishes through the router, over all its rounds.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Rounds per rate, each a floor round then a router round.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Bytes of each client's log and of the floor's rings.
    #[arg(long = "capacity", value_name = "CAPACITY", default_value = "4MiB", value_parser = parse_size)]
    pub log_bytes: usize,
    /// Skip the forwarding floor (no ratios).
    #[arg(long)]
    pub no_floor: bool,
    /// With --transport tcp: a NATS round after every native one, through the router's NATS listener, from the
    /// NATS Go client (tools/nats-lab, built with Go on first use), reported beside the native rows.
    #[arg(long)]
    pub nats: bool,
    /// The NATS load generator's binary (default: $TICKWIRE_NATS_LAB, else built from tools/nats-lab).
    #[arg(long, requires = "nats")]
    pub nats_lab: Option<PathBuf>,
    /// Also write the histograms as an HdrHistogram interval log.
    #[arg(long)]
    pub hlog: Option<PathBuf>,
    /// Write an SVG plot of the percentile distributions.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Where the run's files go (the router gets a directory of its own in it).
    #[arg(skip)]
    pub dir: PathBuf,
    /// `lab request`: each publisher sends requests, the subscriber of its
    /// topic answers each at once, and the samples are round trips; the
    /// floor is the same clients' one-way publish-to-delivery through the
    /// same router, interleaved, counted twice (two one-way hops).
    #[arg(skip)]
    pub request: bool,
}

/// One rate's results.
#[derive(Debug)]
pub struct RateResult {
    /// Offered rate.
    pub rate: u64,
    /// The router's full and pause-free rows, then the floor's (if
    /// measured), then the secure router's (`--secure`).
    pub rows: Vec<Measured>,
    /// Discards announced to subscribers.
    pub discarded: u64,
    /// The router's report after each round.
    pub host: Vec<HostReport>,
    /// The clients' system calls, over every router round.
    pub clients: harness::ClientIo,
    /// `--nats`: the router's report after each NATS round.
    pub nats_host: Vec<HostReport>,
    /// `--nats`: the most a NATS message went after its intended time, ns.
    pub nats_late_max_ns: u64,
}

impl RateResult {
    /// Whether the router kept up: achieved at least 99% of the offered
    /// rate, nothing lost, nothing discarded.
    pub fn sustained(&self) -> bool {
        self.rows.first().is_some_and(|m| {
            m.row.lost == 0
                && self.discarded == 0
                && m.row.achieved_rate.unwrap_or(0.0) >= m.row.offered_rate.unwrap_or(f64::MAX) * 0.99
        })
    }
}

impl RouterLab {
    /// `ipc` (shared-memory clients) or `tcp` (TCP clients on loopback,
    /// also under `tls`).
    pub fn transport(&self) -> Transport {
        if self.transport == "ipc" {
            Transport::Ipc
        } else {
            Transport::Tcp
        }
    }

    /// Over `tcp`: TLS (a self-signed certificate made for the run).
    pub fn tls(&self) -> bool {
        self.transport == "tls"
    }

    /// How the TCP clients batch their writes.
    pub fn batching(&self) -> tickwire_client::Batching {
        match self.batch_window.is_zero() {
            true => tickwire_client::Batching::EVERY_FRAME,
            false => tickwire_client::Batching { window: self.batch_window, ..tickwire_client::Batching::SMART },
        }
    }

    /// Measure the forwarding floor (without: no ratios).
    pub fn floor(&self) -> bool {
        !self.no_floor
    }

    /// Over `tcp`: a NATS round after every native one, through the
    /// router's NATS listener, from the NATS load generator (tools/nats-lab);
    /// `Some(None)`: the generator built from source ([`nats::harness_binary`]).
    pub fn nats(&self) -> Option<Option<PathBuf>> {
        self.nats.then(|| self.nats_lab.clone())
    }

    /// The transport's name in rows (`shm`, `tcp` or `tls`) and the floor's probe.
    pub fn names(&self) -> (&'static str, &'static str) {
        match self.transport() {
            Transport::Tcp if self.tls() => ("tls", "forward_tcp"),
            Transport::Tcp => ("tcp", "forward_tcp"),
            _ => ("shm", "forward_ring"),
        }
    }
}

/// Runs every rate of `o`.
///
/// # Errors
/// Bad parameters, a router or client that fails to start, a round that
/// does not finish.
pub fn run(o: &RouterLab, machine: &Machine) -> Result<Vec<RateResult>, LabError> {
    if !matches!(o.transport(), Transport::Ipc | Transport::Tcp) {
        return Err(LabError::Usage(format!("lab router runs over ipc or tcp, not {}", o.transport().name())));
    }
    if o.size < 16 || o.rates.is_empty() || o.rates.contains(&0) {
        return Err(LabError::Usage("lab router needs --size >= 16 and rates above zero".into()));
    }
    if o.request && (o.fanout || o.secure) {
        return Err(LabError::Usage("lab request takes neither --fanout nor --secure".into()));
    }
    if o.nats().is_some() && (o.transport() != Transport::Tcp || o.tls() || o.request || o.secure) {
        return Err(LabError::Usage(
            "--nats compares with native TCP clients: lab router --transport tcp, without --secure".into(),
        ));
    }
    // Before anything starts: a missing generator (or Go) is named at once.
    let go = match o.nats() {
        Some(given) => Some(nats::harness_binary(given.as_deref())?),
        None => None,
    };
    let tag = crate::run_tag();
    let router_dir = o.dir.join(format!("{tag}-router"));
    let pauses = o.dir.join(format!("{tag}-router.pauses"));
    let secure_dir = o.dir.join(format!("{tag}-router-secure"));
    let tls_dir = o.dir.join(format!("{tag}-tls"));
    let samples = o.dir.join(format!("{tag}-nats.samples"));
    let result = (|| {
        let tls = match o.tls() {
            true => Some(self_signed(&tls_dir)?),
            false => None,
        };
        let mut plain = Router::start(o, &router_dir, false, tls.as_ref(), go.as_deref())?;
        let mut secure = if o.secure { Some(Router::start(o, &secure_dir, true, tls.as_ref(), None)?) } else { None };
        let mut out = Vec::new();
        for &rate in &o.rates {
            if crate::stop_requested() {
                break;
            }
            out.push(one_rate(o, rate, &mut plain, secure.as_mut(), (&pauses, &samples), machine)?);
        }
        for r in std::iter::once(plain).chain(secure) {
            r.stop()?;
        }
        Ok(out)
    })();
    // Everything in them is this run's: the routers' and the clients' files.
    let _ = std::fs::remove_dir_all(&router_dir);
    let _ = std::fs::remove_dir_all(&secure_dir);
    let _ = std::fs::remove_dir_all(&tls_dir);
    let _ = std::fs::remove_file(&pauses);
    let _ = std::fs::remove_file(&samples);
    result
}

/// A router under test: its worker process and the harness's clients.
struct Router {
    process: WorkerProcess,
    harness: harness::Harness,
    /// `--nats`: the NATS load generator, connected to its NATS listener.
    nats: Option<nats::GoHarness>,
}

impl Router {
    fn start(
        o: &RouterLab,
        dir: &std::path::Path,
        secure: bool,
        tls: Option<&(PathBuf, PathBuf)>,
        go: Option<&std::path::Path>,
    ) -> Result<Self, LabError> {
        let spec = HostSpec {
            dir: dir.to_owned(),
            cpu: o.common.cpus.remote,
            tcp: o.transport() == Transport::Tcp,
            tls: tls.cloned(),
            log_bytes: o.log_bytes,
            secure,
            journal: None,
            nats: go.is_some(),
            ha: None,
            net: None,
        };
        let mut process = WorkerProcess::spawn(&spec)?;
        let listening = process.read_line()?;
        let nats_url = match go {
            Some(_) => {
                let line = process.read_line()?;
                let addr =
                    line.strip_prefix("nats ").ok_or_else(|| LabError::Worker(format!("router host said {line:?}")))?;
                Some(format!("nats://{addr}"))
            }
            None => None,
        };
        let uri = match listening.strip_prefix("listening ") {
            Some("ipc") => "ipc".to_owned(),
            // The certificate is for localhost.
            Some(addr) if tls.is_some() => format!("tls://localhost:{}", addr.rsplit(':').next().unwrap_or("")),
            Some(addr) => format!("tcp://{addr}"),
            None => return Err(LabError::Worker(format!("router host said {listening:?}"))),
        };
        let login = secure.then_some(host::LAB_USER);
        let base = tickwire_client::ClientOptions {
            dir: dir.to_owned(),
            log_bytes: o.log_bytes,
            user: login.map(|l| l.0.to_owned()),
            password: login.map(|l| l.1.to_owned()),
            tls_ca: tls.map(|t| t.0.clone()),
            batching: o.batching(),
            ..tickwire_client::ClientOptions::default()
        };
        let shape = (o.publishers, o.subscribers);
        let harness = harness::Harness::connect(&uri, &base, shape, o.fanout)?;
        let nats = match (go, nats_url) {
            (Some(bin), Some(url)) => {
                // The generator inherits this thread's CPU: the harness's.
                tickwire_agent::pin_current_thread(o.common.cpus.local)?;
                // The router serves its connections and probes promptly.
                process.write_line("wake")?;
                let g = nats::GoHarness::start(bin, &url, shape, o.fanout, o.size);
                process.write_line(&format!("sleep {}", dir.join("setup.pauses").display()))?;
                let _: HostReport = crate::base::worker::parse_report("router", &process.read_line()?)?;
                let _ = std::fs::remove_file(dir.join("setup.pauses"));
                Some(g?)
            }
            _ => None,
        };
        Ok(Self { process, harness, nats })
    }

    fn stop(mut self) -> Result<(), LabError> {
        if let Some(g) = self.nats.take() {
            g.stop()?;
        }
        self.harness.close();
        self.process.write_line("stop")?;
        self.process.finish(Duration::from_secs(10))?;
        Ok(())
    }
}

fn one_rate(
    o: &RouterLab,
    rate: u64,
    plain: &mut Router,
    mut secure: Option<&mut Router>,
    (pauses, samples): (&std::path::Path, &std::path::Path),
    machine: &Machine,
) -> Result<RateResult, LabError> {
    let rounds = o.rounds.max(1);
    let per_round = (o.duration / rounds as u32).max(Duration::from_millis(50));
    let wall = SystemTime::now();
    let (mut mine, mut floor_totals, mut secured) = (RunTotals::new(), RunTotals::new(), RunTotals::new());
    let mut natsed = RunTotals::new();
    let (mut nats_host, mut nats_late_max_ns) = (Vec::new(), 0);
    let (mut discarded, mut host) = (0, Vec::new());
    let mut clients = harness::ClientIo::default();
    let h = &mut plain.harness;
    let router = &mut plain.process;
    let go = &mut plain.nats;
    let bar = crate::progress(rounds as u64, &format!("router {rate} msg/s (rounds)"));
    for _ in 0..rounds {
        if crate::stop_requested() {
            break;
        }
        if o.floor() && o.request {
            // Two one-way hops: the same clients publishing, same router.
            h.set_request(false);
            let r = h.round((rate, o.size, per_round), o.common.cpus, router, pauses)?;
            floor_totals.add_report(r.published, &SinkReport::of(&r.split))?;
            h.set_request(true);
        } else if o.floor() {
            let (published, report) = floor_round(o, rate, per_round)?;
            floor_totals.add_report(published, &report)?;
        }
        h.set_request(o.request);
        let r = h.round((rate, o.size, per_round), o.common.cpus, router, pauses)?;
        mine.add_report(r.published, &SinkReport::of(&r.split))?;
        discarded += r.discarded;
        host.push(r.host);
        clients.add(r.clients);
        if let Some(s) = secure.as_deref_mut() {
            let r = s.harness.round((rate, o.size, per_round), o.common.cpus, &mut s.process, pauses)?;
            secured.add_report(r.published, &SinkReport::of(&r.split))?;
            discarded += r.discarded;
        }
        if let Some(g) = go.as_mut() {
            // The same schedule through the router's NATS listener; the
            // router spins as in its native round.
            router.write_line("wake")?;
            let got = g.round(rate, per_round, samples);
            router.write_line(&format!("sleep {}", pauses.display()))?;
            let host: HostReport = crate::base::worker::parse_report("router", &router.read_line()?)?;
            let (r, got) = got?;
            let split = got.split_with_peer(Vec::new(), pauses)?;
            natsed.add_report(Published { sent: r.sent, secs: r.secs }, &SinkReport::of(&split))?;
            nats_host.push(host);
            nats_late_max_ns = nats_late_max_ns.max(r.late_max_ns);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let (transport, probe) = o.names();
    let shape = |fan: u64| RunShape { size: o.size, rate, fan, cpus: o.common.cpus };
    let mode = if o.request { "request" } else { "router" };
    let [mut all, mut free] = mine.rows(mode, transport, None, &shape(h.fan), machine, wall);
    let mut rows = Vec::with_capacity(4);
    if o.floor() && o.request {
        let [mut f_all, mut f_free] = floor_totals.rows("2x one-way", transport, None, &shape(1), machine, wall);
        for f in [&mut f_all, &mut f_free] {
            f.row = std::mem::take(&mut f.row).twice();
        }
        all.row = all.row.with_floor(&f_all.row);
        free.row = free.row.with_floor(&f_free.row);
        rows.extend([all, free, f_all, f_free]);
    } else if o.floor() {
        let [f_all, f_free] = floor_totals.rows("floor", transport, Some(probe), &shape(1), machine, wall);
        all.row = all.row.with_floor(&f_all.row);
        free.row = free.row.with_floor(&f_free.row);
        rows.extend([all, free, f_all, f_free]);
    } else {
        rows.extend([all, free]);
    }
    if secure.is_some() {
        let [s_all, s_free] = secured.rows("router+acl", transport, None, &shape(h.fan), machine, wall);
        rows.extend([s_all, s_free]);
    }
    if go.is_some() {
        let [mut n_all, mut n_free] = natsed.rows("router", "nats", None, &shape(h.fan), machine, wall);
        if o.floor() {
            n_all.row = n_all.row.with_floor(&rows[2].row);
            n_free.row = n_free.row.with_floor(&rows[3].row);
        }
        rows.extend([n_all, n_free]);
    }
    Ok(RateResult { rate, rows, discarded, host, clients, nats_host, nats_late_max_ns })
}

/// One floor round: the harness's schedule through a forwarder on the
/// router's CPU that only copies (a raw ring to a raw ring, or TCP back).
fn floor_round(
    o: &RouterLab,
    rate: u64,
    duration: Duration,
) -> Result<(crate::base::openloop::Published, SinkReport), LabError> {
    match o.transport() {
        Transport::Tcp => {
            let r = NetRound {
                transport: Transport::Tcp,
                rate,
                size: o.size,
                duration,
                reflect_every: 1,
                cpus: o.common.cpus,
                dir: &o.dir,
                params: "",
                netns: None,
            };
            let (source, _line) = network::round(&r)?;
            let report = source
                .reflections
                .ok_or_else(|| LabError::Worker("the TCP floor's source reported no reflections".into()))?;
            Ok((source.published, report))
        }
        _ => {
            let (published, split, _) =
                floor::ring_sweep((rate, o.size, duration), 1, o.common.cpus, &o.dir, o.log_bytes)?;
            Ok((published, SinkReport::of(&split)))
        }
    }
}

/// A self-signed certificate for `localhost` and its key (mode 600, as
/// the router requires), in `dir`.
fn self_signed(dir: &std::path::Path) -> Result<(PathBuf, PathBuf), LabError> {
    let io = |e: std::io::Error| LabError::Worker(format!("{}: {e}", dir.display()));
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()])
        .map_err(|e| LabError::Worker(format!("a self-signed certificate: {e}")))?;
    std::fs::create_dir_all(dir).map_err(io)?;
    let (cert, key) = (dir.join("router.pem"), dir.join("router.key"));
    std::fs::write(&cert, ck.cert.pem()).map_err(io)?;
    std::fs::write(&key, ck.key_pair.serialize_pem()).map_err(io)?;
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).map_err(io)?;
    Ok((cert, key))
}
