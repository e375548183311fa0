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
//! 4. [`request`]: the typed [`request::Request`] a command hands over,
//!    and [`request::run`], which measures it and prints it.
//!
//! ## Adding a mode
//!
//! Write the mode as a file in `modes/` (its options struct, a `run` that
//! returns rows or histograms, and a `print`), using `paths` and `base`.
//! If its far side is a worker process, give that side a struct with
//! `impl Job` in the same file and add the struct to the list in
//! [`modes::run_worker`]. Then add a variant to [`request::Request`] and its
//! arm to [`request::run`]. Nothing else changes.
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
