//! Deadlines (issue 42, item 3): a connection that is not welcomed within
//! `limits.hello_timeout` (no HELLO, a frame that stopped halfway, a TLS
//! handshake that stalled, a password still being checked) is closed and
//! counted; a welcomed client that says nothing stays.
//!
//! Each test prints how many connections it saw closed and how long after
//! their connection (`cargo test ... -- --nocapture`).

mod common;

use common::{framed, frames, start, tempdir};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientOptions};
use tickwire_router::config::LimitsConfig;
use tickwire_router::{Disconnect, Limits, MemoryOut, Outbound, Router, RouterConfig};
use tickwire_wire::client::{ClientKind, ClientRepr, RejectCode, CLIENT_PROTOCOL_VERSION, IPC_LOGIN_SOCKET};
use tickwire_wire::ClientFrame;

/// The short deadline the tests run with (the default is 2 s).
const SHORT: Duration = Duration::from_millis(300);

fn limits(hello_timeout: Duration) -> LimitsConfig {
    LimitsConfig { hello_timeout: humantime::format_duration(hello_timeout).to_string(), ..LimitsConfig::default() }
}

fn hello_frame(name: &str) -> Vec<u8> {
    framed(&ClientRepr { value: CLIENT_PROTOCOL_VERSION, topic: name, ..ClientRepr::new(ClientKind::Hello) })
}

/// A connection the test holds, and what it heard.
struct Held {
    stream: TcpStream,
    connected: Instant,
    heard: Vec<u8>,
    /// How long after its connection it was closed (EOF or reset).
    closed_after: Option<Duration>,
}

fn connect(addr: SocketAddr, send: &[u8]) -> Held {
    // Paced: the router takes connections once a millisecond, and one left
    // in a full accept queue (1024, `accept::ACCEPT_BACKLOG`) reaches it only when the kernel sends
    // its SYN-ACK again, a second later; its time would run from then.
    std::thread::sleep(Duration::from_micros(300));
    let mut stream = TcpStream::connect(addr).unwrap();
    let connected = Instant::now();
    if !send.is_empty() {
        stream.write_all(send).unwrap();
    }
    stream.set_nonblocking(true).unwrap();
    Held { stream, connected, heard: Vec::new(), closed_after: None }
}

/// Reads every connection until each is closed (EOF or reset) or `wait`
/// passes; returns how many were closed.
fn wait_closed(held: &mut [Held], wait: Duration) -> usize {
    let until = Instant::now() + wait;
    let mut buf = [0u8; 4096];
    loop {
        for h in held.iter_mut().filter(|h| h.closed_after.is_none()) {
            loop {
                match h.stream.read(&mut buf) {
                    Ok(0) => h.closed_after = Some(h.connected.elapsed()),
                    Ok(n) => {
                        h.heard.extend_from_slice(&buf[..n]);
                        continue;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    // Reset, aborted: closed too.
                    Err(_) => h.closed_after = Some(h.connected.elapsed()),
                }
                break;
            }
        }
        let closed = held.iter().filter(|h| h.closed_after.is_some()).count();
        if closed == held.len() || Instant::now() >= until {
            return closed;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// min / median / max of the times to close, for the figure.
fn spread(held: &[Held]) -> String {
    let mut t: Vec<Duration> = held.iter().filter_map(|h| h.closed_after).collect();
    if t.is_empty() {
        return "none closed".into();
    }
    t.sort_unstable();
    format!("closed after min {:?}, median {:?}, max {:?}", t[0], t[t.len() / 2], t[t.len() - 1])
}

/// Checks what a group saw: every one closed, none before the deadline,
/// each within `late` of it.
fn check(what: &str, held: &[Held], closed: usize, deadline: Duration, late: Duration) {
    println!("{what}: {closed} of {} closed; {}", held.len(), spread(held));
    assert_eq!(closed, held.len(), "{what}: {} of {} left open ({})", held.len() - closed, held.len(), spread(held));
    for h in held {
        let t = h.closed_after.unwrap();
        // The deadline runs from the router's taking the connection, after
        // the connect; its clock is read a little before (20 ms slack).
        assert!(
            t + Duration::from_millis(20) >= deadline,
            "{what}: closed after {t:?}, before the deadline {deadline:?}"
        );
        assert!(t <= deadline + late, "{what}: closed after {t:?}, deadline {deadline:?}");
    }
}

/// Whether a connection is still open: nothing to read, no end.
fn still_open(s: &mut TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn silent_and_half_framed_connections_are_closed_at_the_hello_timeout_and_counted() {
    let dir = tempdir("deadlines-plain");
    let r = start(&dir, RouterConfig { limits: limits(SHORT), ..RouterConfig::default() });

    // A welcomed client that then says nothing, before and after the others.
    let mut quiet = TcpStream::connect(r.tcp).unwrap();
    quiet.write_all(&hello_frame("quiet")).unwrap();
    quiet.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut welcome = [0u8; 512];
    let n = quiet.read(&mut welcome).unwrap();
    assert_eq!(frames(&welcome[..n]).first().map(|f| f.0), Some(ClientKind::Welcome));
    // A shared-memory client too (its library says HELLO at once).
    let opts = ClientOptions { name: "ipc-quiet".into(), dir: dir.clone(), ..ClientOptions::default() };
    let mut ipc_quiet = Client::connect("ipc", opts).unwrap();
    ipc_quiet.wait_connected(Duration::from_secs(5)).unwrap();

    let started = Instant::now();
    let mut silent: Vec<Held> = (0..200).map(|_| connect(r.tcp, &[])).collect();
    let hello = hello_frame("staller");
    let mut half: Vec<Held> = (0..20)
        .map(|i| {
            // Half a length prefix, or the prefix and half the frame.
            let part = if i % 2 == 0 { &hello[..2] } else { &hello[..4 + (hello.len() - 4) / 2] };
            connect(r.tcp, part)
        })
        .collect();
    println!("220 connections made in {:?}", started.elapsed());

    let closed = wait_closed(&mut silent, Duration::from_secs(10));
    check("200 silent connections", &silent, closed, SHORT, Duration::from_secs(1));
    let closed = wait_closed(&mut half, Duration::from_secs(10));
    check("20 half frames", &half, closed, SHORT, Duration::from_secs(1));
    println!("all 220 closed {:?} after the first connect", started.elapsed());

    // Each heard why: CLOSE, code Limit, "no HELLO within 300ms".
    for h in silent.iter().chain(&half) {
        let f = frames(&h.heard);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].0, f[0].1), (ClientKind::Close, RejectCode::Limit as u32), "{f:?}");
        assert_eq!(f[0].2, "no HELLO within 300ms");
    }

    // The welcomed ones outlived several deadlines.
    let stayed = quiet_for(&mut ipc_quiet, 5 * SHORT);
    assert!(stayed, "the shared-memory client was let go");
    assert!(still_open(&mut quiet), "a welcomed client that says nothing was closed");

    let report = r.stop();
    println!("hello_timeouts = {}", report.totals.hello_timeouts);
    assert_eq!(report.totals.hello_timeouts, 220, "{:?}", report.totals);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Polls `c` for `wait`; true if it stayed connected all along.
fn quiet_for(c: &mut Client, wait: Duration) -> bool {
    let until = Instant::now() + wait;
    while Instant::now() < until {
        c.poll(|_| {}, 64);
        if !c.is_connected() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

#[test]
fn stalled_tls_handshakes_are_closed_at_the_hello_timeout_and_counted() {
    let dir = tempdir("deadlines-tls");
    let (cert, key) = tickwire_testkit::self_signed(&dir, "router");
    let tls = Some(tickwire_router::config::TlsFiles::new(cert.clone(), key));
    let r = start(&dir, RouterConfig { tls, limits: limits(SHORT), ..RouterConfig::default() });

    // A TLS client that logs in, then says nothing.
    let opts = ClientOptions {
        name: "tls-quiet".into(),
        dir: dir.clone(),
        tls_ca: Some(cert.clone()),
        ..ClientOptions::default()
    };
    let mut good = Client::connect(&format!("tls://localhost:{}", r.tcp.port()), opts).unwrap();
    good.wait_connected(Duration::from_secs(5)).unwrap();

    // A ClientHello record that promises 512 bytes and stops after 9.
    let partial: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc];
    let started = Instant::now();
    let mut stalled: Vec<Held> = (0..50).map(|i| connect(r.tcp, if i % 2 == 0 { &[] } else { partial })).collect();
    let closed = wait_closed(&mut stalled, Duration::from_secs(10));
    check("50 stalled TLS handshakes", &stalled, closed, SHORT, Duration::from_secs(1));
    println!("all 50 closed {:?} after the first connect", started.elapsed());

    assert!(quiet_for(&mut good, 5 * SHORT), "a welcomed TLS client was let go");
    let report = r.stop();
    println!("hello_timeouts = {}", report.totals.hello_timeouts);
    assert_eq!(report.totals.hello_timeouts, 50, "{:?}", report.totals);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_default_deadline_is_two_seconds() {
    let dir = tempdir("deadlines-default");
    let r = start(&dir, RouterConfig::default());
    let started = Instant::now();
    let mut silent: Vec<Held> = (0..20).map(|_| connect(r.tcp, &[])).collect();
    let closed = wait_closed(&mut silent, Duration::from_secs(10));
    check(
        "20 silent connections, default hello_timeout",
        &silent,
        closed,
        Duration::from_secs(2),
        Duration::from_secs(8),
    );
    println!("all 20 closed {:?} after the first connect", started.elapsed());
    assert_eq!(frames(&silent[0].heard)[0].2, "no HELLO within 2s");
    assert_eq!(r.stop().totals.hello_timeouts, 20);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_shared_memory_login_that_never_comes_whole_is_refused_at_the_hello_timeout_and_counted() {
    let dir = tempdir("deadlines-ipc");
    let r = start(&dir, RouterConfig { limits: limits(SHORT), ..RouterConfig::default() });
    // Half a login message: a length promising more than ever comes.
    let mut s = std::os::unix::net::UnixStream::connect(dir.join(IPC_LOGIN_SOCKET)).unwrap();
    s.write_all(&[40, 0, 0, 0, 1, 2]).unwrap();
    let sent = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut why = String::new();
    let _ = s.read_to_string(&mut why);
    let t = sent.elapsed();
    println!("a half shared-memory login closed after {t:?}: {why:?}");
    assert!(why.contains("limits.hello_timeout"), "{why:?}");
    assert!(t + Duration::from_millis(50) >= SHORT && t <= SHORT + Duration::from_secs(1), "{t:?}");
    // A whole message with no log beside it: refused at once.
    let mut s = common::ipc_login(&dir, 0x5ee, &[], "no-log");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut why = String::new();
    let _ = s.read_to_string(&mut why);
    assert!(why.contains("no log came with the login"), "{why:?}");
    let until = Instant::now() + Duration::from_secs(5);
    while refused_ipc_logins(&dir) < 2 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(refused_ipc_logins(&dir), 2, "refused_ipc_logins");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The router's `refused_ipc_logins` counter, as its housekeeping (every
/// 20 ms) last published it.
fn refused_ipc_logins(dir: &std::path::Path) -> u64 {
    use tickwire_shm::counters::{counters_path, Kind, ROUTER_ACCEPT_NAMES};
    let at = ROUTER_ACCEPT_NAMES.iter().position(|n| *n == "refused_ipc_logins").unwrap();
    let path = counters_path(dir, std::process::id());
    let r = tickwire_shm::CountersReader::open(&path).unwrap();
    r.sets().into_iter().find(|s| s.kind == Kind::RouterAccept).map_or(0, |s| s.values[at])
}

// ---------------------------------------------------------------------
// The routing core alone: time is passed in.

fn memory() -> Outbound {
    Outbound::Memory(MemoryOut { frames: Vec::new(), room: usize::MAX })
}

fn sent(r: &mut Router, id: u32) -> Vec<(ClientKind, u32, String)> {
    let Outbound::Memory(m) = r.session_mut(id).unwrap().outbound_mut() else { panic!() };
    m.frames
        .iter()
        .map(|b| {
            let f = ClientFrame::new_checked(b).unwrap();
            (f.kind(), f.value(), String::from_utf8_lossy(f.body()).into_owned())
        })
        .collect()
}

const MS: u64 = 1_000_000;

#[test]
fn the_core_expires_only_sessions_not_welcomed_in_time_each_once() {
    let limits = Limits { hello_timeout: SHORT, ..Limits::default() };
    let mut r = Router::new("test", limits, None);
    let t0 = 1_000 * MS;
    let silent = r.attach_at(memory(), "test silent".into(), t0);
    let welcomed = r.attach_at(memory(), "test welcomed".into(), t0);
    r.handle_frame(welcomed, &hello_frame("w")[4..]).unwrap();
    assert_eq!(sent(&mut r, welcomed)[0].0, ClientKind::Welcome);
    let later = r.attach_at(memory(), "test later".into(), t0 + 200 * MS);
    // Attached without a time: its deadline runs from the next look.
    let untimed = r.attach(memory(), "test untimed".into());

    assert!(r.take_expired(t0 + 299 * MS).is_empty());
    let gone = r.take_expired(t0 + 300 * MS);
    assert_eq!(gone.len(), 1, "{gone:?}");
    assert_eq!(gone[0].0, silent);
    assert_eq!((gone[0].1.code, gone[0].1.reason.as_str()), (RejectCode::Limit, "no HELLO within 300ms"));
    assert!(r.disconnect(silent, &gone[0].1).is_some());
    // Once each, even if the agent has not closed it yet.
    assert!(r.take_expired(t0 + 310 * MS).is_empty());
    let gone = r.take_expired(t0 + 500 * MS);
    assert_eq!(gone.iter().map(|g| g.0).collect::<Vec<_>>(), [later]);
    r.disconnect(later, &gone[0].1);
    // The untimed one's deadline ran from the look at +299 ms.
    assert!(r.take_expired(t0 + 598 * MS).is_empty());
    assert_eq!(r.take_expired(t0 + 599 * MS).iter().map(|g| g.0).collect::<Vec<_>>(), [untimed]);
    r.disconnect(untimed, &Disconnect { code: RejectCode::Limit, reason: "test".into() });
    // A new session in a freed slot has its own deadline.
    let again = r.attach_at(memory(), "test again".into(), t0 + 10_000 * MS);
    assert_eq!(again, untimed, "the slot freed last");
    assert!(r.take_expired(t0 + 10_299 * MS).is_empty());
    assert_eq!(r.take_expired(t0 + 10_300 * MS).len(), 1);
    // The welcomed one never expires.
    assert!(r.take_expired(t0 + 1_000_000 * MS).is_empty());
    assert!(r.session(welcomed).is_some());
    assert_eq!(r.totals().hello_timeouts, 4);
}

#[test]
fn a_session_whose_password_is_still_being_checked_expires_and_the_answer_is_dropped() {
    use std::sync::Arc;
    use tickwire_router::access::{hash_password, AuthResult, UserConfig, Users};
    let mut r = Router::new("test", Limits { hello_timeout: SHORT, ..Limits::default() }, None);
    let desk = UserConfig {
        name: "desk".into(),
        password_hash: hash_password(b"pw").unwrap(),
        unix_user: None,
        publish: vec![],
        subscribe: vec!["md/>".into()],
        slow_consumer: None,
    };
    let users = Arc::new(Users::new(&[desk]).unwrap());
    r.set_users(Some(Arc::clone(&users)));
    let login = |r: &mut Router, at: u64| {
        let id = r.attach_at(memory(), "test desk".into(), at);
        let creds = tickwire_wire::client::credentials::password("desk", b"pw");
        let hello = ClientRepr {
            value: CLIENT_PROTOCOL_VERSION,
            topic: "desk",
            body: &creds,
            ..ClientRepr::new(ClientKind::Hello)
        };
        let mut b = vec![0u8; hello.buffer_len()];
        hello.emit(&mut b).unwrap();
        r.handle_frame(id, &b).unwrap();
        id
    };
    let t0 = 1_000 * MS;
    // The check was handed to the worker, and answers too late.
    let slow = login(&mut r, t0);
    let asked = r.take_auth_requests();
    assert_eq!(asked.len(), 1);
    let gone = r.take_expired(t0 + 300 * MS);
    assert_eq!(gone.len(), 1);
    assert_eq!((gone[0].0, gone[0].1.reason.as_str()), (slow, "not logged in within 300ms"));
    r.disconnect(slow, &gone[0].1);
    // Its slot is taken again before the answer comes: the answer is not
    // the new session's.
    let next = login(&mut r, t0 + 400 * MS);
    assert_eq!(next, slow);
    let outcome = users.verify(&asked[0].user, b"pw");
    r.handle_auth(AuthResult { session: asked[0].session, ticket: asked[0].ticket, outcome }).unwrap();
    assert!(sent(&mut r, next).is_empty(), "a WELCOME for an answer that was not its own");
    // A check never handed over is not handed over once its session expired.
    let gone = r.take_expired(t0 + 700 * MS);
    assert_eq!(gone.iter().map(|g| g.0).collect::<Vec<_>>(), [next]);
    assert!(r.take_auth_requests().is_empty());
    assert_eq!(r.totals().hello_timeouts, 2);
}
