//! docs/configuration.md's table of the router's metrics against the real
//! router: its names' `{a,b}` alternatives expanded, the table and a
//! scrape of a router with a journal (in a high-availability group of
//! one), subscribers (one durable) and publishers (one guaranteed) agree
//! both ways, labels too: every family exported is in the table, every
//! name there is exported.

#[path = "support/scraped.rs"]
mod scraped;

use scraped::{scrape, start_cluster_pair, start_router};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

/// docs/configuration.md.
fn configuration_md() -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `name` with its brace alternatives expanded: `a_{b,c}_d{e,f}` is
/// `a_b_de`, `a_b_df`, `a_c_de`, `a_c_df`.
fn expand(name: &str) -> Vec<String> {
    let Some(open) = name.find('{') else {
        assert!(!name.contains('}'), "{name}: a `}}` without its `{{`");
        return vec![name.to_owned()];
    };
    let close = open + name[open..].find('}').unwrap_or_else(|| panic!("{name}: a `{{` without its `}}`"));
    let alternatives = &name[open + 1..close];
    assert!(!alternatives.contains('{'), "{name}: nested braces");
    let (head, tail) = (&name[..open], &name[close + 1..]);
    let tails = expand(tail);
    alternatives
        .split(',')
        .flat_map(|a| {
            assert!(!a.trim().is_empty(), "{name}: an empty alternative");
            tails.iter().map(move |t| format!("{head}{}{t}", a.trim()))
        })
        .collect()
}

/// The `code` spans of a Markdown table cell, and what lies between them.
fn code_spans(cell: &str) -> (Vec<&str>, String) {
    let parts: Vec<&str> = cell.split('`').collect();
    assert!(parts.len() % 2 == 1, "an unclosed ` in {cell:?}");
    let spans = parts.iter().skip(1).step_by(2).copied().collect();
    let between = parts.iter().step_by(2).copied().collect();
    (spans, between)
}

/// The router's metrics table (the section "Prometheus metrics" of
/// `doc`): each name as the table writes it (counters with `_total`,
/// histograms by their family's name), braces expanded, with the labels
/// its row gives.
fn documented_metrics(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let start = doc.find("\n### Prometheus metrics\n").expect("a section \"### Prometheus metrics\"");
    let section = &doc[start + 1..];
    let section = &section[..section[4..].find("\n##").map_or(section.len(), |e| e + 4)];
    let rows: Vec<&str> = section.lines().filter(|l| l.starts_with('|')).collect();
    assert!(rows.len() > 2 && rows[0] == "| metric | labels | what |", "no metrics table: {rows:?}");
    assert!(rows[1].starts_with("| --- |"), "{rows:?}");
    let mut out = BTreeMap::new();
    for row in &rows[2..] {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let [_, names, labels, what, _] = cells[..] else { panic!("not 3 cells: {row}") };
        assert!(!what.is_empty(), "{row}: says nothing of its metrics");
        let (names, between) = code_spans(names);
        assert!(!names.is_empty(), "{row}: no `name`");
        // Every name in `code`: one outside would go unchecked.
        assert!(between.chars().all(|c| c == ',' || c == ' '), "{row}: {between:?} between its names");
        let (labels, between) = code_spans(labels);
        assert!(between.chars().all(|c| c == ',' || c == ' '), "{row}: {between:?} between its labels");
        let labels: BTreeSet<String> = labels.iter().map(|l| (*l).to_owned()).collect();
        for n in names.iter().flat_map(|n| expand(n)) {
            assert!(n.starts_with("tickwire_router_"), "{row}: {n}");
            assert!(n.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_'), "{row}: {n}");
            assert!(out.insert(n.clone(), labels.clone()).is_none(), "{n} twice in the table");
        }
    }
    out
}

/// The name of a sample line and its labels' names (`le` aside: a
/// histogram's buckets).
fn sample_labels(line: &str) -> (&str, BTreeSet<String>) {
    let end = line.find(['{', ' ']).unwrap_or(line.len());
    let mut labels = BTreeSet::new();
    if line[end..].starts_with('{') {
        let b = line.as_bytes();
        let mut i = end + 1;
        while b.get(i).is_some_and(|&c| c != b'}') {
            let eq = i + line[i..].find('=').unwrap_or_else(|| panic!("a label without `=`: {line}"));
            let label = line[i..eq].trim();
            assert_eq!(b.get(eq + 1), Some(&b'"'), "an unquoted label value: {line}");
            i = eq + 2;
            while b.get(i).is_some_and(|&c| c != b'"') {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            assert!(i < b.len(), "an unclosed label value: {line}");
            i += 1;
            if b.get(i) == Some(&b',') {
                i += 1;
            }
            if label != "le" {
                labels.insert(label.to_owned());
            }
        }
        assert!(i < b.len(), "an unclosed label set: {line}");
    }
    (&line[..end], labels)
}

/// What a scrape exports, as the table writes it: for each family (its
/// `# TYPE` line) a counter's name with `_total`, a gauge's or a
/// histogram's as it is (its `_bucket`, `_sum`, `_count` under it), with
/// the label sets of its samples.
fn exported_as_documented(body: &str) -> BTreeMap<String, Vec<BTreeSet<String>>> {
    let mut families: BTreeMap<String, String> = BTreeMap::new();
    let mut out: BTreeMap<String, Vec<BTreeSet<String>>> = BTreeMap::new();
    for l in body.lines() {
        if let Some(t) = l.strip_prefix("# TYPE ") {
            let (name, ty) = t.split_once(' ').unwrap_or_else(|| panic!("{l}"));
            let documented = match ty.trim() {
                "counter" => format!("{name}_total"),
                "gauge" | "histogram" => name.to_owned(),
                other => panic!("{name}: a {other}: how does the table write one? (teach this test)"),
            };
            families.insert(name.to_owned(), documented.clone());
            // A family in two scrapes joined: the series of both.
            out.entry(documented).or_default();
        } else if !l.starts_with('#') && !l.trim().is_empty() {
            let (sample, labels) = sample_labels(l);
            let family = ["", "_total", "_created", "_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| families.get(sample.strip_suffix(s)?))
                .unwrap_or_else(|| panic!("{sample}: a sample of no family\n{body}"));
            out.get_mut(family).unwrap().push(labels);
        }
    }
    out
}

/// How the table and a scrape differ, both ways: a family exported and
/// not in the table, a name in the table not exported, one exported
/// without a series (so its labels go unchecked) or with other labels
/// than its row's.
fn table_vs_scrape(documented: &BTreeMap<String, BTreeSet<String>>, body: &str) -> Vec<String> {
    let exported = exported_as_documented(body);
    let mut out = Vec::new();
    for (name, series) in &exported {
        if !name.starts_with("tickwire_") {
            continue;
        }
        let Some(labels) = documented.get(name) else {
            out.push(format!("{name}: exported, not in the table"));
            continue;
        };
        if series.is_empty() {
            out.push(format!("{name}: exported with no series: the test's router must make one"));
        }
        for l in series.iter().filter(|l| *l != labels).collect::<BTreeSet<_>>() {
            out.push(format!("{name}: exported with labels {l:?}, the table says {labels:?}"));
        }
    }
    for name in documented.keys().filter(|n| !exported.contains_key(*n)) {
        let hint = match name.strip_suffix("_total") {
            Some(base) if exported.contains_key(base) => " (a gauge or histogram: no _total)",
            _ if exported.contains_key(&format!("{name}_total")) => " (a counter: the table writes its _total)",
            _ => "",
        };
        out.push(format!("{name}: in the table, not exported{hint}"));
    }
    out.sort();
    out
}

#[test]
fn brace_alternatives_expand_and_samples_give_their_labels() {
    assert_eq!(expand("a_{b,c}_d{e, f}"), ["a_b_de", "a_b_df", "a_c_de", "a_c_df"]);
    assert_eq!(expand("plain"), ["plain"]);
    let (name, labels) = sample_labels(r#"x_total{client="3",name="a\"},{b\\",le="0.1"} 7"#);
    assert_eq!((name, labels.into_iter().collect::<Vec<_>>()), ("x_total", vec!["client".into(), "name".into()]));
    assert!(sample_labels("y 1").1.is_empty());
}

/// Every metric family the router exports is in docs/configuration.md's
/// metrics table, with its labels, and every name there is exported. The
/// test's router makes every family there is (a journal with its default
/// retain limit, sync group; clients, topics, a guaranteed publisher and
/// a durable subscription): none is exempt.
#[test]
fn the_metrics_table_of_the_configuration_lists_every_metric_the_router_exports_and_no_other() {
    let doc = configuration_md();
    let documented = documented_metrics(&doc);
    assert!(documented.len() >= 40, "{} names: {documented:?}", documented.len());

    let (procs, metrics_addr) = start_router("table");
    // A router in a cluster (not in a high-availability group: one or the
    // other), linked to another: the cluster's series.
    let (cluster, cluster_metrics) = start_cluster_pair();
    // The journal's values come with `router status`'s, about once a second.
    let until = Instant::now() + Duration::from_secs(30);
    let (body, left) = loop {
        let body = scrape(metrics_addr).unwrap_or_default() + &scrape(cluster_metrics).unwrap_or_default();
        let left = table_vs_scrape(&documented, &body);
        if left.is_empty() || Instant::now() > until {
            break (body, left);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        left.is_empty(),
        "docs/configuration.md's metrics table (### Prometheus metrics) and the router's /metrics differ:\n{}\n\n{body}",
        left.join("\n")
    );

    // The check sees a row gone, a name that is not exported, and labels
    // that are not the row's.
    let row = "| `tickwire_router_queue_limit_bytes` | `router` |";
    assert_eq!(doc.matches(row).count(), 1, "the row this check removes");
    let doc = doc.replace(row, "| `tickwire_router_bogus_{a,b}_total` | `client` |");
    let left = table_vs_scrape(&documented_metrics(&doc), &body);
    let want = [
        "tickwire_router_bogus_a_total: in the table, not exported",
        "tickwire_router_bogus_b_total: in the table, not exported",
        "tickwire_router_queue_limit_bytes: exported, not in the table",
    ];
    assert_eq!(left, want, "{left:#?}");
    let doc = configuration_md().replace("| `tickwire_router_clients` | `router` |", "| `tickwire_router_clients` | |");
    let left = table_vs_scrape(&documented_metrics(&doc), &body);
    assert_eq!(left, [r#"tickwire_router_clients: exported with labels {"router"}, the table says {}"#], "{left:#?}");
    drop(procs);
    drop(cluster);
}
