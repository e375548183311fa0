//! `tickwire pub --router URI` and `tickwire sub --router URI`: publishing
//! and subscribing through a router, by topic.

use crate::config::Settings;
use crate::pubsub::{install_ctrl_c, stopped, PubArgs, SubArgs};
use std::io::BufRead;
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, ClientOptions, PublishError};

fn connect(s: &Settings, uri: &str, role: &str, tls_ca: Option<&std::path::Path>) -> Result<Client, String> {
    if uri.starts_with("tls://") && tls_ca.is_none() {
        return Err(format!("{uri} needs --tls-ca FILE: the certificate (PEM) the router's must chain to"));
    }
    let opts = ClientOptions {
        name: format!("tickwire-{role}-{}", std::process::id()),
        dir: s.dir.clone(),
        tls_ca: tls_ca.map(std::path::Path::to_path_buf),
        ..ClientOptions::default()
    };
    Client::connect(uri, opts).map_err(|e| e.to_string())
}

/// Polls until connected, saying once (after 100 ms) that it waits.
fn wait(client: &mut Client, limit: Option<Duration>, mut on: impl FnMut(ClientEvent<'_>)) -> Result<bool, String> {
    let start = Instant::now();
    let mut said = false;
    while !client.is_connected() {
        if stopped() {
            return Ok(false);
        }
        if let Some(why) = client.refused() {
            return Err(format!("the router at {} refused this client: {why}", client.uri()));
        }
        if let Some(w) = limit.filter(|&w| start.elapsed() > w) {
            return Err(format!("no router at {} within {w:?} (--wait): {}", client.uri(), client.last_error()));
        }
        if !said && start.elapsed() > Duration::from_millis(100) {
            eprintln!("waiting for the router at {} (Ctrl-C to stop)", client.uri());
            said = true;
        }
        if client.poll(&mut on, 1) == 0 {
            client.park(Duration::from_millis(5));
        }
    }
    Ok(true)
}

fn publish_one(client: &mut Client, topic: &str, msg: &[u8]) -> Result<(), String> {
    let t = Instant::now();
    loop {
        match client.publish(topic, msg) {
            Ok(()) => return Ok(()),
            Err(PublishError::BadTopic(e)) => return Err(e.to_string()),
            Err(_) if stopped() => return Err("stopped (Ctrl-C) while a message waited".into()),
            Err(e) if t.elapsed() > Duration::from_secs(30) => return Err(format!("{e} for 30 s")),
            Err(_) => {
                client.poll(|_| {}, 16);
                std::hint::spin_loop();
            }
        }
    }
}

pub fn publish(s: &Settings, a: &PubArgs, uri: &str) -> Result<(), String> {
    install_ctrl_c();
    if a.topic.is_empty() {
        return Err("--router needs --topic".into());
    }
    tickwire_topic::check_topic(&a.topic).map_err(|e| e.to_string())?;
    let mut client = connect(s, uri, "pub", a.tls_ca.as_deref())?;
    if !wait(&mut client, a.wait, |_| {})? {
        return Ok(());
    }
    eprintln!("publishing on {} through the router at {uri}", a.topic);
    let start = Instant::now();
    let mut sent = 0u64;
    if a.stdin {
        for line in std::io::stdin().lock().lines() {
            let line = line.map_err(|e| format!("reading stdin: {e}"))?;
            publish_one(&mut client, &a.topic, line.as_bytes())?;
            sent += 1;
            if stopped() {
                break;
            }
        }
    } else {
        let limit = a.count.unwrap_or(u64::MAX);
        let duration = a.duration.unwrap_or(if a.count.is_some() { Duration::MAX } else { Duration::from_secs(5) });
        let interval = a.rate.map(|r| Duration::from_secs_f64(1.0 / r as f64));
        let mut msg = vec![0u8; a.size];
        while sent < limit && start.elapsed() < duration && !stopped() {
            if let Some(iv) = interval {
                let due = start + iv.mul_f64(sent as f64);
                while Instant::now() < due {
                    std::hint::spin_loop();
                }
            }
            msg[..8].copy_from_slice(&sent.to_le_bytes());
            publish_one(&mut client, &a.topic, &msg)?;
            sent += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    client.close();
    eprintln!("published {sent} messages in {secs:.3} s ({:.0} msg/s)", sent as f64 / secs);
    Ok(())
}

/// What a routed subscriber has seen.
#[derive(Debug, Default)]
struct Seen {
    msgs: u64,
    bytes: u64,
    discarded: u64,
    gaps: u64,
    expect: Option<u64>,
    failure: Option<String>,
}

fn on_event(seen: &mut Seen, a: &SubArgs, pattern: &str, uri: &str, e: ClientEvent<'_>) {
    match e {
        ClientEvent::Connected { router, client_id } => {
            eprintln!("subscribed to {pattern} at router {router:?} ({uri}, client {client_id})");
        }
        ClientEvent::Disconnected { reason } => eprintln!("{reason}; waiting for the router to come back"),
        ClientEvent::Rejected { reason, .. } => seen.failure = Some(format!("the router refused: {reason}")),
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
            if a.verify && m.payload.len() >= 8 {
                let seq = u64::from_le_bytes(m.payload[..8].try_into().unwrap_or_default());
                if seen.expect.is_some_and(|x| x != seq) {
                    seen.gaps += 1;
                }
                seen.expect = Some(seq + 1);
            }
            if a.print {
                println!("{} {}", m.topic, String::from_utf8_lossy(m.payload));
            }
        }
    }
}

pub fn subscribe(s: &Settings, a: &SubArgs, uri: &str) -> Result<(), String> {
    install_ctrl_c();
    let pattern = a.topic.as_deref().ok_or("--router needs --topic PATTERN")?;
    let mut client = connect(s, uri, "sub", a.tls_ca.as_deref())?;
    client.subscribe(pattern).map_err(|e| e.to_string())?;
    let mut seen = Seen::default();
    if !wait(&mut client, a.wait, |e| on_event(&mut seen, a, pattern, uri, e))? {
        return Ok(());
    }
    let start = Instant::now();
    let limit = a.count.unwrap_or(u64::MAX);
    while !stopped() && !a.duration.is_some_and(|d| start.elapsed() >= d) && seen.msgs < limit && seen.failure.is_none()
    {
        if client.poll(|e| on_event(&mut seen, a, pattern, uri, e), 256) == 0 {
            client.park(Duration::from_millis(10));
        }
        if let Some(why) = client.refused() {
            seen.failure = Some(format!("the router at {uri} refused this client: {why}"));
        }
    }
    eprintln!(
        "received {} messages, {} bytes; the router discarded {} for this subscriber; {} gaps",
        seen.msgs, seen.bytes, seen.discarded, seen.gaps
    );
    client.close();
    match seen.failure {
        Some(f) => Err(f),
        None => Ok(()),
    }
}
