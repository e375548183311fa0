//! `lab bindings`: the C and Python examples against the Rust lab, parsed
//! into its [`Request`].

use super::Common;
use clap::Args;
use std::path::PathBuf;
use tickwire_lab::modes::bindings::Bindings;
use tickwire_lab::request::Request;

/// Options of `lab bindings`.
#[derive(Debug, Args)]
pub struct BindingsArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// The compiled examples/c/pingpong.c (make install-c, then cc; docs/c.md); without it, no C rows.
    #[arg(long)]
    c: Option<PathBuf>,
    /// A Python interpreter with the tickwire package installed (make python: target/py-venv/bin/python);
    /// without it, no Python rows.
    #[arg(long)]
    python: Option<PathBuf>,
    /// Where pingpong.py and throughput.py are.
    #[arg(long, default_value = "examples/python")]
    examples: PathBuf,
    /// Round trips per round and program.
    #[arg(long, default_value_t = 100_000)]
    count: u64,
    /// Messages published per round and publisher (Rust's offer loop, Python's publish_many).
    #[arg(long, default_value_t = 2_000_000)]
    messages: u64,
    /// Payloads per publish_many call.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Interleaved rounds.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

impl BindingsArgs {
    /// `dir`: where the shared-memory files go.
    pub(super) fn into_request(self, dir: PathBuf) -> Request {
        Request::Bindings {
            run: Bindings {
                c: self.c,
                python: self.python,
                examples: self.examples,
                count: self.count,
                messages: self.messages,
                batch: self.batch,
                rounds: self.rounds,
                cpus: self.common.cpus,
                dir,
            },
            json: self.common.json,
        }
    }
}
