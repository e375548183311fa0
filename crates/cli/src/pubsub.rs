//! `tickwire pub` and `tickwire sub`, over every channel the library takes
//! (`ipc:NAME`, `udp://HOST:PORT`, `udp://GROUP:PORT?interface=ADDR`, `tcp://HOST:PORT`).
//! (With `--router`: [`crate::routed`]; the options: [`crate::pubsub_args`].)
//!
//! Both wait for the other side as long as the user wants (until Ctrl-C,
//! or `--wait`), saying once what they wait for. A subscriber stays when a
//! publisher ends and picks up the next one on the channel, as Aeron's
//! images come and go; it stops at `--count`, `--duration` or Ctrl-C.

use crate::config::Settings;
use crate::pubsub_args::{PubArgs, SubArgs};
use std::io::{BufRead, Write};
use std::time::{Duration, Instant};
use tickwire_agent::stop::{requested as stopped, StopSignals};
use tickwire_agent::Parker;
use tickwire_driver::udp::CloseError;
use tickwire_driver::{Channel, DriverError, InvalidCounts, Publication, ReceiverChange, Subscription, XdpStats};
use tickwire_shm::{Context, Event, GoneReason, Mode, OfferError, ReaderOptions, ShmError};
use tickwire_wire::stamp;

/// A wait for the other side: says once (after 100 ms, so a peer that is
/// already there is not announced) what it waits for, and fails once
/// `--wait` has passed.
struct Waiting {
    start: Instant,
    limit: Option<Duration>,
    said: bool,
}

impl Waiting {
    fn new(limit: Option<Duration>, said: bool) -> Self {
        Self { start: Instant::now(), limit, said }
    }

    fn check(&mut self, who: &str, channel: &Channel, stream: u32) -> Result<(), String> {
        if let Some(w) = self.limit.filter(|&w| self.start.elapsed() > w) {
            return Err(format!("no {who} within {w:?} (--wait)"));
        }
        if !self.said && self.start.elapsed() > Duration::from_millis(100) {
            eprintln!("waiting for a {who} on {channel} stream {stream} (Ctrl-C to stop)");
            self.said = true;
        }
        Ok(())
    }
}

fn open_publication(ctx: &Context, s: &Settings, a: &PubArgs) -> Result<Publication, String> {
    match &a.channel {
        Channel::Ipc(name) => {
            let mut cfg = s.log.clone();
            if let Some(c) = a.capacity {
                cfg = tickwire_shm::LogConfig {
                    unblock_timeout: cfg.unblock_timeout,
                    ..tickwire_shm::LogConfig::with_capacity(c)
                };
            }
            if let Some(m) = a.mtu {
                cfg.mtu = m;
            }
            if !a.stdin && a.size > cfg.max_message {
                return Err(format!(
                    "--size {} is over the largest message of this log, {} bytes (half its capacity)",
                    a.size, cfg.max_message
                ));
            }
            Ok(ctx.appender(name, a.stream, &cfg).map_err(|e| e.to_string())?.into())
        }
        Channel::Udp(_) => Publication::open(ctx, &a.channel, a.stream).map_err(|e| e.to_string()),
    }
}

/// Waits for a subscriber; `Ok(false)` if Ctrl-C came first.
fn wait_for_subscriber(p: &mut Publication, a: &PubArgs) -> Result<bool, String> {
    let mut waiting = Waiting::new(a.wait, false);
    while !p.is_connected() {
        if stopped() {
            return Ok(false);
        }
        waiting.check("subscriber", &a.channel, a.stream)?;
        p.do_work();
        report_receivers(p);
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(true)
}

/// Says which network receivers joined, or were dropped from flow control
/// after `receiver-timeout` of silence.
fn report_receivers(p: &mut Publication) {
    let Some(s) = p.udp_sender() else { return };
    while let Some(c) = s.poll_receiver_change() {
        match c {
            ReceiverChange::Joined { receiver_id, from } => eprintln!("receiver {receiver_id:#x} at {from} joined"),
            ReceiverChange::TimedOut { receiver_id, from, consumption } => eprintln!(
                "receiver {receiver_id:#x} at {from} fell silent at stream position {consumption}: \
                 dropped from flow control (receiver-timeout)"
            ),
        }
    }
}

/// What went through AF_XDP (`xdp=`), for the line printed on exit.
fn xdp_summary(x: &XdpStats) -> String {
    format!(
        "AF_XDP: {} datagrams in, {} out; through the kernel socket: {} in, {} out; UDP checksums: {} failed, \
         {} partial (a veth peer's offload); {} malformed",
        x.rx_packets, x.tx_packets, x.kernel_rx, x.kernel_tx, x.checksum_failures, x.checksum_partial, x.malformed
    )
}

/// What a network endpoint dropped unread, if anything: invalid frames by
/// reason and frames from foreign sources.
fn dropped_summary(invalid: &InvalidCounts, foreign: u64) -> Option<String> {
    (invalid.total() + foreign > 0).then(|| format!("dropped invalid: {invalid}; foreign: {foreign}"))
}

/// Offers until accepted, driving the publication while back-pressured
/// (bounded: 30 s without progress is a stuck subscriber).
fn offer(p: &mut Publication, topic: &str, msg: &[u8]) -> Result<(), String> {
    let t = Instant::now();
    loop {
        match p.offer_topic(topic, msg) {
            Ok(_) => return Ok(()),
            Err(OfferError::BackPressured | OfferError::NotConnected) if stopped() => {
                return Err("stopped (Ctrl-C) while a message waited for room or a subscriber".into())
            }
            Err(OfferError::BackPressured | OfferError::NotConnected) if t.elapsed() < Duration::from_secs(30) => {
                p.do_work();
                std::hint::spin_loop();
            }
            Err(OfferError::BackPressured) => return Err("back-pressured for 30 s: subscriber stuck".into()),
            Err(OfferError::NotConnected) => return Err("no subscriber for 30 s: all subscribers left".into()),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Publishes stdin lines. A thread reads them, so that Ctrl-C stops the
/// publisher at once even while no line comes (a blocking read is not
/// interrupted by a signal whose handler restarts it), and the publication
/// keeps its heartbeat while it waits.
fn publish_stdin(p: &mut Publication, a: &PubArgs) -> Result<u64, String> {
    use std::sync::mpsc::{sync_channel, RecvTimeoutError};
    let (tx, rx) = sync_channel::<std::io::Result<String>>(1024);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut sent = 0;
    while !stopped() {
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(line) => {
                let line = line.map_err(|e| format!("reading stdin: {e}"))?;
                offer(p, &a.topic, line.as_bytes())?;
                sent += 1;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break, // end of input
        }
        p.do_work();
    }
    Ok(sent)
}

fn publish_generated(p: &mut Publication, a: &PubArgs) -> Result<u64, String> {
    let limit = a.count.unwrap_or(u64::MAX);
    let duration = a.duration.unwrap_or(if a.count.is_some() { Duration::MAX } else { Duration::from_secs(5) });
    let interval = a.rate.map(|r| Duration::from_secs_f64(1.0 / r as f64));
    let mut msg = vec![0u8; a.size];
    let begin = Instant::now();
    let mut sent = 0u64;
    while sent < limit && begin.elapsed() < duration {
        if let Some(iv) = interval {
            // Open loop: message n is due at begin + n * interval.
            let offset = iv.mul_f64(sent as f64);
            if offset >= duration {
                break;
            }
            let due = begin + offset;
            while Instant::now() < due {
                p.do_work();
                std::hint::spin_loop();
            }
        }
        msg[..8].copy_from_slice(&sent.to_le_bytes());
        offer(p, &a.topic, &msg)?;
        sent += 1;
        if sent % 64 == 0 {
            p.do_work();
            report_receivers(p);
            if stopped() {
                break;
            }
        }
    }
    Ok(sent)
}

/// `tickwire pub` without `--router`.
pub fn publish(s: &Settings, a: &PubArgs) -> Result<(), String> {
    // First Ctrl-C: stop and print what was done; second: exit at once.
    let _ = StopSignals::command().install();
    let ctx = Context::new(&s.dir).map_err(|e| e.to_string())?;
    let mut p = open_publication(&ctx, s, a)?;
    if let Some(note) = p.udp_sender().and_then(|u| u.transport_note().map(str::to_string)) {
        eprintln!("{note}");
    }
    eprintln!("publishing on {} stream {} ({})", a.channel, a.stream, s.dir.display());
    if !wait_for_subscriber(&mut p, a)? {
        eprintln!("stopped before a subscriber came");
        return Ok(());
    }
    let start = Instant::now();
    let sent = if a.stdin { publish_stdin(&mut p, a)? } else { publish_generated(&mut p, a)? };
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    report_receivers(&mut p);
    let dropped = p.udp_sender().and_then(|u| dropped_summary(&u.stats().invalid_by, u.stats().frames_foreign));
    let xdp = p.udp_sender().and_then(|u| u.xdp_stats());
    let closed = p.close(a.linger);
    if let Some(d) = dropped {
        eprintln!("{d}");
    }
    if let Some(x) = xdp {
        eprintln!("{}", xdp_summary(&x));
    }
    eprintln!("published {sent} messages in {secs:.3} s ({:.0} msg/s)", sent as f64 / secs);
    match closed {
        Ok(0) => Ok(()), // shared memory: readers read the log in place
        Ok(n) => {
            eprintln!("{n} receiver(s) acknowledged everything");
            Ok(())
        }
        Err(e @ CloseError::NoReceiver) => Err(e.to_string()),
        // A subscriber may leave before the end (`sub --count`): say so,
        // it is not a failure to publish.
        Err(e) => {
            eprintln!("warning: {e} (within --linger {:?})", a.linger);
            Ok(())
        }
    }
}

struct SubParker<'a>(&'a mut Subscription);
impl Parker for SubParker<'_> {
    fn park(&mut self, timeout: Duration) {
        self.0.park(timeout);
    }
}

/// What a subscriber has seen, over every publisher it read.
#[derive(Debug, Default)]
struct Tally {
    msgs: u64,
    bytes: u64,
    lost_notices: u64,
    lost_bytes: u64,
    gaps: u64,
    expect: Option<u64>,
    first: Option<Instant>,
    /// The publisher went away without closing its stream.
    gone: Option<(GoneReason, u64)>,
    /// Network: what was dropped unread, over every subscription.
    invalid: InvalidCounts,
    foreign: u64,
    /// `xdp=`: the AF_XDP path's counters, summed over subscriptions.
    xdp: Option<XdpStats>,
}

/// Why reading one publisher's stream stopped.
enum Stop {
    /// `--count`, `--duration` or Ctrl-C: the subscriber is done.
    Done,
    /// The publisher closed its stream (everything delivered).
    Ended,
    /// The publisher died or fell silent without closing its stream.
    Gone,
}

/// Attaches, waiting for a publisher as long as allowed; `None` when the
/// subscriber should stop instead (Ctrl-C, `--duration`).
fn attach(ctx: &Context, a: &SubArgs, deadline: Option<Instant>, said: bool) -> Result<Option<Subscription>, String> {
    let Channel::Ipc(name) = &a.channel else {
        // A network subscription binds at once and hears the publisher's SETUP.
        return Subscription::open(ctx, &a.channel, a.stream).map(Some).map_err(|e| e.to_string());
    };
    let opts = ReaderOptions {
        mode: if a.lossy { Mode::Lossy } else { Mode::Tethered },
        publisher_timeout: a.publisher_timeout,
        ..Default::default()
    };
    let mut waiting = Waiting::new(a.wait, said);
    loop {
        match ctx.reader(name, a.stream, opts) {
            Ok(r) => return Ok(Some(r.into())),
            Err(ShmError::NoPublisher { .. } | ShmError::Stale { .. }) => {
                if stopped() || deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(None);
                }
                waiting.check("publisher", &a.channel, a.stream)?;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn on_event(e: Event<'_>, a: &SubArgs, t: &mut Tally, out: &mut impl Write) {
    match e {
        Event::Message(m) => {
            t.msgs += 1;
            t.bytes += m.payload.len() as u64;
            if a.verify {
                if let Some(seq) = stamp::seq(m.payload) {
                    if let Some(x) = t.expect {
                        t.gaps += seq.saturating_sub(x);
                    }
                    t.expect = Some(seq + 1);
                }
            }
            if a.print {
                let sep = if m.topic.is_empty() { "" } else { " " };
                let _ = writeln!(out, "{}{sep}{}", m.topic, String::from_utf8_lossy(m.payload));
            }
        }
        Event::Lost { from, to, .. } => {
            t.lost_notices += 1;
            t.lost_bytes += to - from;
            eprintln!("LOST stream bytes [{from}, {to})");
        }
        Event::Joined { session_id, position } => {
            t.expect = None;
            eprintln!("joined session {session_id:#x} at stream position {position}");
        }
        Event::Ended { session_id, position } => {
            eprintln!("session {session_id:#x} ended at stream position {position}")
        }
        Event::PublisherGone { reason, position, .. } => t.gone = Some((reason, position)),
    }
}

/// Reads one publisher's stream until it ends, its process dies, or the
/// subscriber is done.
fn read(sub: &mut Subscription, a: &SubArgs, t: &mut Tally, deadline: Option<Instant>) -> Result<Stop, String> {
    let limit = a.count.unwrap_or(u64::MAX);
    let mut idle = a.idle;
    // stdout is line-buffered: with --print each message is written as it arrives.
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut polls = 0u32;
    while t.msgs < limit {
        let n = sub.poll(|e| on_event(e, a, t, &mut out), 256).map_err(|e: DriverError| e.to_string())?;
        if n > 0 && t.first.is_none() {
            t.first = Some(Instant::now());
        }
        polls = polls.wrapping_add(1);
        if n == 0 && (stopped() || deadline.is_some_and(|d| Instant::now() >= d)) {
            return Ok(Stop::Done);
        }
        if t.gone.is_some() {
            return Ok(Stop::Gone);
        }
        if n == 0 && polls % 64 == 0 && sub.is_ended() {
            return Ok(Stop::Ended);
        }
        idle.idle_with(n, &mut SubParker(sub));
    }
    Ok(Stop::Done)
}

/// `tickwire sub` without `--router`.
pub fn subscribe(s: &Settings, a: &SubArgs) -> Result<(), String> {
    // First Ctrl-C: stop and print what was done; second: exit at once.
    let _ = StopSignals::command().install();
    let ctx = Context::new(&s.dir).map_err(|e| e.to_string())?;
    let deadline = a.duration.map(|d| Instant::now() + d);
    let start = Instant::now();
    let mut t = Tally::default();
    let mut waited = false;
    while let Some(mut sub) = attach(&ctx, a, deadline, waited)? {
        match &a.channel {
            Channel::Ipc(_) => {
                let pos = sub.log_reader().map_or(0, |r| r.position());
                eprintln!("subscribed to {} stream {} at position {pos}", a.channel, a.stream);
            }
            Channel::Udp(_) if waited => {}
            Channel::Udp(_) => {
                if let Some(note) = sub.udp_receiver().and_then(|r| r.transport_note().map(str::to_string)) {
                    eprintln!("{note}");
                }
                eprintln!("waiting for a publisher on {} stream {} (Ctrl-C to stop)", a.channel, a.stream)
            }
        }
        waited = true;
        t.expect = None;
        let stop = read(&mut sub, a, &mut t, deadline)?;
        if let Some(r) = sub.udp_receiver() {
            t.invalid.merge(&r.stats().invalid_by);
            t.foreign += r.stats().frames_foreign;
            if let Some(x) = r.xdp_stats() {
                t.xdp.get_or_insert_with(XdpStats::default).merge(&x);
            }
        }
        match stop {
            Stop::Done => {
                sub.linger();
                break;
            }
            Stop::Gone => break,
            Stop::Ended => eprintln!("the publisher ended its stream; waiting for the next one"),
        }
    }
    let secs = t.first.map_or(0.0, |f| f.elapsed().as_secs_f64()).max(1e-9);
    eprintln!(
        "received {} messages, {} bytes in {:.3} s ({:.0} msg/s); lost notices {} ({} bytes){}",
        t.msgs,
        t.bytes,
        start.elapsed().as_secs_f64(),
        t.msgs as f64 / secs,
        t.lost_notices,
        t.lost_bytes,
        if a.verify { format!("; sequence gaps {}", t.gaps) } else { String::new() }
    );
    if let Some(d) = dropped_summary(&t.invalid, t.foreign) {
        eprintln!("{d}");
    }
    if let Some(x) = &t.xdp {
        eprintln!("{}", xdp_summary(x));
    }
    if let Some((reason, position)) = t.gone {
        // A stream cut short is not a success: say where it stopped.
        let last = match t.expect {
            Some(next) if a.verify => format!("last sequence {}", next.saturating_sub(1)),
            _ => format!("{} messages received", t.msgs),
        };
        return Err(format!("{reason} without closing its stream, at stream position {position}; {last}"));
    }
    if t.gaps > 0 && !a.lossy {
        return Err(format!("{} messages missing on a tethered subscriber", t.gaps));
    }
    Ok(())
}
