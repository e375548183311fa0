//! The lab's first layer: what every path and mode stands on. Nothing here
//! imports from [`crate::paths`], [`crate::modes`] or [`crate::request`].
//!
//! * [`common`]: [`common::LabError`], [`common::Cpus`], scratch names,
//!   progress bars, the stop flag.
//! * [`timing`]: spinning with a deadline, bounded loops, round trips.
//! * [`worker`]: the far side's process ([`worker::WorkerProcess`]) and the
//!   [`worker::Job`] it runs, its stdin and result lines.
//! * [`floor`], [`streaming`] and [`line_limit`]: the machine's floors, a
//!   cache line and raw shared-memory rings (ping-pong, and streaming with
//!   each message visible on its own or in batches), and cache lines
//!   streamed one way.
//! * [`openloop`]: what the open-loop modes share: the send schedule, pause
//!   recording, the full and pause-free distributions.
//! * [`host`]: the machine: doctor, machine facts, network namespaces.
//! * [`output`]: rows and tables, JSON, CSV, HdrHistogram logs, sockperf's
//!   block, SVG plots.

pub mod common;
pub mod floor;
pub mod host;
pub mod line_limit;
pub mod openloop;
pub mod output;
pub mod streaming;
pub mod timing;
pub mod worker;
