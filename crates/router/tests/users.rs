//! Users and ACLs: passwords checked, publishes and subscriptions held to
//! each user's patterns, per matched topic under a wildcard, and a reload
//! that takes effect for the clients already connected.

mod common;

use common::{quiet, receive, start, tempdir};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientError, ClientEvent, ClientOptions};
use tickwire_router::access::{hash_password, UserConfig};
use tickwire_router::{RouterConfig, SlowConsumer};
use tickwire_wire::client::RejectCode;

/// Hashing is slow by design: once per test binary.
fn hash(password: &str) -> String {
    static HASHES: OnceLock<(String, String)> = OnceLock::new();
    let (feed, desk) = HASHES.get_or_init(|| (hash_password(b"feed-pw").unwrap(), hash_password(b"desk-pw").unwrap()));
    match password {
        "feed-pw" => feed.clone(),
        "desk-pw" => desk.clone(),
        _ => unreachable!(),
    }
}

fn user(name: &str, password: &str, publish: &[&str], subscribe: &[&str]) -> UserConfig {
    UserConfig {
        name: name.into(),
        password_hash: hash(password),
        unix_user: None,
        publish: publish.iter().map(|s| (*s).to_owned()).collect(),
        subscribe: subscribe.iter().map(|s| (*s).to_owned()).collect(),
        slow_consumer: None,
    }
}

fn users() -> Vec<UserConfig> {
    vec![user("feed", "feed-pw", &["md/>"], &[]), user("desk", "desk-pw", &["orders/desk/>"], &["md/eu/>", "fx/>"])]
}

fn connect(uri: &str, dir: &Path, name: &str, creds: Option<(&str, &str)>) -> Result<Client, ClientError> {
    connect_asking(uri, dir, name, creds, None)
}

fn connect_asking(
    uri: &str,
    dir: &Path,
    name: &str,
    creds: Option<(&str, &str)>,
    slow_consumer: Option<SlowConsumer>,
) -> Result<Client, ClientError> {
    let opts = ClientOptions {
        name: name.into(),
        dir: dir.into(),
        user: creds.map(|c| c.0.to_owned()),
        password: creds.map(|c| c.1.to_owned()),
        slow_consumer,
        ..ClientOptions::default()
    };
    let mut c = Client::connect(uri, opts)?;
    c.wait_connected(Duration::from_secs(10))?;
    Ok(c)
}

/// The REJECTs `c` receives within `wait`: (code, request).
fn rejects(c: &mut Client, wait: Duration) -> Vec<(RejectCode, u64)> {
    let mut got = Vec::new();
    let until = Instant::now() + wait;
    while Instant::now() < until {
        c.poll(
            |e| {
                if let ClientEvent::Rejected { code, request, .. } = e {
                    got.push((code, request));
                }
            },
            64,
        );
    }
    got
}

#[test]
fn passwords_and_acls_hold_over_shared_memory_and_tcp() {
    let dir = tempdir("users");
    let r = start(&dir, RouterConfig { users: users(), ..RouterConfig::default() });
    let tcp = format!("tcp://{}", r.tcp);

    for (uri, creds, why) in [
        (tcp.as_str(), None, "requires a user and password"),
        ("ipc", Some(("feed", "wrong")), "unknown user or wrong password"),
        (tcp.as_str(), Some(("nobody", "feed-pw")), "unknown user or wrong password"),
    ] {
        let e = connect(uri, &dir, "intruder", creds).expect_err("refused");
        assert!(matches!(&e, ClientError::Refused { why: w, .. } if w.contains(why)), "{uri} {creds:?}: {e}");
    }

    let mut feed = connect("ipc", &dir, "feed", Some(("feed", "feed-pw"))).unwrap();
    let mut desk = connect(&tcp, &dir, "desk", Some(("desk", "desk-pw"))).unwrap();
    // A wildcard wider than the ACL: taken, each topic checked.
    desk.subscribe("md/>").unwrap();
    // Nothing it may read: refused.
    let us = desk.subscribe("md/us/>").unwrap();
    assert_eq!(rejects(&mut desk, Duration::from_millis(300)), [(RejectCode::Forbidden, u64::from(us))]);

    feed.publish("md/us/IBM", b"bid 150").unwrap();
    feed.publish("md/eu/VOD", b"bid 101").unwrap();
    feed.publish("orders/desk/1", b"buy").unwrap(); // not feed's to publish
    assert_eq!(receive(&mut desk, 1), [("md/eu/VOD".into(), b"bid 101".to_vec(), 0)]);
    assert!(quiet(&mut desk, Duration::from_millis(200)), "md/us/IBM is not desk's to read");
    assert_eq!(rejects(&mut feed, Duration::from_millis(200)).first().map(|r| r.0), Some(RejectCode::Forbidden));

    let report = r.stop();
    assert!(report.totals.forbidden >= 5, "{:?}", report.totals);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every byte of every regular file under `dir`.
fn all_file_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let t = e.file_type().unwrap();
        if t.is_file() {
            out.push((e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap_or_default()));
        }
    }
    out
}

/// The bytes of every session log this process maps (the router runs on
/// a thread here), read through `/proc/self/mem`.
fn mapped_logs() -> Vec<(String, Vec<u8>)> {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::File::open("/proc/self/mem").unwrap();
    let mut out = Vec::new();
    for l in std::fs::read_to_string("/proc/self/maps").unwrap().lines() {
        let Some(at) = l.find("/memfd:tw-router-") else { continue };
        let range = l.split_whitespace().next().unwrap();
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (u64::from_str_radix(a, 16).unwrap(), u64::from_str_radix(b, 16).unwrap());
        let mut bytes = vec![0u8; (b - a) as usize];
        mem.read_exact_at(&mut bytes, a).unwrap();
        out.push((l[at..].to_owned(), bytes));
    }
    out
}

#[test]
fn a_shared_memory_client_s_password_crosses_the_login_socket_never_shared_memory() {
    let dir = tempdir("users-secret");
    let r = start(&dir, RouterConfig { users: users(), ..RouterConfig::default() });
    let mut feed = connect("ipc", &dir, "feed", Some(("feed", "feed-pw"))).unwrap();
    let mut desk = connect("ipc", &dir, "desk", Some(("desk", "desk-pw"))).unwrap();
    desk.subscribe("md/eu/>").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    feed.publish("md/eu/VOD", b"bid 101").unwrap();
    assert_eq!(receive(&mut desk, 1), [("md/eu/VOD".into(), b"bid 101".to_vec(), 0)]);
    // The logs in and out (memfds, read where they are mapped), the
    // counters, the status: no password in any.
    let mut files = all_file_bytes(&dir);
    let logs = mapped_logs();
    assert!(
        logs.iter().any(|(n, _)| n.contains("tw-router-in-")) && logs.iter().any(|(n, _)| n.contains("tw-router-out-")),
        "{:?}",
        logs.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    files.extend(logs);
    for (name, bytes) in &files {
        for pw in [&b"feed-pw"[..], b"desk-pw"] {
            assert!(!bytes.windows(pw.len()).any(|w| w == pw), "{name} holds a password");
        }
    }
    drop((feed, desk));
    r.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_shared_memory_client_of_a_mapped_unix_user_logs_in_as_its_user_without_a_password() {
    let dir = tempdir("users-unix");
    let me = nix::unistd::geteuid().as_raw();
    let name = nix::unistd::User::from_uid(nix::unistd::geteuid()).unwrap().map_or(me.to_string(), |u| u.name);
    // "feed" is this process's Unix user (by name) and has no password.
    let mut cfgs = users();
    cfgs[0].unix_user = Some(name.clone());
    cfgs[0].password_hash = String::new();
    let r = start(&dir, RouterConfig { users: cfgs, ..RouterConfig::default() });
    let tcp = format!("tcp://{}", r.tcp);
    let mut desk = connect(&tcp, &dir, "desk", Some(("desk", "desk-pw"))).unwrap();
    desk.subscribe("md/eu/>").unwrap();
    // No user, no password: feed, by its Unix user.
    let mut feed = connect("ipc", &dir, "feed-by-uid", None).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    feed.publish("md/eu/VOD", b"bid 101").unwrap();
    feed.publish("orders/desk/1", b"buy").unwrap(); // not feed's to publish
    assert_eq!(receive(&mut desk, 1), [("md/eu/VOD".into(), b"bid 101".to_vec(), 0)]);
    assert_eq!(rejects(&mut feed, Duration::from_millis(200)).first().map(|r| r.0), Some(RejectCode::Forbidden));
    // Naming another user in HELLO is refused; so is feed's (empty)
    // password over TCP, where no Unix user is known.
    let e = connect("ipc", &dir, "other", Some(("desk", "desk-pw"))).expect_err("refused");
    assert!(e.to_string().contains("Unix user"), "{e}");
    let e = connect(&tcp, &dir, "feed-tcp", Some(("feed", ""))).expect_err("refused");
    assert!(e.to_string().contains("unknown user or wrong password"), "{e}");
    println!("unix_user {name:?} (uid {me}) logged in as feed; {e}");
    r.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_reload_takes_effect_for_connected_clients() {
    let dir = tempdir("reload");
    let r = start(&dir, RouterConfig { users: users(), ..RouterConfig::default() });
    let mut feed = connect("ipc", &dir, "feed", Some(("feed", "feed-pw"))).unwrap();
    let mut desk = connect("ipc", &dir, "desk", Some(("desk", "desk-pw"))).unwrap();
    let fx = desk.subscribe("fx/>").unwrap();
    desk.subscribe("md/eu/>").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // Before the reload: desk gets what md/eu/> matches, and not a topic
    // that matches none of its subscriptions, published just before it
    // (delivery is in order, so it would have come first).
    feed.publish("md/us/IBM", b"not subscribed").unwrap();
    feed.publish("md/eu/VOD", b"bid 100").unwrap();
    assert_eq!(receive(&mut desk, 1), [("md/eu/VOD".into(), b"bid 100".to_vec(), 0)]);
    assert!(quiet(&mut desk, Duration::from_millis(100)));

    // desk may no longer read fx/>; feed may now publish on fx/>.
    let mut less = users();
    less[0].publish.push("fx/>".into());
    less[1].subscribe = vec!["md/eu/>".into()];
    r.reload(less.clone());
    assert_eq!(rejects(&mut desk, Duration::from_millis(300)), [(RejectCode::Forbidden, u64::from(fx))]);
    feed.publish("fx/EURUSD", b"1.08").unwrap();
    feed.publish("md/eu/VOD", b"bid 101").unwrap();
    assert_eq!(receive(&mut desk, 1), [("md/eu/VOD".into(), b"bid 101".to_vec(), 0)], "fx/> is gone");

    // A user removed: its session ends, and the client stops trying.
    r.reload(less[1..].to_vec());
    let until = Instant::now() + Duration::from_secs(5);
    while feed.refused().is_none() && Instant::now() < until {
        feed.poll(|_| {}, 64);
    }
    assert!(feed.refused().is_some_and(|w| w.contains("removed")), "{:?}", feed.refused());
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_client_asks_for_its_slow_consumer_policy_and_its_users_policy_wins() {
    let dir = tempdir("policy");
    let mut us = users();
    us[1].slow_consumer = Some(SlowConsumer::Disconnect);
    let r = start(&dir, RouterConfig { users: us, ..RouterConfig::default() });
    let tcp = format!("tcp://{}", r.tcp);
    let asks = Some(SlowConsumer::BackPressure);
    let _feed = connect_asking("ipc", &dir, "feed", Some(("feed", "feed-pw")), asks).unwrap();
    let _desk = connect_asking(&tcp, &dir, "desk", Some(("desk", "desk-pw")), asks).unwrap();
    let _plain = connect("ipc", &dir, "plain", Some(("feed", "feed-pw"))).unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let policies = loop {
        let clients = tickwire_router::status::read(&dir).map(|s| s.clients).unwrap_or_default();
        if clients.len() == 3 {
            let mut p: Vec<(String, String)> = clients.into_iter().map(|c| (c.name, c.slow_consumer)).collect();
            p.sort();
            break p;
        }
        assert!(Instant::now() < until, "router status never listed the three clients");
        std::thread::sleep(Duration::from_millis(50));
    };
    let want = [("desk", "disconnect"), ("feed", "back-pressure"), ("plain", "drop-oldest")];
    assert_eq!(policies, want.map(|(n, p)| (n.to_owned(), p.to_owned())), "(client, policy)");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
