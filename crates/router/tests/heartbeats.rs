//! Heartbeats on TCP links (issue 42, item 3): the router sends HEARTBEAT
//! (its interval in ms) right after WELCOME and whenever it has written
//! nothing for `limits.heartbeat_interval`; a client it has read nothing
//! from for two intervals is closed; a quiet but live client, polled or
//! not, stays; a client whose router falls silent reconnects; each
//! heartbeat carries the router's receipt of the client's publishes, so a
//! publisher whose connection is lost is told which went unconfirmed.
//!
//! Each test prints when it saw what (`-- --nocapture`).

mod common;

use common::{framed, frames, start, tempdir};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, ClientOptions};
use tickwire_router::config::LimitsConfig;
use tickwire_router::RouterConfig;
use tickwire_wire::client::{ClientKind, ClientRepr, RejectCode, CLIENT_PROTOCOL_VERSION};

/// The interval the tests run with (the default is 5 s).
const INTERVAL: Duration = Duration::from_millis(200);

fn config(interval: Duration) -> RouterConfig {
    let limits = LimitsConfig {
        heartbeat_interval: humantime::format_duration(interval).to_string(),
        ..LimitsConfig::default()
    };
    RouterConfig { limits, ..RouterConfig::default() }
}

/// Reads `s` until it ends (EOF or reset) or `wait` passes; what it heard
/// and when it ended.
fn read_until_closed(s: &mut TcpStream, wait: Duration) -> (Vec<u8>, Option<Duration>) {
    let start = Instant::now();
    s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
    let mut heard = Vec::new();
    let mut buf = [0u8; 4096];
    while start.elapsed() < wait {
        match s.read(&mut buf) {
            Ok(0) => return (heard, Some(start.elapsed())),
            Ok(n) => heard.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return (heard, Some(start.elapsed())),
        }
    }
    (heard, None)
}

#[test]
fn a_client_that_falls_silent_is_closed_after_two_intervals_having_heard_heartbeats() {
    let dir = tempdir("heartbeats-silent");
    let r = start(&dir, config(INTERVAL));
    let mut raw = TcpStream::connect(r.tcp).unwrap();
    let hello = ClientRepr { value: CLIENT_PROTOCOL_VERSION, topic: "mute", ..ClientRepr::new(ClientKind::Hello) };
    raw.write_all(&framed(&hello)).unwrap();
    // It reads (so the router's heartbeats are taken) but never writes.
    let (heard, closed) = read_until_closed(&mut raw, 10 * INTERVAL);
    let f = frames(&heard);
    println!("a silent client heard {:?}, closed after {closed:?}", f.iter().map(|x| x.0).collect::<Vec<_>>());
    let closed = closed.expect("a client silent for 10 intervals was never closed");
    assert!(closed >= 2 * INTERVAL - Duration::from_millis(30), "closed after {closed:?}, before two intervals");
    assert!(closed <= 4 * INTERVAL, "closed after {closed:?}: more than two intervals late");
    assert_eq!(f.first().map(|x| x.0), Some(ClientKind::Welcome), "{f:?}");
    let beats: Vec<u32> = f.iter().filter(|x| x.0 == ClientKind::Heartbeat).map(|x| x.1).collect();
    assert!(!beats.is_empty() && beats.iter().all(|&ms| ms == 200), "heartbeats carrying 200 ms: {beats:?}");
    let last = f.last().unwrap();
    assert_eq!((last.0, last.1), (ClientKind::Close, RejectCode::Limit as u32), "{f:?}");
    assert!(last.2.contains("no frame or heartbeat"), "{}", last.2);
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn quiet_clients_stay_whether_or_not_their_application_polls() {
    let dir = tempdir("heartbeats-quiet");
    let r = start(&dir, config(INTERVAL));
    let uri = format!("tcp://{}", r.tcp);
    let open = |name: &str| {
        let opts = ClientOptions { name: name.into(), dir: dir.clone(), ..ClientOptions::default() };
        let mut c = Client::connect(&uri, opts).unwrap();
        c.wait_connected(Duration::from_secs(5)).unwrap();
        c
    };
    let mut polled = open("polled");
    polled.subscribe("md/>").unwrap();
    let mut unpolled = open("unpolled");
    // Ten intervals: nothing published, `polled` polled, `unpolled` left
    // alone (its library's flusher thread sends its heartbeats).
    let mut gone = None;
    let until = Instant::now() + 10 * INTERVAL;
    while Instant::now() < until {
        polled.poll(
            |e| {
                if let ClientEvent::Disconnected { reason } = e {
                    gone = Some(reason.to_owned());
                }
            },
            16,
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(gone, None, "a quiet client that polls was cut");
    println!("the unpolled client's link: {:?}", unpolled.link_stats());
    // The unpolled one is still connected: what it publishes now arrives.
    unpolled.publish("md/eu/VOD", b"still here").unwrap();
    unpolled.flush().unwrap();
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    while got.is_empty() && Instant::now() < until {
        polled.poll(
            |e| match e {
                ClientEvent::Message(m) => got.push(m.payload.to_vec()),
                ClientEvent::Disconnected { reason } => panic!("the polled client lost the router: {reason}"),
                _ => {}
            },
            16,
        );
    }
    assert_eq!(got, [b"still here".to_vec()], "the client left alone for ten intervals was cut");
    let mut reconnected = false;
    unpolled.poll(|e| reconnected |= matches!(e, ClientEvent::Disconnected { .. }), 16);
    assert!(!reconnected, "the unpolled client had lost its session");
    // Both still there when the router stops: it closes two sessions.
    let report = r.stop();
    assert_eq!(report.clients, 2, "{report:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_client_whose_router_falls_silent_reconnects_after_two_intervals() {
    // A fake router: WELCOME and one HEARTBEAT (200 ms), then silence,
    // the connection left open (a host gone without a FIN looks alike).
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let welcome = ClientRepr { value: 1, body: b"fake", ..ClientRepr::new(ClientKind::Welcome) };
        let beat = ClientRepr { value: INTERVAL.as_millis() as u32, ..ClientRepr::new(ClientKind::Heartbeat) };
        s.write_all(&framed(&welcome)).unwrap();
        s.write_all(&framed(&beat)).unwrap();
        // Held open, unread, while the client decides.
        std::thread::sleep(Duration::from_secs(3));
        drop(s);
    });
    let dir = tempdir("heartbeats-router-silent");
    let opts = ClientOptions { name: "watcher".into(), dir: dir.clone(), ..ClientOptions::default() };
    let mut c = Client::connect(&format!("tcp://{addr}"), opts).unwrap();
    c.wait_connected(Duration::from_secs(5)).unwrap();
    let connected = Instant::now();
    let mut why = None;
    while why.is_none() && connected.elapsed() < Duration::from_secs(3) {
        c.poll(
            |e| {
                if let ClientEvent::Disconnected { reason } = e {
                    why = Some(reason.to_owned());
                }
            },
            16,
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let after = connected.elapsed();
    println!("the client gave up on a silent router after {after:?}: {why:?}");
    let why = why.expect("a client whose router fell silent never noticed");
    assert!(why.contains("nothing from the peer"), "{why}");
    assert!(after >= 2 * INTERVAL - Duration::from_millis(30) && after <= 4 * INTERVAL, "after {after:?}");
    fake.join().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A TCP relay to `to` whose router-to-client direction drops what it
/// reads while `mute` is set (a router whose heartbeats stop arriving).
fn relay(to: std::net::SocketAddr) -> (std::net::SocketAddr, std::sync::Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let mute = Arc::new(AtomicBool::new(false));
    let m = Arc::clone(&mute);
    let pump = |mut from: TcpStream, mut into: TcpStream, mute: Option<Arc<AtomicBool>>| {
        std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            while let Ok(n @ 1..) = from.read(&mut buf) {
                let dropped = mute.as_ref().is_some_and(|m| m.load(Ordering::Relaxed));
                if !dropped && into.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = into.shutdown(std::net::Shutdown::Both);
        });
    };
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let (Ok(c), Ok(r)) = (c, TcpStream::connect(to)) else { return };
            pump(c.try_clone().unwrap(), r.try_clone().unwrap(), None);
            pump(r, c, Some(Arc::clone(&m)));
        }
    });
    (addr, mute)
}

#[test]
fn a_publisher_whose_connection_is_lost_is_told_which_publishes_went_unconfirmed() {
    use std::sync::atomic::Ordering::SeqCst;
    let dir = tempdir("heartbeats-publish-gap");
    let r = start(&dir, config(INTERVAL));
    let (addr, mute) = relay(r.tcp);
    let opts = |name: &str| ClientOptions {
        name: name.into(),
        dir: dir.clone(),
        // A connection whose WELCOME the muted relay dropped is tried again soon.
        welcome_timeout: Duration::from_millis(300),
        reconnect_interval: Duration::from_millis(50),
        ..ClientOptions::default()
    };
    let mut c = Client::connect(&format!("tcp://{addr}"), opts("publisher")).unwrap();
    // It also receives a steady stream, so the router is never quiet
    // towards it: its receipts come from the publishes alone.
    c.subscribe("md/noise").unwrap();
    c.wait_connected(Duration::from_secs(5)).unwrap();
    let mut noise = Client::connect(&format!("tcp://{}", r.tcp), opts("noise")).unwrap();
    noise.wait_connected(Duration::from_secs(5)).unwrap();
    let mut seen: Vec<String> = Vec::new();
    let poll_for = |c: &mut Client, noise: &mut Client, seen: &mut Vec<String>, wait: Duration| {
        let until = Instant::now() + wait;
        while Instant::now() < until {
            let _ = noise.publish("md/noise", b"n");
            noise.poll(|_| {}, 64);
            c.poll(
                |e| match e {
                    ClientEvent::Disconnected { .. } => seen.push("disconnected".into()),
                    ClientEvent::PublishGap { from, to } => seen.push(format!("gap {from}..={to}")),
                    _ => {}
                },
                256,
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    for k in 0..100u32 {
        c.publish("md/gap", &k.to_le_bytes()).unwrap();
    }
    // A request is numbered apart (its id): no receipt counts it.
    c.send_request("svc/nobody", b"?", Duration::from_secs(1)).unwrap();
    c.flush().unwrap();
    // The router's receipt (an interval after the publishes) covers all
    // 100: a connection lost now would have nothing to report.
    poll_for(&mut c, &mut noise, &mut seen, 3 * INTERVAL);
    assert!(seen.is_empty(), "{seen:?}");
    mute.store(true, SeqCst);
    for k in 100..150u32 {
        c.publish("md/gap", &k.to_le_bytes()).unwrap();
    }
    c.flush().unwrap();
    assert_eq!(c.published(), 150);
    // Nothing more from the router: after two intervals the client drops
    // the connection, and says which publishes it cannot vouch for.
    poll_for(&mut c, &mut noise, &mut seen, 6 * INTERVAL);
    println!("the publisher saw {seen:?}");
    // (Then, muted, attempts that got no WELCOME: disconnected again, no gap.)
    assert_eq!(seen[..2], ["disconnected", "gap 100..=149"], "{seen:?}");
    let gaps = |seen: &[String]| seen.iter().filter(|e| e.starts_with("gap")).cloned().collect::<Vec<_>>();
    assert_eq!(gaps(&seen), ["gap 100..=149"], "{seen:?}");
    // Connected again: the numbers go on, and so do the receipts.
    mute.store(false, SeqCst);
    c.wait_connected(Duration::from_secs(5)).unwrap();
    for k in 150..160u32 {
        c.publish("md/gap", &k.to_le_bytes()).unwrap();
    }
    c.flush().unwrap();
    poll_for(&mut c, &mut noise, &mut seen, 3 * INTERVAL);
    mute.store(true, SeqCst);
    for k in 160..165u32 {
        c.publish("md/gap", &k.to_le_bytes()).unwrap();
    }
    c.flush().unwrap();
    poll_for(&mut c, &mut noise, &mut seen, 6 * INTERVAL);
    println!("then {seen:?}");
    assert_eq!(gaps(&seen), ["gap 100..=149", "gap 160..=164"], "{seen:?}");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
