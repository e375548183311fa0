//! # tickwire-lab: the latency lab
//!
//! Every performance figure tickwire states is produced here, against a
//! baseline measured in the same run: the machine's *floor* (a cache-line
//! ping-pong and a raw shared-memory ring between the two pinned CPUs).
//!
//! # Layers
//!
//! The crate is four layers, one folder each; a layer imports only from
//! the layers below it, and no files import each other in a cycle (the
//! `layers` test reads the imports and fails on either):
//!
//! 1. [`base`]: what every measurement stands on: the lab's error and CPUs,
//!    timing loops, the floor probes ([`base::floor`], [`base::line_limit`]),
//!    open-loop publishing and pause attribution ([`base::openloop`]),
//!    worker processes and the [`base::worker::Job`] each one runs, the
//!    machine ([`base::host`]), and reports in every format
//!    ([`base::output`]).
//! 2. [`paths`]: what carries the messages: tickwire IPC, kernel sockets,
//!    reliable UDP, open-loop streams, AF_XDP.
//! 3. [`modes`]: the measurements: ping-pong, one-way, rate sweep,
//!    tick-to-trade, transfer, the router's scenarios, `reproduce`; and
//!    [`modes::run_worker`], the one list of every worker job.
//! 4. [`request`]: [`request::Request`], the `tickwire lab` subcommands
//!    (clap parses the command line straight into each mode's options),
//!    and [`request::run`], which checks, measures and prints one.
//!
//! ## Adding a mode
//!
//! A mode is its file in `modes/`, using `paths` and `base`: its options
//! struct, which derives `clap::Args` (it *is* the command line of
//! `tickwire lab <mode>`: flags, defaults, help; the shared `--cpus`,
//! `--json`, `--format`, `--strict` ... by `#[command(flatten)]` of
//! [`output::print::Common`]; the parsers of sizes, rates, durations and
//! CPUs in [`base::common`]; what is not on the command line, such as the
//! shared-memory directory, an `#[arg(skip)]` field), a `run` that returns
//! rows or histograms, and a `print`. If its far side is a worker process,
//! give that side a struct with `impl Job` in the same file and add the
//! struct to the `jobs!` list in `modes/mod.rs` ([`modes::ROLES`]). Then add one variant
//! holding the options to [`request::Request`] (the subcommand; its doc
//! comment is the command's description), its arm to [`request::run`], and,
//! if it has a directory, its line in [`request::Request::with_dir`].
//! Nothing else changes: the CLI hands the parsed `Request` over as it is.
//!
//! Latency is recorded in nanoseconds into an HdrHistogram with three
//! significant digits; half round trip = round trip / 2, as in the papers.
//!
//! # Examples
//!
//! Every mode ends in [`output::report::LatencyRow`]s computed from a
//! histogram; the same rows feed the table, JSON, CSV and plots:
//!
//! ```
//! let mut h = tickwire_lab::output::report::histogram();
//! for ns in [900u64, 1_000, 1_100, 50_000] {
//!     h.record(ns).unwrap();
//! }
//! let row = tickwire_lab::output::report::LatencyRow::from_histogram("pingpong", "ipc", 64, &h);
//! assert!(row.p50_ns >= 1_000 && row.max_ns >= 49_000);
//! println!("{}", tickwire_lab::output::report::table(&[row]));
//! ```
#![forbid(unsafe_code)]

pub mod base;
pub mod modes;
pub mod paths;
pub mod request;

pub use base::common::{ignore_ctrl_c, progress, progress_bytes, run_tag, stop_requested, Cpus, LabError};
pub use base::timing::{round_trips, spin_until, Budget};
pub use base::worker::WorkerProcess;
pub use base::{host, output};
