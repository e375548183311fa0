//! `tickwire`: publish, subscribe, inspect and measure.
#![forbid(unsafe_code)]

mod config;
mod lab;
mod pubsub;
mod routed;
mod router;
mod stat;
mod units;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Low-latency messaging over shared memory (`ipc:NAME`), reliable UDP
/// (`udp://HOST:PORT`, multicast `udp://GROUP:PORT?interface=ADDR`) and TCP
/// (`tcp://HOST:PORT`), and through the router.
#[derive(Debug, Parser)]
#[command(name = "tickwire", version, about)]
struct Cli {
    /// Directory for log and counters files [default: /dev/shm/tickwire, or `dir` in the config].
    #[arg(long, global = true)]
    dir: Option<PathBuf>,
    /// TOML config file (see docs/configuration.md); flags override it.
    #[arg(long, global = true, env = "TICKWIRE_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Publish generated messages or stdin lines on a channel (ipc:, udp:// or tcp://) and stream.
    Pub(pubsub::PubArgs),
    /// Subscribe to a channel (ipc:, udp:// or tcp://) and stream; print or count what arrives.
    Sub(pubsub::SubArgs),
    /// Run the message router: topics with * and > wildcards, shared-memory and TCP clients.
    Router(router::RouterArgs),
    /// Show live counters and streams of every tickwire process (like AeronStat).
    Stat(stat::StatArgs),
    /// Remove files left behind by dead processes.
    Clean,
    /// The router's journal (guaranteed delivery).
    Journal(JournalArgs),
    /// The latency lab.
    Lab(LabArgs),
    /// Write a new shared key for reliable UDP's auth=FILE (64 hex digits, mode 0600).
    Keygen {
        /// Where to write it; copy it to every host of the channel.
        file: PathBuf,
        /// Replace the file if it exists.
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Args)]
struct JournalArgs {
    #[command(subcommand)]
    cmd: JournalCmd,
}

#[derive(Debug, Subcommand)]
enum JournalCmd {
    /// List a journal's segments, their records and any damage (CRC failures, a torn tail), changing nothing.
    Inspect {
        /// The journal's directory (the router's --journal).
        dir: PathBuf,
    },
}

fn journal(cmd: &JournalCmd) -> Result<(), String> {
    match cmd {
        JournalCmd::Inspect { dir } => {
            if !dir.is_dir() {
                return Err(format!("{}: no such directory", dir.display()));
            }
            let report = tickwire_journal::inspect::inspect(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            println!("{report}");
            Ok(())
        }
    }
}

#[derive(Debug, Args)]
struct LabArgs {
    #[command(subcommand)]
    cmd: lab::LabCmd,
}

fn main() -> ExitCode {
    tickwire_shm::os::default_sigpipe();
    let cli = Cli::parse();
    let settings = match config::load(cli.config.as_deref()) {
        Ok(mut s) => {
            if let Some(d) = cli.dir {
                s.dir = d;
            }
            s
        }
        Err(e) => {
            eprintln!("tickwire: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.cmd {
        Cmd::Pub(a) => pubsub::publish(&settings, &a),
        Cmd::Sub(a) => pubsub::subscribe(&settings, &a),
        Cmd::Router(a) => router::run(&settings, &a),
        Cmd::Stat(a) => stat::run(&settings, &a),
        Cmd::Clean => stat::clean(&settings),
        Cmd::Journal(a) => journal(&a.cmd),
        Cmd::Lab(a) => lab::run(&settings, a.cmd),
        Cmd::Keygen { file, force } => tickwire_driver::write_key(&file.to_string_lossy(), force)
            .map_err(|e| e.to_string())
            .map(|()| eprintln!("wrote a new key to {}: use udp://HOST:PORT?auth={0} on every end", file.display())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tickwire: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
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
}
