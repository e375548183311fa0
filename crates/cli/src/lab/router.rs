//! The router's lab commands: `lab topic-match`, `lab router` (the Solace
//! scenario) and `lab guaranteed` (guaranteed publishing per sync
//! policy), each parsed into its [`Request`].

use super::Common;
use crate::units::{parse_duration, parse_size};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use tickwire_lab::modes::router::{cluster::ClusterLab, guaranteed::GuaranteedLab, RouterLab};
use tickwire_lab::paths::Transport;
use tickwire_lab::request::Request;

/// Options of `lab topic-match`.
#[derive(Debug, Args)]
pub struct TopicMatchArgs {
    /// Unrelated subscriptions in each index measured (the first is the baseline).
    #[arg(long, value_delimiter = ',', default_value = "10,100000")]
    unrelated: Vec<usize>,
    /// Interleaved rounds (each: 1M cached lookups, 1M unwanted, 100k uncached per size).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// One JSON object per size.
    #[arg(long)]
    json: bool,
}

/// Options of `lab guaranteed`.
#[derive(Debug, Args)]
pub struct GuaranteedArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// Sync policies, each measured in turn.
    #[arg(long, default_value = "os,group,fsync", value_delimiter = ',', value_parser = ["os", "group", "fsync"])]
    sync: Vec<String>,
    /// Publisher counts, each measured in turn.
    #[arg(long, default_value = "1,10", value_delimiter = ',')]
    publishers: Vec<usize>,
    /// Consume through a durable queue with this many competing consumers, each acknowledging every delivery,
    /// instead of one durable subscription.
    #[arg(long, default_value_t = 0)]
    consumers: usize,
    /// Payload bytes (at least 16).
    #[arg(long, default_value = "100", value_parser = parse_size)]
    size: usize,
    /// The latency phase's offered rate, all publishers together.
    #[arg(long, default_value = "20k", value_parser = crate::units::parse_rate)]
    rate: u64,
    /// Peak and latency phases together, per case, over all rounds.
    #[arg(long, default_value = "6s", value_parser = parse_duration)]
    duration: Duration,
    /// Rounds per case: fsync floor, peak, latency.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Where the journals go: a directory on the disk under test (not tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    journal_dir: PathBuf,
    /// Also a high-availability group of three routers on loopback (the clients on its leader), in the same rounds.
    #[arg(long)]
    group: bool,
}

/// Options of `lab router`.
#[derive(Debug, Args)]
pub struct RouterArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// Clients over ipc (shared memory), tcp or tls (loopback; a self-signed certificate made for the run).
    #[arg(long, default_value = "ipc", value_parser = ["ipc", "tcp", "tls"])]
    transport: String,
    /// TCP clients hold messages published within this long of their link's last write and send them together (0: one write per message).
    #[arg(long, default_value = "10us", value_parser = parse_duration)]
    batch_window: Duration,
    /// Every subscriber on md/> (each message delivered to all), instead of one topic each.
    #[arg(long)]
    fanout: bool,
    /// Also measure a second router with a user, topic ACLs and the metrics endpoint on, interleaved in the same rounds.
    #[arg(long)]
    secure: bool,
    /// Offered rates in messages per second, all publishers together, each measured in turn (e.g. 1M,5M).
    #[arg(long, default_value = "1M", value_delimiter = ',', value_parser = crate::units::parse_rate)]
    rate: Vec<u64>,
    /// Payload bytes (at least 16).
    #[arg(long, default_value = "100", value_parser = parse_size)]
    size: usize,
    /// Publishers, each on its own 12-byte topic.
    #[arg(long, default_value_t = 10)]
    publishers: usize,
    /// Subscribers (one per publisher, or any number with --fanout).
    #[arg(long, default_value_t = 10)]
    subscribers: usize,
    /// How long each rate publishes through the router, over all its rounds.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    duration: Duration,
    /// Rounds per rate, each a floor round then a router round.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Bytes of each client's log and of the floor's rings.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    capacity: usize,
    /// Skip the forwarding floor (no ratios).
    #[arg(long)]
    no_floor: bool,
    /// With --transport tcp: a NATS round after every native one, through the router's NATS listener, from the
    /// NATS Go client (tools/nats-lab, built with Go on first use), reported beside the native rows.
    #[arg(long)]
    nats: bool,
    /// The NATS load generator's binary (default: $TICKWIRE_NATS_LAB, else built from tools/nats-lab).
    #[arg(long, requires = "nats")]
    nats_lab: Option<PathBuf>,
    /// Also write the histograms as an HdrHistogram interval log.
    #[arg(long)]
    hlog: Option<PathBuf>,
    /// Write an SVG plot of the percentile distributions.
    #[arg(long)]
    plot: Option<PathBuf>,
}

/// Options of `lab cluster`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// One-way latency, one publisher on router A to one subscriber on router B: offered rates, each in turn.
    #[arg(long, default_value = "10k", value_delimiter = ',', value_parser = crate::units::parse_rate)]
    rate: Vec<u64>,
    /// Delivered rate of the publishers x subscribers scenario spread over the three routers, against one router
    /// alone: offered rates, all publishers together, each in turn (none: skipped).
    #[arg(long, value_delimiter = ',', value_parser = crate::units::parse_rate)]
    spread_rate: Vec<u64>,
    /// Spread scenario: every subscriber on md/> (each message delivered to all), instead of one topic each.
    #[arg(long)]
    fanout: bool,
    /// Spread scenario: publishers, each on its own 12-byte topic.
    #[arg(long, default_value_t = 10)]
    publishers: usize,
    /// Spread scenario: subscribers (one per publisher, or any number with --fanout).
    #[arg(long, default_value_t = 10)]
    subscribers: usize,
    /// Payload bytes (at least 16).
    #[arg(long, default_value = "100", value_parser = parse_size)]
    size: usize,
    /// How long each rate publishes through the cluster, over all its rounds.
    #[arg(long, default_value = "6s", value_parser = parse_duration)]
    duration: Duration,
    /// Rounds per rate: a floor (or one-router) round then a cluster round, this many times.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Bytes of each client's log.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    capacity: usize,
}

impl ClusterArgs {
    /// `dir`: where the routers' files go.
    pub(super) fn into_request(self, dir: PathBuf) -> Request {
        Request::Cluster(ClusterLab {
            rates: self.rate,
            spread_rates: self.spread_rate,
            fanout: self.fanout,
            publishers: self.publishers,
            subscribers: self.subscribers,
            size: self.size,
            duration: self.duration,
            rounds: self.rounds,
            cpus: self.common.cpus,
            dir,
            log_bytes: self.capacity,
        })
    }
}

impl TopicMatchArgs {
    pub(super) fn into_request(self) -> Request {
        Request::TopicMatch { sizes: self.unrelated, rounds: self.rounds, json: self.json }
    }
}

impl RouterArgs {
    /// `dir`: where the routers' and clients' files go.
    /// `request`: `lab request` (requests and replies, round trips).
    pub(super) fn into_request(self, dir: PathBuf, request: bool) -> Request {
        Request::Router {
            run: RouterLab {
                transport: if self.transport == "ipc" { Transport::Ipc } else { Transport::Tcp },
                tls: self.transport == "tls",
                batching: match self.batch_window.is_zero() {
                    true => tickwire_client::Batching::EVERY_FRAME,
                    false => {
                        tickwire_client::Batching { window: self.batch_window, ..tickwire_client::Batching::SMART }
                    }
                },
                fanout: self.fanout,
                rates: self.rate,
                size: self.size,
                publishers: self.publishers,
                subscribers: self.subscribers,
                duration: self.duration,
                rounds: self.rounds,
                cpus: self.common.cpus,
                dir,
                log_bytes: self.capacity,
                floor: !self.no_floor,
                secure: self.secure,
                request,
                nats: self.nats.then_some(self.nats_lab),
            },
            output: self.common.output(&self.hlog, &self.plot),
        }
    }
}

impl GuaranteedArgs {
    /// `dir`: where the router's shared-memory files go (the journals go
    /// to `--journal-dir`).
    pub(super) fn into_request(self, dir: PathBuf) -> Request {
        Request::Guaranteed {
            run: GuaranteedLab {
                syncs: self.sync,
                publishers: self.publishers,
                consumers: self.consumers,
                size: self.size,
                duration: self.duration,
                rate: self.rate,
                rounds: self.rounds,
                cpus: self.common.cpus,
                journal_dir: self.journal_dir,
                group: self.group,
                shm_dir: dir,
            },
            json: self.common.json,
        }
    }
}
