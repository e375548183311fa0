//! The lab's layers, read from its source: every file's imports of other
//! files of the crate (`crate::`, `super::`, `self::` and child-module
//! paths, `use` trees included) form a graph that has no cycle, and no
//! file imports from a layer above its own:
//!
//! 1. `base/`: clock and floor probes, histograms, pauses, reports and
//!    their formats, the machine, worker processes;
//! 2. `paths/`: what carries the messages;
//! 3. `modes/`: the measurements;
//! 4. `request.rs`: the request that names a run, and the dispatch.
//!
//! `lib.rs` re-exports from `base` only and counts as `base`. Test modules
//! (`#[cfg(test)] mod` to the end of a file) are left out: a test may import
//! anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file: its module path and its text without comments and tests.
struct Unit {
    file: String,
    module: Vec<String>,
    text: String,
}

fn rank(file: &str) -> usize {
    match file.split('/').next() {
        Some("base") | Some("lib.rs") => 0,
        Some("paths") => 1,
        Some("modes") => 2,
        _ => 3,
    }
}

fn layer(r: usize) -> &'static str {
    ["base", "paths", "modes", "request"][r]
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The text with `//` comments, string literals' contents (raw strings
/// included) and `#[cfg(test)] mod ... { ... }` blocks removed.
fn clean(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let b = src.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let word_start = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if word_start && b[i] == b'r' && matches!(b.get(i + 1), Some(b'"') | Some(b'#')) {
            // A raw string: r"...", r#"..."#, with as many # to close.
            let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
            if b.get(i + 1 + hashes) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat(b'#').take(hashes)).collect();
            i += 2 + hashes;
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            // A string literal, escapes included.
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') && b.get(i + 3) == Some(&b'\'') {
            i += 4; // an escaped char literal such as '\"'
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            i += 3; // a char literal such as '"'
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    drop_test_modules(&out)
}

/// `text` without its `#[cfg(test)] mod name { ... }` blocks (braces
/// matched; strings are already empty).
fn drop_test_modules(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = rest[at + "#[cfg(test)]".len()..].trim_start();
        let body = after.strip_prefix("mod ").map(|m| m.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_'));
        match body.map(str::trim_start).filter(|m| m.starts_with('{')) {
            Some(block) => {
                out.push_str(&rest[..at]);
                let mut depth = 0usize;
                let mut end = block.len();
                for (k, c) in block.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &block[end..];
            }
            None => {
                out.push_str(&rest[..at + 1]);
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

fn ident_at(b: &[u8], mut i: usize) -> (String, usize) {
    let s = i;
    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
        i += 1;
    }
    (String::from_utf8_lossy(&b[s..i]).into_owned(), i)
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// Parses a path or `use` tree starting at `i` (just after `prefix::`),
/// pushing every full path it names.
fn tree(b: &[u8], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    loop {
        i = skip_ws(b, i);
        if i < b.len() && b[i] == b'{' {
            i += 1;
            loop {
                i = skip_ws(b, i);
                if i >= b.len() {
                    return i;
                }
                if b[i] == b'}' {
                    return i + 1;
                }
                if b[i] == b',' {
                    i += 1;
                    continue;
                }
                let j = tree(b, i, &path, out);
                i = if j == i { i + 1 } else { j };
            }
        }
        let (id, j) = ident_at(b, i);
        if id.is_empty() {
            out.push(path);
            return i;
        }
        i = j;
        if id == "super" {
            path.pop();
        } else {
            path.push(id);
        }
        if b.get(i) == Some(&b':') && b.get(i + 1) == Some(&b':') {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

fn module_of(rel: &str) -> Vec<String> {
    let rel = rel.trim_end_matches(".rs");
    let mut m: Vec<String> = rel.split('/').map(str::to_owned).collect();
    if matches!(m.last().map(String::as_str), Some("mod") | Some("lib")) {
        m.pop();
    }
    m
}

fn units() -> Vec<Unit> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&root, &mut files);
    files
        .iter()
        .map(|p| {
            let file = p.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            let text = clean(&std::fs::read_to_string(p).unwrap());
            Unit { module: module_of(&file), file, text }
        })
        .collect()
}

/// Every path in `b` that starts at `crate`, `self`, `super` or a name of
/// `names`, in `module`, as full paths.
fn scan(b: &[u8], module: &[String], names: &BTreeMap<String, Vec<String>>) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let boundary = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_' || b[i - 1] == b':');
        let (id, j) = ident_at(b, i);
        if id.is_empty() {
            i += 1;
            continue;
        }
        let path_follows = b.get(j) == Some(&b':') && b.get(j + 1) == Some(&b':');
        if boundary && path_follows {
            let mut base: Option<Vec<String>> = match id.as_str() {
                "crate" => Some(Vec::new()),
                "self" => Some(module.to_vec()),
                "super" => Some(module[..module.len().saturating_sub(1)].to_vec()),
                c => names.get(c).cloned(),
            };
            let mut k = j + 2;
            while let Some(m) = base.as_mut() {
                let (next, e) = ident_at(b, k);
                if next == "super" && b.get(e) == Some(&b':') {
                    m.pop();
                    k = e + 2;
                } else {
                    break;
                }
            }
            if let Some(base) = base {
                i = tree(b, k, &base, &mut paths);
                continue;
            }
        }
        i = j;
    }
    paths
}

/// Every file's edges to other files (with the names that make each).
fn graph(units: &[Unit]) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let modules: BTreeMap<Vec<String>, String> = units.iter().map(|u| (u.module.clone(), u.file.clone())).collect();
    // What lib.rs re-exports (`pub use a::b::{C, d}`): `crate::C` is `a::b::C`.
    let mut reexports: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if let Some(lib) = units.iter().find(|u| u.file == "lib.rs") {
        let b = lib.text.as_bytes();
        let mut from = 0;
        while let Some(at) = lib.text[from..].find("pub use ") {
            let start = from + at + "pub use ".len();
            let mut paths = Vec::new();
            from = tree(b, start, &[], &mut paths).max(start + 1);
            for p in paths {
                reexports.insert(p.last().unwrap().clone(), p);
            }
        }
    }
    let resolve = |path: &[String]| -> (String, String) {
        let path: Vec<String> = match path.first().and_then(|first| reexports.get(first)) {
            Some(target) => target.iter().chain(&path[1..]).cloned().collect(),
            None => path.to_vec(),
        };
        for n in (0..=path.len()).rev() {
            if let Some(f) = modules.get(&path[..n]) {
                return (f.clone(), path.join("::"));
            }
        }
        ("lib.rs".into(), path.join("::"))
    };
    let mut g = BTreeMap::new();
    for u in units {
        let b = u.text.as_bytes();
        // Leading names that stand for a module of the crate: the
        // children, then every module a path names whole (`use
        // crate::modes;` makes `modes::fsync::probe` reach modes/fsync.rs).
        let mut names: BTreeMap<String, Vec<String>> = modules
            .keys()
            .filter(|m| m.len() == u.module.len() + 1 && m.starts_with(&u.module))
            .map(|m| (m.last().unwrap().clone(), m.clone()))
            .collect();
        let mut paths = scan(b, &u.module, &names);
        for p in &paths {
            if modules.contains_key(p) && !p.is_empty() {
                names.entry(p.last().unwrap().clone()).or_insert_with(|| p.clone());
            }
        }
        paths.extend(scan(b, &u.module, &names));
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for p in paths {
            let (to, name) = resolve(&p);
            if to != u.file {
                edges.entry(to).or_default().insert(name);
            }
        }
        g.insert(u.file.clone(), edges);
    }
    g
}

/// Files in cycles (Tarjan's strongly connected components larger than one).
fn cycles(g: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        index: BTreeMap<&'a str, (usize, usize)>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, (t.next, t.next));
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        let g = t.g;
        for w in g.get(v).into_iter().flat_map(|e| e.keys()) {
            let w = w.as_str();
            if !g.contains_key(w) {
                continue;
            }
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.index[w].1;
                let e = t.index.get_mut(v).unwrap();
                e.1 = e.1.min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w].0;
                let e = t.index.get_mut(v).unwrap();
                e.1 = e.1.min(iw);
            }
        }
        if t.index[v].0 == t.index[v].1 {
            let mut c = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                c.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if c.len() > 1 {
                c.sort();
                t.out.push(c);
            }
        }
    }
    let mut t = T { g, index: BTreeMap::new(), stack: Vec::new(), on: BTreeSet::new(), next: 0, out: Vec::new() };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn the_lab_has_no_import_cycle() {
    let g = graph(&units());
    let found = cycles(&g);
    let mut msg = String::new();
    for c in &found {
        msg.push_str(&format!("cycle: {}\n", c.join(", ")));
        for a in c {
            for (b, names) in &g[a] {
                if c.contains(b) {
                    msg.push_str(&format!("  {a} -> {b}: {}\n", names.iter().cloned().collect::<Vec<_>>().join(", ")));
                }
            }
        }
    }
    assert!(found.is_empty(), "{msg}");
}

#[test]
fn no_layer_imports_from_a_layer_above_it() {
    let g = graph(&units());
    let mut up = Vec::new();
    for (a, edges) in &g {
        for (b, names) in edges {
            if rank(b) > rank(a) {
                let names = names.iter().cloned().collect::<Vec<_>>().join(", ");
                up.push(format!("{a} ({}) -> {b} ({}): {names}", layer(rank(a)), layer(rank(b))));
            }
        }
    }
    assert!(up.is_empty(), "imports from a layer above:\n{}", up.join("\n"));
}

#[test]
fn the_reader_sees_imports_of_every_form() {
    let src = "use crate::a::{b::{C, d}, e};\nuse super::f;\nfn x() { g::h(); crate::i::J; } // crate::k\nlet s = \"crate::l\";";
    let t = clean(src);
    let b = t.as_bytes();
    let mut paths = Vec::new();
    let at = t.find("crate::a").unwrap() + "crate::".len();
    tree(b, at, &[], &mut paths);
    let shown: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(shown, ["a::b::C", "a::b::d", "a::e"]);
    assert!(!t.contains("crate::k") && !t.contains("crate::l"), "comments and strings are not read: {t}");
    // Raw strings are skipped, test modules dropped wherever they stand,
    // and `super` inside a group climbs.
    let t =
        clean("let j = r#\"{\"a\":1} crate::x\"#;\n#[cfg(test)]\nmod tests { fn f() { crate::y(); } }\nuse crate::z;");
    assert!(!t.contains("crate::x") && !t.contains("crate::y") && t.contains("use crate::z"), "{t}");
    let mut paths = Vec::new();
    tree(b"{super::c, d}", 0, &["a".to_owned(), "b".to_owned()], &mut paths);
    assert_eq!(paths, [vec!["a", "c"], vec!["a", "b", "d"]]);
    // A name standing for a module starts paths.
    let names = BTreeMap::from([("m".to_owned(), vec!["m".to_owned()])]);
    let found = scan(b"fn f() { m::n::g(); }", &["q".to_owned()], &names);
    assert_eq!(found, [vec!["m", "n", "g"]]);
    assert_eq!(module_of("modes/router/mod.rs"), ["modes", "router"]);
    assert_eq!(module_of("lib.rs"), Vec::<String>::new());
    // Edges known to exist are seen: a use tree, a re-export of lib.rs,
    // a `super::` path, and a child module named from its parent.
    let g = graph(&units());
    for (from, to) in [
        ("modes/pingpong.rs", "paths/ipc.rs"),
        ("base/floor.rs", "base/common.rs"),
        ("modes/router/cluster.rs", "modes/router/harness.rs"),
        ("request.rs", "modes/reproduce.rs"),
        ("modes/mod.rs", "modes/router/host.rs"),
    ] {
        assert!(g[from].contains_key(to), "{from} -> {to} not seen: {:?}", g[from].keys());
    }
    // A graph with a cycle is found to have one.
    let mut g = BTreeMap::new();
    g.insert("a".to_owned(), BTreeMap::from([("b".to_owned(), BTreeSet::new())]));
    g.insert("b".to_owned(), BTreeMap::from([("a".to_owned(), BTreeSet::new())]));
    assert_eq!(cycles(&g), [["a", "b"]]);
}

#[test]
fn architecture_md_draws_every_file_in_its_layer() {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../ARCHITECTURE.md")).unwrap();
    let block =
        doc.split("```text lab-layers\n").nth(1).and_then(|b| b.split("```").next()).expect("the lab-layers block");
    // Each layer's text: its line and the indented lines under it.
    let mut drawn: BTreeMap<String, String> = BTreeMap::new();
    let mut current = String::new();
    for line in block.lines() {
        if !line.starts_with(' ') {
            current = line.split_whitespace().next().unwrap_or("").to_owned();
        }
        drawn.entry(current.clone()).or_default().push_str(&format!(" {line} "));
    }
    let words = |text: &str| -> BTreeSet<String> {
        text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.')).map(str::to_owned).collect()
    };
    let mut missing = Vec::new();
    for u in units().iter().filter(|u| u.file != "lib.rs") {
        let name = u.file.rsplit('/').next().unwrap().trim_end_matches(".rs");
        // A folder's mod.rs is drawn as the folder (`host/`) or as `mod`.
        let names: Vec<&str> = if name == "mod" {
            let folder = u.module.last().map_or("", String::as_str);
            if u.module.len() == 1 {
                vec!["mod.rs"]
            } else {
                vec![folder, "mod"]
            }
        } else {
            vec![name]
        };
        let text = drawn.get(layer(rank(&u.file))).map(String::as_str).unwrap_or("");
        if !names.iter().any(|n| words(text).contains(*n)) {
            missing.push(format!("{} (layer {})", u.file, layer(rank(&u.file))));
        }
    }
    assert!(missing.is_empty(), "ARCHITECTURE.md's lab-layers block does not draw: {}", missing.join(", "));
}
