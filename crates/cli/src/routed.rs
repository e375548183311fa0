//! `tickwire pub --router URI` and `tickwire sub --router URI`: publishing
//! and subscribing through a router, by topic.

use crate::config::Settings;
use crate::pubsub::{install_ctrl_c, stopped, PubArgs, SubArgs};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, ClientOptions, PublishError};

/// Who to connect to a router with users as (`--user`); the password never
/// on the command line, where `ps` would show it.
#[derive(Debug, Clone, clap::Args)]
pub struct Login {
    /// With --router: connect as this user; the password from --password-file or TICKWIRE_PASSWORD.
    #[arg(long, requires = "router")]
    pub(crate) user: Option<String>,
    /// The file holding --user's password (its first line).
    #[arg(long, requires = "user")]
    pub(crate) password_file: Option<PathBuf>,
}

impl Login {
    /// (user, password), if a user is given.
    fn credentials(&self) -> Result<Option<(String, String)>, String> {
        let Some(user) = &self.user else { return Ok(None) };
        let password = match &self.password_file {
            Some(f) => {
                let text = std::fs::read_to_string(f).map_err(|e| format!("--password-file {}: {e}", f.display()))?;
                text.lines().next().unwrap_or("").to_owned()
            }
            None => std::env::var("TICKWIRE_PASSWORD").map_err(|_| {
                format!("--user {user} needs its password in --password-file FILE or the TICKWIRE_PASSWORD environment variable")
            })?,
        };
        Ok(Some((user.clone(), password)))
    }
}

/// Connects as `role` ("pub" or "sub"); `opts` carries what only one of
/// them sets.
fn connect(
    s: &Settings,
    uri: &str,
    role: &str,
    tls_ca: Option<&Path>,
    login: &Login,
    opts: ClientOptions,
) -> Result<Client, String> {
    if uri.starts_with("tls://") && tls_ca.is_none() {
        return Err(format!("{uri} needs --tls-ca FILE: the certificate (PEM) the router's must chain to"));
    }
    let credentials = login.credentials()?;
    let opts = ClientOptions {
        name: format!("tickwire-{role}-{}", std::process::id()),
        dir: s.dir.clone(),
        tls_ca: tls_ca.map(Path::to_path_buf),
        user: credentials.as_ref().map(|c| c.0.clone()),
        password: credentials.map(|c| c.1),
        ..opts
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

fn publish_one(client: &mut Client, topic: &str, msg: &[u8], held: &mut Held) -> Result<(), String> {
    let t = Instant::now();
    let mut waited = false;
    loop {
        match client.publish(topic, msg) {
            Ok(()) => {
                if waited {
                    held.times += 1;
                    held.total += t.elapsed();
                }
                return Ok(());
            }
            Err(PublishError::BadTopic(e)) => return Err(e.to_string()),
            Err(_) if stopped() => return Err("stopped (Ctrl-C) while a message waited".into()),
            Err(e) if t.elapsed() > Duration::from_secs(30) => return Err(format!("{e} for 30 s")),
            Err(_) => {
                waited = true;
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
    let mut client = connect(s, uri, "pub", a.tls_ca.as_deref(), &a.login, ClientOptions::default())?;
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
            publish_one(&mut client, &a.topic, line.as_bytes(), &mut held)?;
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
        while sent < limit && start.elapsed() < duration && !stopped() {
            if let Some(iv) = interval {
                let due = start + iv.mul_f64(sent as f64);
                while Instant::now() < due {
                    std::hint::spin_loop();
                }
            }
            msg[..8].copy_from_slice(&sent.to_le_bytes());
            publish_one(&mut client, &a.topic, &msg, &mut held)?;
            sent += 1;
            if sent % 256 == 0 {
                check_rejected(&mut client, Duration::ZERO)?;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    // A refusal comes back within microseconds: wait a little for one.
    check_rejected(&mut client, Duration::from_millis(50))?;
    client.close();
    eprintln!("published {sent} messages in {secs:.3} s ({:.0} msg/s)", sent as f64 / secs);
    held.report();
    Ok(())
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
    /// The next sequence number expected on each topic (one publisher per
    /// topic, as `tickwire pub --router` publishes).
    expect: std::collections::HashMap<String, u64>,
    failure: Option<String>,
}

fn on_event(seen: &mut Seen, a: &SubArgs, pattern: &str, uri: &str, e: ClientEvent<'_>) {
    match e {
        ClientEvent::Connected { router, client_id } => {
            eprintln!("subscribed to {pattern} at router {router:?} ({uri}, client {client_id})");
        }
        ClientEvent::Disconnected { reason } => eprintln!("{reason}; waiting for the router to come back"),
        ClientEvent::Rejected { reason, .. } => seen.failure = Some(format!("the router refused: {reason}")),
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
            if a.verify && m.payload.len() >= 8 {
                let seq = u64::from_le_bytes(m.payload[..8].try_into().unwrap_or_default());
                let next = seen.expect.entry(m.topic.to_owned()).or_insert(seq);
                // Generated messages count from 0: a publisher started again.
                if seq == 0 {
                    *next = 0;
                }
                match seq.cmp(next) {
                    std::cmp::Ordering::Less => seen.duplicates += 1,
                    std::cmp::Ordering::Greater => seen.gaps += 1,
                    std::cmp::Ordering::Equal => {}
                }
                *next = (*next).max(seq + 1);
            }
            if a.print {
                let tag = if m.is_cached() { " (cached)" } else { "" };
                match std::str::from_utf8(m.payload) {
                    Ok(text) if !text.chars().any(char::is_control) => println!("{} {text}{tag}", m.topic),
                    // Generated messages: binary, not for a terminal.
                    _ => println!("{} ({} bytes){tag}", m.topic, m.payload.len()),
                }
            }
        }
    }
}

pub fn subscribe(s: &Settings, a: &SubArgs, uri: &str) -> Result<(), String> {
    install_ctrl_c();
    let pattern = a.topic.as_deref().ok_or("--router needs --topic PATTERN")?;
    let opts = ClientOptions { slow_consumer: a.slow_consumer, ..ClientOptions::default() };
    let mut client = connect(s, uri, "sub", a.tls_ca.as_deref(), &a.login, opts)?;
    if a.cached {
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
        if client.poll(|e| on_event(&mut seen, a, pattern, uri, e), 256) == 0 {
            client.park(Duration::from_millis(10));
        }
        if let Some(why) = client.refused() {
            seen.failure = Some(format!("the router at {uri} refused this client: {why}"));
        }
    }
    let cached = if a.cached { format!(" ({} from the cache)", seen.cached) } else { String::new() };
    let dups = if a.verify { format!(", {} duplicates", seen.duplicates) } else { String::new() };
    eprintln!(
        "received {} messages{cached}, {} bytes; the router discarded {} for this subscriber; {} gaps{dups}",
        seen.msgs, seen.bytes, seen.discarded, seen.gaps
    );
    // Gaps the router said it made (a queue full) are not failures.
    if a.verify && ((seen.gaps > 0 && seen.discarded == 0) || seen.duplicates > 0) && seen.failure.is_none() {
        seen.failure = Some(format!("{} gaps and {} duplicates in the sequence numbers", seen.gaps, seen.duplicates));
    }
    client.close();
    match seen.failure {
        Some(f) => Err(f),
        None => Ok(()),
    }
}
