//! `lab accel`: sockperf's ping-pong under `tickwire accel` and not,
//! parsed into its [`Request`].

use super::Common;
use clap::Args;
use tickwire_lab::modes::accel::Accel;
use tickwire_lab::request::Request;

/// Options of `lab accel`.
#[derive(Debug, Args)]
pub struct AccelArgs {
    #[command(flatten)]
    pub(super) common: Common,
    /// Datagram sizes, bytes (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "64")]
    size: Vec<usize>,
    /// Seconds per measurement (sockperf's -t).
    #[arg(long, default_value_t = 2)]
    seconds: u64,
    /// Interleaved rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// tickwire accel --spin-us for the blocking rows.
    #[arg(long, default_value_t = 100)]
    spin_us: u64,
}

impl AccelArgs {
    /// `dir`: where the accelerated programs' counters files go (a
    /// directory of the run's own in it).
    pub(super) fn into_request(self, dir: std::path::PathBuf) -> Request {
        Request::Accel {
            run: Accel {
                sizes: self.size,
                seconds: self.seconds,
                rounds: self.rounds,
                cpus: self.common.cpus,
                spin_us: self.spin_us,
                dir,
            },
            json: self.common.json,
        }
    }
}
