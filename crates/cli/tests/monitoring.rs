//! Monitoring: `deploy/prometheus` (scrape config, recording and alert
//! rules and their unit tests) and `deploy/grafana` (the dashboard) against
//! the real router.
//!
//! * promtool checks the rules and the config, and runs the rules' unit
//!   tests (promtool missing: a test failure under `CI=true`, else a
//!   visible SKIP);
//! * a router with a journal (in a high-availability group of one), subscribers (one durable) and publishers (one
//!   guaranteed), and a router in a cluster of two, are scraped, and every metric name in the dashboard's
//!   queries and variables and in the rules' expressions must be a series
//!   it exports (a name is a PromQL identifier that is no function,
//!   keyword or label; recording rules' names and `up` aside);
//! * the recording rules' names: defined once, `level:metric:operation`,
//!   the metric and window the expression reads; every `a:b:c` name used is
//!   defined; every alert says what to do.
//!
//! docs/configuration.md's metrics table against the same router:
//! metrics_table.rs.

#[path = "support/scraped.rs"]
mod scraped;

use scraped::{scrape, start_cluster_pair, start_router};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy").join(path)
}

fn read(path: &str) -> String {
    let p = deploy(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

// ---------------------------------------------------------------------
// PromQL names.

/// PromQL functions (Prometheus 2.x and 3.x).
const FUNCTIONS: &str = "abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes
    clamp clamp_max clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month deg delta
    deriv double_exponential_smoothing exp floor histogram_avg histogram_count histogram_fraction histogram_quantile
    histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase irate label_join label_replace
    last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month pi predict_linear
    present_over_time quantile_over_time rad rate resets round scalar sgn sin sinh sort sort_by_label
    sort_by_label_desc sort_desc sqrt stddev_over_time stdvar_over_time sum_over_time tan tanh time timestamp vector
    year";
/// Aggregation operators (followed by `(` or by `by`/`without`).
const AGGREGATIONS: &str =
    "avg bottomk count count_values group limit_ratio limitk max min quantile stddev stdvar sum topk";
/// Keywords whose parenthesised list holds label names.
const LABEL_LISTS: &str = "by without on ignoring group_left group_right";
/// Other keywords.
const KEYWORDS: &str = "and or unless bool offset atan2 inf nan start end";

/// Whether `word` is one of `list`'s words.
fn is(list: &str, word: &str) -> bool {
    list.split_whitespace().any(|w| w == word)
}

/// The metric and recording-rule names `expr` reads, in order; an error
/// names a call to something that is no PromQL function. Strings, label
/// matchers (`{...}`), ranges (`[...]`), numbers and durations, Grafana
/// variables (`$x`, `${x}`) and label lists (`by (...)`, `on (...)`, ...)
/// hold no names.
fn promql_names(expr: &str) -> Result<Vec<String>, String> {
    let b = expr.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
    // Skips from an opening `open` to past its `close`, over strings.
    let skip_to = |mut i: usize, close: u8| -> usize {
        while i < b.len() && b[i] != close {
            if matches!(b[i], b'"' | b'\'' | b'`') {
                let q = b[i];
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            i += 1;
        }
        i + 1
    };
    let mut names = Vec::new();
    // For each open `(`: whether it is a label list.
    let mut parens: Vec<bool> = Vec::new();
    let mut next_is_labels = false;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'"' | b'\'' | b'`' => {
                i += 1;
                while i < b.len() && b[i] != c {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'{' => i = skip_to(i + 1, b'}'),
            b'[' => i = skip_to(i + 1, b']'),
            b'#' => i = skip_to(i, b'\n'),
            b'$' if b.get(i + 1) == Some(&b'{') => i = skip_to(i + 1, b'}'),
            b'$' => {
                i += 1;
                while i < b.len() && ident(b[i]) {
                    i += 1;
                }
            }
            b'(' => {
                parens.push(std::mem::take(&mut next_is_labels));
                i += 1;
            }
            b')' => {
                parens.pop();
                i += 1;
            }
            b'0'..=b'9' | b'.' => {
                while i < b.len() && (ident(b[i]) || b[i] == b'.') && b[i] != b':' {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == b'_' || c == b':' => {
                let start = i;
                while i < b.len() && ident(b[i]) {
                    i += 1;
                }
                let word = &expr[start..i];
                let called = expr[i..].trim_start().starts_with('(');
                if parens.last() == Some(&true) {
                    continue; // a label
                }
                if is(LABEL_LISTS, word) {
                    next_is_labels = called;
                } else if is(AGGREGATIONS, word) || is(KEYWORDS, word) {
                } else if called {
                    if !is(FUNCTIONS, word) {
                        return Err(format!("{word}( is no PromQL function, in {expr:?}"));
                    }
                } else {
                    names.push(word.to_owned());
                }
            }
            _ => i += 1,
        }
    }
    Ok(names)
}

/// The names a Grafana variable's query reads: `label_values(SELECTOR,
/// LABEL)` reads the selector's; `label_values(LABEL)` none; a query
/// (`query_result(...)` or bare) is PromQL.
fn variable_names(query: &str) -> Result<Vec<String>, String> {
    let q = query.trim();
    if let Some(inner) = q.strip_prefix("label_values(").and_then(|r| r.strip_suffix(')')) {
        return match inner.rfind(',') {
            Some(comma) => promql_names(&inner[..comma]),
            None => Ok(Vec::new()),
        };
    }
    if q.starts_with("label_names(") || q.starts_with("metrics(") {
        return Ok(Vec::new());
    }
    let q = q.strip_prefix("query_result(").and_then(|r| r.strip_suffix(')')).unwrap_or(q);
    promql_names(q)
}

#[test]
fn promql_names_are_told_from_functions_keywords_and_labels() {
    let n = |e| promql_names(e).unwrap();
    assert_eq!(
        n(
            r#"sum by (job, instance) (rate(a_total{job=~"$job", x="y(z)"}[$__rate_interval])) / on (job) group_left (le) b"#
        ),
        ["a_total", "b"]
    );
    assert_eq!(
        n("histogram_quantile(0.99, sum(rate(h_bucket[5m])) by (le)) > bool 1e-3 offset 1h unless c:d:rate1m"),
        ["h_bucket", "c:d:rate1m"]
    );
    assert_eq!(n("topk(10, sum without (topic) (x)) and max_over_time(y[1m:15s]) or up == 0"), ["x", "y", "up"]);
    assert_eq!(n(r#"label_replace(m, "dst", "$1", "src", "(.*)") # comment naming nothing"#), ["m"]);
    assert_eq!(n("sum(a) by (client, name) / ignoring(client) group_right b"), ["a", "b"]);
    assert!(promql_names("rat(a[1m])").unwrap_err().contains("rat("));
    assert_eq!(
        variable_names(r#"label_values(tickwire_router_clients{job=~"$job"}, instance)"#).unwrap(),
        ["tickwire_router_clients"]
    );
    assert!(variable_names("label_values(job)").unwrap().is_empty());
}

// ---------------------------------------------------------------------
// The rules file, read as far as these tests need: each rule's name,
// expression and other keys (labels, annotations).

#[derive(Debug)]
struct Rule {
    alert: bool,
    name: String,
    expr: String,
    /// Every other `key: value` in the rule (labels and annotations).
    keys: BTreeMap<String, String>,
}

/// A YAML scalar: plain, quoted, or a block (`>-`, `|`, ... with the
/// lines indented past `indent` that follow).
fn scalar(value: &str, lines: &[&str], next: &mut usize, indent: usize) -> String {
    let v = value.trim();
    if v.starts_with('>') || v.starts_with('|') {
        let mut out = Vec::new();
        while *next < lines.len() {
            let l = lines[*next];
            let deeper = l.len() - l.trim_start().len() > indent;
            if !(deeper || l.trim().is_empty()) {
                break;
            }
            out.push(l.trim());
            *next += 1;
        }
        return out.join(if v.starts_with('>') { " " } else { "\n" }).trim().to_owned();
    }
    let unquoted = v.strip_prefix('"').and_then(|s| s.strip_suffix('"'));
    let unquoted = unquoted.or_else(|| v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')));
    unquoted.unwrap_or(v).to_owned()
}

fn rules() -> Vec<Rule> {
    let text = read("prometheus/tickwire.rules.yml");
    let lines: Vec<&str> = text.lines().collect();
    let mut rules: Vec<Rule> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        let t = line.trim_start();
        if t.starts_with('#') || t.is_empty() {
            continue;
        }
        let indent = line.len() - t.len();
        let (key, value) = match t.trim_start_matches("- ").split_once(':') {
            Some((k, v)) if !k.contains(' ') => (k, v),
            _ => continue,
        };
        let key_indent = if t.starts_with("- ") { indent + 2 } else { indent };
        let value = scalar(value, &lines, &mut i, key_indent);
        match key {
            "record" | "alert" => {
                rules.push(Rule { alert: key == "alert", name: value, expr: String::new(), keys: BTreeMap::new() })
            }
            "expr" => rules.last_mut().expect("expr outside a rule").expr = value,
            _ => {
                if let Some(r) = rules.last_mut() {
                    r.keys.insert(key.to_owned(), value);
                }
            }
        }
    }
    assert!(rules.iter().all(|r| !r.expr.is_empty()), "a rule without expr: {rules:#?}");
    rules
}

// ---------------------------------------------------------------------
// The dashboard's expressions.

/// (where, expression, names) of every query of the dashboard: panels'
/// targets (rows' panels too) and the variables.
fn dashboard_queries() -> (serde_json::Value, Vec<(String, String, Vec<String>)>) {
    let dash: serde_json::Value = serde_json::from_str(&read("grafana/tickwire.json")).expect("tickwire.json is JSON");
    let queries = queries_of(&dash);
    (dash, queries)
}

fn queries_of(dash: &serde_json::Value) -> Vec<(String, String, Vec<String>)> {
    fn walk(v: &serde_json::Value, title: &str, out: &mut Vec<(String, String, Vec<String>)>) {
        match v {
            serde_json::Value::Object(o) => {
                let title = o.get("title").and_then(|t| t.as_str()).unwrap_or(title);
                if let Some(e) = o.get("expr").and_then(|e| e.as_str()) {
                    let names = promql_names(e).unwrap_or_else(|e| panic!("panel {title:?}: {e}"));
                    out.push((format!("panel {title:?}"), e.to_owned(), names));
                }
                for (k, v) in o {
                    if k != "templating" {
                        walk(v, title, out);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, title, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(dash, "", &mut out);
    let vars = dash["templating"]["list"].as_array().expect("templating.list");
    for v in vars.iter().filter(|v| v["type"] == "query") {
        let q = v["query"].get("query").unwrap_or(&v["query"]).as_str().expect("a variable's query");
        let names = variable_names(q).unwrap_or_else(|e| panic!("variable {}: {e}", v["name"]));
        out.push((format!("variable {}", v["name"]), q.to_owned(), names));
    }
    out
}

#[test]
fn the_dashboard_has_a_prometheus_datasource_variable_and_queries_through_it() {
    let (dash, queries) = dashboard_queries();
    assert!(dash["schemaVersion"].as_u64().is_some_and(|v| v >= 36), "schemaVersion {}", dash["schemaVersion"]);
    let vars = dash["templating"]["list"].as_array().unwrap();
    let ds = vars.iter().find(|v| v["type"] == "datasource").expect("a datasource variable");
    assert_eq!(ds["query"], "prometheus");
    let uses = format!("${{{}}}", ds["name"].as_str().unwrap());
    fn datasources<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a serde_json::Value>) {
        match v {
            serde_json::Value::Object(o) => {
                if let Some(d) = o.get("datasource").filter(|d| d.get("type") != Some(&"grafana".into())) {
                    out.push(d);
                }
                o.values().for_each(|v| datasources(v, out));
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| datasources(v, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    datasources(&dash["panels"], &mut all);
    assert!(!all.is_empty());
    for d in all {
        assert_eq!(d["uid"].as_str(), Some(uses.as_str()), "every panel and query on the variable: {d}");
    }
    assert!(queries.len() > 20, "{} queries", queries.len());
}

// ---------------------------------------------------------------------
// promtool.

/// promtool, or None (a visible SKIP) where it is not installed and this
/// is not CI (under CI=true its absence fails the test).
fn promtool(test: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("promtool"))
        .find(|p| p.is_file());
    if found.is_none() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(!ci, "CI=true and no promtool on PATH: scripts/setup.sh installs it (Debian package prometheus)");
        // Straight to stderr: not captured by the test harness, so seen.
        let _ = writeln!(
            std::io::stderr(),
            "SKIP monitoring::{test}: no promtool on PATH (scripts/setup.sh installs it; under CI=true this fails)"
        );
    }
    found
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

#[test]
fn promtool_checks_the_rules_and_the_config_and_runs_the_rules_tests() {
    let Some(promtool) = promtool("promtool_checks_the_rules_and_the_config_and_runs_the_rules_tests") else {
        return;
    };
    let out = run(Command::new(&promtool).args(["check", "rules"]).arg(deploy("prometheus/tickwire.rules.yml")));
    // promtool's count: every rule of the file was read by `rules()`.
    let found = format!("SUCCESS: {} rules found", rules().len());
    assert!(out.contains(&found), "{found:?} expected:\n{out}");
    // From elsewhere than its directory: rule_files is relative to the config.
    let out = run(Command::new(&promtool)
        .current_dir(std::env::temp_dir())
        .args(["check", "config"])
        .arg(deploy("prometheus/prometheus.yml")));
    assert!(out.contains("1 rule files found") && out.contains(&found), "{out}");
    let out = run(Command::new(&promtool).current_dir(deploy("prometheus")).args([
        "test",
        "rules",
        "tickwire.rules.test.yml",
    ]));
    assert!(out.contains("SUCCESS"), "{out}");
}

// ---------------------------------------------------------------------
// The recording rules' names.

/// A duration at the end of a recording rule's operation (`rate1m`,
/// `p99_5m`): the window its expression must use.
fn window(operation: &str) -> Option<&str> {
    let end = operation.rsplit(['_']).next()?;
    let d = end.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    (d.starts_with(|c: char| c.is_ascii_digit()) && d.ends_with(['s', 'm', 'h', 'd'])).then_some(d)
}

#[test]
fn recording_rules_are_named_for_what_they_record_and_every_one_used_is_defined() {
    let rules = rules();
    let mut names = BTreeSet::new();
    for r in &rules {
        assert!(names.insert(r.name.as_str()), "{} defined twice", r.name);
    }
    let records: BTreeSet<&str> = rules.iter().filter(|r| !r.alert).map(|r| r.name.as_str()).collect();
    assert!(records.len() >= 5, "{records:?}");
    for r in rules.iter().filter(|r| !r.alert) {
        let read = promql_names(&r.expr).unwrap();
        let parts: Vec<&str> = r.name.split(':').collect();
        let [level, metric, operation] = parts[..] else {
            panic!("{}: not level:metric:operation", r.name);
        };
        assert!(
            [level, metric, operation]
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')),
            "{}: lower-case level:metric:operation",
            r.name
        );
        let reads_metric = read.iter().any(|n| {
            n == metric || ["_total", "_bucket", "_sum", "_count"].iter().any(|s| *n == format!("{metric}{s}"))
        });
        assert!(reads_metric, "{}: its expression reads no {metric}: {}", r.name, r.expr);
        // The level's labels are kept by the aggregation (of a rule that is
        // one, or a function of one).
        let first = r.expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap();
        let aggregated = is(AGGREGATIONS, first) || is(FUNCTIONS, first);
        if let Some(by) = r.expr.split("by (").nth(1).filter(|_| aggregated) {
            let kept = by.split(')').next().unwrap();
            for label in level.split('_') {
                assert!(kept.split(',').any(|k| k.trim() == label), "{}: by ({kept}) drops {label}", r.name);
            }
        }
        if let Some(w) = window(operation) {
            let ranges: Vec<&str> = r.expr.split('[').skip(1).map(|s| s.split(']').next().unwrap()).collect();
            assert!(!ranges.is_empty() && ranges.iter().all(|x| *x == w), "{}: ranges {ranges:?}", r.name);
        }
    }
    // Every a:b:c name used, in rules and in the dashboard, is a recording rule.
    let (_, queries) = dashboard_queries();
    let used = rules
        .iter()
        .map(|r| (format!("rule {}", r.name), promql_names(&r.expr).unwrap()))
        .chain(queries.into_iter().map(|(at, _, names)| (at, names)));
    for (at, names) in used {
        for n in names.iter().filter(|n| n.contains(':')) {
            assert!(records.contains(n.as_str()), "{at} uses {n}, which no recording rule defines");
        }
    }
}

#[test]
fn every_alert_has_a_severity_and_says_what_to_do() {
    let rules = rules();
    let alerts: Vec<&Rule> = rules.iter().filter(|r| r.alert).collect();
    let names: BTreeSet<&str> = alerts.iter().map(|r| r.name.as_str()).collect();
    for want in [
        "TickwireRouterDown",
        "TickwireClientDiscards",
        "TickwireClientQueueNearLimit",
        "TickwireJournalNearRetention",
        "TickwireJournalAckLag",
        "TickwirePublisherAckLag",
        "TickwireHaNoLeader",
        "TickwireHaMemberLag",
        "TickwireHaSnapshotFailing",
    ] {
        assert!(names.contains(want), "no alert {want}: {names:?}");
    }
    for a in alerts {
        assert!(a.name.starts_with("Tickwire"), "{}", a.name);
        assert!(matches!(a.keys.get("severity").map(String::as_str), Some("critical" | "warning")), "{a:#?}");
        assert!(a.keys.get("summary").is_some_and(|s| s.len() > 10), "{}: no summary", a.name);
        let d = a.keys.get("description").map(String::as_str).unwrap_or_default();
        assert!(d.contains("Action: "), "{}: the description says no action: {d:?}", a.name);
    }
    let down = rules.iter().find(|r| r.name == "TickwireRouterDown").unwrap();
    assert!(down.expr.contains(r#"up{job="tickwire-router"} == 0"#), "{}", down.expr);
    let config = read("prometheus/prometheus.yml");
    assert!(config.contains("job_name: tickwire-router") && config.contains("127.0.0.1:9464"), "{config}");
}

// ---------------------------------------------------------------------
// The real router, scraped.

/// The names of the series a scrape holds (counters' `_total`,
/// histograms' `_bucket`, `_sum`, `_count`: what PromQL queries), and its
/// families by name with their types.
fn exported(body: &str) -> (BTreeSet<String>, BTreeMap<String, String>) {
    let mut series = BTreeSet::new();
    let mut families = BTreeMap::new();
    for l in body.lines() {
        if let Some(t) = l.strip_prefix("# TYPE ") {
            let mut w = t.split_whitespace();
            if let (Some(n), Some(ty)) = (w.next(), w.next()) {
                families.insert(n.to_owned(), ty.to_owned());
            }
        } else if !l.starts_with('#') && !l.is_empty() {
            series.insert(l.split(['{', ' ']).next().unwrap().to_owned());
        }
    }
    (series, families)
}

/// The metric names (not recording rules' names, not `up`) that `used`
/// names and the scrape has no series of, each with where it is used and
/// a hint.
fn missing(
    used: impl IntoIterator<Item = (String, Vec<String>)>,
    series: &BTreeSet<String>,
    families: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (at, names) in used {
        for n in names {
            if n == "up" || n.contains(':') || series.contains(&n) {
                continue;
            }
            let hint = match families.get(&n) {
                Some(ty) => format!("a {ty} family: query its series ({n}_total, {n}_bucket, ...)"),
                None => "not exported".to_owned(),
            };
            out.push(format!("{n} ({at}): {hint}"));
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn every_metric_the_dashboard_and_the_rules_name_is_exported_by_the_router() {
    let rules = rules();
    let (mut dash, queries) = dashboard_queries();
    let used: Vec<(String, Vec<String>)> = rules
        .iter()
        .map(|r| (format!("rule {}", r.name), promql_names(&r.expr).unwrap()))
        .chain(queries.into_iter().map(|(at, _, names)| (at, names)))
        .collect();
    let metrics: BTreeSet<&String> = used.iter().flat_map(|(_, n)| n).filter(|n| n.starts_with("tickwire_")).collect();
    assert!(metrics.len() >= 30, "{metrics:?}");

    let (procs, metrics_addr) = start_router("dashboard");
    // A router in a cluster (not in a group: one or the other): its series.
    let (cluster, cluster_metrics) = start_cluster_pair();

    // The journal's values come with `router status`'s, about once a second.
    let until = Instant::now() + Duration::from_secs(30);
    let (body, left) = loop {
        let body = scrape(metrics_addr).unwrap_or_default() + &scrape(cluster_metrics).unwrap_or_default();
        let (series, families) = exported(&body);
        let left = missing(used.clone(), &series, &families);
        if left.is_empty() || Instant::now() > until {
            break (body, left);
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        left.is_empty(),
        "named by the dashboard or the rules, not exported by the router:\n{}\n\n{body}",
        left.join("\n")
    );
    let (series, families) = exported(&body);
    for n in ["tickwire_router_client_conflated_total", "tickwire_router_journal_retain_bytes"] {
        assert!(series.contains(n), "{n}\n{body}");
    }

    // A name the router does not export fails the check: a bogus panel.
    dash["panels"].as_array_mut().unwrap().push(serde_json::json!({
        "type": "timeseries", "title": "Bogus",
        "targets": [{"expr": "sum(rate(tickwire_router_bogus_total{job=~\"$job\"}[5m])) / tickwire_router_messages_in"}]
    }));
    let bogus = queries_of(&dash).into_iter().map(|(at, _, names)| (at, names));
    let left = missing(bogus, &series, &families);
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left[0].starts_with("tickwire_router_bogus_total (panel \"Bogus\"): not exported"), "{left:?}");
    assert!(left[1].contains("tickwire_router_messages_in (panel \"Bogus\"): a counter family"), "{left:?}");
    drop(procs);
    drop(cluster);
}
