//! Hostile TCP clients (issue 32): an oversize length prefix, a HELLO
//! dribbled a byte at a time, a subscriber that never reads. Each is cut
//! off or bounded, and counted, while a normal publisher/subscriber pair
//! (`tickwire_client`, over TCP) on the same router keeps delivering.
//!
//! The raw clients speak the real wire format: each client frame
//! (`tickwire_wire::client`) behind its 4-byte little-endian length. Every
//! loop is bounded in count and time; every socket is on 127.0.0.1.

mod common;

use common::{client, framed, frames, start, tempdir};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent};
use tickwire_router::config::LimitsConfig;
use tickwire_router::RouterConfig;
use tickwire_wire::client::{ClientKind, ClientRepr, RejectCode, SlowConsumer, CLIENT_PROTOCOL_VERSION};
use tickwire_wire::ClientFrame;

fn hello(name: &str, flags: u8) -> Vec<u8> {
    framed(&ClientRepr { value: CLIENT_PROTOCOL_VERSION, topic: name, flags, ..ClientRepr::new(ClientKind::Hello) })
}

/// Reads `s` until the router closes it (EOF or reset) or `wait` passes:
/// what it heard, and whether it was closed.
fn read_until_closed(s: &mut TcpStream, wait: Duration) -> (Vec<u8>, bool) {
    s.set_nonblocking(true).unwrap();
    let until = Instant::now() + wait;
    let mut heard = Vec::new();
    let mut buf = [0u8; 64 << 10];
    while Instant::now() < until {
        match s.read(&mut buf) {
            Ok(0) => return (heard, true),
            Ok(n) => heard.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(2)),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return (heard, true), // reset
        }
    }
    (heard, false)
}

/// A normal pair over TCP: `publ` publishes on `md/pair`, `sub` takes it.
struct Pair {
    publ: Client,
    sub: Client,
    /// The next sequence number `publ` sends.
    next: u64,
}

impl Pair {
    fn connect(addr: SocketAddr, dir: &std::path::Path) -> Self {
        let uri = format!("tcp://{addr}");
        let mut sub = client(&uri, dir, "pair-sub");
        sub.subscribe("md/pair").unwrap();
        let mut publ = client(&uri, dir, "pair-pub");
        sub.wait_connected(Duration::from_secs(5)).unwrap();
        publ.wait_connected(Duration::from_secs(5)).unwrap();
        let mut p = Self { publ, sub, next: 0 };
        // The subscription is in place once a probe comes through.
        let until = Instant::now() + Duration::from_secs(5);
        let mut seen = false;
        while !seen {
            assert!(Instant::now() < until, "the pair's subscription did not take within 5 s");
            p.publ.publish("md/pair", &u64::MAX.to_le_bytes()).unwrap();
            p.publ.flush().unwrap();
            let t = Instant::now() + Duration::from_millis(20);
            while !seen && Instant::now() < t {
                p.sub.poll(|e| seen |= matches!(e, ClientEvent::Message(_)), 64);
            }
        }
        // Probes still on their way.
        let t = Instant::now() + Duration::from_millis(50);
        while Instant::now() < t {
            p.sub.poll(|_| {}, 64);
        }
        p
    }

    /// Sends `n` messages one at a time, `gap` apart, each awaited by the
    /// subscriber (at most 1 s); returns the longest a message took.
    /// Panics if one is lost, out of order, or counted as discarded.
    fn exchange(&mut self, n: usize, gap: Duration) -> Duration {
        let mut worst = Duration::ZERO;
        for _ in 0..n {
            let seq = self.next;
            self.next += 1;
            let sent = Instant::now();
            self.publ.publish("md/pair", &seq.to_le_bytes()).unwrap();
            let mut got = None;
            while got.is_none() && sent.elapsed() < Duration::from_secs(1) {
                self.sub.poll(
                    |e| {
                        if let ClientEvent::Message(m) = e {
                            assert_eq!(m.discarded, 0, "the pair's subscriber lost messages");
                            got = Some(u64::from_le_bytes(m.payload.try_into().unwrap()));
                        }
                    },
                    1,
                );
                self.publ.poll(|_| {}, 16);
            }
            let took = sent.elapsed();
            assert_eq!(got, Some(seq), "message {seq} of the pair (waited {took:?})");
            worst = worst.max(took);
            let next = sent + gap;
            while Instant::now() < next {
                self.sub.poll(|_| {}, 16);
                std::thread::yield_now();
            }
        }
        worst
    }
}

#[test]
fn an_oversize_length_prefix_closes_its_connection_and_counts_a_violation_while_a_pair_keeps_delivering() {
    let dir = tempdir("hostile-oversize");
    let r = start(&dir, RouterConfig::default());
    let mut pair = Pair::connect(r.tcp, &dir);
    let before = pair.exchange(50, Duration::from_millis(1));
    // One before HELLO, one after it.
    let mut raw: Vec<(TcpStream, Instant)> = [Vec::new(), hello("evil", 0)]
        .into_iter()
        .map(|first| {
            let mut s = TcpStream::connect(r.tcp).unwrap();
            s.write_all(&[first, u32::MAX.to_le_bytes().to_vec()].concat()).unwrap();
            (s, Instant::now())
        })
        .collect();
    for (i, (s, sent)) in raw.iter_mut().enumerate() {
        let (heard, closed) = read_until_closed(s, Duration::from_secs(2));
        assert!(closed, "client {i}: still open {:?} after its oversize length", sent.elapsed());
        let f = frames(&heard);
        let close = f.iter().find(|f| f.0 == ClientKind::Close).unwrap_or_else(|| panic!("client {i}: {f:?}"));
        assert_eq!(close.1, RejectCode::TooLarge as u32, "client {i}: {close:?}");
    }
    let after = pair.exchange(200, Duration::from_millis(1));
    println!("the pair's slowest message: {before:?} before, {after:?} after");
    assert!(after <= Duration::from_millis(100), "a message of the pair took {after:?}");
    let totals = r.stop().totals;
    assert_eq!(totals.violations, 2, "{totals:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What a dribbled HELLO came to.
struct Dribbled {
    /// Bytes of it written before the router closed the connection (or all).
    written: usize,
    heard: Vec<u8>,
    /// How long after the connect the router closed it.
    closed_after: Option<Duration>,
}

/// Connects and writes `bytes` one byte per write, `pause` apart, looking
/// for the router's answer before each byte (and after the last, for
/// `listen`); stops writing once the router closes the connection.
fn dribble(addr: SocketAddr, bytes: Vec<u8>, pause: Duration, listen: Duration) -> Dribbled {
    let mut s = TcpStream::connect(addr).unwrap();
    let connected = Instant::now();
    s.set_nodelay(true).unwrap();
    s.set_nonblocking(true).unwrap();
    let mut d = Dribbled { written: 0, heard: Vec::new(), closed_after: None };
    let mut buf = [0u8; 4096];
    let mut hear = |s: &mut TcpStream, d: &mut Dribbled| loop {
        match s.read(&mut buf) {
            Ok(0) => d.closed_after = Some(connected.elapsed()),
            Ok(n) => {
                d.heard.extend_from_slice(&buf[..n]);
                continue;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => d.closed_after = Some(connected.elapsed()),
        }
        break;
    };
    for &byte in &bytes {
        hear(&mut s, &mut d);
        if d.closed_after.is_some() {
            return d;
        }
        match s.write(&[byte]) {
            Ok(1) => d.written += 1,
            _ => {
                d.closed_after = Some(connected.elapsed());
                return d;
            }
        }
        std::thread::sleep(pause);
    }
    let until = Instant::now() + listen;
    while d.closed_after.is_none() && Instant::now() < until {
        hear(&mut s, &mut d);
        std::thread::sleep(Duration::from_millis(2));
    }
    d
}

#[test]
fn a_hello_dribbled_a_byte_per_5_ms_is_served_within_the_hello_timeout_and_closed_past_it_while_a_pair_keeps_delivering(
) {
    const TIMEOUT: Duration = Duration::from_millis(300);
    const PAUSE: Duration = Duration::from_millis(5);
    let dir = tempdir("hostile-dribble");
    let limits = LimitsConfig { hello_timeout: humantime::format_duration(TIMEOUT).to_string(), ..Default::default() };
    let r = start(&dir, RouterConfig { limits, ..RouterConfig::default() });
    let mut pair = Pair::connect(r.tcp, &dir);

    // 24 bytes: done in about 120 ms. 4 + 16 + 100 = 120 bytes: 600 ms.
    let short = hello("slow", 0);
    let long = hello(&"x".repeat(100), 0);
    // Sizes as promised: well within, and twice past, the timeout.
    let ms = PAUSE.as_millis() as usize;
    assert!(short.len() * ms <= 150 && long.len() * ms >= 2 * 300, "{} and {} bytes", short.len(), long.len());
    let addr = r.tcp;
    let served = std::thread::spawn(move || dribble(addr, short, PAUSE, Duration::from_millis(500)));
    let cut = std::thread::spawn(move || dribble(addr, long, PAUSE, Duration::from_secs(2)));
    // Meanwhile: 200 messages, 3 ms apart (600 ms, past both).
    let worst = pair.exchange(200, Duration::from_millis(3));
    let (served, cut) = (served.join().unwrap(), cut.join().unwrap());
    println!("the pair's slowest message: {worst:?}; the long HELLO cut after {:?}", cut.closed_after);
    assert!(worst <= Duration::from_millis(100), "a message of the pair took {worst:?}");

    assert_eq!(served.written, 24);
    assert_eq!(served.closed_after, None, "the HELLO finished in time was closed");
    assert_eq!(frames(&served.heard).first().map(|f| f.0), Some(ClientKind::Welcome), "{:?}", frames(&served.heard));

    let t = cut.closed_after.expect("the HELLO still unfinished at the deadline was not closed");
    assert!(cut.written < 120, "the whole long HELLO was taken");
    assert!(t + Duration::from_millis(20) >= TIMEOUT && t <= TIMEOUT + Duration::from_secs(1), "closed after {t:?}");
    let f = frames(&cut.heard);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        (f[0].0, f[0].1, f[0].2.as_str()),
        (ClientKind::Close, RejectCode::Limit as u32, "no HELLO within 300ms")
    );

    let totals = r.stop().totals;
    assert_eq!((totals.hello_timeouts, totals.violations), (1, 0), "{totals:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Bytes of deliveries the router may queue for one client in the
/// never-reading tests (room for 100 ms of lag of the one that reads).
const QUEUE: usize = 1 << 20;
/// Messages published on the busy topic, [`PAYLOAD`] bytes each, at
/// [`RATE`] a second: 8 MB, twice what the kernel's TCP buffers can take
/// for the one that never reads (`tcp_wmem` tops out at 4 MiB).
const BUSY: u64 = 8_000;
const PAYLOAD: usize = 1_000;
const RATE: u64 = 10_000;

/// A raw subscriber to `md/busy` that asks for `policy` and never reads
/// after its WELCOME.
fn never_reading_subscriber(addr: SocketAddr, policy: SlowConsumer) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    // A fixed receive buffer (no autotuning): 256 KiB, not smaller: under
    // two of loopback's 64 KiB segments the connection stalls in
    // zero-window probes once it is read at last.
    tickwire_transport::set_socket_buffers(&s, 128 << 10);
    let sub = framed(&ClientRepr { value: 1, topic: "md/busy", ..ClientRepr::new(ClientKind::Subscribe) });
    (&s).write_all(&[hello("never-reads", policy.hello_flags()), sub].concat()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // Its WELCOME (a frame of its own: read exactly it).
    let mut len = [0u8; 4];
    (&s).read_exact(&mut len).unwrap();
    let mut welcome = vec![0u8; u32::from_le_bytes(len) as usize];
    (&s).read_exact(&mut welcome).unwrap();
    assert_eq!(ClientFrame::new_checked(&welcome).unwrap().kind(), ClientKind::Welcome);
    s
}

/// Publishes [`BUSY`] messages on `md/busy` at [`RATE`] while
/// `fast` (subscribed to `md/busy`) is read; returns what `fast` got, in
/// order (panics on a discard).
fn publish_busy(publ: &mut Client, fast: &mut Client) -> Vec<u64> {
    let mut got = Vec::with_capacity(BUSY as usize);
    let read = |fast: &mut Client, got: &mut Vec<u64>| {
        fast.poll(
            |e| {
                if let ClientEvent::Message(m) = e {
                    assert_eq!(m.discarded, 0, "the subscriber that reads lost messages");
                    got.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap()));
                }
            },
            256,
        );
    };
    let begin = Instant::now();
    for i in 0..BUSY {
        let due = begin + Duration::from_micros(i * 1_000_000 / RATE);
        while Instant::now() < due {
            read(fast, &mut got);
        }
        let mut msg = [0u8; PAYLOAD];
        msg[..8].copy_from_slice(&i.to_le_bytes());
        let until = Instant::now() + Duration::from_secs(1);
        while let Err(e) = publ.publish("md/busy", &msg) {
            assert!(Instant::now() < until, "publish {i}: {e}");
            publ.poll(|_| {}, 16);
        }
    }
    publ.flush().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while (got.len() as u64) < BUSY && Instant::now() < until {
        read(fast, &mut got);
        publ.poll(|_| {}, 16);
    }
    got
}

fn busy_router(name: &str) -> (std::path::PathBuf, common::Running) {
    let dir = tempdir(name);
    let limits = LimitsConfig { queue_bytes: QUEUE, max_frame: 16 << 10, ..Default::default() };
    let r = start(&dir, RouterConfig { limits, ..RouterConfig::default() });
    (dir, r)
}

fn fast_and_publisher(addr: SocketAddr, dir: &std::path::Path) -> (Client, Client) {
    let uri = format!("tcp://{addr}");
    let mut fast = client(&uri, dir, "fast");
    fast.subscribe("md/busy").unwrap();
    let mut publ = client(&uri, dir, "busy-pub");
    fast.wait_connected(Duration::from_secs(5)).unwrap();
    publ.wait_connected(Duration::from_secs(5)).unwrap();
    // Its subscription is in place before the first message counts:
    // SUBSCRIBE and the first PUBLISH are on different connections.
    std::thread::sleep(Duration::from_millis(100));
    (fast, publ)
}

/// Client `name` as the router's status file (written once a second)
/// describes it once `done` says so (within 5 s; else the last seen).
fn status_of(
    dir: &std::path::Path,
    name: &str,
    done: impl Fn(&tickwire_router::status::ClientStatus) -> bool,
) -> Option<tickwire_router::status::ClientStatus> {
    let until = Instant::now() + Duration::from_secs(5);
    let mut last = None;
    while Instant::now() < until {
        if let Ok(st) = tickwire_router::status::read(dir) {
            last = st.clients.into_iter().find(|c| c.name == name);
            if last.as_ref().is_some_and(&done) {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    last
}

#[test]
fn a_subscriber_that_never_reads_has_its_queue_bounded_and_its_oldest_discarded_and_the_other_gets_every_message() {
    let (dir, r) = busy_router("hostile-never-reads");
    let _never = never_reading_subscriber(r.tcp, SlowConsumer::DropOldest);
    let (mut fast, mut publ) = fast_and_publisher(r.tcp, &dir);
    let got = publish_busy(&mut publ, &mut fast);
    assert_eq!(got, (0..BUSY).collect::<Vec<_>>(), "the subscriber that reads got every message, in order");
    // Once every message is accounted for: handed to its socket, queued
    // or discarded.
    let st = status_of(&dir, "never-reads", |c| c.messages_out + c.queue_messages as u64 + c.discards >= BUSY)
        .expect("the never-reading subscriber is in the router's status");
    let totals = r.stop().totals;
    println!(
        "never-reading subscriber: {} messages handed to its socket, {} ({} bytes) queued, {} discarded",
        st.messages_out, st.queue_messages, st.queue_bytes, st.discards
    );
    // The router's memory for it is its queue, full at most.
    assert!(st.queue_bytes <= QUEUE, "{} bytes queued, the limit is {QUEUE}", st.queue_bytes);
    // What neither its queue nor the kernel (4 MiB at most) took was
    // dropped, and counted.
    let framed = (4 + 16 + "md/busy".len() + PAYLOAD) as u64;
    assert!(st.discards * framed >= BUSY * framed - (QUEUE as u64) - (4 << 20) - (1 << 20), "{st:?}");
    assert_eq!(totals.discards, st.discards, "{totals:?}");
    assert_eq!(totals.slow_disconnected, 0, "{totals:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_subscriber_that_never_reads_under_the_disconnect_policy_is_closed_and_counted_and_the_other_gets_every_message() {
    let (dir, r) = busy_router("hostile-never-reads-disconnect");
    let mut never = never_reading_subscriber(r.tcp, SlowConsumer::Disconnect);
    let (mut fast, mut publ) = fast_and_publisher(r.tcp, &dir);
    let got = publish_busy(&mut publ, &mut fast);
    assert_eq!(got, (0..BUSY).collect::<Vec<_>>(), "the subscriber that reads got every message, in order");
    // Read at last: what its socket held, then the end (the router waits
    // up to 5 s for a slow consumer's CLOSE to go).
    let (heard, closed) = read_until_closed(&mut never, Duration::from_secs(10));
    assert!(closed, "the subscriber that never read is still connected");
    println!("never-reading subscriber: {} bytes heard before the end", heard.len());
    // What its socket held, then why.
    let f = frames(&heard);
    let last = f.last().expect("frames before the end");
    assert_eq!((last.0, last.1), (ClientKind::Close, RejectCode::Limit as u32), "{:?}", (last.0, last.1));
    assert!(last.2.contains("slow consumer"), "{:?}", last.2);
    let totals = r.stop().totals;
    assert_eq!(totals.slow_disconnected, 1, "{totals:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The agents' `write`/`writev` calls on TCP sockets, from the metrics
/// page (`tickwire_router_agent_socket_writes_total`, all agents).
fn socket_writes(metrics: SocketAddr) -> u64 {
    let mut c = TcpStream::connect(metrics).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let n: Vec<u64> = (text.lines())
        .filter(|l| l.starts_with("tickwire_router_agent_socket_writes_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert!(!n.is_empty(), "no socket_writes in the metrics page:\n{text}");
    n.iter().sum()
}

/// A subscriber that never reads leaves its socket full and frames queued
/// once a busy run is over: the router waits for epoll to say the socket
/// is writable, and does not try (and fail) a `writev` on it every duty
/// cycle meanwhile (it did: 40 stalled clients cost 40 failed calls a
/// cycle, 2-3 times the router's CPU).
#[test]
fn a_full_socket_is_not_written_to_again_until_it_is_writable() {
    let dir = tempdir("hostile-parked");
    let limits =
        LimitsConfig { queue_bytes: QUEUE, max_frame: 16 << 10, heartbeat_interval: "0s".into(), ..Default::default() };
    let cfg = RouterConfig { limits, metrics: Some("127.0.0.1:0".into()), ..RouterConfig::default() };
    let r = start(&dir, cfg);
    let metrics = r.metrics.expect("the metrics listener");
    let _never = never_reading_subscriber(r.tcp, SlowConsumer::DropOldest);
    let (mut fast, mut publ) = fast_and_publisher(r.tcp, &dir);
    let got = publish_busy(&mut publ, &mut fast);
    assert_eq!(got.len() as u64, BUSY, "the subscriber that reads got every message");
    let st = status_of(&dir, "never-reads", |c| c.queue_messages > 0).expect("never-reads in the status");
    assert!(st.queue_messages > 0, "frames wait for the full socket: {st:?}");
    // Quiet now: no publisher, no heartbeats; only the full socket waits.
    std::thread::sleep(Duration::from_millis(100));
    let before = socket_writes(metrics);
    std::thread::sleep(Duration::from_millis(500));
    let after = socket_writes(metrics);
    println!(
        "a full socket with {} frames ({} bytes) queued for it: {} socket writes in 500 ms of quiet ({before} before)",
        st.queue_messages,
        st.queue_bytes,
        after - before
    );
    assert!(after - before <= 2, "{} writes in 500 ms to a socket that stays full", after - before);
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
