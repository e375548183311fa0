//! Measurement modes: each takes a typed request, drives one or more
//! [`transports`](crate::transports) and returns rows and histograms.
//!
//! * [`pingpong`]: half round trip by size, interleaved with its floor.
//! * [`oneway`]: one-way latency at a fixed offered rate, open loop, from
//!   each message's intended send time (free of coordinated omission).
//! * [`sweep`]: latency against message rate (Exhibit 4): open-loop stream,
//!   one message in N reflected, up to the highest rate the path sustains.
//! * [`openloop`] and [`network`]: what the open-loop modes share (pause
//!   recording, the two distributions, the send schedule) and their rounds
//!   over UDP, TCP and reliable UDP.
//! * [`tick_to_trade`]: UDP tick in, TCP order out, timed with kernel
//!   software timestamps (the method of paper 004).
//! * [`transfer`]: a generated stream over reliable UDP under chosen loss,
//!   checked byte for byte.
//! * [`matching`]: the router's topic lookup with few and many unrelated
//!   subscriptions.
//! * [`router`]: the Solace scenario (paper 001) through tickwire's router,
//!   one to one and fan-out, beside its forwarding floor.
//! * [`auth_cost`]: reliable UDP with and without a shared key (a MAC on
//!   every datagram), ping-pong and throughput, beside kernel UDP.
//! * [`reproduce`]: all of the above with the papers' parameters, into a
//!   report with the published figures beside ours and SVG plots.

pub mod accel;
pub mod auth_cost;
pub mod bindings;
pub mod matching;
pub mod network;
pub mod oneway;
pub mod openloop;
pub mod pingpong;
pub mod reproduce;
pub mod router;
pub mod sweep;
pub mod tick_to_trade;
pub mod transfer;
