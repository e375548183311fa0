//! The `/metrics` listener: each request on a thread of its own with a
//! whole-request deadline (2 s), so that a client trickling its request
//! blinds no scrape; at most [`MAX_REQUESTS`] at once, one more ending the
//! oldest ([`MetricsServer::evicted`]), so that clients holding every
//! place keep no scrape out either.

use super::{ClusterMetrics, CountersFile, JournalMetrics, RouterCollector, SharedLatencies};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The `/metrics` listener and its thread.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Requests ended to make room (exported as
    /// `tickwire_router_metrics_evicted_total`).
    evicted: Counter,
}

impl MetricsServer {
    /// Listens on `addr` and serves the router's metrics from `counters`
    /// (its counters file, read in place) and `times` (one per routing agent),
    /// with the journal's and the cluster's when the router has them.
    ///
    /// # Errors
    /// The address cannot be bound, or the thread cannot start.
    pub fn start(
        addr: SocketAddr,
        counters: Arc<CountersFile>,
        times: Vec<Arc<SharedLatencies>>,
        journal: Option<JournalMetrics>,
        cluster: Option<ClusterMetrics>,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(RouterCollector { counters, times }));
        if let Some(j) = journal {
            registry.register_collector(Box::new(j));
        }
        if let Some(c) = cluster {
            registry.register_collector(Box::new(c));
        }
        let evicted = Counter::default();
        registry.register(
            "tickwire_router_metrics_evicted",
            format!(
                "Metrics requests ended unanswered to make room for a newer one (more than {MAX_REQUESTS} at once)."
            ),
            evicted.clone(),
        );
        let registry = Arc::new(registry);
        let open: Arc<Mutex<VecDeque<(u64, TcpStream)>>> = Arc::default();
        let counted = evicted.clone();
        std::thread::Builder::new().name("router-metrics".into()).spawn(move || {
            let mut next = 0u64;
            for conn in listener.incoming() {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(c) = conn else { continue };
                // Each request on a thread of its own, so that a client
                // that trickles its request blinds no scrape; at most
                // MAX_REQUESTS at once: one more ends the oldest, so that
                // clients holding every place cannot keep a scrape out
                // (a scrape takes milliseconds, a holder its deadline).
                let Ok(handle) = c.try_clone() else { continue };
                let id = next;
                next += 1;
                if let Ok(mut o) = open.lock() {
                    if o.len() >= MAX_REQUESTS {
                        if let Some((_, oldest)) = o.pop_front() {
                            let _ = oldest.shutdown(Shutdown::Both);
                            counted.inc();
                            tracing::debug!("metrics: {MAX_REQUESTS} requests in progress; the oldest ended");
                        }
                    }
                    o.push_back((id, handle));
                }
                let (registry, done) = (Arc::clone(&registry), Arc::clone(&open));
                let spawned = std::thread::Builder::new().name("router-metrics-req".into()).spawn(move || {
                    if let Err(e) = serve(c, &registry) {
                        tracing::debug!("metrics: {e}");
                    }
                    if let Ok(mut o) = done.lock() {
                        o.retain(|(k, _)| *k != id);
                    }
                });
                if spawned.is_err() {
                    if let Ok(mut o) = open.lock() {
                        o.retain(|(k, _)| *k != id);
                    }
                }
            }
        })?;
        Ok(Self { addr, stop, evicted })
    }

    /// Requests ended unanswered to make room for a newer one (more than
    /// [`MAX_REQUESTS`] at once).
    pub fn evicted(&self) -> u64 {
        self.evicted.get()
    }

    /// Where it listens (port 0 resolved).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accepting thread so it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(100));
    }
}

/// Requests served at once.
pub const MAX_REQUESTS: usize = 16;
/// The longest a whole request may take to arrive (however it trickles).
const REQUEST_DEADLINE: Duration = Duration::from_secs(2);

/// Answers one HTTP request: `GET /metrics`, anything else 404 or 405.
fn serve(mut c: TcpStream, registry: &Registry) -> std::io::Result<()> {
    let deadline = std::time::Instant::now() + REQUEST_DEADLINE;
    c.set_write_timeout(Some(REQUEST_DEADLINE))?;
    let mut req = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "request not whole within 2 s"));
        }
        c.set_read_timeout(Some(left))?;
        let n = c.read(&mut buf)?;
        if n == 0 || req.len() + n > 8192 {
            return Ok(());
        }
        req.extend_from_slice(&buf[..n]);
    }
    let line = req.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let (status, body, ty) = match (method, path) {
        (b"GET", b"/metrics") => {
            let mut text = String::new();
            match prometheus_client::encoding::text::encode(&mut text, registry) {
                Ok(()) => ("200 OK", text, "application/openmetrics-text; version=1.0.0; charset=utf-8"),
                Err(e) => ("500 Internal Server Error", format!("{e}\n"), "text/plain"),
            }
        }
        (b"GET", _) => ("404 Not Found", "tickwire router: metrics are at /metrics\n".into(), "text/plain"),
        _ => ("405 Method Not Allowed", "GET only\n".into(), "text/plain"),
    };
    write!(
        c,
        "HTTP/1.1 {status}\r\nContent-Type: {ty}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    c.write_all(body.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::super::tests::frame;
    use super::*;

    fn get(addr: SocketAddr) -> (String, Duration) {
        let t = std::time::Instant::now();
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut text = String::new();
        c.read_to_string(&mut text).unwrap();
        (text, t.elapsed())
    }

    /// Issue 44: label values are escaped as the exposition format says,
    /// so a topic or client name holding `"`, `\` or a would-be label
    /// leaves the page valid and adds no label; and a client trickling its
    /// request one byte every 0.5 s blinds no scrape.
    #[test]
    fn label_values_are_escaped_and_a_trickling_client_blinds_no_scrape() {
        use crate::{Limits, MemoryOut, Outbound, Router};
        use tickwire_wire::client::{ClientKind, ClientRepr, CLIENT_PROTOCOL_VERSION};
        let dir = std::env::temp_dir().join(format!("tw-metrics-escaped-{}", std::process::id()));
        let counters = CountersFile::create(&dir).unwrap();
        let mut r = Router::new("m", Limits::default(), Some(Arc::clone(&counters)));
        let name = "desk\\\"7";
        let out = Outbound::Memory(MemoryOut { frames: Vec::new(), room: usize::MAX });
        let p = r.attach(out, "test".into());
        let hello = ClientRepr { value: CLIENT_PROTOCOL_VERSION, topic: name, ..ClientRepr::new(ClientKind::Hello) };
        r.handle_frame(p, &frame(hello)).unwrap();
        let topics = ["md/q\"x", "md/back\\slash", "md/a\",router=\"spoof"];
        for topic in topics {
            r.handle_frame(p, &frame(ClientRepr { topic, body: b"1", ..ClientRepr::new(ClientKind::Publish) }))
                .unwrap();
        }
        r.publish_counters();
        let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), counters, Vec::new(), None, None).unwrap();
        // A client that sends its request a byte every 0.5 s.
        let trickler = TcpStream::connect(server.addr()).unwrap();
        let trickle = std::thread::spawn(move || {
            for &b in b"GET /metrics HTTP/1.1\r\n".iter() {
                if (&trickler).write_all(&[b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        });
        std::thread::sleep(Duration::from_millis(100));
        let mut text = String::new();
        for _ in 0..3 {
            let (page, took) = get(server.addr());
            assert!(took < Duration::from_secs(1), "a scrape took {took:?} beside a trickling client");
            text = page;
        }
        let body = text.split("\r\n\r\n").nth(1).unwrap();
        // Every sample line parses as the exposition format says (escapes
        // undone), with nothing left over.
        let mut samples = Vec::new();
        for line in body.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let parsed = exposition_line(line);
            assert!(parsed.is_some(), "not a valid sample line: {line}");
            samples.extend(parsed);
        }
        let of = |metric: &str, label: &str| -> Vec<String> {
            samples
                .iter()
                .filter(|(m, _)| m == metric)
                .filter_map(|(_, ls)| ls.iter().find(|(k, _)| k == label).map(|(_, v)| v.clone()))
                .collect()
        };
        let topic_labels = of("tickwire_router_topic_messages_in_total", "topic");
        for topic in topics {
            assert!(topic_labels.iter().any(|t| t == topic), "{topic:?} not among {topic_labels:?}");
        }
        for (metric, labels) in &samples {
            let keys: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
            assert!(!metric.starts_with("tickwire_router_topic_") || keys == ["topic"], "{metric} {labels:?}");
        }
        let names = of("tickwire_router_client_messages_in_total", "name");
        assert!(names.iter().any(|n| n.starts_with(name)), "{name:?} not among {names:?}");
        drop(trickle);
        drop(r);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// One sample line of the exposition format: its metric name and
    /// labels (escapes undone), `None` if it is not valid.
    fn exposition_line(line: &str) -> Option<(String, Vec<(String, String)>)> {
        let (name, rest) = match line.find('{') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => return line.split_once(' ').map(|(n, _)| (n.to_owned(), Vec::new())),
        };
        let mut labels = Vec::new();
        let mut chars = rest.chars();
        loop {
            let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return None;
            }
            if chars.next()? != '"' {
                return None;
            }
            let mut value = String::new();
            loop {
                match chars.next()? {
                    '\\' => match chars.next()? {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        _ => return None,
                    },
                    '"' => break,
                    '\n' => return None,
                    c => value.push(c),
                }
            }
            labels.push((key, value));
            match chars.next()? {
                ',' => continue,
                '}' => break,
                _ => return None,
            }
        }
        let tail: String = chars.collect();
        let value = tail.strip_prefix(' ')?;
        value.split(' ').next()?.parse::<f64>().ok()?;
        Some((name.to_owned(), labels))
    }
}
