//! `tickwire pub --router URI` and `tickwire sub --router URI`: publishing
//! and subscribing through a router, by topic.

use crate::config::Settings;
use crate::login::{connect, wait};
use crate::pubsub_args::{PubArgs, SubArgs};
use std::io::BufRead;
use std::time::{Duration, Instant};
use tickwire_agent::stop::{requested as stopped, StopSignals};
use tickwire_client::{Client, ClientEvent, ClientOptions, PublishError};

/// Reads what the router sent a publisher for `wait` (at least one poll):
/// a REJECT (a publish not allowed) is an error.
fn check_rejected(client: &mut Client, wait: Duration) -> Result<(), String> {
    let until = Instant::now() + wait;
    let mut refused = None;
    loop {
        client.poll(
            |e| {
                if let ClientEvent::Rejected { reason, .. } = e {
                    refused.get_or_insert_with(|| format!("the router refused a publish: {reason}"));
                } else {
                    publisher_event(e);
                }
            },
            64,
        );
        if let Some(why) = refused.take().or_else(|| client.refused().map(str::to_owned)) {
            return Err(why);
        }
        if Instant::now() >= until {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How long a publisher waited for the router to read (back-pressure:
/// its log or socket was full).
#[derive(Debug, Default)]
struct Held {
    times: u64,
    total: Duration,
}

impl Held {
    /// Says so, if it waited: the router holds a publisher for a
    /// back-pressure subscriber that is behind.
    fn report(&self) {
        if self.times > 0 {
            eprintln!(
                "back-pressured {} times, {:.1} ms in all: the router read slower than this publisher \
                 (a back-pressure subscriber behind, or the router busy)",
                self.times,
                self.total.as_secs_f64() * 1e3
            );
        }
    }
}

fn publish_one(
    client: &mut Client,
    (topic, headers): (&str, &[(&str, &str)]),
    msg: &[u8],
    held: &mut Held,
) -> Result<(), String> {
    let t = Instant::now();
    let mut waited = false;
    loop {
        let r = if headers.is_empty() {
            client.publish(topic, msg)
        } else {
            client.publish_with_headers(topic, headers, msg)
        };
        match r {
            Ok(()) => {
                if waited {
                    held.times += 1;
                    held.total += t.elapsed();
                }
                return Ok(());
            }
            Err(e @ (PublishError::BadTopic(_) | PublishError::TooLarge { .. } | PublishError::BadHeaders(_))) => {
                return Err(e.to_string())
            }
            Err(_) if stopped() => return Err("stopped (Ctrl-C) while a message waited".into()),
            Err(e) if t.elapsed() > Duration::from_secs(30) => return Err(format!("{e} for 30 s")),
            Err(_) => {
                waited = true;
                client.poll(publisher_event, 16);
                std::hint::spin_loop();
            }
        }
    }
}

/// What a publisher says of its events: publishes a lost connection may
/// have lost (the others are nothing to it).
fn publisher_event(e: ClientEvent<'_>) {
    if let ClientEvent::PublishGap { from, to } = e {
        eprintln!(
            "publishes {from} to {to} ({} messages) went on the lost connection before the router confirmed them: some or all may have reached no subscriber",
            to - from + 1
        );
    }
}

/// [`publish_one`] in guaranteed mode: the message waits in the client's
/// window until the router acknowledges it, so only a full window waits
/// (for as long as the router is away).
fn publish_guaranteed_one(client: &mut Client, topic: &str, msg: &[u8], held: &mut Held) -> Result<(), String> {
    let t = Instant::now();
    let (mut waited, mut said) = (false, false);
    loop {
        match client.publish_guaranteed(topic, msg) {
            Ok(_) => {
                if waited {
                    held.times += 1;
                    held.total += t.elapsed();
                }
                if said {
                    eprintln!("the router is back: publishing again");
                }
                return Ok(());
            }
            Err(e @ (PublishError::BadTopic(_) | PublishError::TooLarge { .. })) => return Err(e.to_string()),
            Err(_) if stopped() => return Err("stopped (Ctrl-C) while the window was full".into()),
            Err(e) => {
                waited = true;
                if t.elapsed() > Duration::from_secs(1) && !said {
                    eprintln!("{e}; waiting for the router at {}", client.uri());
                    said = true;
                }
                if client.poll(publisher_event, 256) == 0 {
                    client.park(Duration::from_micros(100));
                }
            }
        }
    }
}

/// At the end of a guaranteed run: waits (30 s at most, or until Ctrl-C)
/// for the router to acknowledge everything, then says how far it got.
fn finish_guaranteed(client: &mut Client) -> Result<(), String> {
    let until = Instant::now() + Duration::from_secs(30);
    while client.unacknowledged() > 0 && Instant::now() < until && !stopped() {
        if client.poll(publisher_event, 256) == 0 {
            client.park(Duration::from_millis(1));
        }
    }
    eprintln!("acknowledged {}", client.acknowledged());
    match client.unacknowledged() {
        0 => Ok(()),
        n => Err(format!("{n} guaranteed publishes were not acknowledged (is the router there?)")),
    }
}

/// `tickwire pub --router URI`.
pub fn publish(s: &Settings, a: &PubArgs, uri: &str) -> Result<(), String> {
    // First thing, while this process has one thread: it may change the
    // environment.
    let credentials = a.login.credentials(uri == "ipc")?;
    // First Ctrl-C: stop and print what was done; second: exit at once.
    let _ = StopSignals::command().install();
    if a.topic.is_empty() {
        return Err("--router needs --topic".into());
    }
    tickwire_topic::check_topic(&a.topic).map_err(|e| e.to_string())?;
    let headers = a
        .headers
        .iter()
        .map(|h| h.split_once('=').ok_or_else(|| format!("--header {h:?}: expected NAME=VALUE")))
        .collect::<Result<Vec<_>, _>>()?;
    tickwire_wire::headers::encode_block(&mut Vec::new(), &headers).map_err(|e| format!("--header: {e}"))?;
    let topic = (a.topic.as_str(), &headers[..]);
    let mut client =
        connect(s, uri, "pub", a.tls_ca.as_deref(), credentials, a.login.identity(ClientOptions::default()))?;
    if !wait(&mut client, a.wait, |_| {})? {
        return Ok(());
    }
    eprintln!("publishing on {} through the router at {uri}", a.topic);
    let start = Instant::now();
    let mut sent = 0u64;
    let mut held = Held::default();
    if a.stdin {
        for line in std::io::stdin().lock().lines() {
            let line = line.map_err(|e| format!("reading stdin: {e}"))?;
            if a.guaranteed {
                publish_guaranteed_one(&mut client, &a.topic, line.as_bytes(), &mut held)?;
            } else {
                publish_one(&mut client, topic, line.as_bytes(), &mut held)?;
            }
            sent += 1;
            check_rejected(&mut client, Duration::ZERO)?;
            if stopped() {
                break;
            }
        }
    } else {
        let limit = a.count.unwrap_or(u64::MAX);
        let duration = a.duration.unwrap_or(if a.count.is_some() { Duration::MAX } else { Duration::from_secs(5) });
        let interval = a.rate.map(|r| Duration::from_secs_f64(1.0 / r as f64));
        let mut msg = vec![0u8; a.size];
        // Guaranteed: this run's tag after the sequence number, so that a
        // durable subscriber checks each publisher's stream on its own.
        if a.guaranteed && a.size >= 16 {
            let tag = std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), start);
            msg[8..16].copy_from_slice(&tag.to_le_bytes());
        }
        while sent < limit && start.elapsed() < duration && !stopped() {
            if let Some(iv) = interval {
                let due = start + iv.mul_f64(sent as f64);
                while Instant::now() < due {
                    std::hint::spin_loop();
                }
            }
            msg[..8].copy_from_slice(&sent.to_le_bytes());
            if a.guaranteed {
                publish_guaranteed_one(&mut client, &a.topic, &msg, &mut held)?;
                if sent % 64 == 0 {
                    client.poll(publisher_event, 256);
                }
            } else {
                publish_one(&mut client, topic, &msg, &mut held)?;
            }
            sent += 1;
            if sent % 256 == 0 {
                check_rejected(&mut client, Duration::ZERO)?;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    // A refusal comes back within microseconds: wait a little for one.
    check_rejected(&mut client, Duration::from_millis(50))?;
    eprintln!("published {sent} messages in {secs:.3} s ({:.0} msg/s)", sent as f64 / secs);
    held.report();
    let done = if a.guaranteed { finish_guaranteed(&mut client) } else { Ok(()) };
    client.close();
    done
}

/// What a routed subscriber has seen.
#[derive(Debug, Default)]
struct Seen {
    msgs: u64,
    bytes: u64,
    discarded: u64,
    gaps: u64,
    duplicates: u64,
    cached: u64,
    /// Guaranteed: messages seen again, flagged as redelivered.
    redeliveries: u64,
    /// Guaranteed: messages the router said are lost (retention).
    lost: u64,
    /// The next sequence number expected from each publisher: by topic, and
    /// for guaranteed messages by topic and the run's tag (bytes 8..16).
    expect: std::collections::HashMap<(String, u64), u64>,
    /// Guaranteed deliveries to acknowledge: (subscription, sequence, when).
    acks: std::collections::VecDeque<(u32, u64, Instant)>,
    failure: Option<String>,
}

fn on_event(seen: &mut Seen, a: &SubArgs, pattern: &str, uri: &str, e: ClientEvent<'_>) {
    match e {
        ClientEvent::Connected { router, client_id } => {
            eprintln!("subscribed to {pattern} at router {router:?} ({uri}, client {client_id})");
        }
        ClientEvent::Disconnected { reason } => eprintln!("{reason}; waiting for the router to come back"),
        ClientEvent::Rejected { reason, .. } => seen.failure = Some(format!("the router refused: {reason}")),
        ClientEvent::Lost { from, to, .. } => {
            eprintln!("the router lost messages {from} to {to} of this durable subscription (retention removed them)");
            seen.lost += to - from + 1;
        }
        // A subscriber answers no requests (`tickwire reply` does).
        // (Nor publishes.)
        ClientEvent::Request(_)
        | ClientEvent::Reply { .. }
        | ClientEvent::RequestFailed { .. }
        | ClientEvent::PublishGap { .. } => {}
        // --count: the rest of the last batch is not taken.
        ClientEvent::Message(_) if a.count.is_some_and(|c| seen.msgs >= c) => {}
        ClientEvent::Message(m) => {
            seen.msgs += 1;
            seen.bytes += m.payload.len() as u64;
            if m.discarded > 0 {
                seen.discarded += u64::from(m.discarded);
                eprintln!(
                    "the router discarded {} message(s) before this one (this subscriber fell behind)",
                    m.discarded
                );
            }
            seen.cached += u64::from(m.is_cached());
            if let Some(sub) = m.subscription {
                seen.acks.push_back((sub, m.sequence, Instant::now()));
            }
            if a.verify && m.payload.len() >= 8 {
                let seq = u64::from_le_bytes(m.payload[..8].try_into().unwrap_or_default());
                let tag = match m.payload.get(8..16) {
                    Some(t) if m.is_guaranteed() => u64::from_le_bytes(t.try_into().unwrap_or_default()),
                    _ => 0,
                };
                let next = seen.expect.entry((m.topic.to_owned(), tag)).or_insert(seq);
                // Generated messages count from 0: a publisher started again
                // (a guaranteed one has a tag of its own).
                if seq == 0 && !m.is_guaranteed() {
                    *next = 0;
                }
                match seq.cmp(next) {
                    std::cmp::Ordering::Less if m.is_redelivered() => seen.redeliveries += 1,
                    std::cmp::Ordering::Less => seen.duplicates += 1,
                    std::cmp::Ordering::Greater => seen.gaps += 1,
                    std::cmp::Ordering::Equal => {}
                }
                *next = (*next).max(seq + 1);
            }
            if a.print {
                let mut tag = String::from(if m.is_cached() { " (cached)" } else { "" });
                if let Some(h) = m.headers {
                    let pairs: Vec<String> = h.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    tag += &format!(" [{}]", pairs.join(", "));
                }
                match std::str::from_utf8(m.payload) {
                    Ok(text) if !text.chars().any(char::is_control) => println!("{} {text}{tag}", m.topic),
                    // Generated messages: binary, not for a terminal.
                    _ => println!("{} ({} bytes){tag}", m.topic, m.payload.len()),
                }
            }
        }
    }
}

/// Acknowledges (cumulatively, per subscription) the guaranteed deliveries
/// that arrived at least `delay` ago.
/// A durable queue's consumer (`each`) acknowledges every delivery on its
/// own: a queue's acknowledgement names one delivery.
fn acknowledge(
    client: &mut Client,
    acks: &mut std::collections::VecDeque<(u32, u64, Instant)>,
    delay: Duration,
    each: bool,
) {
    let mut last: Vec<(u32, u64)> = Vec::new();
    while let Some(&(sub, seq, at)) = acks.front() {
        if at.elapsed() < delay {
            break;
        }
        acks.pop_front();
        if each {
            client.ack(sub, seq);
            continue;
        }
        match last.iter_mut().find(|l| l.0 == sub) {
            Some(l) => l.1 = l.1.max(seq),
            None => last.push((sub, seq)),
        }
    }
    for (sub, seq) in last {
        client.ack(sub, seq);
    }
}

/// `tickwire sub --router URI`.
pub fn subscribe(s: &Settings, a: &SubArgs, uri: &str) -> Result<(), String> {
    // First thing, while this process has one thread: it may change the
    // environment.
    let credentials = a.login.credentials(uri == "ipc")?;
    // First Ctrl-C: stop and print what was done; second: exit at once.
    let _ = StopSignals::command().install();
    let pattern = a.topic.as_deref().ok_or("--router needs --topic PATTERN")?;
    let opts = a.login.identity(ClientOptions { slow_consumer: a.slow_consumer, ..ClientOptions::default() });
    let mut client = connect(s, uri, "sub", a.tls_ca.as_deref(), credentials, opts)?;
    if let Some(name) = &a.durable_queue {
        client.subscribe_durable_queue(pattern, name).map_err(|e| e.to_string())?;
    } else if let Some(group) = &a.queue {
        client.subscribe_queue(pattern, group).map_err(|e| e.to_string())?;
    } else if let Some(name) = &a.durable {
        client.subscribe_durable(pattern, name).map_err(|e| e.to_string())?;
    } else if a.cached {
        client.subscribe_cached(pattern).map_err(|e| e.to_string())?;
    } else {
        client.subscribe(pattern).map_err(|e| e.to_string())?;
    }
    let mut seen = Seen::default();
    if !wait(&mut client, a.wait, |e| on_event(&mut seen, a, pattern, uri, e))? {
        return Ok(());
    }
    let start = Instant::now();
    let limit = a.count.unwrap_or(u64::MAX);
    while !stopped() && !a.duration.is_some_and(|d| start.elapsed() >= d) && seen.msgs < limit && seen.failure.is_none()
    {
        // Reconnecting: to the router it tries now (of a list, or one its
        // router told of).
        let at = (!client.is_connected()).then(|| client.uri().to_string());
        let at = at.as_deref().unwrap_or(uri);
        if client.poll(|e| on_event(&mut seen, a, pattern, at, e), 256) == 0 {
            client.park(Duration::from_millis(if seen.acks.is_empty() { 10 } else { 1 }));
        }
        acknowledge(&mut client, &mut seen.acks, a.ack_delay.unwrap_or(Duration::ZERO), a.durable_queue.is_some());
        if let Some(why) = client.refused() {
            seen.failure = Some(format!("the router at {uri} refused this client: {why}"));
        }
    }
    let cached = if a.cached { format!(" ({} from the cache)", seen.cached) } else { String::new() };
    acknowledge(&mut client, &mut seen.acks, Duration::ZERO, a.durable_queue.is_some());
    let dups = match (a.verify, &a.durable) {
        (true, Some(_)) => format!(
            ", {} redeliveries (flagged), {} unflagged duplicates, {} lost",
            seen.redeliveries, seen.duplicates, seen.lost
        ),
        (true, None) => format!(", {} duplicates", seen.duplicates),
        _ => String::new(),
    };
    eprintln!(
        "received {} messages{cached}, {} bytes; the router discarded {} for this subscriber; {} gaps{dups}",
        seen.msgs, seen.bytes, seen.discarded, seen.gaps
    );
    // Gaps the router said it made (a queue full) are not failures.
    if a.verify && ((seen.gaps > 0 && seen.discarded == 0) || seen.duplicates > 0) && seen.failure.is_none() {
        seen.failure = Some(format!("{} gaps and {} duplicates in the sequence numbers", seen.gaps, seen.duplicates));
    }
    if a.verify && seen.lost > 0 && seen.failure.is_none() {
        seen.failure = Some(format!("{} messages lost (retention)", seen.lost));
    }
    client.close();
    match seen.failure {
        Some(f) => Err(f),
        None => Ok(()),
    }
}
