//! Nothing stuck forever (issue 43): a message, a publisher or a client
//! that used to wait for good, each with the command a user runs.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

#[path = "support/cmd.rs"]
mod cmd;
use cmd::hash_password;

/// A router on a free loopback port, stopped when dropped.
struct Router {
    child: Child,
    uri: String,
    dir: std::path::PathBuf,
}

impl Router {
    fn start(name: &str, config: &str, args: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("tw-live-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = dir.join("router.toml");
        std::fs::write(&cfg, config).unwrap();
        let mut child = Command::new(BIN)
            .arg("--dir")
            .arg(dir.join("shm"))
            .arg("--config")
            .arg(&cfg)
            .args(["router", "--no-ipc", "--listen", "tcp://127.0.0.1:0"])
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let uri = loop {
            line.clear();
            assert!(err.read_line(&mut line).unwrap() > 0, "the router exited before listening");
            if let Some(rest) = line.strip_prefix("router listening: ") {
                break rest.split_whitespace().next().unwrap().to_owned();
            }
        };
        // Keep draining its log so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in err.lines() {});
        Self { child, uri, dir }
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `tickwire ARGS` for at most `limit`: its status (None: killed at
/// the limit) and stderr.
fn run_for(args: &[&str], limit: Duration) -> (Option<std::process::ExitStatus>, String) {
    let mut child = Command::new(BIN).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let end = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (status, reader.join().unwrap())
}

/// Bug 4: a guaranteed message over the router's `max_frame` was resent
/// after every reconnection, for ever, blocking everything behind it. It
/// is refused at publish time, naming the limit; what comes after it goes.
#[test]
fn a_guaranteed_message_over_max_frame_is_refused_at_once_naming_the_limit() {
    let journal = std::env::temp_dir().join(format!("tw-live-journal-{}", std::process::id()));
    let r = Router::start("big", "", &["--journal", journal.to_str().unwrap()]);
    let t = Instant::now();
    let args = ["pub", "--router", &r.uri, "--guaranteed", "--size", "2MiB", "--count", "1", "--topic", "big/x"];
    let (status, err) = run_for(&args, Duration::from_secs(10));
    let status = status.unwrap_or_else(|| panic!("still publishing after 10 s: {err}"));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("over the router's limit of 1049088 bytes") && err.contains("max_frame"), "{err}");
    println!("a 2 MiB guaranteed publish refused in {:?}", t.elapsed());
    // A publish within the limit on the same router is stored and acknowledged.
    let args = ["pub", "--router", &r.uri, "--guaranteed", "--size", "1000", "--count", "3", "--topic", "big/x"];
    let (status, err) = run_for(&args, Duration::from_secs(10));
    assert!(status.is_some_and(|s| s.success()), "{err}");
    let _ = std::fs::remove_dir_all(&journal);
}

/// Bug 4, the router's side: a router with a smaller `max_frame` says so
/// in WELCOME, and the client refuses by that limit, not its own.
#[test]
fn the_router_tells_its_max_frame_in_welcome_and_the_client_keeps_to_it() {
    let r = Router::start("small", "[router.limits]\nmax_frame = 65536\n", &[]);
    let mut client = tickwire_client::Client::connect(&r.uri, tickwire_client::ClientOptions::default()).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    while !client.is_connected() {
        client.poll(|_| {}, 16);
        assert!(Instant::now() < end, "never connected");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(client.max_frame(), 65536);
    let e = client.publish("big/x", &[0u8; 70_000]).unwrap_err();
    assert!(e.to_string().contains("over the router's limit of 65536 bytes"), "{e}");
    client.publish("big/x", &[0u8; 60_000]).unwrap();
    assert!(client.is_connected());
}

fn users_config(extra: &str) -> String {
    format!(
        "{extra}\n[[users]]\nname = \"desk\"\npassword_hash = \"{}\"\npublish = [\"md/>\"]\nsubscribe = [\"md/>\"]\n",
        hash_password("s3cret")
    )
}

fn desk(uri: &str) -> tickwire_client::Client {
    let opts = tickwire_client::ClientOptions {
        user: Some("desk".into()),
        password: Some("s3cret".into()),
        ..tickwire_client::ClientOptions::default()
    };
    tickwire_client::Client::connect(uri, opts).unwrap()
}

/// Bug 1: a client sends HELLO and then every SUBSCRIBE before WELCOME;
/// while its password was checked the router kept 256 frames at most,
/// then closed it, and the client came back every 100 ms for ever. Its
/// subscriptions are kept up to `max_subscriptions`, and it logs in.
#[test]
fn a_client_with_many_subscriptions_and_a_password_logs_in_and_gets_them_all() {
    let r = Router::start("subs", &users_config(""), &[]);
    let mut c = desk(&r.uri);
    for i in 0..300 {
        c.subscribe(&format!("md/eq/S{i}")).unwrap();
    }
    let mut events = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    while !c.is_connected() {
        c.poll(|e| events.push(format!("{e:?}")), 64);
        assert!(Instant::now() < end, "not logged in within 10 s: {events:?} ({})", c.last_error());
        std::thread::sleep(Duration::from_millis(1));
    }
    // The last subscription is live: a message on it comes back.
    let mut got = 0;
    let end = Instant::now() + Duration::from_secs(10);
    while got == 0 {
        let _ = c.publish("md/eq/S299", b"x");
        c.poll(
            |e| {
                if let tickwire_client::ClientEvent::Message(m) = e {
                    got += usize::from(m.topic == "md/eq/S299");
                }
            },
            64,
        );
        assert!(Instant::now() < end, "nothing on the 300th subscription");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!events.iter().any(|e| e.contains("Disconnected")), "{events:?}");
}

/// Bug 1, the client's side: refused for a limit (here more subscriptions
/// than the router's `max_subscriptions` before its WELCOME), it backs off
/// instead of coming back every 100 ms.
#[test]
fn a_client_refused_for_a_limit_backs_off() {
    let r = Router::start("limit", &users_config("[router.limits]\nmax_subscriptions = 10\n"), &[]);
    let mut c = desk(&r.uri);
    for i in 0..50 {
        c.subscribe(&format!("md/eq/S{i}")).unwrap();
    }
    let mut closed = Vec::new();
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        c.poll(
            |e| {
                if let tickwire_client::ClientEvent::Disconnected { reason } = e {
                    closed.push(reason.to_owned());
                }
            },
            64,
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(!c.is_connected());
    // Each session ends with the router's refusal; a write racing the
    // router's close may see the reset first.
    let refused = |w: &String| w.contains("Limit") && w.contains("subscriptions");
    let reset = |w: &String| w.contains("Connection reset") || w.contains("Broken pipe");
    assert!(closed.iter().all(|w| refused(w) || reset(w)), "{closed:?}");
    assert!(closed.iter().any(refused), "the refusal said why at least once: {closed:?}");
    // 100, 200, 400, 800, 1600 ms: at most 5 sessions in 3 s (29 before).
    assert!((1..=6).contains(&closed.len()), "{} sessions in 3 s: {closed:?}", closed.len());
    println!("refused {} times in 3 s, backing off", closed.len());
}

/// Bug 2: over TLS, first frames of more than 64 KiB (HELLO and 2,500
/// subscriptions) were taken for a closed connection before the handshake
/// ended, and the client reconnected for ever.
#[test]
fn a_tls_client_with_first_frames_over_64_kib_connects() {
    let certs = std::env::temp_dir().join(format!("tw-live-certs-{}", std::process::id()));
    let (cert, key) = tickwire_testkit::self_signed(&certs, "router");
    let r = Router::start("tls", "", &["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()]);
    let port = r.uri.rsplit(':').next().unwrap();
    let opts = tickwire_client::ClientOptions { tls_ca: Some(cert.clone()), ..Default::default() };
    let mut c = tickwire_client::Client::connect(&format!("tls://localhost:{port}"), opts).unwrap();
    for i in 0..2500 {
        c.subscribe(&format!("md/eq/a-rather-long-instrument-name-{i}")).unwrap();
    }
    let mut events = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    while !c.is_connected() {
        c.poll(|e| events.push(format!("{e:?}")), 64);
        assert!(Instant::now() < end, "not connected within 10 s: {events:?} ({})", c.last_error());
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(!events.iter().any(|e| e.contains("Disconnected")), "{events:?}");
    let _ = std::fs::remove_dir_all(&certs);
}

/// Bug 5: an application waiting on `Client::as_fd` level-triggered, with
/// a limit per poll, used to strand the frames the client had already read
/// (they wait in the client, where the socket's readiness does not show
/// them). `has_buffered` says when to poll again.
#[test]
fn level_triggered_polling_of_the_client_fd_strands_no_frame() {
    use std::os::fd::AsRawFd;
    let r = Router::start("fd", "", &[]);
    let connected = |uri: &str| {
        let mut c = tickwire_client::Client::connect(uri, tickwire_client::ClientOptions::default()).unwrap();
        c.wait_connected(Duration::from_secs(10)).unwrap();
        c
    };
    let mut sub = connected(&r.uri);
    sub.subscribe("md/>").unwrap();
    let mut publisher = connected(&r.uri);
    // The subscription is in place once a probe comes back.
    let end = Instant::now() + Duration::from_secs(10);
    let mut seen = false;
    while !seen {
        publisher.publish("md/probe", b"p").unwrap();
        sub.poll(|e| seen |= matches!(e, tickwire_client::ClientEvent::Message(_)), 1000);
        assert!(Instant::now() < end, "the subscription never took");
        std::thread::sleep(Duration::from_millis(5));
    }
    while sub.poll(|_| {}, 1000) > 0 {}
    let n = 1000;
    for i in 0..n {
        let end = Instant::now() + Duration::from_secs(5);
        while publisher.publish("md/x", format!("{i}").as_bytes()).is_err() {
            publisher.poll(|_| {}, 16);
            assert!(Instant::now() < end);
        }
    }
    let mut got = 0;
    let end = Instant::now() + Duration::from_secs(5);
    while got < n && Instant::now() < end {
        publisher.poll(|_| {}, 16);
        if !sub.has_buffered() {
            let fd = sub.as_fd().expect("connected").as_raw_fd();
            let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd for the duration of the call.
            let ready = unsafe { libc::poll(&mut p, 1, 100) };
            if ready <= 0 {
                continue;
            }
        }
        sub.poll(
            |e| {
                if let tickwire_client::ClientEvent::Message(m) = e {
                    got += usize::from(m.topic == "md/x");
                }
            },
            64,
        );
    }
    assert_eq!(got, n, "frames stranded in the client");
}

/// A client waiting for WELCOME used to wait for ever (a router that
/// hangs, or another server on the port): it gives up after
/// `welcome_timeout`, says why, and tries again.
#[test]
fn a_client_that_gets_no_welcome_gives_up_and_says_why() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let uri = format!("tcp://{}", silent.local_addr().unwrap());
    let opts = tickwire_client::ClientOptions { welcome_timeout: Duration::from_millis(300), ..Default::default() };
    let mut c = tickwire_client::Client::connect(&uri, opts).unwrap();
    let mut why = None;
    let t = Instant::now();
    while why.is_none() && t.elapsed() < Duration::from_secs(5) {
        c.poll(
            |e| {
                if let tickwire_client::ClientEvent::Disconnected { reason } = e {
                    why = Some(reason.to_owned());
                }
            },
            16,
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let why = why.expect("still waiting for WELCOME after 5 s");
    assert!(why.contains("no WELCOME from the router within 300ms"), "{why}");
    assert!(t.elapsed() < Duration::from_secs(2), "gave up after {:?}", t.elapsed());
    drop(silent);
}

/// Issue 42: a back-pressure subscriber that stops reading holds its TCP
/// publisher; when the router cuts it (`back_pressure_timeout`), the
/// publisher's socket, full, signals no new readiness: it was never read
/// again. It resumes at once, and a plain subscriber gets everything.
#[test]
fn a_tcp_publisher_held_by_a_stopped_back_pressure_subscriber_resumes_when_it_is_cut() {
    let cfg = "[router.limits]\nback_pressure_timeout = \"1s\"\n";
    let r = Router::start("held", cfg, &[]);
    let spawn = |args: &[&str]| {
        let mut c = Command::new(BIN).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let err = c.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        (Reaped(c), rx)
    };
    let says = |rx: &std::sync::mpsc::Receiver<String>, text: &str| {
        let mut seen = Vec::new();
        while let Ok(l) = rx.recv_timeout(Duration::from_secs(10)) {
            if l.contains(text) {
                return l;
            }
            seen.push(l);
        }
        panic!("no {text:?} within 10 s: {seen:?}");
    };
    let sub = ["sub", "--router", &r.uri, "--topic", "orders/>"];
    let (stalled, stalled_err) = spawn(&[&sub[..], &["--slow-consumer", "back-pressure"]].concat());
    says(&stalled_err, "subscribed to orders/>");
    // A reader that keeps up, also back-pressure: it holds the publisher
    // for moments and lets it go (the ordinary release path), losing nothing.
    let (mut plain, plain_err) = spawn(&[&sub[..], &["--count", "60000", "--slow-consumer", "back-pressure"]].concat());
    says(&plain_err, "subscribed to orders/>");
    let stop = |c: &Reaped, sig: &str| {
        assert!(Command::new("kill").args([sig, &c.0.id().to_string()]).status().unwrap().success());
    };
    stop(&stalled, "-STOP");
    let t = Instant::now();
    let args = ["pub", "--router", &r.uri, "--topic", "orders/desk/1", "--size", "1000", "--rate", "50k"];
    let (status, err) = run_for(&[&args[..], &["--count", "60000"]].concat(), Duration::from_secs(20));
    stop(&stalled, "-CONT");
    let status = status.unwrap_or_else(|| panic!("the publisher was still held after 20 s: {err}"));
    assert!(status.success(), "{err}");
    assert!(err.contains("back-pressured"), "the publisher was never held: {err}");
    println!("60,000 messages of 1000 B published in {:?} past a stalled back-pressure subscriber", t.elapsed());
    let got = says(&plain_err, "received ");
    assert!(got.contains("received 60000 messages") && got.contains(" 0 gaps"), "{got}");
    let _ = plain.0.wait();
    drop(stalled);
}

/// A child process killed and reaped however the test ends (a failed
/// assertion included).
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
