//! Roles for multi-process tests. Each prints one JSON line on success.
//!
//! ```text
//! tw-testkit publish DIR CHANNEL STREAM COUNT SIZE [CAPACITY] [UNBLOCK_MS] [SUBSCRIBERS]
//! tw-testkit subscribe DIR CHANNEL STREAM COUNT [lossy|tethered] [slow_us] [inside|between]
//!     [--pause-every N --pause-us U]
//! tw-testkit claim-and-hang DIR CHANNEL STREAM BEFORE UNBLOCK_MS
//! tw-testkit publisher-then-sleep DIR CHANNEL STREAM
//! ```
//!
//! `--pause-every N --pause-us U` makes a subscriber sleep U µs after every
//! N-th poll that delivered something, before it polls again: outside a poll,
//! so a lossy one can be moved on by a publisher it holds back.

use std::path::Path;
use std::time::{Duration, Instant};
use tickwire_shm::{counters, Context, Event, LogConfig, Mode, OfferError, ReaderOptions, ShmError};
use tickwire_testkit::{check, length, pattern};

const LIMIT: Duration = Duration::from_secs(60);

fn arg<T: std::str::FromStr>(a: &[String], i: usize, default: Option<T>) -> T {
    match a.get(i).map(|s| s.parse()) {
        Some(Ok(v)) => v,
        _ => default.unwrap_or_else(|| fail(&format!("argument {i} missing or invalid"))),
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("tw-testkit: {msg}");
    std::process::exit(2)
}

fn config(a: &[String], cap_at: usize, unblock_at: usize) -> LogConfig {
    let capacity: usize = arg(a, cap_at, Some(1 << 20));
    let ms: u64 = arg(a, unblock_at, Some(5000));
    LogConfig { unblock_timeout: Duration::from_millis(ms), ..LogConfig::with_capacity(capacity) }
}

/// Removes `--NAME VALUE` from the arguments and returns the value.
fn option(a: &mut Vec<String>, name: &str) -> Option<u64> {
    let i = a.iter().position(|s| s == name)?;
    if i + 1 >= a.len() {
        fail(&format!("{name} needs a value"));
    }
    let v = a.remove(i + 1);
    a.remove(i);
    Some(v.parse().unwrap_or_else(|_| fail(&format!("{name}: {v:?} is not a number"))))
}

fn main() {
    let mut a: Vec<String> = std::env::args().skip(1).collect();
    let pause_every = option(&mut a, "--pause-every").unwrap_or(0);
    let pause_us = option(&mut a, "--pause-us").unwrap_or(0);
    if (pause_every == 0) != (pause_us == 0) {
        fail("--pause-every and --pause-us go together, both non-zero");
    }
    let role = a.first().map(String::as_str).unwrap_or("");
    let dir: String = arg(&a, 1, None);
    let channel: String = arg(&a, 2, None);
    let stream: u32 = arg(&a, 3, None);
    let ctx = Context::new(Path::new(&dir)).unwrap_or_else(|e| fail(&e.to_string()));
    match role {
        "publish" => {
            let count: u64 = arg(&a, 4, None);
            let size: usize = arg(&a, 5, None);
            let subs: usize = arg(&a, 8, Some(1));
            let mut p = ctx.appender(&channel, stream, &config(&a, 6, 7)).unwrap_or_else(|e| fail(&e.to_string()));
            let start = Instant::now();
            // Wait for the expected subscribers by watching the slots via stat.
            let path =
                tickwire_shm::log_path(Path::new(&dir), &channel, stream).unwrap_or_else(|e| fail(&e.to_string()));
            while tickwire_shm::status(&path).map(|s| s.subscribers.len()).unwrap_or(0) < subs {
                if start.elapsed() > LIMIT {
                    fail("subscribers never attached");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut buf = Vec::new();
            let mut seq = 0;
            while seq < count {
                pattern(seq, length(seq, size), &mut buf);
                match p.offer(&buf) {
                    Ok(_) => seq += 1,
                    Err(OfferError::BackPressured) => std::hint::spin_loop(),
                    Err(e) => fail(&format!("offer {seq}: {e}")),
                }
                if start.elapsed() > LIMIT {
                    fail("publish timed out");
                }
            }
            let c = p.counters();
            println!(
                "{}",
                serde_json::json!({"sent": seq, "back_pressured": c.get(counters::publisher::BACK_PRESSURED),
                    "evictions": c.get(counters::publisher::EVICTIONS)})
            );
        }
        "subscribe" => {
            let count: u64 = arg(&a, 4, None);
            let lossy = a.get(5).is_some_and(|s| s == "lossy");
            let slow_us: u64 = arg(&a, 6, Some(0));
            // Slow inside the handler (holds a lossy subscriber's READING bit)
            // or between polls (outside poll: the publisher may move it on).
            let between = a.get(7).is_some_and(|s| s == "between");
            let handler_us = if between { 0 } else { slow_us };
            let opts = ReaderOptions { mode: if lossy { Mode::Lossy } else { Mode::Tethered }, ..Default::default() };
            let start = Instant::now();
            let mut s = loop {
                match ctx.reader(&channel, stream, opts) {
                    Ok(s) => break s,
                    Err(ShmError::NoPublisher { .. }) if start.elapsed() < LIMIT => {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Err(e) => fail(&e.to_string()),
                }
            };
            let (mut received, mut lost_notices, mut lost_bytes, mut next, mut bytes) = (0u64, 0u64, 0u64, 0u64, 0u64);
            let mut errors: Vec<String> = Vec::new();
            let mut max_seen = 0u64;
            let mut gone: Option<String> = None;
            let (mut busy_polls, mut pauses) = (0u64, 0u64);
            while received < count && !s.is_end_of_stream() && gone.is_none() {
                let n = s
                    .poll(
                        |e| match e {
                            Event::Message(m) => match check(m.payload) {
                                Ok(seq) => {
                                    if !lossy && seq != next {
                                        errors.push(format!("expected {next}, got {seq}"));
                                    }
                                    if lossy && seq < next {
                                        errors.push(format!("went backwards: {seq} after {next}"));
                                    }
                                    next = seq + 1;
                                    max_seen = seq;
                                    received += 1;
                                    bytes += m.payload.len() as u64;
                                    if handler_us > 0 {
                                        std::thread::sleep(Duration::from_micros(handler_us));
                                    }
                                }
                                Err(e) => errors.push(e),
                            },
                            Event::Lost { from, to, .. } => {
                                lost_notices += 1;
                                lost_bytes += to - from;
                            }
                            Event::PublisherGone { reason, .. } => gone = Some(reason.to_string()),
                            Event::Joined { .. } | Event::Ended { .. } => {
                                errors.push(format!("a log reader saw a network session event: {e:?}"))
                            }
                        },
                        64,
                    )
                    .unwrap_or_else(|e| fail(&e.to_string()));
                if lossy && max_seen + 1 >= count {
                    break;
                }
                if n == 0 {
                    std::hint::spin_loop();
                } else if between && slow_us > 0 {
                    std::thread::sleep(Duration::from_micros(slow_us));
                }
                if n > 0 && pause_every > 0 {
                    busy_polls += 1;
                    if busy_polls % pause_every == 0 {
                        pauses += 1;
                        std::thread::sleep(Duration::from_micros(pause_us));
                    }
                }
                if start.elapsed() > LIMIT {
                    fail(&format!("timed out after {received} messages"));
                }
            }
            println!(
                "{}",
                serde_json::json!({"received": received, "bytes": bytes, "lost_notices": lost_notices,
                    "lost_bytes": lost_bytes, "errors": errors.iter().take(5).collect::<Vec<_>>(), "error_count": errors.len(),
                    "last": max_seen, "publisher_gone": gone, "pauses": pauses})
            );
        }
        "claim-and-hang" => {
            let before: u64 = arg(&a, 4, None);
            let mut p = ctx.appender(&channel, stream, &config(&a, 99, 5)).unwrap_or_else(|e| fail(&e.to_string()));
            let start = Instant::now();
            while !p.is_connected() {
                if start.elapsed() > LIMIT {
                    fail("no subscriber");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut buf = Vec::new();
            for seq in 0..before {
                pattern(seq, 64, &mut buf);
                while p.offer(&buf).is_err() {}
            }
            let mut claim = p.try_claim(64).unwrap_or_else(|e| fail(&e.to_string()));
            claim.buffer().fill(0xAB);
            println!("claimed");
            std::thread::sleep(LIMIT); // killed here
            std::process::exit(3);
        }
        "publisher-then-sleep" => {
            let _p = ctx
                .appender(&channel, stream, &LogConfig::with_capacity(1 << 16))
                .unwrap_or_else(|e| fail(&e.to_string()));
            println!("ready");
            std::thread::sleep(LIMIT); // killed here, leaving a stale file
        }
        other => fail(&format!("unknown role {other:?}")),
    }
}
