//! NATS clients that misbehave, on the router's real NATS listener over
//! loopback, spoken to in raw bytes: one that stops answering the
//! router's PINGs is closed after two heartbeat intervals while one that
//! answers stays, and so does a subscriber that only answers PINGs while
//! messages flow to it; one that sends and never reads what it is answered is
//! closed as a slow consumer, its staged bytes bounded; one that sends
//! what is not an operation gets the NATS server's -ERR and the end.

mod common;

use common::{start, tempdir};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tickwire_router::config::LimitsConfig;
use tickwire_router::RouterConfig;

fn config(heartbeat: &str) -> RouterConfig {
    RouterConfig {
        nats_listen: vec!["127.0.0.1:0".into()],
        limits: LimitsConfig { heartbeat_interval: heartbeat.into(), ..LimitsConfig::default() },
        ..RouterConfig::default()
    }
}

/// Connects and reads INFO.
fn open(addr: std::net::SocketAddr) -> BufReader<TcpStream> {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("INFO {"), "{line}");
    r
}

/// Connects, reads INFO, logs in: PONG comes back.
fn connect(addr: std::net::SocketAddr) -> BufReader<TcpStream> {
    let mut r = open(addr);
    let mut line = String::new();
    r.get_mut().write_all(b"CONNECT {}\r\nPING\r\n").unwrap();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "PONG\r\n");
    r
}

/// As from a NATS server, the first line after INFO is the PONG to the
/// client's first PING (or a `+OK`/`-ERR`), even when CONNECT and PING come
/// apart: Python's and Go's clients read one line after their PING and fail
/// or misbehave on anything else (a router PING there left a Python
/// client's subscriptions unsent). The first PING comes an interval later.
#[test]
fn a_nats_client_s_first_line_after_its_connect_is_the_pong_to_its_ping_even_when_sent_apart() {
    let dir = tempdir("nats-first-pong");
    let router = start(&dir, config("1s"));
    let mut r = open(router.nats.unwrap());
    let mut line = String::new();
    let started = Instant::now();
    r.get_mut().write_all(b"CONNECT {}\r\n").unwrap();
    // The router reads CONNECT alone and welcomes the client first.
    std::thread::sleep(Duration::from_millis(100));
    r.get_mut().write_all(b"PING\r\n").unwrap();
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "PONG\r\n", "the first line after CONNECT and PING");
    line.clear();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "PING\r\n");
    assert!(started.elapsed() >= Duration::from_millis(900), "the first PING an interval on: {:?}", started.elapsed());
    drop(router);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_nats_subscriber_receiving_steadily_is_still_pinged_and_stays_while_it_answers() {
    let dir = tempdir("nats-busy-liveness");
    let router = start(&dir, config("200ms"));
    let addr = router.nats.unwrap();
    let mut sub = connect(addr);
    sub.get_mut().write_all(b"SUB md.> 1\r\nPING\r\n").unwrap();
    let mut line = String::new();
    sub.read_line(&mut line).unwrap();
    assert_eq!(line, "PONG\r\n");
    sub.get_mut().set_read_timeout(Some(Duration::from_millis(5))).unwrap();
    let mut publisher = connect(addr);
    let (started, mut last_sent) = (Instant::now(), Instant::now());
    let (mut pings, mut msgs, mut closed) = (0, 0, false);
    // 1.5 s of a message every 20 ms: the router writes to the subscriber
    // all the time, and the subscriber sends nothing but PONGs.
    while started.elapsed() < Duration::from_millis(1500) {
        if last_sent.elapsed() >= Duration::from_millis(20) {
            publisher.get_mut().write_all(b"PUB md.x 2\r\nhi\r\n").unwrap();
            last_sent = Instant::now();
        }
        line.clear();
        match sub.read_line(&mut line) {
            Ok(0) => closed = true,
            Ok(_) if line == "PING\r\n" => {
                pings += 1;
                sub.get_mut().write_all(b"PONG\r\n").unwrap();
            }
            Ok(_) if line.starts_with("MSG md.x 1 2") => msgs += 1,
            Ok(_) => assert!(!line.starts_with("-ERR"), "{line}"),
            Err(_) => {}
        }
        if closed {
            break;
        }
    }
    assert!(!closed && pings >= 3, "pinged every interval while busy ({pings}), and kept (closed: {closed})");
    assert!(msgs >= 40, "messages all along: {msgs}");
    drop(router);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_nats_client_that_stops_answering_pings_is_closed_and_one_that_answers_stays() {
    let dir = tempdir("nats-liveness");
    let router = start(&dir, config("200ms"));
    let addr = router.nats.unwrap();
    let mut silent = connect(addr);
    let mut alive = connect(addr);
    alive.get_mut().set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let started = Instant::now();
    let mut pings = 0;
    // The live one answers every PING for 1.5 s.
    while started.elapsed() < Duration::from_millis(1500) {
        let mut line = String::new();
        if alive.read_line(&mut line).is_ok() && line == "PING\r\n" {
            pings += 1;
            alive.get_mut().write_all(b"PONG\r\n").unwrap();
        }
    }
    assert!(pings >= 3, "PINGs every interval: {pings}");
    // The silent one was sent PINGs and then closed.
    let mut rest = String::new();
    let end = silent.read_to_string(&mut rest);
    assert!(end.is_ok(), "closed by the router, not still open: {end:?} after {rest:?}");
    assert!(rest.starts_with("PING\r\n"), "PINGs first: {rest:?}");
    assert!(rest.contains("-ERR 'no frame or heartbeat from the client"), "then why: {rest:?}");
    // The live one is still served.
    alive.get_mut().set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    alive.get_mut().write_all(b"PING\r\n").unwrap();
    let mut line = String::new();
    while line != "PONG\r\n" {
        line.clear();
        alive.read_line(&mut line).unwrap();
        assert!(!line.is_empty(), "closed");
    }
    drop(router);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_nats_client_that_never_reads_its_answers_is_closed_with_its_staged_bytes_bounded() {
    let dir = tempdir("nats-slow");
    let router = start(&dir, config("0s"));
    let mut c = connect(router.nats.unwrap()).into_inner();
    c.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
    // PINGs whose PONGs are never read: 6 bytes staged each, 16 MiB bound.
    let burst = b"PING\r\n".repeat(100_000);
    let started = Instant::now();
    let mut sent = 0usize;
    let closed = loop {
        match c.write(&burst) {
            Ok(n) => sent += n,
            Err(_) => break true,
        }
        if started.elapsed() > Duration::from_secs(30) || sent > 200 << 20 {
            break false;
        }
    };
    assert!(closed, "still open after {sent} bytes of PINGs in {:?}", started.elapsed());
    println!("closed after {sent} bytes of PINGs in {:?}", started.elapsed());
    drop(router);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn what_is_not_a_nats_operation_gets_the_servers_err_and_the_end() {
    let dir = tempdir("nats-garbage");
    let router = start(&dir, config("0s"));
    for (bytes, err) in [
        (&b"FOO bar\r\n"[..], "-ERR 'Unknown Protocol Operation'"),
        (&b"PUB a 99999999\r\n"[..], "-ERR 'Maximum Payload Violation'"),
        (&[b'x'; 5000][..], "-ERR 'Maximum Control Line Exceeded'"),
    ] {
        let mut c = connect(router.nats.unwrap());
        c.get_mut().write_all(bytes).unwrap();
        let mut rest = String::new();
        let _ = c.read_to_string(&mut rest);
        assert!(rest.starts_with(err), "{rest:?}");
    }
    drop(router);
    let _ = std::fs::remove_dir_all(&dir);
}
