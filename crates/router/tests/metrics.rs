//! The Prometheus endpoint, scraped and read by a Prometheus text parser
//! (`prometheus-parse`): per-router, per-client and per-topic values, and
//! the forwarding-time histogram.

mod common;

use common::{client, receive, start, tempdir};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use tickwire_router::RouterConfig;

/// GET `path`: (status line, body).
fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

fn value(scrape: &prometheus_parse::Scrape, metric: &str, label: (&str, &str)) -> Option<f64> {
    scrape.samples.iter().find(|s| s.metric == metric && s.labels.get(label.0) == Some(label.1)).map(|s| {
        match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            _ => f64::NAN,
        }
    })
}

#[test]
fn metrics_are_scraped_and_parsed() {
    let dir = tempdir("metrics");
    let cfg = RouterConfig { name: "m".into(), metrics: Some("127.0.0.1:0".into()), ..RouterConfig::default() };
    let r = start(&dir, cfg);
    let addr = r.metrics.expect("metrics on");
    let mut sub = client("ipc", &dir, "watcher");
    sub.subscribe("md/>").unwrap();
    let mut publisher = client(&format!("tcp://{}", r.tcp), &dir, "feed");
    for c in [&mut sub, &mut publisher] {
        c.wait_connected(Duration::from_secs(10)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    for i in 0..1000u32 {
        publisher.publish("md/eu/VOD", &i.to_le_bytes()).unwrap();
    }
    assert_eq!(receive(&mut sub, 1000).len(), 1000);
    // Counters are published every 20 ms.
    std::thread::sleep(Duration::from_millis(100));

    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap();
    assert_eq!(value(&scrape, "tickwire_router_messages_in_total", ("router", "m")), Some(1000.0), "{body}");
    assert_eq!(value(&scrape, "tickwire_router_deliveries_total", ("router", "m")), Some(1000.0));
    assert_eq!(value(&scrape, "tickwire_router_clients", ("router", "m")), Some(2.0));
    assert_eq!(value(&scrape, "tickwire_router_topic_deliveries_total", ("topic", "md/eu/VOD")), Some(1000.0));
    let watcher =
        scrape.samples.iter().find(|s| s.labels.get("name").is_some_and(|n| n.starts_with("watcher@"))).unwrap();
    let id = watcher.labels.get("client").unwrap();
    assert_eq!(value(&scrape, "tickwire_router_client_messages_out_total", ("client", id)), Some(1000.0));
    assert_eq!(value(&scrape, "tickwire_router_client_subscriptions", ("client", id)), Some(1.0));
    let timed = value(&scrape, "tickwire_router_forwarding_seconds_count", ("", "")).or_else(|| {
        scrape.samples.iter().find(|s| s.metric == "tickwire_router_forwarding_seconds").map(|s| match &s.value {
            prometheus_parse::Value::Histogram(b) => b.last().map_or(0.0, |c| c.count),
            _ => 0.0,
        })
    });
    // 1000 publishes, and the subscriber's and publisher's HELLO and
    // SUBSCRIBE: at least 3 frames of 256 timed.
    assert!(timed.is_some_and(|n| n >= 3.0), "{timed:?}\n{body}");
    // The routing agent's own set: the TCP publisher's link was read, in
    // far fewer reads than its 1000 messages (they came batched).
    let agent = scrape.samples.iter().find(|s| s.metric == "tickwire_router_agent_socket_reads_total").expect(&body);
    let reads = value(&scrape, "tickwire_router_agent_socket_reads_total", ("agent", &agent.labels["agent"]));
    assert!(reads.is_some_and(|n| (1.0..1000.0).contains(&n)), "{reads:?}\n{body}");
    for name in ["heartbeat_timeouts", "logins_failed", "logins_abandoned", "logins_throttled", "topic_evictions"] {
        let full = format!("tickwire_router_agent_{name}_total");
        assert!(scrape.samples.iter().any(|s| s.metric == full), "{full} missing\n{body}");
    }
    assert_eq!(get(addr, "/").0, "HTTP/1.1 404 Not Found");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn journal_metrics_are_scraped_and_parsed() {
    let dir = tempdir("metrics-journal");
    let journal = Some(tickwire_router::config::JournalTable::at(dir.join("journal")));
    let cfg =
        RouterConfig { name: "j".into(), metrics: Some("127.0.0.1:0".into()), journal, ..RouterConfig::default() };
    let r = start(&dir, cfg);
    let addr = r.metrics.expect("metrics on");
    let mut sub = client("ipc", &dir, "durable");
    sub.subscribe_durable("orders/>", "desk").unwrap();
    // Guaranteed by topic: `publish` on orders/> goes guaranteed.
    let opts = tickwire_client::ClientOptions {
        name: "feed".into(),
        dir: dir.clone(),
        guaranteed_topics: vec!["orders/>".into()],
        ..Default::default()
    };
    let mut publisher = tickwire_client::Client::connect("ipc", opts).unwrap();
    for c in [&mut sub, &mut publisher] {
        c.wait_connected(Duration::from_secs(10)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(100));
    for i in 0..500u32 {
        publisher.publish("orders/a", &i.to_le_bytes()).unwrap();
    }
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while publisher.acknowledged() < 500 {
        assert!(std::time::Instant::now() < until, "acknowledged {}", publisher.acknowledged());
        publisher.poll(|_| {}, 64);
    }
    // The journal's status is refreshed about once a second.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let (scrape, body) = loop {
        let (_, body) = get(addr, "/metrics");
        let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap();
        let stored =
            scrape.samples.iter().find(|s| s.metric == "tickwire_router_journal_stored_total").map(|s| match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
                _ => f64::NAN,
            });
        if stored == Some(500.0) {
            break (scrape, body);
        }
        assert!(std::time::Instant::now() < until, "no journal metrics: {body}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // Nothing read by the durable subscriber yet: all 500 wait for it.
    assert_eq!(value(&scrape, "tickwire_router_durable_backlog_records", ("durable", "desk")), Some(500.0), "{body}");
    let fsyncs =
        scrape.samples.iter().find(|s| s.metric == "tickwire_router_journal_fsync_seconds").map(|s| match &s.value {
            prometheus_parse::Value::Histogram(b) => b.last().map_or(0.0, |c| c.count),
            _ => 0.0,
        });
    assert!(fsyncs.is_some_and(|n| n >= 1.0), "{fsyncs:?}\n{body}");
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
