//! `lab transfer`: a generated stream over reliable UDP, under optional
//! loss, reorder and duplication, checked byte for byte at every receiver.
//!
//! The sender and each receiver are worker processes (so each can sit in
//! its own network namespace). One receiver is unicast (loopback, or across
//! a veth pair with `--netns`); several are multicast on a bridged segment of
//! namespaces. The report says what was sent, what arrived, whether it is
//! identical and in order, and what the protocol did to get there.

use crate::base::common::{parse_duration, parse_size};
use crate::base::host::netns::{NetnsPair, NetnsStar};
use crate::paths::Transport;
use crate::{LabError, WorkerProcess};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tickwire_driver::udp::{UdpReceiver, UdpSender};
use tickwire_driver::{ChannelUri, Event, OfferError};
use tickwire_impair::Rng;
use tickwire_wire::stamp;

const STREAM: u32 = 1101;
const IDLE_LIMIT: Duration = Duration::from_secs(30);

/// What to transfer and how.
#[derive(Debug, Clone, clap::Args)]
pub struct Transfer {
    /// Transport (rudp).
    #[arg(long, default_value = "rudp", value_parser = parse_rudp)]
    pub transport: Transport,
    /// Payload bytes to send.
    #[arg(long, default_value = "10MiB", value_parser = parse_bytes)]
    pub bytes: u64,
    /// Largest message; sizes are uniform from 16 bytes up to it.
    #[arg(long, default_value = "4k", value_parser = parse_max_size)]
    pub max_size: usize,
    /// Drop this fraction of the datagrams each end sends (data and control).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Reorder this fraction, likewise.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Duplicate this fraction, likewise.
    #[arg(long, default_value_t = 0.0)]
    pub duplicate: f64,
    /// Seed of the impairments and the generated content.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Receivers; more than one is multicast and needs --netns.
    #[arg(long, default_value_t = 1)]
    pub receivers: usize,
    /// Run across network namespaces (veth pair; a bridge for several receivers).
    #[arg(long)]
    pub netns: bool,
    /// Any channel parameter, KEY=VALUE (repeatable), e.g. send-data-drop=65536-65537, nak-delay=50us.
    #[arg(long = "param")]
    pub params: Vec<String>,
    /// Give up after this long.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Where the workers' counters files go.
    #[arg(skip)]
    pub dir: PathBuf,
}

/// `--transport`: reliable UDP only.
fn parse_rudp(s: &str) -> Result<Transport, String> {
    match Transport::parse(s)? {
        Transport::Rudp => Ok(Transport::Rudp),
        t => Err(format!("transfer runs over {} only, not {}", Transport::Rudp.name(), t.name())),
    }
}

/// `--bytes`: a size.
fn parse_bytes(s: &str) -> Result<u64, String> {
    parse_size(s).map(|v| v as u64)
}

/// `--max-size`: a size, within 16 B to 1 MiB.
fn parse_max_size(s: &str) -> Result<usize, String> {
    parse_size(s).map(|v| v.clamp(16, 1 << 20))
}

/// One receiver's account.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReceiverReport {
    /// Payload bytes delivered.
    pub bytes_received: u64,
    /// Messages delivered.
    pub messages: u64,
    /// FNV-1a 64 of every delivered payload byte, in order.
    pub checksum: u64,
    /// Messages arrived numbered 0, 1, 2, ... with none missing.
    pub in_order: bool,
    /// NAKs sent (first and retries).
    pub naks_sent: u64,
    /// NAKs sent again.
    pub nak_retries: u64,
    /// NAKs held back after seeing another receiver's.
    pub naks_suppressed: u64,
    /// Gaps opened.
    pub gaps_detected: u64,
    /// Duplicate frames dropped.
    pub duplicates: u64,
    /// `Lost` events and their bytes.
    pub lost_events: u64,
    /// Bytes reported lost.
    pub lost_bytes: u64,
    /// Malformed datagrams.
    pub invalid: u64,
    /// Datagrams the receiver's own impairment dropped on its sends.
    pub control_dropped: u64,
    /// `xdp=`: which path the datagrams took (the AF_XDP set-up, or why it
    /// fell back to kernel UDP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp_path: Option<String>,
    /// Datagrams received through the AF_XDP socket.
    #[serde(default)]
    pub xdp_packets: u64,
}

/// The sender's account.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SenderReport {
    /// Payload bytes sent.
    pub bytes_sent: u64,
    /// Messages sent.
    pub messages: u64,
    /// FNV-1a 64 of every payload byte, in order.
    pub checksum: u64,
    /// Datagrams retransmitted.
    pub retransmits: u64,
    /// NAKs received.
    pub naks_received: u64,
    /// NAKs ignored while a range lingered.
    pub naks_coalesced: u64,
    /// Heartbeats sent.
    pub heartbeats: u64,
    /// Data datagrams the impairment dropped (random and fixed-range).
    pub datagrams_dropped: u64,
    /// From the first offer to the last receiver's final STATUS.
    pub duration_s: f64,
    /// Every receiver consumed everything.
    pub drained: bool,
    /// Stream position at the end (payload plus frame headers and alignment).
    pub final_position: u64,
    /// `xdp=`: which path the datagrams took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xdp_path: Option<String>,
    /// Datagrams sent through the AF_XDP socket.
    #[serde(default)]
    pub xdp_packets: u64,
}

/// What `lab transfer --json` prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TransferReport {
    /// The channel (as the sender opened it).
    pub channel: String,
    /// Payload bytes sent.
    pub bytes_sent: u64,
    /// Fewest payload bytes any receiver got.
    pub bytes_received: u64,
    /// Every receiver got exactly the sent bytes (checksum and length).
    pub identical: bool,
    /// Every receiver got every message in order.
    pub in_order: bool,
    /// NAKs sent, all receivers.
    pub naks_sent: u64,
    /// Datagrams retransmitted.
    pub retransmits: u64,
    /// `Lost` events, all receivers.
    pub lost_events: u64,
    /// Data datagrams dropped by the impairment at the sender.
    pub datagrams_dropped: u64,
    /// Retransmissions per dropped data datagram.
    pub retransmits_per_loss: f64,
    /// Sender time, first offer to drained.
    pub duration_s: f64,
    /// The sender's details.
    pub sender: SenderReport,
    /// Each receiver's details.
    pub receivers: Vec<ReceiverReport>,
}

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}
const FNV0: u64 = 0xcbf2_9ce4_8422_2325;

/// Message `i` of the generated stream: its index, then seeded bytes.
fn message(seed: u64, i: u64, max: usize, out: &mut Vec<u8>) {
    let mut r = Rng::new(seed ^ i.wrapping_mul(0x9E37_79B9));
    let len = 16 + (r.next_u64() as usize) % (max.max(16) - 15);
    out.clear();
    out.extend_from_slice(&i.to_le_bytes());
    while out.len() < len {
        out.extend_from_slice(&r.next_u64().to_le_bytes());
    }
    out.truncate(len);
}

fn idle(work: usize, idle_runs: &mut u32) -> bool {
    if work > 0 {
        *idle_runs = 0;
        return false;
    }
    *idle_runs += 1;
    *idle_runs > 64
}

/// Worker job [`RudpSend`].
///
/// # Errors
/// A bad URI, socket errors, or no receiver in time.
pub(crate) fn sender(
    dir: &Path,
    uri: &str,
    bytes: u64,
    max: usize,
    seed: u64,
    receivers: usize,
    timeout: Duration,
) -> Result<String, LabError> {
    let uri: ChannelUri = uri.parse().map_err(|e| LabError::Usage(format!("{e}")))?;
    // Counters in the caller's directory, so `tickwire stat` shows the run live.
    let counters = tickwire_shm::CountersFile::create(dir).ok();
    let mut p = UdpSender::open(&uri, STREAM, counters.as_ref()).map_err(|e| LabError::Worker(e.to_string()))?;
    let deadline = Instant::now() + timeout;
    while p.receivers() < receivers {
        if Instant::now() > deadline {
            return Err(LabError::Timeout(format!("{} of {receivers} receivers connected", p.receivers())));
        }
        p.do_work();
        p.park(Duration::from_millis(1));
    }
    let start = Instant::now();
    let mut rep = SenderReport { checksum: FNV0, ..SenderReport::default() };
    let mut msg = Vec::with_capacity(max);
    let mut i = 0u64;
    let mut idle_runs = 0;
    message(seed, i, max, &mut msg);
    // Drawn by this worker on the terminal it shares with the lab (stderr is inherited).
    let bar = crate::progress_bytes(bytes, "transfer");
    while rep.bytes_sent < bytes {
        if Instant::now() > deadline {
            return Err(LabError::Timeout(format!("sent {} of {bytes} bytes", rep.bytes_sent)));
        }
        let mut work = 0;
        loop {
            // The last message is cut to the bytes still owed (never below
            // the 8-byte index).
            let sent = &msg[..msg.len().min((bytes - rep.bytes_sent) as usize).max(8)];
            match p.offer(sent) {
                Ok(_) => {
                    rep.checksum = fnv(rep.checksum, sent);
                    rep.bytes_sent += sent.len() as u64;
                    rep.messages += 1;
                    i += 1;
                    work += 1;
                    message(seed, i, max, &mut msg);
                    if rep.bytes_sent >= bytes {
                        break;
                    }
                }
                Err(OfferError::BackPressured | OfferError::NotConnected) => break,
                Err(e) => return Err(LabError::Worker(e.to_string())),
            }
        }
        work += p.do_work();
        bar.set_position(rep.bytes_sent);
        if idle(work, &mut idle_runs) {
            p.park(Duration::from_micros(50));
        }
    }
    bar.finish_and_clear();
    let left = deadline.saturating_duration_since(Instant::now());
    rep.final_position = p.position();
    rep.drained = p.close(left).is_ok();
    rep.duration_s = start.elapsed().as_secs_f64();
    let s = p.stats();
    rep.retransmits = s.retransmits;
    rep.naks_received = s.naks_received;
    rep.naks_coalesced = s.naks_coalesced;
    rep.heartbeats = s.heartbeats;
    rep.datagrams_dropped = p.impairment().map_or(0, |i| i[0].dropped + i[0].range_dropped);
    rep.xdp_path = p.transport_note().map(str::to_string);
    rep.xdp_packets = p.xdp_stats().map_or(0, |x| x.tx_packets);
    serde_json::to_string(&rep).map_err(|e| LabError::Worker(e.to_string()))
}

/// Worker job [`RudpRecv`]: prints `listening PORT`, then its report.
///
/// # Errors
/// A bad URI, socket errors, or silence for 30 s.
pub(crate) fn receiver(dir: &Path, uri: &str) -> Result<String, LabError> {
    let uri: ChannelUri = uri.parse().map_err(|e| LabError::Usage(format!("{e}")))?;
    let counters = tickwire_shm::CountersFile::create(dir).ok();
    let mut sub = UdpReceiver::open(&uri, STREAM, counters.as_ref()).map_err(|e| LabError::Worker(e.to_string()))?;
    println!("listening {}", sub.local_addr().port());
    let mut rep = ReceiverReport { checksum: FNV0, in_order: true, ..ReceiverReport::default() };
    let mut next = 0u64;
    let mut last = Instant::now();
    let mut idle_runs = 0;
    while !sub.is_ended() {
        let n = sub
            .poll(
                |ev| match ev {
                    Event::Message(m) => {
                        let idx = stamp::seq(m.payload).unwrap_or(u64::MAX);
                        rep.in_order &= idx == next;
                        next = idx.wrapping_add(1);
                        rep.checksum = fnv(rep.checksum, m.payload);
                        rep.bytes_received += m.payload.len() as u64;
                        rep.messages += 1;
                    }
                    Event::Lost { .. } => rep.in_order = false,
                    Event::Joined { .. } | Event::Ended { .. } | Event::PublisherGone { .. } => {}
                },
                256,
            )
            .map_err(|e| LabError::Worker(e.to_string()))?;
        if n > 0 {
            last = Instant::now();
        } else if last.elapsed() > IDLE_LIMIT {
            return Err(LabError::Timeout("no data for 30 s".into()));
        }
        if idle(n, &mut idle_runs) {
            sub.park(Duration::from_micros(50));
        }
    }
    // Answer the closing sender until it is satisfied (its close is honest).
    sub.linger(Duration::from_millis(20), Duration::from_secs(2));
    let s = sub.stats();
    rep.naks_sent = s.naks_sent;
    rep.nak_retries = s.nak_retries;
    rep.naks_suppressed = s.naks_suppressed;
    rep.gaps_detected = s.gaps_detected;
    rep.duplicates = s.duplicates;
    rep.lost_events = s.lost_events;
    rep.lost_bytes = s.lost_bytes;
    rep.invalid = s.invalid;
    rep.control_dropped = sub.impairment().map_or(0, |i| i[1].dropped);
    rep.xdp_path = sub.transport_note().map(str::to_string);
    rep.xdp_packets = sub.xdp_stats().map_or(0, |x| x.rx_packets);
    serde_json::to_string(&rep).map_err(|e| LabError::Worker(e.to_string()))
}

fn with_params(base: String, t: &Transfer, extra: &[String]) -> String {
    let mut q: Vec<String> = Vec::new();
    if t.loss > 0.0 {
        q.push(format!("loss={}", t.loss));
    }
    if t.reorder > 0.0 {
        q.push(format!("reorder={}", t.reorder));
    }
    if t.duplicate > 0.0 {
        q.push(format!("duplicate={}", t.duplicate));
    }
    q.extend(t.params.iter().cloned());
    q.extend(extra.iter().cloned());
    if q.is_empty() {
        base
    } else {
        format!("{base}?{}", q.join("&"))
    }
}

/// Runs the transfer and checks it.
///
/// # Errors
/// [`LabError::Usage`] for a bad combination (several receivers without
/// namespaces), namespace or worker failures, or a timeout.
pub fn run(t: &Transfer) -> Result<TransferReport, LabError> {
    if t.receivers == 0 {
        return Err(LabError::Usage("--receivers must be at least 1".into()));
    }
    if t.receivers > 1 && !t.netns {
        return Err(LabError::Usage("several receivers are multicast: add --netns for a bridged segment".into()));
    }
    let sender_role = |uri: &str| RudpSend {
        dir: t.dir.clone(),
        uri: uri.to_owned(),
        bytes: t.bytes,
        max_size: t.max_size,
        seed: t.seed,
        receivers: t.receivers,
        timeout: t.timeout.max(Duration::from_secs(1)),
    };
    let recv_role = |uri: String| RudpRecv { dir: t.dir.clone(), uri };
    let mut _pair = None;
    let mut _star = None;
    let mut receivers = Vec::new();
    let send_uri;
    let port = 20_000 + (std::process::id() % 20_000) as u16 + (t.seed % 997) as u16;
    if t.receivers == 1 {
        let (sender_ns, recv_ns, host) = if t.netns {
            let p = NetnsPair::create()?;
            let r = (Some(p.a.clone()), Some(p.b.clone()), p.b_addr.clone());
            _pair = Some(p);
            r
        } else {
            (None, None, "127.0.0.1".to_string())
        };
        let seed = format!("seed={}", t.seed.wrapping_add(1000));
        let mut w = WorkerProcess::spawn_in(
            recv_ns.as_deref(),
            &recv_role(with_params(format!("udp://{host}:0"), t, &[seed])),
        )?;
        let bound: u16 = w.read_listening()?;
        receivers.push(w);
        send_uri = with_params(format!("udp://{host}:{bound}"), t, &[format!("seed={}", t.seed)]);
        let s = WorkerProcess::spawn_in(sender_ns.as_deref(), &sender_role(&send_uri))?;
        return finish(t, send_uri, s, receivers);
    }
    let star = NetnsStar::create(t.receivers)?;
    let group = format!("udp://239.255.77.1:{port}");
    for (i, (ns, addr)) in star.leaves.iter().enumerate() {
        let extra = [format!("interface={addr}"), format!("seed={}", t.seed.wrapping_add(1000 + i as u64))];
        let mut w = WorkerProcess::spawn_in(Some(ns), &recv_role(with_params(group.clone(), t, &extra)))?;
        w.read_line()?;
        receivers.push(w);
    }
    send_uri = with_params(group, t, &[format!("interface={}", star.hub_addr), format!("seed={}", t.seed)]);
    let s = WorkerProcess::spawn_in(Some(&star.hub), &sender_role(&send_uri))?;
    _star = Some(star);
    finish(t, send_uri, s, receivers)
}

fn finish(
    t: &Transfer,
    channel: String,
    s: WorkerProcess,
    receivers: Vec<WorkerProcess>,
) -> Result<TransferReport, LabError> {
    let limit = t.timeout + Duration::from_secs(10);
    let sender: SenderReport = crate::base::worker::parse_report("sender", &s.finish(limit)?)?;
    let mut reps = Vec::new();
    for w in receivers {
        let line = w.finish(Duration::from_secs(10))?;
        reps.push(crate::base::worker::parse_report::<ReceiverReport>("receiver", &line)?);
    }
    let naks_sent = reps.iter().map(|r| r.naks_sent).sum();
    Ok(TransferReport {
        channel,
        bytes_sent: sender.bytes_sent,
        bytes_received: reps.iter().map(|r| r.bytes_received).min().unwrap_or(0),
        identical: reps.iter().all(|r| r.checksum == sender.checksum && r.bytes_received == sender.bytes_sent),
        in_order: reps.iter().all(|r| r.in_order && r.messages == sender.messages),
        naks_sent,
        retransmits: sender.retransmits,
        lost_events: reps.iter().map(|r| r.lost_events).sum(),
        datagrams_dropped: sender.datagrams_dropped,
        retransmits_per_loss: if sender.datagrams_dropped > 0 {
            sender.retransmits as f64 / sender.datagrams_dropped as f64
        } else {
            0.0
        },
        duration_s: sender.duration_s,
        sender,
        receivers: reps,
    })
}

/// Prints a transfer's outcome (or its JSON report).
pub fn print(r: &TransferReport, json: bool) {
    if json {
        print!("{}", crate::base::output::print::json_lines(std::slice::from_ref(r)));
        return;
    }
    println!("channel {}", r.channel);
    println!(
        "sent {} B in {:.3} s; received {} B; identical {}; in order {}",
        r.bytes_sent, r.duration_s, r.bytes_received, r.identical, r.in_order
    );
    println!(
        "NAKs sent {}, retransmissions {}, data datagrams dropped {}, lost events {}",
        r.naks_sent, r.retransmits, r.datagrams_dropped, r.lost_events
    );
}

/// Worker job: the sending end of `lab transfer`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RudpSend {
    pub dir: PathBuf,
    pub uri: String,
    pub bytes: u64,
    pub max_size: usize,
    pub seed: u64,
    pub receivers: usize,
    pub timeout: Duration,
}

impl crate::base::worker::Job for RudpSend {
    const ROLE: &'static str = "rudp-send";

    fn run(self) -> Result<String, LabError> {
        sender(&self.dir, &self.uri, self.bytes, self.max_size, self.seed, self.receivers, self.timeout)
    }
}

/// Worker job: a receiving end of `lab transfer`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct RudpRecv {
    pub dir: PathBuf,
    pub uri: String,
}

impl crate::base::worker::Job for RudpRecv {
    const ROLE: &'static str = "rudp-recv";

    fn run(self) -> Result<String, LabError> {
        receiver(&self.dir, &self.uri)
    }
}
