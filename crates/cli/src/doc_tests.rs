//! The documents' command lines against today's CLI.

use super::Cli;
use clap::Parser;

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

/// README item: every command the docs show parses with today's CLI,
/// and the README's commands run the built binary (`$T`), which is there
/// after `make build` without any install step.
#[test]
fn every_documented_command_line_parses() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut checked = 0;
    for file in ["README.md", "docs/configuration.md", "docs/PERFORMANCE.md", "ARCHITECTURE.md"] {
        let text = std::fs::read_to_string(format!("{root}/{file}")).expect(file);
        for (line, words) in commands(&text) {
            if file == "README.md" {
                assert_eq!(words[0], "$T", "README.md:{line}: run the built binary as $T, not {:?}", words[0]);
            }
            if let Err(e) = Cli::try_parse_from(&words) {
                panic!("{file}:{line}: `{}` does not parse:\n{e}", words.join(" "));
            }
            checked += 1;
        }
    }
    assert!(checked > 20, "found only {checked} command lines: is the extraction broken?");
}
