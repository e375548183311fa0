//! A router on a thread and clients of both kinds, in one process: fan-out,
//! single delivery, malformed input, a stalled subscriber, restarts.

mod common;

use common::{client, quiet, receive, start, tempdir};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, ClientOptions};
use tickwire_router::{RouterConfig, Server, SlowConsumer};
use tickwire_wire::client::{ClientKind, ClientRepr, RejectCode, CLIENT_PROTOCOL_VERSION, IPC_IN_CHANNEL};

#[test]
fn wildcard_fan_out_over_shared_memory_and_tcp_delivers_once_per_subscriber() {
    let dir = tempdir("fanout");
    let r = start(&dir, RouterConfig::default());
    let tcp = format!("tcp://{}", r.tcp);
    let mut subs = vec![client("ipc", &dir, "a"), client(&tcp, &dir, "b"), client("ipc", &dir, "c")];
    subs[0].subscribe("md/>").unwrap();
    subs[0].subscribe("md/*/VOD").unwrap(); // overlaps md/>: still one delivery
    subs[1].subscribe("md/*/VOD").unwrap();
    subs[2].subscribe("fx/>").unwrap();
    let mut ipc_pub = client("ipc", &dir, "p1");
    let mut tcp_pub = client(&tcp, &dir, "p2");
    for c in subs.iter_mut().chain([&mut ipc_pub, &mut tcp_pub]) {
        c.wait_connected(Duration::from_secs(5)).unwrap();
    }
    ipc_pub.publish("md/eu/VOD", b"bid 101.25").unwrap();
    tcp_pub.publish("md/us/IBM", b"bid 150").unwrap();
    // Zero copy over shared memory: write in place.
    let mut claim = ipc_pub.try_claim("fx/EURUSD", 6).unwrap();
    claim.buffer().copy_from_slice(b"1.0850");
    claim.commit();
    let a = receive(&mut subs[0], 2);
    let mut topics: Vec<_> = a.iter().map(|m| m.0.as_str()).collect();
    topics.sort_unstable();
    assert_eq!(topics, ["md/eu/VOD", "md/us/IBM"]);
    assert_eq!(receive(&mut subs[1], 1), [("md/eu/VOD".into(), b"bid 101.25".to_vec(), 0)]);
    assert_eq!(receive(&mut subs[2], 1), [("fx/EURUSD".into(), b"1.0850".to_vec(), 0)]);
    for s in &mut subs {
        assert!(quiet(s, Duration::from_millis(100)), "one delivery per subscriber");
    }
    let report = r.stop();
    assert_eq!(report.clients, 5);
    let _ = std::fs::remove_dir_all(&dir);
}

fn tcp_frame(r: ClientRepr<'_>) -> Vec<u8> {
    let mut b = vec![0u8; 4 + r.buffer_len()];
    b[..4].copy_from_slice(&(r.buffer_len() as u32).to_le_bytes());
    r.emit(&mut b[4..]).unwrap();
    b
}

/// Reads frames until the connection ends; returns the CLOSE frame's code
/// and reason, if one came.
fn read_close(s: &mut TcpStream) -> Option<(u32, String)> {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut all = Vec::new();
    let _ = s.read_to_end(&mut all);
    let mut at = 0;
    while at + 4 <= all.len() {
        let len = u32::from_le_bytes(all[at..at + 4].try_into().unwrap()) as usize;
        let f = tickwire_wire::ClientFrame::new_checked(&all[at + 4..at + 4 + len]).ok()?;
        if f.kind() == ClientKind::Close {
            return Some((f.value(), String::from_utf8_lossy(f.body()).into_owned()));
        }
        at += 4 + len;
    }
    None
}

#[test]
fn malformed_frames_close_only_the_client_that_sent_them() {
    let dir = tempdir("malformed");
    let r = start(&dir, RouterConfig::default());
    let tcp = format!("tcp://{}", r.tcp);
    let mut sub = client("ipc", &dir, "innocent");
    sub.subscribe("t").unwrap();
    let mut publ = client(&tcp, &dir, "innocent-pub");
    sub.wait_connected(Duration::from_secs(5)).unwrap();
    publ.wait_connected(Duration::from_secs(5)).unwrap();
    let hello =
        tcp_frame(ClientRepr { value: CLIENT_PROTOCOL_VERSION, topic: "evil", ..ClientRepr::new(ClientKind::Hello) });
    let cases: Vec<(&str, Vec<u8>, u32, &str)> = vec![
        (
            "garbage kind",
            [hello.clone(), vec![20, 0, 0, 0], vec![0xee; 20]].concat(),
            RejectCode::Protocol as u32,
            "unknown client frame kind",
        ),
        (
            "oversized length",
            [hello.clone(), u32::MAX.to_le_bytes().to_vec()].concat(),
            RejectCode::TooLarge as u32,
            "limit",
        ),
        (
            "publish before hello",
            tcp_frame(ClientRepr { topic: "t", ..ClientRepr::new(ClientKind::Publish) }),
            RejectCode::Protocol as u32,
            "HELLO",
        ),
        (
            "topic past the frame",
            [hello.clone(), vec![17, 0, 0, 0, 5, 0, 200, 0], vec![0; 13]].concat(),
            RejectCode::Protocol as u32,
            "truncated",
        ),
        (
            "router-only frame",
            [hello, tcp_frame(ClientRepr { topic: "t", ..ClientRepr::new(ClientKind::Deliver) })].concat(),
            RejectCode::Protocol as u32,
            "router's to send",
        ),
    ];
    for (what, bytes, code, says) in cases {
        let mut s = TcpStream::connect(r.tcp).unwrap();
        s.write_all(&bytes).unwrap();
        let (got, reason) = read_close(&mut s).unwrap_or_else(|| panic!("{what}: no CLOSE"));
        assert_eq!(got, code, "{what}: {reason}");
        assert!(reason.contains(says), "{what}: {reason}");
        // Everyone else is unaffected.
        publ.publish("t", what.as_bytes()).unwrap();
        assert_eq!(receive(&mut sub, 1)[0].1, what.as_bytes(), "{what}");
    }

    // A shared-memory client writing garbage into its own log.
    let ctx = tickwire_shm::Context::new(&dir).unwrap();
    let (mut evil, log) =
        ctx.appender_sealed(IPC_IN_CHANNEL, 0xbad, &tickwire_shm::LogConfig::with_capacity(64 << 10)).unwrap();
    let _login = common::ipc_login(&dir, 0xbad, &[&log], "evil");
    let until = Instant::now() + Duration::from_secs(5);
    while !evil.is_connected() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    evil.offer(&[9u8; 40]).unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        evil.do_work();
        if !evil.is_connected() {
            break; // the router let go of the log
        }
        assert!(Instant::now() < until, "the router still reads a log that sent garbage");
        std::thread::sleep(Duration::from_millis(5));
    }
    publ.publish("t", b"still here").unwrap();
    assert_eq!(receive(&mut sub, 1)[0].1, b"still here");
    drop(evil);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A router whose clients' logs and queues hold 64 KiB: a subscriber that
/// stops reading fills them within a second at 10k msg/s.
fn start_small(dir: &Path, slow_consumer: SlowConsumer) -> common::Running {
    let limits = tickwire_router::config::LimitsConfig {
        queue_bytes: 64 << 10,
        max_frame: 16 << 10,
        slow_consumer,
        ..Default::default()
    };
    start(dir, RouterConfig { ipc_log_bytes: 64 << 10, limits, ..RouterConfig::default() })
}

/// What a subscriber that keeps up saw during [`stall`].
#[derive(Default)]
struct Timed {
    got: u64,
    discards: u64,
    /// The longest a message took (its send time is at bytes 8..16).
    worst: Duration,
}

impl Timed {
    fn poll(&mut self, c: &mut Client) {
        c.poll(
            |e| {
                if let ClientEvent::Message(m) = e {
                    self.got += 1;
                    self.discards += u64::from(m.discarded);
                    let sent = u64::from_le_bytes(m.payload[8..16].try_into().unwrap());
                    self.worst = self.worst.max(Duration::from_nanos(tickwire_shm::os::monotonic_ns() - sent));
                }
            },
            64,
        );
    }
}

/// The slow subscriber reads again, until `done` says it has what it should
/// (or `wait` passes): the sequence numbers it got, and the discards it was
/// told of.
fn wake(c: &mut Client, wait: Duration, done: impl Fn(&[u64]) -> bool) -> (Vec<u64>, u64) {
    let (mut seqs, mut discarded) = (Vec::new(), 0u64);
    let until = Instant::now() + wait;
    while !done(&seqs) && Instant::now() < until {
        c.poll(
            |e| {
                if let ClientEvent::Message(m) = e {
                    discarded += u64::from(m.discarded);
                    seqs.push(u64::from_le_bytes(m.payload[..8].try_into().unwrap()));
                }
            },
            256,
        );
    }
    (seqs, discarded)
}

/// Why the router closed `c`'s session, as `c` hears it when it reads
/// again (5 s at most; empty if it did not).
fn closed_why(c: &mut Client) -> String {
    let mut why = String::new();
    let until = Instant::now() + Duration::from_secs(5);
    while why.is_empty() && Instant::now() < until {
        c.poll(
            |e| {
                if let ClientEvent::Disconnected { reason } = e {
                    why = reason.to_owned();
                }
            },
            256,
        );
    }
    why
}

/// The 2.5 s a slow subscriber sleeps through: `publish` is handed `n`
/// 150-byte messages at 10k msg/s (sequence number at 0..8, send time at
/// 8..16) while `fast` is read into `seen`; then `fast` is read until it
/// has all of them, and the 2.5 s are waited out.
fn stall(n: u64, seen: &mut Timed, fast: &mut Client, mut publish: impl FnMut(&mut [u8; 150])) {
    let begin = Instant::now();
    for i in 0..n {
        let due = begin + Duration::from_micros(i * 100);
        while Instant::now() < due {
            seen.poll(fast);
        }
        let mut msg = [0u8; 150];
        msg[..8].copy_from_slice(&i.to_le_bytes());
        msg[8..16].copy_from_slice(&tickwire_shm::os::monotonic_ns().to_le_bytes());
        publish(&mut msg);
    }
    while seen.got < n && begin.elapsed() < Duration::from_secs(10) {
        seen.poll(fast);
    }
    std::thread::sleep(Duration::from_millis(2500u64.saturating_sub(begin.elapsed().as_millis() as u64)));
}

#[test]
fn a_stalled_subscriber_loses_its_oldest_and_the_others_do_not_wait() {
    let dir = tempdir("stalled");
    let r = start_small(&dir, SlowConsumer::DropOldest);
    let mut slow = client("ipc", &dir, "slow");
    let mut fast = client("ipc", &dir, "fast");
    let mut publ = client("ipc", &dir, "pub");
    slow.subscribe("md/>").unwrap();
    fast.subscribe("md/>").unwrap();
    for c in [&mut slow, &mut fast, &mut publ] {
        c.wait_connected(Duration::from_secs(5)).unwrap();
    }
    // The slow one stops reading for 2.5 s while 20,000 messages go by
    // (about 3 MB: far more than its 64 KiB log and 64 KiB queue hold).
    let n = 20_000u64;
    let mut fast_side = Timed::default();
    stall(n, &mut fast_side, &mut fast, |msg| {
        while publ.publish("md/eu/VOD", msg).is_err() {
            publ.poll(|_| {}, 1);
        }
    });
    let worst = fast_side.worst;
    assert_eq!(fast_side.got, n, "the fast subscriber got everything");
    assert_eq!(fast_side.discards, 0);
    // Generous: a host pause can take milliseconds, but waiting on the
    // stalled one would take seconds.
    assert!(worst < Duration::from_millis(500), "the fast subscriber waited {worst:?}");
    // The slow one wakes: the oldest were dropped, and the first message
    // after the hole says how many.
    let (seqs, discarded) = wake(&mut slow, Duration::from_secs(5), |seqs| seqs.last() == Some(&(n - 1)));
    assert_eq!(seqs.last(), Some(&(n - 1)), "the newest messages reach the slow subscriber");
    assert!(discarded > 0, "the slow subscriber heard of its discards");
    assert_eq!(seqs.len() as u64 + discarded, n, "every message is delivered or counted as discarded");
    let t = r.stop();
    assert_eq!(t.dropped, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under `slow_consumer = "disconnect"` a subscriber that stops reading
/// for 2.5 s is closed, saying why, and the others do not wait for it.
#[test]
fn a_stalled_subscriber_under_the_disconnect_policy_is_closed_and_the_others_do_not_wait() {
    let dir = tempdir("stalled-disconnect");
    let r = start_small(&dir, SlowConsumer::Disconnect);
    let (mut slow, mut fast, mut publ) =
        (client("ipc", &dir, "slow"), client("ipc", &dir, "fast"), client("ipc", &dir, "p"));
    slow.subscribe("md/>").unwrap();
    fast.subscribe("md/>").unwrap();
    for c in [&mut slow, &mut fast, &mut publ] {
        c.wait_connected(Duration::from_secs(5)).unwrap();
    }
    let (n, mut fast_side) = (20_000u64, Timed::default());
    stall(n, &mut fast_side, &mut fast, |msg| {
        while publ.publish("md/eu/VOD", msg).is_err() {
            publ.poll(|_| {}, 1);
        }
    });
    assert_eq!(fast_side.got, n, "the fast subscriber got everything");
    assert!(fast_side.worst < Duration::from_millis(500), "the fast subscriber waited {:?}", fast_side.worst);
    // The slow one wakes to what it was sent before the CLOSE, then the CLOSE.
    let why = closed_why(&mut slow);
    assert!(why.contains("slow consumer"), "{why:?}");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Under `slow_consumer = "back-pressure"` a subscriber that stops
/// reading for 2.5 s loses nothing: the publisher it shares is held (its
/// publishes come back `BackPressured`), and a publisher on another topic,
/// with its own subscriber, goes on as if nothing happened.
#[test]
fn a_stalled_subscriber_under_back_pressure_holds_its_publisher_only() {
    use tickwire_client::PublishError;
    let dir = tempdir("stalled-back-pressure");
    let r = start_small(&dir, SlowConsumer::BackPressure);
    let opts = |name: &str| ClientOptions {
        name: name.into(),
        dir: dir.clone(),
        log_bytes: 64 << 10,
        ..ClientOptions::default()
    };
    let connect = |name: &str| Client::connect("ipc", opts(name)).unwrap();
    let (mut slow, mut fast, mut pub_a, mut pub_b) = (connect("slow"), connect("fast"), connect("a"), connect("b"));
    slow.subscribe("md/a").unwrap();
    fast.subscribe("md/b").unwrap();
    for c in [&mut slow, &mut fast, &mut pub_a, &mut pub_b] {
        c.wait_connected(Duration::from_secs(5)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    let (n, mut fast_side) = (20_000u64, Timed::default());
    let (mut next_a, mut held_a) = (0u64, 0u64);
    stall(n, &mut fast_side, &mut fast, |msg| {
        while pub_b.publish("md/b", msg).is_err() {
            pub_b.poll(|_| {}, 1);
        }
        // A goes as fast as it is let: held while the slow one sleeps.
        msg[..8].copy_from_slice(&next_a.to_le_bytes());
        match pub_a.publish("md/a", msg) {
            Ok(()) => next_a += 1,
            Err(PublishError::BackPressured) => held_a += 1,
            Err(e) => panic!("{e}"),
        }
        pub_a.poll(|_| {}, 1);
    });
    assert_eq!(fast_side.got, n, "the other topic's subscriber got everything");
    assert!(fast_side.worst < Duration::from_millis(500), "and did not wait: {:?}", fast_side.worst);
    assert!(held_a > 0, "the shared publisher was held (BackPressured)");
    // The slow one wakes: every message A published, in order, none dropped.
    let (seqs, discarded) = wake(&mut slow, Duration::from_secs(10), |seqs| seqs.len() as u64 >= next_a);
    assert_eq!(discarded, 0);
    assert_eq!(seqs, (0..next_a).collect::<Vec<_>>(), "every held message, in order");
    let report = r.stop();
    assert!(report.totals.back_pressured > 0 && report.totals.discards == 0, "{:?}", report.totals);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A subscriber that asks for back-pressure in its HELLO (the router's
/// default is drop-oldest) and never reads again holds its publisher for
/// `back_pressure_timeout`, then is disconnected, saying why, and the
/// publisher goes on.
#[test]
fn a_subscriber_that_holds_its_publisher_past_the_timeout_is_disconnected() {
    use tickwire_client::PublishError;
    let dir = tempdir("back-pressure-timeout");
    let limits = tickwire_router::config::LimitsConfig {
        queue_bytes: 64 << 10,
        max_frame: 16 << 10,
        back_pressure_timeout: "1s".into(),
        ..Default::default()
    };
    let r = start(&dir, RouterConfig { ipc_log_bytes: 64 << 10, limits, ..RouterConfig::default() });
    let opts = |name: &str, slow_consumer| ClientOptions {
        name: name.into(),
        dir: dir.clone(),
        log_bytes: 64 << 10,
        slow_consumer,
        ..ClientOptions::default()
    };
    let mut slow = Client::connect("ipc", opts("slow", Some(SlowConsumer::BackPressure))).unwrap();
    let mut publ = Client::connect("ipc", opts("p", None)).unwrap();
    slow.subscribe("md/a").unwrap();
    for c in [&mut slow, &mut publ] {
        c.wait_connected(Duration::from_secs(5)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    // Publish flat out: the longest run of BackPressured is the hold (a
    // full log waiting for the router's next read is far shorter), and it
    // ends with the timeout.
    let (start_at, msg) = (Instant::now(), [0u8; 150]);
    let (mut since, mut longest) = (None::<Instant>, Duration::ZERO);
    while longest < Duration::from_millis(500) && start_at.elapsed() < Duration::from_secs(10) {
        match publ.publish("md/a", &msg) {
            Ok(()) => longest = longest.max(since.take().map_or(Duration::ZERO, |t| t.elapsed())),
            Err(PublishError::BackPressured) => {
                since.get_or_insert_with(Instant::now);
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => panic!("{e}"),
        }
        publ.poll(|_| {}, 16);
    }
    // 1 s, seen at a 20 ms housekeeping; a host pause may add a little.
    assert!(longest >= Duration::from_millis(900) && longest < Duration::from_secs(5), "held for {longest:?}");
    let why = closed_why(&mut slow);
    assert!(why.contains("back_pressure_timeout"), "{why:?}");
    let report = r.stop();
    assert!(report.totals.back_pressured > 0 && report.totals.slow_disconnected == 1, "{:?}", report.totals);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn clients_wait_for_a_router_and_come_back_after_it_restarts() {
    let dir = tempdir("restart");
    std::fs::create_dir_all(&dir).unwrap();
    // Started before any router: they wait.
    let mut sub = client("ipc", &dir, "early-sub");
    sub.subscribe("x/>").unwrap();
    let mut publ = client("ipc", &dir, "early-pub");
    assert!(sub.wait_connected(Duration::from_millis(200)).is_err());
    let r = start(&dir, RouterConfig::default());
    sub.wait_connected(Duration::from_secs(5)).unwrap();
    publ.wait_connected(Duration::from_secs(5)).unwrap();
    publ.publish("x/1", b"one").unwrap();
    assert_eq!(receive(&mut sub, 1)[0].0, "x/1");
    // A second router on the same directory is refused.
    let e = Server::start(RouterConfig { dir: dir.clone(), listen: vec![], ..RouterConfig::default() }).unwrap_err();
    assert!(e.to_string().contains("another router serves"), "{e}");
    r.stop();
    let mut said = None;
    let until = Instant::now() + Duration::from_secs(5);
    while said.is_none() && Instant::now() < until {
        sub.poll(
            |e| {
                if let ClientEvent::Disconnected { reason } = e {
                    said = Some(reason.to_owned())
                }
            },
            16,
        );
    }
    assert!(said.is_some_and(|r| r.contains("shutting down")), "the subscriber hears why");
    let _r2 = start(&dir, RouterConfig::default());
    sub.wait_connected(Duration::from_secs(5)).unwrap();
    // The publisher never polled: its first publish finds the router gone,
    // and it reconnects as an application's retry loop polls.
    assert!(publ.publish("x/2", b"two").is_err());
    let until = Instant::now() + Duration::from_secs(5);
    while publ.publish("x/2", b"two").is_err() {
        assert!(Instant::now() < until, "the publisher did not reconnect: {}", publ.last_error());
        publ.poll(|_| {}, 16);
    }
    assert_eq!(receive(&mut sub, 1)[0].0, "x/2", "the subscription came back with the client");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn tls_clients_are_served_and_plain_or_untrusting_ones_are_turned_away() {
    let d = tempdir("tls");
    let (cert, key) = tickwire_testkit::self_signed(&d, "router");
    let (stranger, _) = tickwire_testkit::self_signed(&d, "stranger");
    let tls = Some(tickwire_router::config::TlsFiles::new(cert.clone(), key));
    let r = start(&d, RouterConfig { tls, ..RouterConfig::default() });
    let uri = format!("tls://localhost:{}", r.tcp.port());
    let tls_client = |name: &str, ca: &Path| {
        let opts =
            ClientOptions { name: name.into(), dir: d.clone(), tls_ca: Some(ca.into()), ..ClientOptions::default() };
        Client::connect(&uri, opts).unwrap()
    };
    let mut sub = tls_client("sub", &cert);
    sub.subscribe("md/>").unwrap();
    sub.wait_connected(Duration::from_secs(5)).unwrap();
    let mut publisher = tls_client("pub", &cert);
    publisher.wait_connected(Duration::from_secs(5)).unwrap();
    // The subscription is in place once a message comes through.
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    while got.is_empty() && Instant::now() < until {
        publisher.publish("md/eu/VOD", b"bid 101.25").unwrap();
        got = receive(&mut sub, 1);
    }
    assert_eq!(got[0].0, "md/eu/VOD");
    // A message of many TLS records.
    let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    publisher.publish("md/big", &big).unwrap();
    let got = receive(&mut sub, 8);
    assert!(got.iter().any(|(t, p, _)| t == "md/big" && *p == big), "the big message did not arrive whole");

    // A client speaking plain TCP to the TLS listener is let go: a TLS
    // alert record, then the end of the connection (or a reset). Silence
    // until the read timeout is not a close.
    let mut plain = TcpStream::connect(r.tcp).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let hello = ClientRepr { value: CLIENT_PROTOCOL_VERSION, topic: "plain", ..ClientRepr::new(ClientKind::Hello) };
    plain.write_all(&tcp_frame(hello)).unwrap();
    let (mut heard, mut ended) = (Vec::new(), None);
    let mut buf = [0u8; 256];
    while ended.is_none() {
        match plain.read(&mut buf) {
            Ok(0) => ended = Some("closed".to_owned()),
            Ok(n) => heard.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                panic!("the router kept a plain client on its TLS listener for 5 s (heard {heard:02x?})")
            }
            Err(e)
                if matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted) =>
            {
                ended = Some(format!("reset ({e})"))
            }
            Err(e) => panic!("reading the plain client's connection: {e}"),
        }
    }
    // Whatever came before the end is a TLS alert record (content type 21).
    assert!(heard.is_empty() || heard[0] == 21, "{ended:?} after {heard:02x?}, which is not a TLS alert");

    // A client that trusts another certificate is refused, says why and stops trying.
    let mut doubter = tls_client("doubter", &stranger);
    let e = doubter.wait_connected(Duration::from_secs(5)).unwrap_err().to_string();
    assert!(e.contains("refused") && e.contains("certificate"), "{e}");
    assert!(doubter.refused().is_some());

    // And the router still serves the others.
    publisher.publish("md/eu/VOD", b"still here").unwrap();
    assert_eq!(receive(&mut sub, 1)[0].1, b"still here");
    // Without a certificate authority, a tls:// client cannot even start.
    let opts = ClientOptions { dir: d.clone(), ..ClientOptions::default() };
    assert!(Client::connect(&uri, opts).unwrap_err().to_string().contains("tls_ca"));
    drop(r);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_shared_memory_login_the_router_never_answers_is_tried_again() {
    use std::os::unix::net::UnixListener;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let dir = tempdir("login-unanswered");
    std::fs::create_dir_all(&dir).unwrap();
    // A router that stops in the middle of each login: it takes the
    // message and closes without an answer (a router killed there).
    let listener = UnixListener::bind(dir.join(tickwire_wire::client::IPC_LOGIN_SOCKET)).unwrap();
    let logins = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&logins);
    std::thread::spawn(move || {
        for _ in 0..2 {
            let (mut s, _) = listener.accept().unwrap();
            let _ = s.read(&mut [0u8; 256]);
            counted.fetch_add(1, Ordering::Relaxed);
        }
    });
    let opts = ClientOptions {
        name: "unanswered".into(),
        dir: dir.clone(),
        reconnect_interval: Duration::from_millis(20),
        ..ClientOptions::default()
    };
    let mut c = Client::connect("ipc", opts).unwrap();
    let start = Instant::now();
    let mut said = String::new();
    while logins.load(Ordering::Relaxed) < 2 && start.elapsed() < Duration::from_secs(5) {
        c.poll(|_| {}, 16);
        if c.last_error().contains("without an answer") {
            said = c.last_error().to_owned();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = start.elapsed();
    println!("an unanswered login tried again within {took:?}: {said}");
    assert!(said.contains("without an answer"), "the client said {:?}", c.last_error());
    // Not the welcome timeout (10 s): the close itself ends the attempt.
    assert_eq!(logins.load(Ordering::Relaxed), 2, "a second login within {took:?}");
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `ClientOptions::echo` false, over shared memory and TCP: the client's
/// own publishes do not come back to its subscription; another client's
/// do, and another subscriber gets both.
#[test]
fn a_client_that_asks_for_no_echo_gets_others_publishes_but_not_its_own() {
    let dir = tempdir("no-echo");
    let r = start(&dir, RouterConfig::default());
    for uri in ["ipc".to_owned(), format!("tcp://{}", r.tcp)] {
        let opts = ClientOptions { name: "quiet".into(), dir: dir.clone(), echo: false, ..ClientOptions::default() };
        let mut quiet = Client::connect(&uri, opts).unwrap();
        let mut other = client(&uri, &dir, "other");
        for c in [&mut quiet, &mut other] {
            c.subscribe("md/>").unwrap();
            c.wait_connected(Duration::from_secs(10)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
        // The router routed the quiet one's publish before the other's:
        // the other got it first. Had it gone to the quiet one too, it
        // would come before the other's there.
        quiet.publish("md/own", b"mine").unwrap();
        let seen: Vec<String> = receive(&mut other, 1).into_iter().map(|m| m.0).collect();
        assert_eq!(seen, ["md/own"], "{uri}");
        other.publish("md/other", b"theirs").unwrap();
        let got: Vec<String> = receive(&mut quiet, 1).into_iter().map(|m| m.0).collect();
        assert_eq!(got, ["md/other"], "{uri}: not its own, others'");
    }
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
