//! `lab auth-cost`: what reliable UDP's shared key costs, parsed into its
//! [`Request`].

use super::Common;
use crate::units::{parse_duration, parse_size};
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;
use tickwire_lab::modes::auth_cost::AuthCost;
use tickwire_lab::request::Request;

/// Options of `lab auth-cost`.
#[derive(Debug, Args)]
pub struct AuthCostArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// Message size in bytes (at least 8).
    #[arg(long, default_value = "64", value_parser = parse_size)]
    size: usize,
    /// Round trips recorded per round, per path.
    #[arg(long, default_value_t = 20_000)]
    count: u64,
    /// Round trips before recording, per round and path.
    #[arg(long, default_value_t = 2_000)]
    warmup: u64,
    /// Throughput per round, per path.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    duration: Duration,
    /// Interleaved rounds, each: kernel UDP, reliable UDP, keyed reliable UDP.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

impl AuthCostArgs {
    /// `dir`: where the temporary key goes.
    pub(super) fn into_request(self, dir: PathBuf) -> Request {
        Request::AuthCost {
            run: AuthCost {
                size: self.size,
                count: self.count,
                warmup: self.warmup,
                duration: self.duration,
                rounds: self.rounds,
                cpus: self.common.cpus,
                dir,
            },
            json: self.common.json,
        }
    }
}
