//! What one publish costs the routing core, driven without I/O: PUBLISH
//! frames handed to [`Router::handle_frame`], deliveries into in-memory
//! transports. Run with `cargo bench -p tickwire-router --bench route`.
//!
//! Each case publishes round-robin over its topics; the figure is the
//! median, over interleaved rounds, of nanoseconds per publish:
//! * `plain`: 1,000 topics, one `md/>` subscriber;
//! * `unwanted`: 1,000 topics nobody subscribed to;
//! * `full`: as `plain`, with conflation, a last-value cache and a second
//!   routing agent interested in every topic (the message crosses a link);
//! * `churn`: 200,000 distinct topics, each seen once per pass (more than
//!   the router remembers), one `md/>` subscriber.

use std::hint::black_box;
use std::time::Instant;
use tickwire_router::cache::{CacheConfig, LastValues};
use tickwire_router::peers::{link, Interest, LinkReader, Peers};
use tickwire_router::{Limits, MemoryOut, Outbound, Router};
use tickwire_topic::Pattern;
use tickwire_wire::client::{ClientKind, ClientRepr, CLIENT_PROTOCOL_VERSION};

fn frame(r: ClientRepr<'_>) -> Vec<u8> {
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b).expect("sized");
    b
}

fn client(r: &mut Router, name: &str) -> u32 {
    let id = r.attach(Outbound::Memory(MemoryOut { frames: Vec::new(), room: usize::MAX }), name.into());
    let hello = frame(ClientRepr { value: CLIENT_PROTOCOL_VERSION, topic: name, ..ClientRepr::new(ClientKind::Hello) });
    r.handle_frame(id, &hello).expect("hello");
    id
}

struct Case {
    name: &'static str,
    router: Router,
    publisher: u32,
    subscriber: Option<u32>,
    link: Option<LinkReader>,
    frames: Vec<Vec<u8>>,
}

fn case(name: &'static str, topics: usize, prefix: &str, full: bool) -> Case {
    let p = |s: &str| Pattern::parse(s).expect("pattern");
    let (mut router, link) = if full {
        let limits = Limits { conflate: vec![p("md/>")], ..Limits::default() };
        let (tx, rx) = link(1 << 20, None);
        let mut r = Router::with_peers("bench", limits, None, Peers::new(0, vec![None, Some(tx)]), 2);
        r.handle_interest(&Interest::Add { agent: 1, id: 0, pattern: p("md/>") });
        let cfg = CacheConfig { patterns: vec![p("md/>")], max_topics: 1 << 20, max_bytes: 1 << 30 };
        r.set_cache(LastValues::new(cfg));
        (r, Some(rx))
    } else {
        (Router::new("bench", Limits::default(), None), None)
    };
    let publisher = client(&mut router, "p");
    let subscriber = (prefix == "md").then(|| {
        let s = client(&mut router, "s");
        let sub = frame(ClientRepr { value: 1, topic: "md/>", ..ClientRepr::new(ClientKind::Subscribe) });
        router.handle_frame(s, &sub).expect("subscribe");
        s
    });
    let frames = (0..topics)
        .map(|i| {
            let topic = format!("{prefix}/x{}/S{i:06}", i % 97);
            frame(ClientRepr { topic: &topic, body: b"bid 101.25 ask 101.5", ..ClientRepr::new(ClientKind::Publish) })
        })
        .collect();
    Case { name, router, publisher, subscriber, link, frames }
}

/// Nanoseconds per publish over `n` publishes.
fn round(c: &mut Case, n: usize) -> f64 {
    let t = Instant::now();
    for i in 0..n {
        let f = &c.frames[i % c.frames.len()];
        black_box(c.router.handle_frame(c.publisher, f)).expect("publish");
        if i % 64 == 63 {
            if let Some(s) = c.subscriber {
                if let Some(Outbound::Memory(m)) = c.router.session_mut(s).map(|s| s.outbound_mut()) {
                    m.frames.clear();
                }
            }
            if let Some(l) = &mut c.link {
                l.receive(usize::MAX, |m| {
                    black_box((m.topic, m.payload));
                });
            }
        }
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let mut cases = vec![
        case("plain", 1_000, "md", false),
        case("unwanted", 1_000, "eq", false),
        case("full", 1_000, "md", true),
        case("churn", 200_000, "md", false),
    ];
    let (rounds, n) = (9, 400_000);
    let mut samples = vec![Vec::new(); cases.len()];
    for c in &mut cases {
        round(c, n); // warm up: every topic seen
    }
    for _ in 0..rounds {
        for (c, s) in cases.iter_mut().zip(samples.iter_mut()) {
            s.push(round(c, n));
        }
    }
    println!("{:<10} {:>10} {:>10}", "case", "median ns", "min ns");
    for (c, mut s) in cases.iter().zip(samples) {
        s.sort_by(f64::total_cmp);
        println!("{:<10} {:>10.1} {:>10.1}", c.name, s[s.len() / 2], s[0]);
    }
}
