//! The README's quick start as a person runs it, in two "terminals": a
//! subscriber that waits for publishers as long as it is asked to, prints
//! each message as it arrives, and stays for the next publisher; `pub` and
//! `sub` over every channel form; `stat` before anything ran.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

#[path = "support/cmd.rs"]
mod cmd;
use cmd::hash_password;

fn dir(name: &str) -> String {
    let d = std::env::temp_dir().join(format!("tw-qs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d.display().to_string()
}

/// Spawns `tickwire ARGS` with stdout and stderr read line by line on
/// threads, so a test sees each line when it is written, not at exit.
struct Live {
    child: Child,
    stdout: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
}

impl Live {
    fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(BIN).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let lines = |r: Box<dyn std::io::Read + Send>| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                for l in BufReader::new(r).lines().map_while(Result::ok) {
                    let _ = tx.send(l);
                }
            });
            rx
        };
        let stdout = lines(Box::new(child.stdout.take().unwrap()));
        let stderr = lines(Box::new(child.stderr.take().unwrap()));
        Self { child, stdout, stderr }
    }

    /// The next stdout line, within 10 s.
    fn line(&self) -> String {
        self.stdout.recv_timeout(Duration::from_secs(10)).expect("a line on stdout within 10 s")
    }

    /// Sends it `sig` (`-HUP`, `-STOP`, ...) with kill(1).
    fn signal(&self, sig: &str) {
        let ok = Command::new("kill").args([sig, &self.child.id().to_string()]).status().unwrap().success();
        assert!(ok, "kill {sig}");
    }

    /// Waits (10 s at most) for a stderr line containing `text`.
    fn says(&self, text: &str) -> String {
        let mut seen = Vec::new();
        while let Ok(l) = self.stderr.recv_timeout(Duration::from_secs(10)) {
            if l.contains(text) {
                return l;
            }
            seen.push(l);
        }
        panic!("no stderr line containing {text:?}; saw {seen:?}");
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `tickwire --dir D pub ARGS --stdin --wait 10s` with `lines` on stdin.
fn pub_stdin(d: &str, args: &[&str], lines: &str) {
    let mut p = Command::new(BIN)
        .args(["--dir", d, "pub"])
        .args(args)
        .args(["--stdin", "--wait", "10s"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    p.stdin.take().unwrap().write_all(lines.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    assert!(out.status.success(), "pub {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

fn publish_lines(d: &str, channel: &str, lines: &str) {
    pub_stdin(d, &["--channel", channel], lines);
}

/// Two publishers one after the other; the subscriber says what it waits
/// for, prints each line while still running (no buffering until exit),
/// and picks up the second publisher after the first ends.
fn subscriber_stays_for_the_next_publisher(channel: &str) {
    let d = dir(&channel.replace([':', '/', '.'], "_"));
    let sub = Live::spawn(&["--dir", &d, "sub", "--channel", channel, "--print", "--count", "3"]);
    let waiting = sub.says("waiting for a publisher");
    assert!(waiting.contains(channel) && waiting.contains("stream 10"), "{waiting}");
    publish_lines(&d, channel, "one\n");
    assert_eq!(sub.line(), "one", "printed as it arrived, while the subscriber still runs");
    sub.says("the publisher ended its stream; waiting for the next one");
    publish_lines(&d, channel, "two\nthree\n");
    assert_eq!(sub.line(), "two");
    assert_eq!(sub.line(), "three");
    let summary = sub.says("received 3 messages");
    assert!(summary.contains("lost notices 0"), "{summary}");
}

/// A UDP port free on 127.0.0.1 now (a socket bound to port 0 finds it),
/// not one derived from the pid: `sub` does not say which port it bound,
/// so `--channel udp://127.0.0.1:0` would leave the publisher without it.
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn ipc_subscriber_waits_prints_live_and_stays_for_the_next_publisher() {
    subscriber_stays_for_the_next_publisher("ipc:qs");
}

#[test]
fn udp_subscriber_waits_prints_live_and_stays_for_the_next_publisher() {
    subscriber_stays_for_the_next_publisher(&format!("udp://127.0.0.1:{}", free_udp_port()));
}

/// The README's keyed channel: `keygen`, then the same two terminals with
/// `auth=` on both ends.
#[test]
fn keyed_udp_subscriber_from_the_readme() {
    let d = dir("keyed");
    std::fs::create_dir_all(&d).unwrap();
    let key = format!("{d}/md.key");
    let out = Command::new(BIN).args(["keygen", &key]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    subscriber_stays_for_the_next_publisher(&format!("udp://127.0.0.1:{}?auth={key}", free_udp_port()));
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn ctrl_c_stops_a_waiting_subscriber_with_its_summary_and_exit_0() {
    let d = dir("ctrlc");
    let mut sub = Live::spawn(&["--dir", &d, "sub", "--channel", "ipc:nobody"]);
    sub.says("waiting for a publisher on ipc:nobody stream 10");
    sub.signal("-INT");
    sub.says("received 0 messages");
    assert!(sub.child.wait().unwrap().success());
}

#[test]
fn an_unknown_channel_form_is_an_error_listing_the_accepted_ones() {
    for cmd in ["pub", "sub"] {
        let out = Command::new(BIN).args([cmd, "--channel", "http://127.0.0.1:9"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains("ipc:NAME") && err.contains("udp://HOST:PORT") && err.contains("tcp://HOST:PORT"),
            "{cmd}: {err}"
        );
    }
}

#[test]
fn stat_before_anything_ran_is_an_answer_not_an_error() {
    let d = dir("never");
    let out = Command::new(BIN).args(["--dir", &d, "stat"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no tickwire processes") && text.contains("does not exist"), "{text}");
}

fn publish_routed(d: &str, uri: &str, topic: &str, lines: &str) {
    pub_stdin(d, &["--router", uri, "--topic", topic], lines);
}

/// The README's router quick start: a router, a subscriber by pattern over
/// shared memory and one over TCP, publishers on both; then the router is
/// killed with kill -9, a new one starts on the same directory at once, and
/// the subscriber comes back to it by itself.
#[test]
fn router_quick_start_and_a_restart_after_kill_9() {
    let d = dir("router");
    let mut router = Live::spawn(&["--dir", &d, "router", "--listen", "tcp://127.0.0.1:0"]);
    let line = router.says("router listening");
    let tcp = line
        .split(", ")
        .find_map(|p| p.split_whitespace().next().filter(|w| w.starts_with("tcp://")))
        .unwrap()
        .to_owned();
    let ipc_sub = Live::spawn(&["--dir", &d, "sub", "--router", "ipc", "--topic", "md/>", "--print"]);
    let tcp_sub = Live::spawn(&["--dir", &d, "sub", "--router", &tcp, "--topic", "md/*/VOD", "--print"]);
    ipc_sub.says("subscribed to md/>");
    tcp_sub.says("subscribed to md/*/VOD");
    publish_routed(&d, "ipc", "md/eu/VOD", "bid 101.25\n");
    publish_routed(&d, &tcp, "md/us/IBM", "bid 150\n");
    assert_eq!(ipc_sub.line(), "md/eu/VOD bid 101.25");
    assert_eq!(ipc_sub.line(), "md/us/IBM bid 150");
    assert_eq!(tcp_sub.line(), "md/eu/VOD bid 101.25");

    // kill -9: nothing it leaves blocks the next router.
    router.child.kill().unwrap();
    router.child.wait().unwrap();
    ipc_sub.says("waiting for the router to come back");
    let router2 = Live::spawn(&["--dir", &d, "router", "--no-tcp"]);
    router2.says("router listening");
    ipc_sub.says("subscribed to md/>");
    publish_routed(&d, "ipc", "md/eu/VOD", "bid 101.50\n");
    assert_eq!(ipc_sub.line(), "md/eu/VOD bid 101.50");
    drop((ipc_sub, tcp_sub, router2));
    let _ = std::fs::remove_dir_all(&d);
}

/// The router with TLS from the command line: a TLS router, a subscriber
/// and a publisher over `tls://` with `--tls-ca`; a client without
/// `--tls-ca` is told what to add, and one trusting another certificate is
/// refused with the reason instead of retrying forever.
#[test]
fn router_over_tls_from_the_command_line() {
    let d = dir("tls");
    let path = |p: std::path::PathBuf| p.display().to_string();
    let (cert, key) = tickwire_testkit::self_signed(std::path::Path::new(&d), "router");
    let (cert, key, stranger) =
        (path(cert), path(key), path(tickwire_testkit::self_signed(std::path::Path::new(&d), "stranger").0));
    let router = Live::spawn(&[
        "--dir",
        &d,
        "router",
        "--no-ipc",
        "--listen",
        "tcp://127.0.0.1:0",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ]);
    let line = router.says("router listening");
    let port = line.split("tls://127.0.0.1:").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().to_owned();
    let uri = format!("tls://localhost:{port}");
    let sub = Live::spawn(&["--dir", &d, "sub", "--router", &uri, "--tls-ca", &cert, "--topic", "md/>", "--print"]);
    sub.says("subscribed to md/>");
    pub_stdin(&d, &["--router", &uri, "--tls-ca", &cert, "--topic", "md/eu/VOD"], "bid 101.25\n");
    assert_eq!(sub.line(), "md/eu/VOD bid 101.25");

    let out =
        Command::new(BIN).args(["--dir", &d, "pub", "--router", &uri, "--topic", "md/x", "--stdin"]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("needs --tls-ca"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(BIN)
        .args(["--dir", &d, "sub", "--router", &uri, "--tls-ca", &stranger, "--topic", "md/>"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("refused this client") && err.contains("certificate"), "{err}");
    drop((sub, router));
    let _ = std::fs::remove_dir_all(&d);
}

/// `tickwire router hash-password` with the password on standard input.
/// The README's users and ACLs: hashes from `router hash-password`, a
/// router.toml with two users, a subscriber whose password is in a file,
/// a publisher whose password is in TICKWIRE_PASSWORD; a topic the
/// subscriber may not read never reaches it, a publish not allowed and a
/// wrong password fail with the reason, and SIGHUP after an edit takes a
/// permission from the live subscriber.
#[test]
fn router_users_from_the_command_line() {
    let d = dir("users");
    let config = format!("{d}/router.toml");
    // Hashed once: a new hash of the same password reads as a new password.
    let (feed, desk) = (hash_password("feed-secret"), hash_password("desk-secret"));
    let toml = |desk_reads: &str| {
        format!(
            "dir = \"{d}\"\n[router]\nlisten = []\n\n\
             [[users]]\nname = \"feed\"\npassword_hash = \"{feed}\"\npublish = [\"md/>\"]\nsubscribe = []\n\n\
             [[users]]\nname = \"desk\"\npassword_hash = \"{desk}\"\npublish = [\"orders/desk/>\"]\nsubscribe = [{desk_reads}]\n"
        )
    };
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(&config, toml("\"md/eu/>\"")).unwrap();
    std::fs::write(format!("{d}/desk.pw"), "desk-secret\n").unwrap();
    // `chmod 600 desk.pw`, as the page says: a password file others may
    // read is refused.
    std::fs::set_permissions(format!("{d}/desk.pw"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let router = Live::spawn(&["--config", &config, "router"]);
    router.says("router listening");
    let pw = format!("{d}/desk.pw");
    let sub = Live::spawn(&[
        "--config",
        &config,
        "sub",
        "--router",
        "ipc",
        "--topic",
        "md/>",
        "--print",
        "--user",
        "desk",
        "--password-file",
        &pw,
    ]);
    sub.says("subscribed to md/>");
    let publish = |topic: &str, password: &str| {
        let mut p = Command::new(BIN)
            .args(["--config", &config, "pub", "--router", "ipc", "--topic", topic, "--stdin", "--user", "feed"])
            .env("TICKWIRE_PASSWORD", password)
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        p.stdin.take().unwrap().write_all(b"bid 1\n").unwrap();
        let out = p.wait_with_output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    assert!(publish("md/us/IBM", "feed-secret").0);
    assert!(publish("md/eu/VOD", "feed-secret").0);
    assert_eq!(sub.line(), "md/eu/VOD bid 1", "md/us/IBM is not desk's to read");
    let (ok, err) = publish("orders/desk/1", "feed-secret");
    assert!(!ok && err.contains("may not publish on orders/desk/1"), "{err}");
    let (ok, err) = publish("md/eu/VOD", "wrong");
    assert!(!ok && err.contains("wrong password"), "{err}");

    // Take md/eu/> from desk and reload: the live subscription goes.
    std::fs::write(&config, toml("\"fx/>\"")).unwrap();
    router.signal("-HUP");
    router.says("users reloaded");
    sub.says("may no longer read md/>");
    drop((sub, router));
    let _ = std::fs::remove_dir_all(&d);
}

/// The README's last-value cache, across processes: a publisher at 100k
/// msg/s, and a subscriber joining mid-stream with `--cached --verify`
/// gets the newest value first and then every message, none missing and
/// none twice; a late subscriber gets each cached topic's last value.
#[test]
fn router_last_value_cache_from_the_command_line() {
    let d = dir("cache");
    let router = Live::spawn(&["--dir", &d, "router", "--no-tcp", "--cache", "md/>"]);
    router.says("router listening");
    let publisher = Live::spawn(&[
        "--dir",
        &d,
        "pub",
        "--router",
        "ipc",
        "--topic",
        "md/eu/VOD",
        "--rate",
        "100k",
        "--duration",
        "4s",
    ]);
    publisher.says("publishing on md/eu/VOD");
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new(BIN)
        .args(["--dir", &d, "sub", "--router", "ipc", "--topic", "md/>", "--cached", "--verify", "--count", "50000"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("received 50000 messages (1 from the cache)") && err.contains("0 gaps, 0 duplicates"),
        "{err}"
    );
    drop(publisher);
    publish_routed(&d, "ipc", "md/us/IBM", "bid 150\n");
    let late = Live::spawn(&["--dir", &d, "sub", "--router", "ipc", "--topic", "md/us/>", "--cached", "--print"]);
    assert_eq!(late.line(), "md/us/IBM bid 150 (cached)");
    drop((late, router));
    let _ = std::fs::remove_dir_all(&d);
}

/// `tickwire router status`: the clients, their subscriptions and queues,
/// as a table and as JSON; and a clear answer when no router runs.
#[test]
fn router_status_lists_clients_and_their_subscriptions() {
    let d = dir("status");
    let out = Command::new(BIN).args(["--dir", &d, "router", "status"]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no router serves"));
    let router = Live::spawn(&["--dir", &d, "router", "--no-tcp"]);
    router.says("router listening");
    let sub = Live::spawn(&["--dir", &d, "sub", "--router", "ipc", "--topic", "md/eu/>"]);
    sub.says("subscribed to md/eu/>");
    // Written every second.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let json = loop {
        let out = Command::new(BIN).args(["--dir", &d, "router", "status", "--json"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("md/eu/>") || std::time::Instant::now() > until {
            break text;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["clients"][0]["subscriptions"][0], "md/eu/>", "{json}");
    assert_eq!(v["clients"][0]["slow_consumer"], "drop-oldest");
    let table = Command::new(BIN).args(["--dir", &d, "router", "status"]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("1 client(s)") && table.contains("SUBSCRIPTIONS") && table.contains("md/eu/>"), "{table}");
    drop((sub, router));
    let _ = std::fs::remove_dir_all(&d);
}

/// docs/configuration.md's back-pressure example: a subscriber that asks
/// for back-pressure and stops reading holds the publisher for
/// `back_pressure_timeout`, then is disconnected; the publisher says it
/// was held.
#[test]
fn a_back_pressure_subscriber_from_the_command_line() {
    let d = dir("back-pressure");
    std::fs::create_dir_all(&d).unwrap();
    let config = format!("{d}/router.toml");
    let toml = "[router]\nlisten = []\n[router.limits]\nback_pressure_timeout = \"1s\"\nqueue_bytes = 65536\nmax_frame = 16384\n";
    std::fs::write(&config, toml).unwrap();
    let router = Live::spawn(&["--dir", &d, "--config", &config, "router"]);
    router.says("router listening");
    let sub = Live::spawn(&[
        "--dir",
        &d,
        "sub",
        "--router",
        "ipc",
        "--topic",
        "orders/>",
        "--slow-consumer",
        "back-pressure",
    ]);
    sub.says("subscribed to orders/>");
    sub.signal("-STOP");
    let out = Command::new(BIN)
        .args(["--dir", &d, "pub", "--router", "ipc", "--topic", "orders/desk/1", "--rate", "100k", "--duration", "3s"])
        .output()
        .unwrap();
    sub.signal("-CONT");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("back-pressured"), "the publisher says it was held: {err}");
    router.says("held 1 publisher(s) for 1s");
    sub.says("back_pressure_timeout");
    drop((sub, router));
    let _ = std::fs::remove_dir_all(&d);
}

/// The README's guaranteed delivery: a durable subscriber and a guaranteed
/// publisher across a `kill -9` of the router, then `journal inspect`.
#[test]
fn guaranteed_delivery_from_the_command_line_across_kill_9() {
    let d = dir("guaranteed");
    let journal = format!("{d}-journal");
    let _ = std::fs::remove_dir_all(&journal);
    let router_args = ["--dir", &d, "router", "--no-tcp", "--journal", &journal, "--sync", "group"];
    let router = Live::spawn(&router_args);
    router.says("router listening");
    let sub = Live::spawn(&[
        "--dir",
        &d,
        "sub",
        "--router",
        "ipc",
        "--topic",
        "orders/>",
        "--durable",
        "desk",
        "--verify",
        "--count",
        "30000",
    ]);
    sub.says("subscribed to orders/>");
    std::thread::sleep(Duration::from_millis(300));
    let publisher = Live::spawn(&[
        "--dir",
        &d,
        "pub",
        "--router",
        "ipc",
        "--topic",
        "orders/desk/1",
        "--guaranteed",
        "--rate",
        "20k",
        "--count",
        "30000",
    ]);
    publisher.says("publishing on orders/desk/1");
    std::thread::sleep(Duration::from_millis(600));
    drop(router); // SIGKILL
    let router = Live::spawn(&router_args);
    assert!(router.says("journal").contains("recovered"));
    assert_eq!(publisher.says("acknowledged"), "acknowledged 30000");
    let summary = sub.says("received");
    assert!(summary.contains("received 30000 messages") && summary.contains("0 gaps"), "{summary}");
    assert!(summary.contains("0 unflagged duplicates, 0 lost"), "{summary}");
    let out = Command::new(BIN).args(["journal", "inspect", &journal]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("30000 record(s), 0 damaged"), "{text}");
    drop(router);
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&journal);
}
