//! `lab guaranteed --group`: the same guaranteed publishing against a
//! high-availability group of three routers (`tickwire_ha`), in the same
//! rounds as the single router, interleaved.
//!
//! Three router hosts ([`super::host`]) on loopback, each with its own
//! directory and journal, all pinned to the router's CPU; only the leader
//! is woken for the group's phases (the followers' routing agents run a
//! duty cycle every 200 µs, enough to apply what is committed; the
//! members' Raft threads wake on their sockets and are not pinned). The
//! clients connect to the leader over shared memory, as they do to the
//! single router, so the difference is the replication: a publish is
//! acknowledged once a majority's logs hold it (written ahead, synced
//! unless the policy is `os`) and the leader has applied it.

use super::host::{HostReport, HostSpec};
use crate::base::output::report::Quantiles;
use crate::{LabError, WorkerProcess};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Members of the group.
pub const MEMBERS: usize = 3;

/// The group's figures, beside the single router's in the same rounds.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GroupFigures {
    /// The member that led.
    pub leader: u64,
    /// Acknowledged messages per second at peak, per round.
    pub peak_rates: Vec<f64>,
    /// The durable subscriber's catch-up rate after each peak, per round.
    pub delivery_rates: Vec<f64>,
    /// Publish to acknowledgement at the offered rate.
    pub ack: Quantiles,
    /// Publish to delivery at the offered rate.
    pub deliver: Quantiles,
    /// Latency-phase messages that could not go out on time.
    pub late: u64,
    /// The leader's report at the end.
    pub host: HostReport,
}

impl GroupFigures {
    /// The median peak rate.
    pub fn peak(&self) -> f64 {
        crate::base::output::report::median(self.peak_rates.clone())
    }
}

/// Each member's role as its status file says (for an error message):
/// `, group: m1 leader, m2 follower, m3 follower`.
pub(super) fn roles(dir: &Path) -> String {
    let roles: Vec<String> = (1..=MEMBERS)
        .map(|i| {
            let d = PathBuf::from(format!("{}-m{i}", dir.display()));
            let role = tickwire_router::status::read(&d).ok().and_then(|s| s.journal?.ha).map(|h| h.group.role);
            format!("m{i} {}", role.as_deref().unwrap_or("gone"))
        })
        .collect();
    format!(", group: {}", roles.join(", "))
}

/// Three router hosts forming a group.
pub(super) struct Group {
    hosts: Vec<WorkerProcess>,
    dirs: Vec<PathBuf>,
    journals: Vec<PathBuf>,
    leader: usize,
}

fn free_port() -> Result<u16, LabError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| LabError::Worker(format!("a free port: {e}")))?;
    l.local_addr().map(|a| a.port()).map_err(|e| LabError::Worker(format!("a free port: {e}")))
}

impl Group {
    /// Starts the members (directories `dir-mN`, journals `journal-mN`)
    /// and waits until one leads.
    pub(super) fn start(dir: &Path, journal: &Path, sync: &str, cpu: usize) -> Result<Self, LabError> {
        let peers: Vec<String> =
            (1..=MEMBERS).map(|i| free_port().map(|p| format!("{i}=127.0.0.1:{p}"))).collect::<Result<_, _>>()?;
        let name = |p: &Path, i: usize| PathBuf::from(format!("{}-m{i}", p.display()));
        let mut g = Self { hosts: Vec::new(), dirs: Vec::new(), journals: Vec::new(), leader: 0 };
        for i in 1..=MEMBERS {
            let (d, j) = (name(dir, i), name(journal, i));
            g.dirs.push(d.clone());
            g.journals.push(j.clone());
            let spec = HostSpec {
                dir: d,
                cpu,
                tcp: false,
                tls: None,
                log_bytes: 4 << 20,
                secure: false,
                journal: Some((j, sync.to_owned())),
                nats: false,
                ha: Some(("lab".into(), i as u64, peers.clone())),
                net: None,
            };
            let mut host = WorkerProcess::spawn(&spec)?;
            let listening = host.read_line()?;
            if listening != "listening ipc" {
                return Err(LabError::Worker(format!("group member {i} said {listening:?}")));
            }
            g.hosts.push(host);
        }
        g.leader = g.find_leader(Duration::from_secs(15))?;
        Ok(g)
    }

    /// The member whose status file says it leads (written about once a
    /// second).
    fn find_leader(&self, within: Duration) -> Result<usize, LabError> {
        let until = Instant::now() + within;
        while Instant::now() < until {
            for (i, d) in self.dirs.iter().enumerate() {
                let leads = tickwire_router::status::read(d)
                    .ok()
                    .and_then(|s| s.journal?.ha)
                    .is_some_and(|h| h.group.role == "leader");
                if leads {
                    return Ok(i);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(LabError::Worker(format!("no member of the group led within {within:?}")))
    }

    /// The leader's directory (its clients connect there).
    pub(super) fn leader_dir(&self) -> &Path {
        &self.dirs[self.leader]
    }

    /// The leader's member id.
    pub(super) fn leader_id(&self) -> u64 {
        self.leader as u64 + 1
    }

    /// The leader's host, to wake and put to sleep.
    pub(super) fn leader_host(&mut self) -> &mut WorkerProcess {
        &mut self.hosts[self.leader]
    }

    /// Stops every member and removes their files.
    pub(super) fn stop(self) -> Result<(), LabError> {
        let mut first = Ok(());
        for mut h in self.hosts {
            let r = h.write_line("stop").and_then(|()| h.finish(Duration::from_secs(30)).map(|_| ()));
            if first.is_ok() {
                first = r;
            }
        }
        for p in self.dirs.iter().chain(&self.journals) {
            let _ = std::fs::remove_dir_all(p);
        }
        first
    }
}

/// The group's row under the single router's, with its ratios to it (same
/// rounds): peak rate, and publish-to-acknowledgement p50.
pub(super) fn print_row(g: &GroupFigures, single_peak: f64, single_ack_p50: u64) {
    let us = |ns: u64| ns as f64 / 1e3;
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    println!(
        "{:<18} {:>12.0} ({:.2}x)  {:>8.0}  to ack {:.1}/{:.1}/{:.1} µs ({:.2}x the single router's p50)  to delivery {:.1}/{:.1}/{:.1} µs  late {}",
        format!("  group of {MEMBERS} (m{})", g.leader),
        g.peak(),
        ratio(g.peak(), single_peak),
        crate::base::output::report::median(g.delivery_rates.clone()),
        us(g.ack.p50),
        us(g.ack.p99),
        us(g.ack.p999),
        ratio(g.ack.p50 as f64, single_ack_p50 as f64),
        us(g.deliver.p50),
        us(g.deliver.p99),
        us(g.deliver.p999),
        g.late
    );
}
