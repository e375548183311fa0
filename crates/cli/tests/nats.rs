//! The router's NATS listener (`--nats-listen`) with the real, unmodified
//! Python NATS client (nats-py, installed by scripts/setup.sh into
//! target/nats-venv), driven by `tests/nats_py/client.py`: publish and
//! subscribe with wildcards, request/reply and no responders, headers, a
//! queue group, users with passwords or a token, TLS, a reconnect
//! after the router's restart, the other routers of a cluster told in
//! `INFO`'s `connect_urls` and moved to; and messages across the protocols, NATS to
//! a shared-memory subscriber and a shared-memory publisher to NATS, every
//! one, in order, the same bytes.
//!
//! `TICKWIRE_NATS_MESSAGES` sets the cross-protocol count (100,000 in
//! `make test`; the 1,000,000 by hand).

#[path = "support/cmd.rs"]
mod cmd;
#[path = "support/router.rs"]
mod router;

use router::{RouterProcess, BIN};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

fn python() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/nats-venv/bin/python");
    assert!(p.exists(), "{} missing: run scripts/setup.sh (make test does)", p.display());
    p
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/nats_py/client.py")
}

/// Removes a test's directory when the test ends, passed or failed (made
/// first, it outlives the routers that use it).
struct Gone(String);

impl Drop for Gone {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(name: &str) -> (String, Gone) {
    let d = std::env::temp_dir().join(format!("tw-nats-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let d = d.display().to_string();
    (d.clone(), Gone(d))
}

/// A router with a NATS listener on a port of its own; its `nats://` URL.
fn router(d: &str, extra: &[&str], port: u16) -> (RouterProcess, String) {
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec!["--dir", d];
    // `router-tls CERT KEY`: the router's own options, after `router`.
    let (extra, tls) = match extra {
        ["router-tls", cert, key] => (&[][..], vec!["--tls-cert", *cert, "--tls-key", *key]),
        _ => (extra, Vec::new()),
    };
    args.extend_from_slice(extra);
    args.extend_from_slice(&["router", "--no-tcp", "--nats-listen", &listen]);
    args.extend_from_slice(&tls);
    let r = RouterProcess::start(&args);
    let line = r.lines.lock().unwrap().iter().find(|(_, l)| l.contains("router listening")).unwrap().1.clone();
    let url = line.split([' ', ',']).find(|w| w.starts_with("nats://")).unwrap().to_owned();
    (r, url)
}

/// Runs one scenario of client.py; its JSON lines.
fn py(args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(python()).arg(script()).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{args:?}: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn the_python_nats_client_publishes_subscribes_requests_and_is_told_what_is_not_supported() {
    let (d, _gone) = scratch("basic");
    let (_r, url) = router(&d, &[], 0);
    let v = &py(&["basic", &url])[0];
    // One message per subscription its subject matches, as from a NATS server.
    let got: Vec<(String, String)> = v["got"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m[0].as_str().unwrap().to_owned(), m[1].as_str().unwrap().to_owned()))
        .collect();
    let want = [("md.eu.VOD", "hello"), ("md.eu.VOD", "hello"), ("md.us.IBM", "hi")];
    assert_eq!(got, want.map(|(a, b)| (a.to_owned(), b.to_owned())), "{v}");
    assert_eq!(v["reply"], "quote buy 100", "{v}");
    assert_eq!(v["no_responders"], "NoRespondersError", "no responders at once, not a timeout: {v}");
    // Headers, on a message, a request and its reply.
    assert_eq!(v["headed"], serde_json::json!([["hdr.x", "with headers", {"Trace-Id": "t-1", "K": "v"}]]), "{v}");
    assert_eq!(v["headed_reply"], serde_json::json!(["ok q", {"Answer": "7"}]), "{v}");
    assert_eq!((v["connected"].as_bool(), v["errors"].as_array().map(Vec::len)), (Some(true), Some(0)), "{v}");
    assert!(v["max_payload"].as_u64().unwrap() > 1 << 19, "{v}");
}

#[test]
fn a_queue_group_of_python_clients_shares_every_message_once() {
    let (d, _gone) = scratch("queue");
    let (_r, url) = router(&d, &[], 0);
    let v = &py(&["queue", &url, "4", "20000"])[0];
    let counts: Vec<u64> = v["counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).collect();
    assert_eq!((counts.iter().sum::<u64>(), v["distinct"].as_u64()), (20_000, Some(20_000)), "each once: {v}");
    assert!(counts.iter().all(|&c| c >= 4_500), "spread within ±10%: {counts:?}");
}

#[test]
fn users_log_in_with_their_passwords_and_a_wrong_one_is_refused() {
    let (d, _gone) = scratch("auth");
    let config = format!("{d}/router.toml");
    let hash = cmd::hash_password("desk-secret");
    let toml = format!(
        "[[users]]\nname = \"desk\"\npassword_hash = \"{hash}\"\npublish = [\"md/>\"]\nsubscribe = [\"md/>\"]\n"
    );
    std::fs::write(&config, toml).unwrap();
    let (_r, url) = router(&d, &["--config", &config], 0);
    let ok = &py(&["auth", &url, "desk", "desk-secret"])[0];
    assert_eq!((ok["connected"].as_bool(), ok["got"][0].as_str()), (Some(true), Some("as desk")), "{ok}");
    let bad = &py(&["auth", &url, "desk", "wrong"])[0];
    assert_eq!(bad["connected"], false, "{bad}");
    assert!(bad["error"].as_str().unwrap().to_lowercase().contains("authorization"), "{bad}");
}

#[test]
fn tickwire_pub_header_reaches_a_nats_subscriber_and_sub_print_shows_them() {
    let (d, _gone) = scratch("headers");
    let (_r, url) = router(&d, &[], 0);
    let sub = Command::new(BIN)
        .args(["--dir", &d, "sub", "--router", "ipc", "--topic", "md/>", "--print", "--count", "1"])
        .args(["--duration", "20s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut nats_sub = Command::new(python())
        .arg(script())
        .args(["headers", &url, "md.>", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(nats_sub.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().contains("ready"));
    std::thread::sleep(Duration::from_secs(1));
    let mut publ = Command::new(BIN)
        .args(["--dir", &d, "pub", "--router", "ipc", "--topic", "md/h", "--stdin"])
        .args(["--header", "Trace-Id=t-1", "--header", "K=v"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    publ.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    assert!(publ.wait().unwrap().success());
    let v: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(nats_sub.wait().unwrap().success());
    assert_eq!(v, serde_json::json!({"subject": "md.h", "data": "hello", "headers": {"Trace-Id": "t-1", "K": "v"}}));
    let out = sub.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "md/h hello [Trace-Id=t-1, K=v]\n");
    // A header that would break the block is refused before anything is sent.
    let bad = Command::new(BIN)
        .args(["--dir", &d, "pub", "--router", "ipc", "--topic", "md/h", "--stdin", "--header", "no equals"])
        .output()
        .unwrap();
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("NAME=VALUE"));
}

#[test]
fn a_token_logs_in_as_the_token_user_with_its_acls_and_a_wrong_token_is_refused() {
    let (d, _gone) = scratch("token");
    let config = format!("{d}/router.toml");
    let hash = cmd::hash_password("s3cr3t-token");
    let toml = format!(
        "[router]\nnats_token_user = \"feed\"\n\n[[users]]\nname = \"feed\"\npassword_hash = \"{hash}\"\n\
         publish = [\"md/>\"]\nsubscribe = [\"md/>\"]\n"
    );
    std::fs::write(&config, toml).unwrap();
    let (_r, url) = router(&d, &["--config", &config], 0);
    let ok = &py(&["token", &url, "s3cr3t-token"])[0];
    assert_eq!((ok["connected"].as_bool(), ok["got"][0].as_str()), (Some(true), Some("as token")), "{ok}");
    let bad = &py(&["token", &url, "guess"])[0];
    assert_eq!(bad["connected"], false, "{bad}");
    assert!(bad["error"].as_str().unwrap().to_lowercase().contains("authorization"), "{bad}");
}

#[test]
fn the_nats_port_speaks_tls_with_the_router_s_certificate() {
    let (d, _gone) = scratch("tls");
    let (cert, key) = tickwire_testkit::self_signed(std::path::Path::new(&d), "router");
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let (_r, url) = router(&d, &["router-tls", &cert, &key], 0);
    let ok = &py(&["tls", &url, &cert])[0];
    assert_eq!((ok["connected"].as_bool(), ok["got"][0].as_str()), (Some(true), Some("as tls")), "{ok}");
    // A client that does not speak TLS gets nowhere.
    let plain = &py(&["auth", &url, "nobody", "x"])[0];
    assert_eq!(plain["connected"], false, "{plain}");
}

#[test]
fn a_python_client_reconnects_after_the_router_restarts_and_its_subscription_still_works() {
    let (d, _gone) = scratch("restart");
    let (mut r, url) = router(&d, &[], 0);
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let mut client = Command::new(python())
        .arg(script())
        .args(["reconnect", &url, "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().contains("ready"));
    r.stop();
    let (_again, _) = router(&d, &[], port);
    let v: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(client.wait().unwrap().success());
    let events: Vec<&str> = v["events"].as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect();
    assert!(events.contains(&"disconnected") && events.contains(&"reconnected"), "{v}");
    assert_eq!(v["got"][0], "after the restart", "the subscription was made again: {v}");
}

#[test]
fn messages_cross_between_nats_and_shared_memory_clients_every_one_in_order() {
    let n: u64 = std::env::var("TICKWIRE_NATS_MESSAGES").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let (d, _gone) = scratch("cross");
    let (_r, url) = router(&d, &[], 0);
    let count = n.to_string();

    // NATS to a shared-memory subscriber.
    let sub = Command::new(BIN)
        .args(["--dir", &d, "sub", "--router", "ipc", "--topic", "md/>", "--print", "--count", &count])
        .args(["--duration", "120s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    py(&["publish", &url, "md.nats", &count]);
    let out = sub.wait_with_output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len() as u64, n, "{}", String::from_utf8_lossy(&out.stderr));
    for (k, l) in lines.iter().enumerate() {
        assert_eq!(*l, format!("md/nats m{k}"), "line {k}");
    }

    // A shared-memory publisher to NATS, at a rate the Python client keeps up with.
    let mut nats_sub = Command::new(python())
        .arg(script())
        .args(["subscribe", &url, "md.>", &count, "120"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(nats_sub.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().contains("ready"));
    let mut publ = Command::new(BIN)
        .args(["--dir", &d, "pub", "--router", "ipc", "--topic", "md/shm", "--stdin", "--rate", "50k"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let text: String = (0..n).map(|k| format!("m{k}\n")).collect();
    publ.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    assert!(publ.wait().unwrap().success());
    let v: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert!(nats_sub.wait().unwrap().success());
    assert_eq!((v["received"].as_u64(), v["in_order"].as_bool()), (Some(n), Some(true)), "{v}");
}

/// A free port on loopback (bound, read, let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Two routers of a cluster on loopback: a NATS client given the first
/// alone is told of the second in `INFO`'s `connect_urls` (as from a NATS
/// cluster), and when the first stops it moves to the second, subscribes
/// again and receives there.
#[test]
fn a_nats_client_given_one_router_of_a_cluster_is_told_of_the_other_and_moves_to_it() {
    let (d, _gone) = scratch("discover");
    let secret = format!("{d}/secret");
    std::fs::write(&secret, "a-cluster-secret-of-the-nats-test").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let first = format!("tcp://127.0.0.1:{}", free_port());
    let start = |name: &str, listen: &str, peer: &str| {
        let dir = format!("{d}/{name}");
        let args = [
            "--dir",
            &dir,
            "router",
            "--no-tcp",
            "--name",
            name,
            "--nats-listen",
            "127.0.0.1:0",
            "--cluster-name",
            "t",
            "--cluster-listen",
            listen,
            "--cluster-peer",
            peer,
            "--cluster-secret-file",
            &secret,
        ];
        let r = RouterProcess::start(&args);
        let line = r.lines.lock().unwrap().iter().find(|(_, l)| l.contains("router listening")).unwrap().1.clone();
        let url = line.split([' ', ',']).find(|w| w.starts_with("nats://")).unwrap().to_owned();
        (r, url)
    };
    let (mut r1, url1) = start("r1", &first, &first);
    let (_r2, url2) = start("r2", &format!("tcp://127.0.0.1:{}", free_port()), &first);
    let linked = r1.wait_for_line("cluster link to router r2", Duration::from_secs(10));
    assert!(linked.is_some(), "r1 and r2 linked");
    let mut client = Command::new(python())
        .arg(script())
        .args(["discover", &url1, "2000", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(client.stdout.take().unwrap()).lines();
    let mut next = || -> serde_json::Value { serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap() };
    let netloc2 = url2.trim_start_matches("nats://");
    assert_eq!(next()["servers"], serde_json::json!([netloc2]), "r2 told of in INFO");
    r1.stop();
    assert_eq!(next()["reconnected"], netloc2);
    assert_eq!(py(&["publish", &url2, "md.eu", "2000"])[0]["published"], 2000);
    assert_eq!(next()["received"], 2000);
    assert!(client.wait().unwrap().success());
}
