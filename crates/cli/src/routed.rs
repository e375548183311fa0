//! `tickwire pub --router URI` and `tickwire sub --router URI`: publishing
//! and subscribing through a router, by topic.

use crate::config::Settings;
use crate::pubsub::{install_ctrl_c, stopped, PubArgs, SubArgs};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, ClientOptions, PublishError};
use zeroize::Zeroizing;

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
    /// With --router tls://: this client's certificate (PEM) for a router that asks for one (mutual TLS);
    /// it logs in as the user the certificate names, no password needed. Needs --tls-key.
    #[arg(long, visible_alias = "cert", requires = "tls_key", requires = "router")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert, readable by its owner alone (chmod 600).
    #[arg(long, visible_alias = "key", requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
}

/// The environment variable a password may come in.
const PASSWORD_VAR: &str = "TICKWIRE_PASSWORD";

impl Login {
    /// `opts` with this login's client certificate and key, if any.
    pub(crate) fn identity(&self, opts: ClientOptions) -> ClientOptions {
        ClientOptions { tls_cert: self.tls_cert.clone(), tls_key: self.tls_key.clone(), ..opts }
    }

    /// (user, password), if a user is given. Called first thing, before
    /// any thread starts: [`take_password_var`] changes the environment.
    /// The password file must be its owner's alone (the check every secret
    /// file gets: [`tickwire_transport::tls::read_secret`]); its bytes are
    /// zeroed once the first line is taken.
    ///
    /// Over shared memory (`ipc`) no password is needed: a router whose
    /// `[[users]]` entry names this process's Unix user (`unix_user`) logs
    /// it in as that user from the socket's credentials; the password, when
    /// given, is sent all the same (and checked for any other user).
    pub(crate) fn credentials(&self, ipc: bool) -> Result<Option<(String, Zeroizing<String>)>, String> {
        let Some(user) = &self.user else { return Ok(None) };
        let password = match &self.password_file {
            Some(f) => {
                let bytes = tickwire_transport::tls::read_secret(f)
                    .map_err(|e| format!("--password-file {}: {e}", f.display()))?;
                let text = std::str::from_utf8(&bytes)
                    .map_err(|_| format!("--password-file {}: not UTF-8 text", f.display()))?;
                Zeroizing::new(text.lines().next().unwrap_or("").to_owned())
            }
            None => match take_password_var() {
                Some(p) => Zeroizing::new(p),
                None if ipc => Zeroizing::new(String::new()),
                None => {
                    return Err(format!(
                        "--user {user} needs its password in --password-file FILE or the {PASSWORD_VAR} environment variable (or, over --router ipc, a router that maps this Unix user to it)"
                    ))
                }
            },
        };
        Ok(Some((user.clone(), password)))
    }
}

/// Takes the password out of `TICKWIRE_PASSWORD` and removes it from the
/// environment, so that no child process inherits it and nothing reading
/// the environment later (a library, a crash handler) finds it.
///
/// `/proc/PID/environ` is not changed by this: it shows the environment
/// the process was started with (proc(5)), which only overwriting that
/// memory would clear (`unsafe`, forbidden in this crate). A password file
/// (`--password-file`) leaves nothing there.
///
/// Must run while this process has one thread: changing the environment
/// races with another thread reading it through libc (why `remove_var` is
/// `unsafe` in edition 2024; this workspace is edition 2021).
/// `tickwire pub` and `sub --router` call it first, before the Ctrl-C
/// handler's thread starts.
fn take_password_var() -> Option<String> {
    let password = std::env::var(PASSWORD_VAR).ok()?;
    std::env::remove_var(PASSWORD_VAR);
    Some(password)
}

/// Connects as `role` ("pub", "sub", "request", "reply"); `opts` carries
/// what only one of them sets.
pub(crate) fn connect(
    s: &Settings,
    uri: &str,
    role: &str,
    tls_ca: Option<&Path>,
    credentials: Option<(String, Zeroizing<String>)>,
    opts: ClientOptions,
) -> Result<Client, String> {
    if uri.starts_with("tls://") && tls_ca.is_none() {
        return Err(format!("{uri} needs --tls-ca FILE: the certificate (PEM) the router's must chain to"));
    }
    if opts.tls_cert.is_some() && !uri.starts_with("tls://") {
        return Err(format!("--tls-cert is for a tls:// router, not {uri}"));
    }
    let opts = ClientOptions {
        name: format!("tickwire-{role}-{}", std::process::id()),
        dir: s.dir.clone(),
        tls_ca: tls_ca.map(Path::to_path_buf),
        user: credentials.as_ref().map(|c| c.0.clone()),
        // Moved, not copied: the client keeps it to log in again after a
        // reconnection.
        password: credentials.map(|(_, mut p)| std::mem::take(&mut *p)),
        ..opts
    };
    Client::connect(uri, opts).map_err(|e| e.to_string())
}

/// Polls until connected, saying once (after 100 ms) that it waits.
pub(crate) fn wait(
    client: &mut Client,
    limit: Option<Duration>,
    mut on: impl FnMut(ClientEvent<'_>),
) -> Result<bool, String> {
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

pub fn publish(s: &Settings, a: &PubArgs, uri: &str) -> Result<(), String> {
    // Before any thread starts (the Ctrl-C handler's): it may change the
    // environment.
    let credentials = a.login.credentials(uri == "ipc")?;
    install_ctrl_c();
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

pub fn subscribe(s: &Settings, a: &SubArgs, uri: &str) -> Result<(), String> {
    // Before any thread starts (the Ctrl-C handler's): it may change the
    // environment.
    let credentials = a.login.credentials(uri == "ipc")?;
    install_ctrl_c();
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 44 item 5: the password is taken out of the environment once
    /// read, so no child process inherits it. (The test harness has other
    /// threads; they do not read TICKWIRE_PASSWORD, and std's lock keeps
    /// its own readers and writers apart.)
    #[test]
    fn the_password_variable_is_removed_once_read() {
        std::env::set_var(PASSWORD_VAR, "env-s3cret");
        let login = Login { user: Some("desk".into()), password_file: None, tls_cert: None, tls_key: None };
        let (user, password) = login.credentials(false).unwrap().unwrap();
        assert_eq!((user.as_str(), password.as_str()), ("desk", "env-s3cret"));
        assert!(std::env::var_os(PASSWORD_VAR).is_none(), "still in the environment");
        let child = std::process::Command::new("env").output().unwrap();
        assert!(!String::from_utf8_lossy(&child.stdout).contains("env-s3cret"), "a child inherited it");
        let e = login.credentials(false).unwrap_err();
        assert!(e.contains("TICKWIRE_PASSWORD"), "read once: {e}");
    }
}
