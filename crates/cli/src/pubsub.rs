//! `tickwire pub` and `tickwire sub`.

use crate::config::Settings;
use crate::units::{parse_duration, parse_rate, parse_size};
use clap::Args;
use std::io::BufRead;
use std::time::{Duration, Instant};
use tickwire_agent::{Idle, Parker};
use tickwire_shm::{Context, Event, LogReader, Mode, OfferError, ReaderOptions, ShmError};
use tickwire_wire::stamp;

/// Options of `tickwire pub`.
#[derive(Debug, Args)]
pub struct PubArgs {
    /// Channel (`ipc:NAME`).
    #[arg(long, default_value = "ipc:default")]
    channel: String,
    /// Stream id.
    #[arg(long, default_value_t = 10)]
    stream: u32,
    /// Publish stdin lines instead of generated messages.
    #[arg(long)]
    stdin: bool,
    /// Generated message size (at least 8: a sequence number leads).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    size: usize,
    /// Messages to publish (generated mode).
    #[arg(long)]
    count: Option<u64>,
    /// How long to publish (generated mode) [default: 5s if no --count].
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Target rate, open loop (e.g. 100k, 1M) [default: as fast as allowed].
    #[arg(long, value_parser = parse_rate)]
    rate: Option<u64>,
    /// Topic carried in each message.
    #[arg(long, default_value = "")]
    topic: String,
    /// Wait this long for a subscriber before publishing.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    wait: Duration,
    /// Log capacity (power of two), e.g. 16MiB.
    #[arg(long, value_parser = parse_size)]
    capacity: Option<usize>,
    /// Largest frame, e.g. 64k.
    #[arg(long, value_parser = parse_size)]
    mtu: Option<usize>,
}

/// Options of `tickwire sub`.
#[derive(Debug, Args)]
pub struct SubArgs {
    /// Channel (`ipc:NAME`).
    #[arg(long, default_value = "ipc:default")]
    channel: String,
    /// Stream id.
    #[arg(long, default_value_t = 10)]
    stream: u32,
    /// Print each message (topic and payload as text).
    #[arg(long)]
    print: bool,
    /// Stop after this many messages.
    #[arg(long)]
    count: Option<u64>,
    /// Stop after this long.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Lossy: never hold the publisher back; report losses instead.
    #[arg(long)]
    lossy: bool,
    /// Check the leading sequence numbers of generated messages.
    #[arg(long)]
    verify: bool,
    /// Idle strategy: spin, yield, backoff, park.
    #[arg(long, default_value = "park", value_parser = Idle::parse)]
    idle: Idle,
    /// Wait this long for the publisher to appear.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    wait: Duration,
}

pub fn publish(s: &Settings, a: &PubArgs) -> Result<(), String> {
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
    let ctx = Context::new(&s.dir).map_err(|e| e.to_string())?;
    let mut p = ctx.appender(&a.channel, a.stream, &cfg).map_err(|e| e.to_string())?;
    eprintln!(
        "publishing on {} stream {} (session {:#x}) in {}",
        a.channel,
        a.stream,
        p.descriptor().session_id,
        s.dir.display()
    );
    let start = Instant::now();
    while !p.is_connected() {
        if start.elapsed() > a.wait {
            return Err(format!("no subscriber attached within {:?}", a.wait));
        }
        p.do_work();
        std::thread::sleep(Duration::from_millis(1));
    }
    let offer = |p: &mut tickwire_shm::LogAppender, msg: &[u8]| -> Result<(), String> {
        let t = Instant::now();
        loop {
            match p.offer_topic(&a.topic, msg) {
                Ok(_) => return Ok(()),
                Err(OfferError::BackPressured) => {
                    if t.elapsed() > Duration::from_secs(30) {
                        return Err("back-pressured for 30 s: subscriber stuck".into());
                    }
                    std::hint::spin_loop();
                }
                Err(OfferError::NotConnected) => return Err("all subscribers left".into()),
                Err(e) => return Err(e.to_string()),
            }
        }
    };
    let mut sent = 0u64;
    if a.stdin {
        for line in std::io::stdin().lock().lines() {
            let line = line.map_err(|e| e.to_string())?;
            offer(&mut p, line.as_bytes())?;
            sent += 1;
        }
    } else {
        if a.size < 8 {
            return Err("--size must be at least 8 (a sequence number leads each message)".into());
        }
        let limit = a.count.unwrap_or(u64::MAX);
        let duration = a.duration.unwrap_or(if a.count.is_some() { Duration::MAX } else { Duration::from_secs(5) });
        let interval = a.rate.map(|r| Duration::from_secs_f64(1.0 / r as f64));
        let mut msg = vec![0u8; a.size];
        let begin = Instant::now();
        while sent < limit && begin.elapsed() < duration {
            if let Some(iv) = interval {
                // Open loop: message n is due at begin + n * interval.
                let offset = iv.mul_f64(sent as f64);
                if offset >= duration {
                    break;
                }
                let due = begin + offset;
                while Instant::now() < due {
                    std::hint::spin_loop();
                }
            }
            msg[..8].copy_from_slice(&sent.to_le_bytes());
            offer(&mut p, &msg)?;
            sent += 1;
            if sent % 65536 == 0 {
                p.do_work();
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!("published {sent} messages in {secs:.3} s ({:.0} msg/s)", sent as f64 / secs);
    Ok(())
}

struct SubParker<'a>(&'a mut LogReader);
impl Parker for SubParker<'_> {
    fn park(&mut self, timeout: Duration) {
        self.0.park(timeout);
    }
}

fn attach(ctx: &Context, a: &SubArgs) -> Result<LogReader, String> {
    let opts = ReaderOptions { mode: if a.lossy { Mode::Lossy } else { Mode::Tethered }, ..Default::default() };
    let start = Instant::now();
    loop {
        match ctx.reader(&a.channel, a.stream, opts) {
            Ok(s) => return Ok(s),
            Err(ShmError::NoPublisher { .. } | ShmError::Stale { .. }) if start.elapsed() < a.wait => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

pub fn subscribe(s: &Settings, a: &SubArgs) -> Result<(), String> {
    let ctx = Context::new(&s.dir).map_err(|e| e.to_string())?;
    let mut sub = attach(&ctx, a)?;
    eprintln!("subscribed to {} stream {} at position {}", a.channel, a.stream, sub.position());
    let (mut msgs, mut bytes, mut lost_notices, mut lost_bytes, mut gaps, mut expect) =
        (0u64, 0u64, 0u64, 0u64, 0u64, None::<u64>);
    let limit = a.count.unwrap_or(u64::MAX);
    let deadline = a.duration.map(|d| Instant::now() + d);
    let mut idle = a.idle;
    let start = Instant::now();
    let mut first: Option<Instant> = None;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut polls = 0u32;
    while msgs < limit {
        let n = sub
            .poll(
                |e| match e {
                    Event::Message(m) => {
                        msgs += 1;
                        bytes += m.payload.len() as u64;
                        if a.verify && m.payload.len() >= 8 {
                            let seq = stamp::seq(m.payload).unwrap_or(0);
                            if let Some(x) = expect {
                                gaps += seq.saturating_sub(x);
                            }
                            expect = Some(seq + 1);
                        }
                        if a.print {
                            use std::io::Write;
                            let _ = writeln!(
                                out,
                                "{}{}{}",
                                m.topic,
                                if m.topic.is_empty() { "" } else { " " },
                                String::from_utf8_lossy(m.payload)
                            );
                        }
                    }
                    Event::Lost { from, to, .. } => {
                        lost_notices += 1;
                        lost_bytes += to - from;
                        eprintln!("LOST stream bytes [{from}, {to})");
                    }
                    Event::Joined { session_id, position } => {
                        eprintln!("joined session {session_id} at stream position {position}")
                    }
                    Event::Ended { session_id, position } => {
                        eprintln!("session {session_id} ended at stream position {position}")
                    }
                },
                256,
            )
            .map_err(|e| e.to_string())?;
        if n > 0 && first.is_none() {
            first = Some(Instant::now());
        }
        polls = polls.wrapping_add(1);
        if n == 0 && polls % 64 == 0 {
            if sub.is_end_of_stream() {
                eprintln!("end of stream");
                break;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
        }
        idle.idle_with(n, &mut SubParker(&mut sub));
    }
    drop(out);
    let secs = first.map_or(0.0, |f| f.elapsed().as_secs_f64()).max(1e-9);
    eprintln!(
        "received {msgs} messages, {bytes} bytes in {:.3} s ({:.0} msg/s); lost notices {lost_notices} ({lost_bytes} bytes){}",
        start.elapsed().as_secs_f64(),
        msgs as f64 / secs,
        if a.verify { format!("; sequence gaps {gaps}") } else { String::new() }
    );
    if gaps > 0 && !a.lossy {
        return Err(format!("{gaps} messages missing on a tethered subscriber"));
    }
    Ok(())
}
