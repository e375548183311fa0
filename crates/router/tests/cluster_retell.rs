//! A router whose clients hold more patterns than a cluster link's buffer
//! takes at once (300,000 patterns of about 200 bytes: 60 MB of INTEREST
//! frames against a 16 MB write limit and the sockets' buffers) still
//! links with another router, once, and tells it every pattern: a new
//! link's retelling goes as the link drains. Told at once, the link closed
//! at its start, again and again (6 connects in this test).

mod common;

use common::{client, start, tempdir};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};
use tickwire_client::ClientEvent;
use tickwire_router::config::{ClusterTable, LimitsConfig};
use tickwire_router::RouterConfig;

const N: usize = 300_000;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A value of the router's status file in `dir` (written once a second).
fn status(dir: &Path) -> serde_json::Value {
    std::fs::read(dir.join("router-status.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// Waits up to `limit` for `ok` of the status in `dir`.
fn wait_status(dir: &Path, limit: Duration, mut tick: impl FnMut(), ok: impl Fn(&serde_json::Value) -> bool) {
    let until = Instant::now() + limit;
    loop {
        let s = status(dir);
        if ok(&s) {
            return;
        }
        assert!(Instant::now() < until, "{}", s["cluster"]);
        tick();
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_router_holding_more_patterns_than_a_links_buffer_links_and_tells_them_all() {
    let base = tempdir("cluster-retell");
    std::fs::create_dir_all(&base).unwrap();
    let secret = base.join("secret");
    std::fs::write(&secret, "a-cluster-secret-of-the-retell-test").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let first = format!("tcp://127.0.0.1:{}", free_port());
    let config = |name: &str, listen: String| RouterConfig {
        name: name.into(),
        cluster: Some(ClusterTable {
            name: "t".into(),
            listen,
            peers: vec![first.clone()],
            secret_file: secret.clone(),
            ..ClusterTable::default()
        }),
        limits: LimitsConfig { max_subscriptions: 2 * N, ..LimitsConfig::default() },
        ..RouterConfig::default()
    };
    let (dir_a, dir_b) = (base.join("a"), base.join("b"));
    let a = start(&dir_a, config("a", first.clone()));
    let mut many = client(&format!("tcp://{}", a.tcp), &dir_a, "many");
    many.wait_connected(Duration::from_secs(5)).unwrap();
    let filler = "x".repeat(190);
    for k in 0..N {
        many.subscribe(&format!("md/{filler}/{k}")).unwrap();
    }
    let _ = many.flush();
    let held = |s: &serde_json::Value| s["cluster"]["patterns_told"] == N;
    wait_status(
        &dir_a,
        Duration::from_secs(60),
        || {
            many.poll(|_| {}, 1024);
        },
        held,
    );

    let b = start(&dir_b, config("b", format!("tcp://127.0.0.1:{}", free_port())));
    let told = |s: &serde_json::Value| {
        s["cluster"]["links"]
            .as_array()
            .and_then(|ls| ls.iter().find(|l| l["router"] == "a"))
            .is_some_and(|l| l["state"] == "up" && l["interest"] == N)
    };
    wait_status(
        &dir_b,
        Duration::from_secs(60),
        || {
            many.poll(|_| {}, 1024);
        },
        told,
    );
    let links = status(&dir_a)["cluster"]["links"].clone();
    let to_b = links.as_array().unwrap().iter().find(|l| l["router"] == "b").unwrap().clone();
    assert_eq!(to_b["connects"], 1, "one link, made once: {to_b}");

    // A message published on b for the last pattern reaches a's client.
    let mut publisher = client(&format!("tcp://{}", b.tcp), &dir_b, "pub");
    publisher.wait_connected(Duration::from_secs(5)).unwrap();
    let topic = format!("md/{filler}/{}", N - 1);
    publisher.publish(&topic, b"the last").unwrap();
    let _ = publisher.flush();
    let until = Instant::now() + Duration::from_secs(10);
    let mut got = None;
    while got.is_none() && Instant::now() < until {
        let _ = publisher.poll(|_| {}, 64);
        many.poll(
            |e| {
                if let ClientEvent::Message(m) = e {
                    got = Some((m.topic.to_owned(), m.payload.to_vec()));
                }
            },
            1024,
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(got, Some((topic, b"the last".to_vec())));
    drop((a, b));
    let _ = std::fs::remove_dir_all(&base);
}
