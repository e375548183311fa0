//! ARCHITECTURE.md's crate graph is today's: the `crate-graph` block lists
//! every workspace crate's normal dependencies on other tickwire crates
//! (not dev- or build-dependencies) exactly as `cargo metadata` reports
//! them, and lists each crate below every crate it depends on.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

type Graph = BTreeMap<String, BTreeSet<String>>;

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const PREFIX: &str = "tickwire-";

/// The workspace's graph from `cargo metadata`, names without `tickwire-`.
fn cargo_graph() -> Graph {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline", "--manifest-path"])
        .arg(format!("{ROOT}/Cargo.toml"))
        .output()
        .expect("run cargo metadata");
    assert!(out.status.success(), "cargo metadata failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let mut graph = Graph::new();
    for p in meta["packages"].as_array().expect("packages") {
        let name = p["name"].as_str().expect("package name");
        let Some(name) = name.strip_prefix(PREFIX) else { continue };
        let deps = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            .filter(|d| d["kind"].is_null()) // normal: not "dev", not "build"
            .filter_map(|d| d["name"].as_str()?.strip_prefix(PREFIX).map(str::to_owned))
            .collect();
        graph.insert(name.to_owned(), deps);
    }
    graph
}

/// The lines of the first fenced block whose info string names `tag`.
fn block<'a>(markdown: &'a str, tag: &str) -> Vec<(usize, &'a str)> {
    let mut lines = markdown.lines().enumerate();
    let opened = lines
        .by_ref()
        .any(|(_, l)| l.trim().strip_prefix("```").is_some_and(|info| info.split([' ', ',']).any(|w| w == tag)));
    assert!(opened, "ARCHITECTURE.md has no ```text {tag} block");
    lines.take_while(|(_, l)| !l.trim().starts_with("```")).map(|(n, l)| (n + 1, l)).collect()
}

/// The documented graph, in the document's order: `crate -> dep, dep`
/// lines, `#` starting a comment.
fn documented(markdown: &str) -> Vec<(usize, String, BTreeSet<String>)> {
    let mut out = Vec::new();
    for (n, line) in block(markdown, "crate-graph") {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (name, deps) =
            line.split_once("->").unwrap_or_else(|| panic!("ARCHITECTURE.md:{n}: `{line}` is not `crate -> dep, dep`"));
        let deps = deps.split(',').map(str::trim).filter(|d| !d.is_empty()).map(str::to_owned).collect();
        out.push((n, name.trim().to_owned(), deps));
    }
    out
}

/// Every difference between the document and cargo, one line each.
fn differences(doc: &[(usize, String, BTreeSet<String>)], cargo: &Graph) -> Vec<String> {
    let mut diffs = Vec::new();
    let mut seen = BTreeSet::new();
    for (n, name, deps) in doc {
        if !seen.insert(name.clone()) {
            diffs.push(format!("ARCHITECTURE.md:{n}: `{name}` is listed twice"));
        }
        let Some(real) = cargo.get(name) else {
            diffs.push(format!("ARCHITECTURE.md:{n}: `{name}` is not a workspace crate"));
            continue;
        };
        for d in real.difference(deps) {
            diffs.push(format!("ARCHITECTURE.md:{n}: missing edge {name} -> {d} (in {name}'s Cargo.toml)"));
        }
        for d in deps.difference(real) {
            diffs.push(format!("ARCHITECTURE.md:{n}: edge {name} -> {d} is not in {name}'s Cargo.toml"));
        }
    }
    for name in cargo.keys().filter(|c| !seen.contains(*c)) {
        diffs.push(format!("ARCHITECTURE.md: crate `{name}` is not listed (its deps: {:?})", cargo[name]));
    }
    // "Each depends only on crates above it."
    let order: BTreeMap<&str, usize> = doc.iter().enumerate().map(|(i, (_, c, _))| (c.as_str(), i)).collect();
    for (i, (n, name, deps)) in doc.iter().enumerate() {
        for d in deps.iter().filter(|d| order.get(d.as_str()).is_some_and(|&j| j >= i)) {
            diffs.push(format!("ARCHITECTURE.md:{n}: `{name}` depends on `{d}`, listed below it"));
        }
    }
    diffs
}

#[test]
fn the_documented_crate_graph_is_cargos() {
    let text = std::fs::read_to_string(format!("{ROOT}/ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let cargo = cargo_graph();
    assert!(cargo.len() >= 10, "cargo metadata listed only {} tickwire crates", cargo.len());
    let diffs = differences(&documented(&text), &cargo);
    assert!(diffs.is_empty(), "ARCHITECTURE.md's crate graph is not today's:\n{}", diffs.join("\n"));
}

#[test]
fn a_missing_or_extra_edge_is_named() {
    let cargo: Graph = [("wire", vec![]), ("shm", vec!["wire"]), ("router", vec!["shm", "wire"])]
        .into_iter()
        .map(|(c, d)| (c.to_owned(), d.into_iter().map(str::to_owned).collect()))
        .collect();
    let doc = "```text crate-graph\nwire ->\nrouter -> shm, topic   # a comment\nshm -> wire\n```\n";
    let diffs = differences(&documented(doc), &cargo);
    assert_eq!(
        diffs,
        [
            "ARCHITECTURE.md:3: missing edge router -> wire (in router's Cargo.toml)",
            "ARCHITECTURE.md:3: edge router -> topic is not in router's Cargo.toml",
            "ARCHITECTURE.md:3: `router` depends on `shm`, listed below it",
        ]
    );
}
