//! The host the lab runs on.
//!
//! * [`doctor`]: machine settings that cost latency, with `--apply` and a
//!   way back, and the hiccup probe.
//! * [`machine`]: what every report says about the machine and the clock.
//! * [`netns`]: network namespaces joined by veth pairs (or a bridge), made
//!   and removed by the lab for runs across a real link.

pub mod doctor;
pub mod machine;
pub mod netns;
