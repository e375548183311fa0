//! The documents' command lines against today's CLI and today's tests.
//!
//! The documents are README.md, ARCHITECTURE.md and every `docs/*.md`
//! (globbed: a new guide is covered without touching this file). One
//! convention for all of them: the README, read right after `make build`,
//! runs the built binary as `$T` (`T=./target/release/tickwire`); every
//! other document runs `tickwire` from the PATH.

use super::Cli;
use clap::{CommandFactory, Parser};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every document, as (path from the root, text): README.md,
/// ARCHITECTURE.md, then docs/*.md in name order.
fn documents() -> Vec<(String, String)> {
    let root = root();
    let mut names = vec!["README.md".to_owned(), "ARCHITECTURE.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    names.extend(docs);
    names.into_iter().map(|n| (n.clone(), std::fs::read_to_string(root.join(&n)).expect(&n))).collect()
}

/// The program word a document's commands must use.
fn program_of(file: &str) -> &'static str {
    if file == "README.md" {
        "$T"
    } else {
        "tickwire"
    }
}

/// The `tickwire` command lines in a markdown file's `sh` blocks: each
/// pipeline stage whose program is `tickwire`, `$T` or a path ending in
/// `/tickwire`, split into words, without comments and a trailing `&`.
fn commands(markdown: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let mut in_sh = false;
    for (n, line) in markdown.lines().enumerate() {
        let t = line.trim();
        if t.starts_with("```") {
            in_sh = !in_sh && (t == "```sh" || t == "```bash");
            continue;
        }
        if !in_sh {
            continue;
        }
        let code = t.split(" #").next().unwrap_or("").trim_start_matches('#');
        for stage in code.split('|').filter(|s| !t.starts_with('#') && !s.trim().is_empty()) {
            let words: Vec<String> =
                stage.split_whitespace().map(|w| unquote(w).to_owned()).filter(|w| w != "&" && w != "\\").collect();
            let program = words
                .iter()
                .position(|w| w == "$T" || w == "tickwire" || (w.ends_with("/tickwire") && !w.contains('=')));
            if let Some(p) = program {
                out.push((n + 1, words[p..].to_vec()));
            }
        }
    }
    out
}

/// A word without the quotes around it (`'udp://...?auth=K'`); a
/// quote at one end only (`'tickwire --config ...'` split in words)
/// stays.
fn unquote(w: &str) -> &str {
    match w.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
        Some(inner) => inner,
        None => w.trim_matches('"'),
    }
}

/// The subcommand path of a command line that parses (`["router",
/// "status"]`, `["lab", "pingpong"]`, `["sub"]`).
fn subcommand_path(words: &[String]) -> Result<Vec<String>, clap::Error> {
    let matches = Cli::command().try_get_matches_from(words)?;
    let mut path = Vec::new();
    let mut m = &matches;
    while let Some((name, sub)) = m.subcommand() {
        path.push(name.to_owned());
        m = sub;
    }
    Ok(path)
}

/// Every documented command: (file, line, words).
fn documented_commands() -> Vec<(String, usize, Vec<String>)> {
    documents()
        .into_iter()
        .flat_map(|(file, text)| commands(&text).into_iter().map(move |(n, w)| (file.clone(), n, w)))
        .collect()
}

/// README item: every command the documents show parses with today's CLI,
/// and each document runs the binary by its convention: the README as
/// `$T` (there after `make build`, no install step), the others as
/// `tickwire`.
#[test]
fn every_documented_command_line_parses() {
    let mut checked = 0;
    let mut files = BTreeSet::new();
    for (file, line, words) in documented_commands() {
        let want = program_of(&file);
        assert_eq!(
            words[0], want,
            "{file}:{line}: run the binary as {want}, not {:?} (README.md: $T, the built binary; \
             every other document: tickwire, from the PATH)",
            words[0]
        );
        if let Err(e) = Cli::try_parse_from(&words) {
            panic!("{file}:{line}: `{}` does not parse:\n{e}", words.join(" "));
        }
        checked += 1;
        files.insert(file);
    }
    assert!(checked > 100, "found only {checked} command lines: is the extraction broken?");
    for f in ["README.md", "docs/transports.md", "docs/router.md", "docs/guaranteed.md", "docs/lab.md"] {
        assert!(files.contains(f), "no command line found in {f}");
    }
}

/// The README defines `$T` before its first use.
#[test]
fn the_readme_sets_t_before_using_it() {
    let text = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let set = text.find("T=./target/release/tickwire").expect("README.md sets T=./target/release/tickwire");
    let used = text.find("$T ").expect("README.md runs $T");
    assert!(set < used, "README.md uses $T before it sets it");
}

/// Every document with a ```rust block is compiled as doctests: some
/// crate's lib.rs includes it with `include_str!` (as the driver crate
/// does, under `cfg(doctest)`), so its examples cannot drift from the API.
#[test]
fn every_rust_block_in_the_documents_is_compiled() {
    let root = root();
    let mut libs = String::new();
    for e in std::fs::read_dir(root.join("crates")).expect("crates/").flatten() {
        if let Ok(s) = std::fs::read_to_string(e.path().join("src/lib.rs")) {
            libs.push_str(&s);
        }
    }
    let mut missing = Vec::new();
    for (file, text) in documents() {
        let has_rust = text.lines().any(|l| l.trim().starts_with("```rust"));
        if has_rust && !libs.contains(&format!("include_str!(\"../../../{file}\")")) {
            missing.push(file);
        }
    }
    assert!(
        missing.is_empty(),
        "these documents have ```rust blocks no crate compiles: {missing:?}\n\
         add `#[doc = include_str!(\"../../../FILE\")]` beside README.md's in crates/driver/src/lib.rs"
    );
}

/// The string literals of a Rust source, in order, split into words: what
/// a test passes to the binary, however it spells it (`["router",
/// "status"]`, `"lab pingpong --transport ipc"`). Comments are skipped.
fn literal_words(src: &str) -> Vec<String> {
    let b = src.as_bytes();
    let mut words = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            }
            // A char literal ('"', '\'', 'x'); anything else is a lifetime.
            b'\'' => {
                if b.get(i + 1) == Some(&b'\\') {
                    i += 2;
                    while i < b.len() && b[i] != b'\'' {
                        i += 1;
                    }
                    i += 1;
                } else if b.get(i + 2) == Some(&b'\'') {
                    i += 3;
                } else {
                    i += 1;
                }
            }
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#')) && (i == 0 || !b[i - 1].is_ascii_alphanumeric()) => {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                let open = i + 1 + hashes;
                if b.get(open) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let body = &src[open + 1..];
                let end = body.find(&close).unwrap_or(body.len());
                words.extend(body[..end].split_whitespace().map(str::to_owned));
                i = open + 1 + end + close.len();
            }
            b'"' => {
                let mut s = String::new();
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                        s.push(' ');
                    } else {
                        s.push(b[i] as char);
                    }
                    i += 1;
                }
                i += 1;
                words.extend(s.split_whitespace().map(str::to_owned));
            }
            _ => i += 1,
        }
    }
    words
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The words of every test under crates/*/tests/, one list per file.
fn test_sources() -> Vec<(PathBuf, Vec<String>)> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(root().join("crates")).expect("crates/").flatten() {
        rust_files(&e.path().join("tests"), &mut files);
    }
    files.sort();
    files.into_iter().map(|f| (f.clone(), literal_words(&std::fs::read_to_string(&f).expect("test source")))).collect()
}

/// Documented subcommands no test runs yet. Each is a debt: write its
/// test and remove it from here (the test below fails while one listed
/// here is tested, so the list only shrinks).
const UNTESTED: &[&str] = &[];

/// README item: every command the documents show runs in a test. Each
/// documented subcommand path (`router status`, `lab pingpong`, `journal
/// inspect`) must appear, word after word, among the string literals of
/// some test under crates/*/tests/.
#[test]
fn every_documented_subcommand_is_run_by_a_test() {
    let sources = test_sources();
    assert!(sources.len() > 10, "found only {} test files", sources.len());
    let mut paths: std::collections::BTreeMap<Vec<String>, String> = Default::default();
    for (file, line, words) in documented_commands() {
        let path = subcommand_path(&words).unwrap_or_else(|e| panic!("{file}:{line}: does not parse:\n{e}"));
        paths.entry(path).or_insert(format!("{file}:{line}"));
    }
    let tested = |path: &[String]| sources.iter().any(|(_, w)| w.windows(path.len()).any(|win| win == path));
    let mut untested = Vec::new();
    let mut stale = Vec::new();
    for (path, at) in &paths {
        let name = path.join(" ");
        match (tested(path), UNTESTED.contains(&name.as_str())) {
            (false, false) => untested.push(format!("`tickwire {name}` (first shown at {at})")),
            (true, true) => stale.push(name),
            _ => {}
        }
    }
    assert!(
        untested.is_empty(),
        "documented commands no test under crates/*/tests/ runs:\n{}\nwrite a test that runs each \
         (the words in string literals, e.g. [\"router\", \"status\"])",
        untested.join("\n")
    );
    assert!(stale.is_empty(), "tested now, remove from UNTESTED: {stale:?}");
    let names: Vec<String> = paths.keys().map(|p| p.join(" ")).collect();
    eprintln!("{} documented subcommands, each run by a test: {}", names.len(), names.join(", "));
    assert!(paths.len() > 15, "found only {} documented subcommands", paths.len());
}

#[test]
fn literal_words_skip_comments_and_read_every_spelling() {
    let src = r##"
        // "router status" in a comment is not a test
        let c = '"'; let l: &'a str = "x";
        run(&["--dir", &d, "router", "status"]);
        spawn("lab pingpong --transport ipc\n");
        let r = r#"journal "inspect""#;
    "##;
    let w = literal_words(src);
    assert_eq!(
        w,
        ["x", "--dir", "router", "status", "lab", "pingpong", "--transport", "ipc", "journal", "\"inspect\""]
    );
}
