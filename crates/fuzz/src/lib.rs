//! # tickwire-fuzz: the fuzz targets
//!
//! Each target is a plain function of the fuzzer's bytes, so that it runs
//! three ways: under libFuzzer (`fuzz/`, `make fuzz`, nightly), over its
//! committed corpus and regressions in `cargo test` (stable, `make test`),
//! and by hand on one input. Every target checks invariants and panics
//! when one breaks; a panic is a finding.
//!
//! | target | what it feeds | invariants |
//! |---|---|---|
//! | `wire` | bytes as any reliable-UDP frame view | parse never panics; a parsed frame emits and parses back to itself |
//! | `client` | bytes as a router client frame | the same |
//! | `cluster` | bytes as a frame from another router of a cluster | parse never panics; a parsed frame emits the same bytes |
//! | `journal_record` | bytes as a journal record (CRC fixed up so the fuzzer reaches the rest) | the same |
//! | `receiver` | a live stream's datagrams dropped, duplicated, reordered, mutated, and garbage, into a `Receiver` | see [`protocol`] |
//! | `sender` | the same on the control path, into a `Sender` | see [`protocol`] |
//! | `nats` | bytes as a NATS client's connection, whole and cut in two | parse never panics; the cut input parses the same; what parses spells back to itself |
//! | `nats_session` | a NATS client's session fed client bytes and router frames in any order | no panic; subscriptions bounded; the frames it makes for the router parse |
//! | `xdp_frame` | bytes as an Ethernet frame from an AF_XDP socket (IPv4 header checksum also fixed up) | read never panics; what is read has consistent lengths and writes back to itself |
//! | `accel_demux` | a sequence of flows added and removed, groups joined and left, and receives of frames for any of them, on one demultiplexer | every datagram where a model says, in order; `steers` agrees with the model |
//! | `accel_frame` | the same, sent to one of two flows, two joined groups or a gone flow, into the demultiplexer `tickwire accel` and every AF_XDP transport read through | the datagram lands with its owner and is counted there, or nowhere and counted on the reader |
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod accel;
mod nats;
pub mod protocol;
mod views;

pub use accel::{accel_demux, accel_frame};
pub use nats::{nats, nats_session};
pub use views::{client, cluster, journal_record, wire, xdp_frame};

/// A fuzz target: the fuzzer's bytes in, a panic for a finding.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/` and the corpus
/// directories name them.
pub const TARGETS: &[(&str, Target)] = &[
    ("wire", wire),
    ("client", client),
    ("cluster", cluster),
    ("journal_record", journal_record),
    ("receiver", protocol::receiver),
    ("sender", protocol::sender),
    ("xdp_frame", xdp_frame),
    ("accel_frame", accel_frame),
    ("accel_demux", accel_demux),
    ("nats", nats),
    ("nats_session", nats_session),
];
