//! `tickwire`: publish, subscribe, inspect and measure.
#![forbid(unsafe_code)]

mod config;
mod lab;
mod pubsub;
mod stat;
mod units;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Low-latency messaging over shared memory (`ipc:NAME`) and reliable UDP
/// (`udp://HOST:PORT`, multicast `udp://GROUP:PORT?interface=ADDR`).
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
    /// Publish generated messages or stdin lines on a channel (ipc: or udp://) and stream.
    Pub(pubsub::PubArgs),
    /// Subscribe to a channel (ipc: or udp://) and stream; print or count what arrives.
    Sub(pubsub::SubArgs),
    /// Show live counters and streams of every tickwire process (like AeronStat).
    Stat(stat::StatArgs),
    /// Remove files left behind by dead processes.
    Clean,
    /// The latency lab.
    Lab(LabArgs),
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
        Cmd::Stat(a) => stat::run(&settings, &a),
        Cmd::Clean => stat::clean(&settings),
        Cmd::Lab(a) => lab::run(&settings, a.cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tickwire: {e}");
            ExitCode::FAILURE
        }
    }
}
