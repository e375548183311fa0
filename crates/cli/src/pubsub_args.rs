//! The options of `tickwire pub` and `tickwire sub`: one set for both
//! ways of running them, straight on a channel ([`crate::pubsub`]) and
//! through a router (`--router`, [`crate::routed`]).

use crate::login::Login;
use crate::units::{parse_capacity, parse_duration, parse_message_size, parse_mtu, parse_rate};
use clap::Args;
use std::time::Duration;
use tickwire_agent::Idle;
use tickwire_driver::Channel;

/// Options of `tickwire pub`.
#[derive(Debug, Args)]
pub struct PubArgs {
    /// Channel: ipc:NAME, udp://HOST:PORT, udp://GROUP:PORT?interface=ADDR, or tcp://HOST:PORT.
    #[arg(long, default_value = "ipc:default", value_parser = parse_channel)]
    pub(crate) channel: Channel,
    /// Stream id.
    #[arg(long, default_value_t = 10)]
    pub(crate) stream: u32,
    /// Publish stdin lines instead of generated messages.
    #[arg(long)]
    pub(crate) stdin: bool,
    /// Generated message size, 8 B (a sequence number leads) to 4 MiB.
    #[arg(long, default_value = "64", value_parser = |s: &str| parse_message_size(s, 8))]
    pub(crate) size: usize,
    /// Messages to publish (generated mode).
    #[arg(long)]
    pub(crate) count: Option<u64>,
    /// How long to publish (generated mode) [default: 5s if no --count].
    #[arg(long, value_parser = parse_duration)]
    pub(crate) duration: Option<Duration>,
    /// Target rate, open loop (e.g. 100k, 1M, 1.5k) [default: as fast as allowed].
    #[arg(long, value_parser = parse_rate)]
    pub(crate) rate: Option<u64>,
    /// Topic carried in each message.
    #[arg(long, default_value = "")]
    pub(crate) topic: String,
    /// Give up if no subscriber comes within this long [default: wait until Ctrl-C].
    #[arg(long, value_parser = parse_duration)]
    pub(crate) wait: Option<Duration>,
    /// ipc: log capacity (power of two, 64KiB to 1TiB), e.g. 16MiB.
    #[arg(long, value_parser = parse_capacity)]
    pub(crate) capacity: Option<usize>,
    /// ipc: largest frame (a multiple of 32), e.g. 64k.
    #[arg(long, value_parser = parse_mtu)]
    pub(crate) mtu: Option<usize>,
    /// udp: at the end, how long to serve retransmissions until every receiver has everything.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub(crate) linger: Duration,
    /// Publish through the router at URI (ipc: the router in --dir; tcp://HOST:PORT; tls://HOST:PORT), on --topic.
    #[arg(long)]
    pub(crate) router: Option<String>,
    /// With --router tls://: the certificate authority (PEM) the router's certificate must chain to.
    #[arg(long, requires = "router")]
    pub(crate) tls_ca: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) login: Login,
    /// With --router: publish in guaranteed mode (stored by the router's journal, acknowledged, resent across router restarts); prints "acknowledged N" at the end.
    #[arg(long, requires = "router")]
    pub(crate) guaranteed: bool,
    /// With --router: a header on every message, NAME=VALUE (repeatable; NATS clients get them in HMSG).
    #[arg(long = "header", value_name = "NAME=VALUE", requires = "router", conflicts_with = "guaranteed")]
    pub(crate) headers: Vec<String>,
}

/// Options of `tickwire sub`.
#[derive(Debug, Args)]
pub struct SubArgs {
    /// Channel: ipc:NAME, udp://HOST:PORT, udp://GROUP:PORT?interface=ADDR, or tcp://HOST:PORT.
    #[arg(long, default_value = "ipc:default", value_parser = parse_channel)]
    pub(crate) channel: Channel,
    /// Stream id.
    #[arg(long, default_value_t = 10)]
    pub(crate) stream: u32,
    /// Print each message as it arrives (topic and payload as text), one line each.
    #[arg(long)]
    pub(crate) print: bool,
    /// Stop after this many messages.
    #[arg(long)]
    pub(crate) count: Option<u64>,
    /// Stop after this long.
    #[arg(long, value_parser = parse_duration)]
    pub(crate) duration: Option<Duration>,
    /// ipc: lossy: never hold the publisher back; report losses instead.
    #[arg(long)]
    pub(crate) lossy: bool,
    /// Check the leading sequence numbers of generated messages (with --router: per topic, one publisher each; a gap the router did not announce or a duplicate fails).
    #[arg(long)]
    pub(crate) verify: bool,
    /// Idle strategy: spin, yield, backoff, park.
    #[arg(long, default_value = "park", value_parser = Idle::parse)]
    pub(crate) idle: Idle,
    /// Give up if no publisher comes within this long [default: wait until Ctrl-C].
    #[arg(long, value_parser = parse_duration)]
    pub(crate) wait: Option<Duration>,
    /// ipc: treat a live publisher that neither publishes nor heartbeats for
    /// this long as gone [default: only a dead publisher process is gone].
    #[arg(long, value_parser = parse_duration)]
    pub(crate) publisher_timeout: Option<Duration>,
    /// Subscribe through the router at URI (ipc: the router in --dir; tcp://HOST:PORT; tls://HOST:PORT).
    #[arg(long, requires = "topic")]
    pub(crate) router: Option<String>,
    /// With --router tls://: the certificate authority (PEM) the router's certificate must chain to.
    #[arg(long, requires = "router")]
    pub(crate) tls_ca: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) login: Login,
    /// With --router: the topic pattern (levels split by /, * one level, > the rest).
    #[arg(long)]
    pub(crate) topic: Option<String>,
    /// With --router: first receive the last value of every cached topic the pattern matches (flagged "(cached)").
    #[arg(long, requires = "router")]
    pub(crate) cached: bool,
    /// With --router: ask for this slow-consumer policy (drop-oldest, disconnect, back-pressure) [default: the router's; its config may fix one for --user].
    #[arg(long, requires = "router", value_parser = str::parse::<tickwire_client::SlowConsumer>)]
    pub(crate) slow_consumer: Option<tickwire_client::SlowConsumer>,
    /// With --router: consume this durable queue (made with --topic's pattern if new): its guaranteed messages
    /// are shared among its consumers, each acknowledged.
    #[arg(long, requires = "router", conflicts_with_all = ["durable", "cached", "queue"])]
    pub(crate) durable_queue: Option<String>,
    /// With --router: join this queue group: each message goes to one member of the group.
    #[arg(long, requires = "router", conflicts_with_all = ["durable", "cached"])]
    pub(crate) queue: Option<String>,
    /// With --router: a durable subscription of this name (the router keeps its place; guaranteed messages only; each acknowledged).
    #[arg(long, requires = "router", conflicts_with = "cached")]
    pub(crate) durable: Option<String>,
    /// With --durable: acknowledge each message this long after it arrived (a slow consumer) [default: at once].
    #[arg(long, requires = "durable", value_parser = parse_duration)]
    pub(crate) ack_delay: Option<Duration>,
}

fn parse_channel(s: &str) -> Result<Channel, String> {
    s.parse().map_err(|e: tickwire_driver::UriError| e.to_string())
}
