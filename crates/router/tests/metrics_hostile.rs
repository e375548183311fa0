//! The metrics endpoint against hostile input (issue 44 item 4): topics
//! holding `"`, `\` and a would-be label leave the page valid exposition
//! text, each value read back as published; and clients that trickle a
//! request, say nothing, or hold every place the listener has blind no
//! scrape.

mod common;

use common::{client, start, tempdir};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use tickwire_router::metrics::MAX_REQUESTS;
use tickwire_router::RouterConfig;

/// GET /metrics: (body, how long the answer took).
fn scrape(addr: SocketAddr) -> (String, Duration) {
    let t = Instant::now();
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let took = t.elapsed();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    (body.to_owned(), took)
}

/// A sample: its metric name and labels (escapes undone).
type Sample = (String, Vec<(String, String)>);

/// One line of the exposition format, strictly: `# ...` comments, blank,
/// or `name{label="value",...} number [timestamp]` where a value escapes
/// only `\\`, `\"` and `\n`. `Err` says what is wrong.
fn sample_line(line: &str) -> Result<Option<Sample>, String> {
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    let is_name = |s: &str| {
        !s.is_empty()
            && !s.starts_with(|c: char| c.is_ascii_digit())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    if !is_name(name) {
        return Err(format!("metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices();
        loop {
            let start = chars.clone().next().map_or(r.len(), |(i, _)| i);
            let eq = chars.by_ref().find(|&(_, c)| c == '=').ok_or("a label without =")?.0;
            let key = &r[start..eq];
            if !is_name(key) || key.contains(':') {
                return Err(format!("label name {key:?}"));
            }
            if chars.next().map(|x| x.1) != Some('"') {
                return Err(format!("label {key}: value not quoted"));
            }
            let mut value = String::new();
            loop {
                match chars.next().ok_or("a value not closed")?.1 {
                    '\\' => match chars.next().ok_or("a lone backslash")?.1 {
                        '\\' => value.push('\\'),
                        '"' => value.push('"'),
                        'n' => value.push('\n'),
                        c => return Err(format!("escape \\{c}")),
                    },
                    '"' => break,
                    '\n' => return Err("a raw line feed".into()),
                    c => value.push(c),
                }
            }
            labels.push((key.to_owned(), value));
            match chars.next().ok_or("labels not closed")? {
                (_, ',') => {}
                (i, '}') => {
                    rest = &r[i + 1..];
                    break;
                }
                (_, c) => return Err(format!("{c:?} after a label value")),
            }
        }
        let mut keys: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        if keys.windows(2).any(|w| w[0] == w[1]) {
            return Err(format!("a label given twice: {keys:?}"));
        }
    }
    let mut fields = rest.strip_prefix(' ').ok_or("no space before the value")?.split(' ');
    let value = fields.next().ok_or("no value")?;
    let number = matches!(value, "+Inf" | "-Inf" | "NaN") || value.parse::<f64>().is_ok();
    if !number {
        return Err(format!("value {value:?}"));
    }
    if let Some(ts) = fields.next() {
        ts.parse::<f64>().map_err(|_| format!("timestamp {ts:?}"))?;
    }
    if fields.next().is_some() {
        return Err("more after the timestamp".into());
    }
    Ok(Some((name.to_owned(), labels)))
}

/// The parser refuses what the issue saw: a quote ending a value early,
/// a label smuggled in by a value, an unknown escape.
#[test]
fn the_strict_parser_refuses_what_the_issue_saw() {
    for bad in [
        r#"m{topic="md/q"x"} 1"#,
        r#"m{topic="md/a",router="spoof"} 1"#,
        r#"m{topic="md/a\b"} 1"#,
        r#"m{topic="x"} one"#,
        "m{topic=\"a\nb\"} 1",
    ] {
        // The second is valid text, but has a label of the value's making.
        let r = sample_line(bad);
        assert!(r.is_err() || r.as_ref().unwrap().as_ref().unwrap().1.len() > 1, "{bad}: {r:?}");
    }
    let ok = sample_line(r#"m_total{topic="md/q\"x",n="a\\b\nc"} 3 1700000000"#).unwrap().unwrap();
    assert_eq!(ok.1, [("topic".to_owned(), "md/q\"x".to_owned()), ("n".to_owned(), "a\\b\nc".to_owned())]);
}

#[test]
fn hostile_topics_leave_the_page_valid_and_slow_clients_blind_no_scrape() {
    let dir = tempdir("metrics-hostile");
    let cfg = RouterConfig { name: "m".into(), metrics: Some("127.0.0.1:0".into()), ..RouterConfig::default() };
    let r = start(&dir, cfg);
    let addr = r.metrics.expect("metrics on");
    // Topics may not hold a line feed (no control characters): only `"`,
    // `\` and a would-be label reach the page.
    assert!(tickwire_topic::check_topic("md/a\nb").is_err());
    let topics = ["md/q\"x", "md/a\\b", "md/a\",router=\"spoof"];
    let mut publisher = client(&format!("tcp://{}", r.tcp), &dir, "feed\"\\desk");
    publisher.wait_connected(Duration::from_secs(10)).unwrap();
    for t in topics {
        publisher.publish(t, b"1").unwrap();
    }
    publisher.flush().unwrap();

    // A client trickling its request a byte every 0.5 s, one saying
    // nothing, and as many again as the listener serves at once.
    let trickler = TcpStream::connect(addr).unwrap();
    let trickle = std::thread::spawn(move || {
        for &b in b"GET /metrics HTTP/1.1\r\nHost: slow\r\n\r\n" {
            if (&trickler).write_all(&[b]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    });
    let opened = Instant::now();
    let silent: Vec<TcpStream> = (0..=MAX_REQUESTS).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // One more than the listener serves at once: the oldest were ended to
    // make room, well before their 2 s deadline would have ended them.
    let mut first = &silent[0];
    first
        .set_read_timeout(Some(
            Duration::from_millis(1800).saturating_sub(opened.elapsed()).max(Duration::from_millis(1)),
        ))
        .unwrap();
    let r = first.read(&mut [0u8; 16]);
    let ended = match &r {
        Ok(0) => true,
        Err(e) => matches!(e.kind(), std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted),
        Ok(_) => false,
    };
    println!("the oldest silent connection ended after {:?} ({r:?})", opened.elapsed());
    assert!(ended, "the oldest silent connection still open after {:?}: {r:?}", opened.elapsed());

    // Counters reach the page within 20 ms; allow for a paused host.
    let until = Instant::now() + Duration::from_secs(10);
    let mut times = Vec::new();
    let samples = loop {
        let (body, took) = scrape(addr);
        times.push(took);
        let mut samples = Vec::new();
        for (i, line) in body.lines().enumerate() {
            match sample_line(line) {
                Ok(s) => samples.extend(s),
                Err(e) => panic!("line {}: {e}: {line}", i + 1),
            }
        }
        let topic_values: Vec<&str> = samples
            .iter()
            .filter(|(m, _)| m == "tickwire_router_topic_messages_in_total")
            .flat_map(|(_, ls)| ls.iter().filter(|(k, _)| k == "topic").map(|(_, v)| v.as_str()))
            .collect();
        if topics.iter().all(|t| topic_values.contains(t)) && times.len() >= 3 {
            break samples;
        }
        assert!(Instant::now() < until, "topics not read back from the page: {topic_values:?}\n{body}");
        std::thread::sleep(Duration::from_millis(50));
    };
    println!(
        "{} scrapes beside a trickling client and {} silent ones: {:?}",
        times.len(),
        silent.len(),
        times.iter().map(|t| format!("{:.1} ms", t.as_secs_f64() * 1e3)).collect::<Vec<_>>()
    );
    for t in &times {
        assert!(*t < Duration::from_secs(3), "a scrape took {t:?}");
    }
    for (m, ls) in &samples {
        if m.starts_with("tickwire_router_topic_") {
            assert!(ls.len() == 1 && ls[0].0 == "topic", "{m} {ls:?}: a label of a topic's making");
        }
    }
    let names: Vec<&str> =
        samples.iter().flat_map(|(_, ls)| ls.iter().filter(|(k, _)| k == "name").map(|(_, v)| v.as_str())).collect();
    assert!(names.iter().any(|n| n.starts_with("feed\"\\desk@")), "the client's name read back: {names:?}");
    // The requests ended to make room are counted on the page.
    let (body, _) = scrape(addr);
    let evicted: Vec<f64> = body
        .lines()
        .filter_map(|l| l.strip_prefix("tickwire_router_metrics_evicted_total "))
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    assert!(evicted.len() == 1 && evicted[0] >= 1.0, "tickwire_router_metrics_evicted_total: {evicted:?}");

    drop(silent);
    trickle.join().unwrap();
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
