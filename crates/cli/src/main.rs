//! `tickwire`: publish, subscribe, inspect and measure.
#![forbid(unsafe_code)]

mod accel;
mod config;
mod ha;
mod lab;
mod login;
mod pubsub;
mod pubsub_args;
mod queue;
mod request;
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
#[command(name = "tickwire", version = version(), about)]
struct Cli {
    /// Directory for log and counters files [default: /dev/shm/tickwire-USER, this user's own, or `dir` in the config].
    #[arg(long, global = true)]
    dir: Option<PathBuf>,
    /// TOML config file (see docs/configuration.md); flags override it [default for `tickwire router`:
    /// /etc/tickwire/router.toml if it exists].
    #[arg(long, global = true, env = "TICKWIRE_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Publish generated messages or stdin lines on a channel (ipc:, udp:// or tcp://) and stream.
    Pub(pubsub_args::PubArgs),
    /// Subscribe to a channel (ipc:, udp:// or tcp://) and stream; print or count what arrives.
    Sub(pubsub_args::SubArgs),
    /// Send a request through a router and print the reply (exit status 3: no responders).
    Request(request::RequestArgs),
    /// Answer requests through a router (--echo, or --exec CMD), alone or in a queue group.
    Reply(request::ReplyArgs),
    /// Manage a router's durable queues: create, list, delete, browse.
    Queue(queue::QueueArgs),
    /// Run the message router: topics with * and > wildcards, shared-memory and TCP clients.
    Router(Box<router::RouterArgs>),
    /// Show live counters and streams of every tickwire process (like AeronStat).
    Stat(stat::StatArgs),
    /// Run an unmodified program with its UDP sockets over AF_XDP (LD_PRELOAD, like `onload PROGRAM`).
    Accel(accel::AccelArgs),
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
    cmd: tickwire_lab::request::Request,
}

/// `tickwire --version`: the release, the git commit it was built from and
/// the cargo features built in.
fn version() -> &'static str {
    static VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    VERSION.get_or_init(|| {
        let features: Vec<&str> = [("xdp", tickwire_driver::udp::xdp::BUILT_IN)]
            .into_iter()
            .filter_map(|(name, on)| on.then_some(name))
            .collect();
        format!(
            "{} (git {}, features: {})",
            env!("CARGO_PKG_VERSION"),
            env!("TICKWIRE_GIT_HASH"),
            if features.is_empty() { "none".into() } else { features.join(" ") }
        )
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A router serving keeps SIGPIPE ignored: a write to a peer that has
    // gone (a client, another router, a metrics scrape) must be an error,
    // never its death. Every other command ends quietly on a closed pipe.
    if !matches!(&cli.cmd, Cmd::Router(a) if a.serves()) {
        tickwire_shm::os::default_sigpipe();
    }
    // `tickwire router` runs as a service: it reads the system's config
    // file when none is named (`--config`, TICKWIRE_CONFIG).
    let config_path = match (&cli.config, &cli.cmd) {
        (Some(p), _) => Some(p.clone()),
        (None, Cmd::Router(_)) => config::system_default(),
        (None, _) => None,
    };
    let settings = match config::load(config_path.as_deref()) {
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
        Cmd::Pub(a) => {
            warnings();
            match &a.router {
                Some(uri) => routed::publish(&settings, &a, uri),
                None => pubsub::publish(&settings, &a),
            }
        }
        Cmd::Sub(a) => {
            warnings();
            match &a.router {
                Some(uri) => routed::subscribe(&settings, &a, uri),
                None => pubsub::subscribe(&settings, &a),
            }
        }
        Cmd::Request(a) => {
            warnings();
            return request::request(&settings, &a);
        }
        Cmd::Reply(a) => {
            warnings();
            request::reply(&settings, &a)
        }
        Cmd::Queue(a) => {
            warnings();
            queue::run(&settings, &a)
        }
        Cmd::Router(a) => router::run(&settings, &a),
        Cmd::Stat(a) => stat::run(&settings, &a),
        Cmd::Accel(a) => accel::run(&settings, &a),
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
mod doc_tests;

/// Warnings of the libraries (a file another user planted in the
/// directory, removed unread) on stderr; `TICKWIRE_LOG` as for the router.
fn warnings() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("TICKWIRE_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .try_init();
}
