//! Connection limits (issue 42, item 4): past `limits.max_connections`
//! or `limits.max_connections_per_address` a new connection is refused at
//! once, with CLOSE (`Limit`) naming the limit over TCP and a reset over
//! TLS, counted by reason; once a connection goes, a new one gets in.
//! (Descriptors running out is `crates/cli/tests/limits.rs`: it needs a
//! router process of its own.)
//!
//! Each test prints how long the refusal took and the counts
//! (`cargo test ... -- --nocapture`).

mod common;

use common::{client, framed, frames, start, tempdir};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, ClientOptions};
use tickwire_router::config::LimitsConfig;
use tickwire_router::RouterConfig;
use tickwire_shm::counters::{counters_path, Kind, ROUTER_ACCEPT_NAMES};
use tickwire_shm::CountersReader;
use tickwire_wire::client::{ClientKind, ClientRepr, RejectCode, CLIENT_PROTOCOL_VERSION};

/// The router's accept counters (`Kind::RouterAccept`) by name, as
/// `tickwire stat` shows them; they are published once a millisecond
/// after a connection is taken, and every 20 ms.
fn accept_counts(dir: &Path) -> Vec<(&'static str, u64)> {
    let r = CountersReader::open(&counters_path(dir, std::process::id())).unwrap();
    let set = r.sets().into_iter().find(|s| s.kind == Kind::RouterAccept).expect("a router-accept set");
    ROUTER_ACCEPT_NAMES.iter().copied().zip(set.values).collect()
}

fn count(dir: &Path, name: &str) -> u64 {
    accept_counts(dir).into_iter().find(|(n, _)| *n == name).map_or(0, |(_, v)| v)
}

/// Waits (at most 2 s) until the router's count `name` is `want`.
fn wait_count(dir: &Path, name: &str, want: u64) -> u64 {
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let v = count(dir, name);
        if v == want || Instant::now() > until {
            return v;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn connected(uri: &str, dir: &Path, name: &str) -> Client {
    let mut c = client(uri, dir, name);
    c.wait_connected(Duration::from_secs(5)).unwrap_or_else(|e| panic!("{name}: {e}"));
    c
}

/// Polls a client until its session ends (at most `wait`); returns the
/// reason and how long it took.
fn refusal(c: &mut Client, wait: Duration) -> Option<(String, Duration)> {
    let start = Instant::now();
    while start.elapsed() < wait {
        let mut reason = None;
        c.poll(
            |e| {
                if let ClientEvent::Disconnected { reason: r } = e {
                    reason = Some(r.to_owned());
                }
            },
            16,
        );
        if let Some(r) = reason {
            return Some((r, start.elapsed()));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    None
}

/// A raw connection from `from` (an address of loopback) that says HELLO;
/// returns every frame it gets until the router closes it (at most 2 s)
/// and how long that took.
fn raw_hello(router: SocketAddr, from: &str) -> (Vec<(ClientKind, u32, String)>, Duration, bool) {
    use nix::sys::socket::{bind, connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
    let fd = socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None).unwrap();
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn::from(format!("{from}:0").parse::<std::net::SocketAddrV4>().unwrap()),
    )
    .unwrap();
    let SocketAddr::V4(to) = router else { panic!("{router}: IPv4") };
    connect(std::os::fd::AsRawFd::as_raw_fd(&fd), &SockaddrIn::from(to)).unwrap();
    let mut s = TcpStream::from(fd);
    let start = Instant::now();
    let hello = ClientRepr { value: CLIENT_PROTOCOL_VERSION, topic: "raw", ..ClientRepr::new(ClientKind::Hello) };
    s.write_all(&framed(&hello)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
    let mut heard = Vec::new();
    let mut buf = [0u8; 4096];
    let mut closed = false;
    while start.elapsed() < Duration::from_secs(2) {
        match s.read(&mut buf) {
            Ok(0) => {
                closed = true;
                break;
            }
            Ok(n) => heard.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                // Welcomed: nothing more is coming; the test is done with it.
                if frames(&heard).iter().any(|f| f.0 == ClientKind::Welcome) {
                    break;
                }
            }
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    (frames(&heard), start.elapsed(), closed)
}

fn limits(max: Option<usize>, per_address: usize) -> LimitsConfig {
    LimitsConfig { max_connections: max, max_connections_per_address: per_address, ..LimitsConfig::default() }
}

#[test]
fn past_max_connections_a_client_gets_close_limit_at_once_and_gets_in_once_one_leaves() {
    let dir = tempdir("limits-max");
    let r = start(&dir, RouterConfig { limits: limits(Some(3), 0), ..RouterConfig::default() });
    let uri = format!("tcp://{}", r.tcp);
    let mut held: Vec<Client> = (0..3).map(|k| connected(&uri, &dir, &format!("held-{k}"))).collect();
    assert_eq!(wait_count(&dir, "connections", 3), 3);
    assert_eq!(count(&dir, "max_connections"), 3);

    // The fourth: CLOSE (Limit) naming the limit, through the client API.
    let mut fourth = client(&uri, &dir, "fourth");
    let (reason, took) = refusal(&mut fourth, Duration::from_secs(2)).expect("a refusal within 2 s");
    println!("the 4th client refused in {took:?}: {reason}");
    assert!(
        reason.contains("(Limit)") && reason.contains("too many connections: 3 (limits.max_connections)"),
        "{reason}"
    );
    assert!(!fourth.is_connected());
    let e = fourth.wait_connected(Duration::from_millis(300)).unwrap_err().to_string();
    assert!(e.contains("Limit") && e.contains("limits.max_connections"), "the API error names it: {e}");
    drop(fourth);

    // On the wire: CLOSE with the code, then the end of the stream.
    let (heard, took, closed) = raw_hello(r.tcp, "127.0.0.1");
    println!("a raw connection past the limit: {heard:?} and its end in {took:?}");
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert_eq!((heard[0].0, RejectCode::from_u32(heard[0].1)), (ClientKind::Close, RejectCode::Limit));
    assert!(closed && took < Duration::from_secs(2), "closed {closed} after {took:?}");
    let refused = wait_count(&dir, "refused_max_connections", 3);
    println!("counted: {:?}", accept_counts(&dir));
    assert!(refused >= 3, "the 4th (at least twice: it tried again) and the raw one: {refused}");
    assert_eq!(count(&dir, "connections"), 3, "refusals hold no slot");

    // One leaves: the next gets in.
    held.pop().unwrap().close();
    let start = Instant::now();
    let mut fifth = client(&uri, &dir, "fifth");
    fifth.wait_connected(Duration::from_secs(2)).unwrap_or_else(|e| panic!("once one left: {e}"));
    println!("once one left, a new client got in within {:?}", start.elapsed());
    assert_eq!(wait_count(&dir, "connections", 3), 3);
    drop((held, fifth));
    assert_eq!(wait_count(&dir, "connections", 0), 0, "every slot given back when the sockets close");
    r.stop();
}

#[test]
fn past_the_per_address_limit_that_address_is_refused_and_another_gets_in() {
    let dir = tempdir("limits-address");
    let r = start(&dir, RouterConfig { limits: limits(None, 2), ..RouterConfig::default() });
    let uri = format!("tcp://{}", r.tcp);
    let held: Vec<Client> = (0..2).map(|k| connected(&uri, &dir, &format!("held-{k}"))).collect();

    let mut third = client(&uri, &dir, "third");
    let (reason, took) = refusal(&mut third, Duration::from_secs(2)).expect("a refusal within 2 s");
    println!("the 3rd client from 127.0.0.1 refused in {took:?}: {reason}");
    let want = "too many connections from 127.0.0.1: 2 (limits.max_connections_per_address)";
    assert!(reason.contains("(Limit)") && reason.contains(want), "{reason}");
    drop(third);

    // Another address of loopback is another address.
    let (heard, took, _) = raw_hello(r.tcp, "127.0.0.2");
    println!("from 127.0.0.2: {heard:?} in {took:?}");
    assert_eq!(heard.first().map(|f| f.0), Some(ClientKind::Welcome), "{heard:?}");
    let (heard, _, closed) = raw_hello(r.tcp, "127.0.0.1");
    assert_eq!(heard.first().map(|f| (f.0, f.1)), Some((ClientKind::Close, RejectCode::Limit as u32)), "{heard:?}");
    assert!(closed);
    let refused = wait_count(&dir, "refused_per_address", 2);
    println!("counted: {:?}", accept_counts(&dir));
    assert!(refused >= 2, "{refused}");
    assert_eq!(count(&dir, "refused_max_connections"), 0);

    drop(held);
    let start = Instant::now();
    connected(&uri, &dir, "again");
    println!("once the two left, a client from 127.0.0.1 got in within {:?}", start.elapsed());
    r.stop();
}

#[test]
fn over_tls_a_connection_past_the_limit_is_reset_at_once() {
    let dir = tempdir("limits-tls");
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = tickwire_testkit::self_signed(&dir, "router");
    let tls = Some(tickwire_router::config::TlsFiles { cert: cert.clone(), key, client_ca: None });
    let r = start(&dir, RouterConfig { tls, limits: limits(Some(1), 0), ..RouterConfig::default() });
    let uri = format!("tls://localhost:{}", r.tcp.port());
    let opts = |name: &str| ClientOptions {
        name: name.into(),
        dir: dir.clone(),
        tls_ca: Some(cert.clone()),
        ..ClientOptions::default()
    };
    let mut first = Client::connect(&uri, opts("first")).unwrap();
    first.wait_connected(Duration::from_secs(5)).unwrap();
    let mut second = Client::connect(&uri, opts("second")).unwrap();
    let (reason, took) = refusal(&mut second, Duration::from_secs(2)).expect("a refusal within 2 s");
    println!("a TLS client past the limit, in {took:?}: {reason}");
    assert!(reason.to_lowercase().contains("reset"), "{reason}");
    assert!(second.refused().is_none(), "a reset is tried again, not a refusal for good");
    assert!(wait_count(&dir, "refused_max_connections", 1) >= 1);
    drop(first);
    second.wait_connected(Duration::from_secs(6)).unwrap_or_else(|e| panic!("once the first left: {e}"));
    r.stop();
}
