//! The router under test: worker job [`HostSpec`],
//! a `tickwire_router::Server` in its own process, pinned to the router's
//! CPU, for the whole of a `lab router` run.
//!
//! It spins only while a router round runs: between rounds the floor's
//! forwarding thread has the same CPU, so the router sleeps (a duty cycle
//! every 200 µs, enough for its clients to stay served). The measuring
//! side steers it with lines on its stdin:
//! * `wake`: spin from now on, recording pauses;
//! * `sleep PATH`: write the pauses since `wake` to PATH
//!   ([`write_pauses`]), print a [`HostReport`] line, and sleep;
//! * end of input: shut down, and print the last report.

use crate::base::openloop::{write_pauses, PauseRecorder};
use crate::LabError;
use serde::{Deserialize, Serialize};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use tickwire_agent::{pin_current_thread, Idle};
use tickwire_router::{RouterConfig, Server};
use tickwire_shm::os::monotonic_ns;

/// The awake loop reads the clock for its pause record once in this many
/// idle duty cycles (and after every busy one).
const TICK_EVERY: u64 = 8;

/// What the router worker needs (a worker job).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostSpec {
    /// The router's directory (its own: clients' logs, lock, counters).
    pub dir: PathBuf,
    /// The CPU to pin to.
    pub cpu: usize,
    /// Also listen on TCP, on a free loopback port (printed as `listening ADDR`).
    pub tcp: bool,
    /// TLS on that port: the certificate and its key (PEM files).
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Bytes of each shared-memory client's log out of the router.
    pub log_bytes: usize,
    /// Users, topic ACLs and the metrics endpoint on: one user,
    /// [`LAB_USER`], who may publish and read `md/*` (so a fan-out
    /// subscriber's `md/>` has each topic checked before delivery).
    pub secure: bool,
    /// A journal (its directory, and sync policy): guaranteed delivery on.
    #[serde(default)]
    pub journal: Option<(PathBuf, String)>,
    /// Also a NATS listener on a free loopback port (printed after the
    /// first line as `nats ADDR`).
    #[serde(default)]
    pub nats: bool,
    /// A member of a high-availability group (needs `journal`): the
    /// group's name, this member's id, every member's `ID=HOST:PORT`.
    #[serde(default)]
    pub ha: Option<(String, u64, Vec<String>)>,
    /// `lab cluster`: a router in a network namespace of its own, maybe a
    /// member of a cluster ([`HostNet`]).
    #[serde(default)]
    pub net: Option<HostNet>,
}

/// Where a `lab cluster` router listens, and the cluster it joins. With
/// it the router is pinned before it starts (its cluster agent's thread
/// too stays on the router's CPU), and it and its cluster agent idle as
/// a router with `idle = "wait"` does: after every duty cycle that finds
/// nothing, they wait in the kernel on their sockets and on the doorbell
/// the other rings, for 1 us doubling to 1 ms. Three routers share one
/// CPU, and any spin takes it from the thread the work is for (spinning
/// 64 idle cycles before sleeping was tried, and yielding before that:
/// under EEVDF a yield need not hand the CPU to the router with work;
/// waiting at once took the 10k msg/s p50 from about 0.9 ms to about
/// 0.5 ms).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostNet {
    /// The router's name (in the cluster's status and handshakes).
    pub router: String,
    /// The address its client listener binds (port 0: any; printed as
    /// `listening ADDR`).
    pub ip: String,
    /// A member of the cluster `lab`: where it takes links
    /// (`tcp://IP:PORT`), the routers it dials, the secret's file.
    pub cluster: Option<(String, Vec<String>, PathBuf)>,
}

/// The user a secure router's clients log in as, and its password.
pub const LAB_USER: (&str, &str) = ("lab", "lab-password");

/// What the router says after each round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostReport {
    /// Resident memory of the router process, bytes.
    pub rss_bytes: u64,
    /// Messages published to it, since it started.
    pub messages_in: u64,
    /// Deliveries made or queued, since it started.
    pub deliveries: u64,
    /// Deliveries dropped by full queues, since it started.
    pub discards: u64,
    /// Sessions closed for protocol violations, since it started.
    pub violations: u64,
    /// Open sessions.
    pub clients: u64,
    /// Duty cycles while awake in the last round.
    pub cycles: u64,
    /// Nanoseconds awake in the last round.
    pub awake_ns: u64,
    /// Messages published to it in the last round.
    pub round_messages: u64,
    /// Deliveries made or queued in the last round.
    pub round_deliveries: u64,
    /// Reads of client sockets in the last round (the links' own count).
    pub reads: u64,
    /// Writes to client sockets in the last round (the links' own count).
    pub writes: u64,
    /// Readiness polls (`epoll_wait`) in the last round.
    pub polls: u64,
}

impl HostReport {
    /// Adds `o`'s counts (the round's and the totals); memory and
    /// sessions too: several routers' reports as one.
    pub fn add(&mut self, o: &Self) {
        let HostReport {
            rss_bytes,
            messages_in,
            deliveries,
            discards,
            violations,
            clients,
            cycles,
            awake_ns,
            round_messages,
            round_deliveries,
            reads,
            writes,
            polls,
        } = *o;
        self.rss_bytes += rss_bytes;
        self.messages_in += messages_in;
        self.deliveries += deliveries;
        self.discards += discards;
        self.violations += violations;
        self.clients += clients;
        self.cycles += cycles;
        self.awake_ns = self.awake_ns.max(awake_ns);
        self.round_messages += round_messages;
        self.round_deliveries += round_deliveries;
        self.reads += reads;
        self.writes += writes;
        self.polls += polls;
    }
}

/// Where a round's counts start: the router's totals at `wake`.
#[derive(Debug, Clone, Copy, Default)]
struct Baseline {
    messages: u64,
    deliveries: u64,
    io: tickwire_router::agent::IoCounts,
}

impl Baseline {
    fn of(server: &Server) -> Self {
        let t = server.totals();
        Self { messages: t.messages_in, deliveries: t.deliveries, io: server.io_counts() }
    }
}

/// The process's resident set, from `VmRSS` in `/proc/self/status` (0 if unreadable).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn report(server: &Server, cycles: u64, awake_ns: u64, since: Baseline) -> HostReport {
    let t = server.totals();
    let io = server.io_counts();
    HostReport {
        round_messages: t.messages_in - since.messages,
        round_deliveries: t.deliveries - since.deliveries,
        reads: io.reads - since.io.reads,
        writes: io.writes - since.io.writes,
        polls: io.polls - since.io.polls,
        rss_bytes: rss_bytes(),
        messages_in: t.messages_in,
        deliveries: t.deliveries,
        discards: t.discards,
        violations: t.violations,
        clients: server.clients() as u64,
        cycles,
        awake_ns,
    }
}

fn line(r: &HostReport) -> Result<String, LabError> {
    serde_json::to_string(r).map_err(|e| LabError::Worker(e.to_string()))
}

/// Worker job [`HostSpec`].
pub(crate) fn serve(spec: &HostSpec) -> Result<String, LabError> {
    let cfg = RouterConfig {
        name: "lab-router".into(),
        dir: spec.dir.clone(),
        ipc: true,
        listen: if spec.tcp { vec!["tcp://127.0.0.1:0".into()] } else { Vec::new() },
        nats_listen: if spec.nats { vec!["127.0.0.1:0".into()] } else { Vec::new() },
        ipc_log_bytes: spec.log_bytes,
        tls: spec.tls.as_ref().map(|(cert, key)| tickwire_router::config::TlsFiles::new(cert.clone(), key.clone())),
        ..RouterConfig::default()
    };
    let cfg = if spec.secure {
        let hash = tickwire_router::access::hash_password(LAB_USER.1.as_bytes()).map_err(LabError::Worker)?;
        let user = tickwire_router::access::UserConfig {
            name: LAB_USER.0.into(),
            password_hash: hash,
            unix_user: None,
            publish: vec!["md/*".into()],
            subscribe: vec!["md/*".into()],
            slow_consumer: None,
        };
        RouterConfig { users: vec![user], metrics: Some("127.0.0.1:0".into()), ..cfg }
    } else {
        cfg
    };
    let cfg = match &spec.journal {
        Some((dir, sync)) => {
            // No retention limit within a run: the run removes the journal.
            // The sync thread on the router's CPU (the harness spins on the
            // other), which the router yields while it awaits an fsync.
            let t = tickwire_router::config::JournalTable {
                sync: sync.clone(),
                retain_bytes: 0,
                sync_cpu: Some(spec.cpu),
                ..tickwire_router::config::JournalTable::at(dir)
            };
            let ha = spec.ha.as_ref().map(|(group, node, peers)| tickwire_router::config::HaTable {
                group: group.clone(),
                node: *node,
                peers: peers.clone(),
                // The lab measures replication, not fail-over: elections
                // after 1 s of silence, so that a paused vCPU or a starved
                // Raft thread does not move the leadership mid-round.
                election_ticks: 100,
                heartbeat_ticks: 5,
                ..tickwire_router::config::HaTable::default()
            });
            RouterConfig { journal: Some(t), ha, ..cfg }
        }
        None => cfg,
    };
    let cfg = match &spec.net {
        Some(net) => {
            // Every thread the router starts inherits this pinning.
            pin_current_thread(spec.cpu)?;
            let cluster = net.cluster.as_ref().map(|(listen, peers, secret)| tickwire_router::config::ClusterTable {
                name: "lab".into(),
                listen: listen.clone(),
                peers: peers.clone(),
                secret_file: secret.clone(),
                heartbeat: "1s".into(),
                ..tickwire_router::config::ClusterTable::default()
            });
            // It waits at once (three routers share one CPU); its cluster
            // agent runs on its thread (`thread = "auto"`, plain TCP).
            let idle = "wait".to_owned();
            RouterConfig { name: net.router.clone(), listen: vec![format!("tcp://{}:0", net.ip)], cluster, idle, ..cfg }
        }
        None => cfg,
    };
    let yields = spec.net.is_some();
    let mut server = Server::start(cfg).map_err(|e| LabError::Worker(format!("router: {e}")))?;
    match server.tcp_addrs().first() {
        Some(a) => println!("listening {a}"),
        None => println!("listening ipc"),
    }
    if spec.nats {
        match server.nats_addrs().first() {
            Some(a) => println!("nats {a}"),
            None => return Err(LabError::Worker("router: no NATS listener".into())),
        }
    }
    // Commands come on a thread of their own, so the spinning loop looks
    // at one flag and never at its stdin.
    let (tx, rx) = mpsc::channel::<String>();
    let pending = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&pending);
    std::thread::spawn(move || {
        for l in std::io::stdin().lock().lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                return;
            }
            flag.store(true, Ordering::Release);
        }
        let _ = tx.send("stop".into());
        flag.store(true, Ordering::Release);
    });
    pin_current_thread(spec.cpu)?;
    let mut recorder: Option<PauseRecorder> = None;
    let (mut cycles, mut woke) = (0u64, 0u64);
    let mut idle = Idle::wait();
    let mut since = Baseline::default();
    loop {
        let work = server.do_work();
        match &mut recorder {
            Some(r) => {
                cycles += 1;
                // A pause is a gap over 20 us: a tick after every cycle
                // that worked (which may take long: TCP's system calls)
                // and every few idle ones (each well under a microsecond)
                // sees every one, and leaves the clock's cost out of most
                // idle cycles.
                if work > 0 || yields || cycles % TICK_EVERY == 0 {
                    r.tick(monotonic_ns());
                }
                if yields {
                    idle.idle_with(work, &mut server);
                }
                if !pending.load(Ordering::Acquire) {
                    continue;
                }
            }
            None => std::thread::sleep(Duration::from_micros(200)),
        }
        pending.store(false, Ordering::Release);
        while let Ok(cmd) = rx.try_recv() {
            match cmd.split_once(' ').unwrap_or((cmd.as_str(), "")) {
                ("wake", _) => {
                    (cycles, woke) = (0, monotonic_ns());
                    since = Baseline::of(&server);
                    recorder = Some(PauseRecorder::new(woke));
                }
                ("sleep", path) => {
                    let pauses = recorder.take().map(PauseRecorder::into_pauses).unwrap_or_default();
                    write_pauses(Path::new(path), &pauses)?;
                    println!("{}", line(&report(&server, cycles, monotonic_ns().saturating_sub(woke), since))?);
                }
                ("stop", _) => {
                    let last = report(&server, 0, 0, Baseline::of(&server));
                    server.shutdown(Duration::from_millis(100));
                    return line(&last);
                }
                _ => return Err(LabError::Worker(format!("router host: unknown command {cmd:?}"))),
            }
        }
    }
}

impl crate::base::worker::Job for HostSpec {
    const ROLE: &'static str = "router-host";

    fn run(self) -> Result<String, LabError> {
        serve(&self)
    }
}
