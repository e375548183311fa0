//! Measurement modes: each takes a typed request, drives one or more
//! [`transports`](crate::paths) and returns rows and histograms.
//!
//! * [`pingpong`]: half round trip by size, interleaved with its floor.
//! * [`oneway`]: one-way latency at a fixed offered rate, open loop, from
//!   each message's intended send time (free of coordinated omission).
//! * [`fsync`]: the disk's durability floor, `pwrite` + `fdatasync`.
//! * [`throughput`]: streaming throughput against its floor, in rounds.
//! * [`sweep`]: latency against message rate (Exhibit 4): open-loop stream,
//!   one message in N reflected, up to the highest rate the path sustains.
//! * [`network`]: the open-loop modes' rounds over UDP, TCP and reliable
//!   UDP (the schedule and pauses they share are [`crate::base::openloop`]).
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
pub mod fsync;
pub mod matching;
pub mod network;
pub mod oneway;
pub mod pingpong;
pub mod reproduce;
pub mod router;
pub mod sweep;
pub mod throughput;
pub mod tick_to_trade;
pub mod transfer;

use crate::base::worker::{parse_job, parse_role, Job};
use crate::base::{floor, line_limit, streaming};
use crate::paths::{ipc, rudp, sockets, xdp};
use crate::LabError;

/// The one list of every worker job: [`ROLES`] and `dispatch`, which
/// parses the fields of the job named `role` and runs it.
macro_rules! jobs {
    ($($job:ty),+ $(,)?) => {
        /// Every worker job's role, in the order listed.
        pub const ROLES: &[&str] = &[$(<$job as Job>::ROLE),+];

        fn dispatch(role: &str, fields: serde_json::Value) -> Option<Result<String, LabError>> {
            $(
                if role == <$job as Job>::ROLE {
                    return Some(parse_job::<$job>(fields).and_then(Job::run));
                }
            )+
            None
        }
    };
}

jobs!(
    floor::Cacheline,
    floor::RingPong,
    streaming::RingSink,
    streaming::SlotSink,
    floor::RingOnewaySink,
    floor::RingReflect,
    line_limit::LineSink,
    ipc::IpcPong,
    ipc::IpcSink,
    sockets::SockPong,
    sockets::SockPing,
    rudp::RudpPong,
    rudp::RudpPing,
    rudp::RudpBlast,
    rudp::UdpBlast,
    xdp::XdpPong,
    xdp::XdpPing,
    xdp::XdpBlast,
    xdp::XdpSink,
    sweep::Reflect,
    oneway::OnewaySink,
    transfer::RudpSend,
    transfer::RudpRecv,
    network::SinkSpec,
    network::SourceSpec,
    tick_to_trade::TickToTradeSut,
    router::host::HostSpec,
    router::cluster::ClusterSpec,
    router::relay::RelaySpec,
);

/// Runs the worker job its argument names (`tickwire lab worker ROLE`);
/// returns the result line to print. A new mode whose far side is a
/// worker adds its [`Job`] to the list above.
///
/// # Errors
/// [`LabError::Usage`] naming an unknown role or a bad field; then the
/// job's own errors.
pub fn run_worker(arg: &str) -> Result<String, LabError> {
    let (role, fields) = parse_role(arg)?;
    dispatch(&role, fields)
        .unwrap_or_else(|| Err(LabError::Usage(format!("worker: bad role {arg:?}: unknown role {role:?}"))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::worker::job_arg;
    use std::time::Duration;

    #[test]
    fn a_job_round_trips_through_its_argument_and_bad_ones_are_named() {
        let j = rudp::RudpBlast {
            port: 9,
            cpu: 1,
            size: 64,
            duration: Duration::from_millis(250),
            params: "loss=0.1".into(),
        };
        let arg = job_arg(&j);
        assert!(arg.contains(r#""role":"rudp-blast""#), "{arg}");
        let (role, fields) = parse_role(&arg).unwrap();
        assert_eq!(role, "rudp-blast");
        assert_eq!(parse_job::<rudp::RudpBlast>(fields).unwrap(), j);
        let s = network::SinkSpec {
            transport: crate::paths::Transport::Rudp,
            bind: "127.0.0.1:0".parse().unwrap(),
            cpu: 1,
            size: 64,
            reflect_every: 100,
            expected: 1000,
            pauses: "/tmp/p".into(),
            params: String::new(),
        };
        let (role, fields) = parse_role(&job_arg(&s)).unwrap();
        assert_eq!(role, "net-sink");
        assert_eq!(parse_job::<network::SinkSpec>(fields).unwrap(), s);
        let e = run_worker(r#"{"role":"ring-sink","path":"/x"}"#).unwrap_err().to_string();
        assert!(e.contains("cpu"), "{e}");
        let e = run_worker(r#"{"role":"ring-sink","path":"/x","cpu":1,"extra":2}"#).unwrap_err().to_string();
        assert!(e.contains("extra"), "{e}");
        let e = run_worker(r#"{"role":"nope"}"#).unwrap_err().to_string();
        assert!(e.contains("nope"), "{e}");
        let e = run_worker("[1]").unwrap_err().to_string();
        assert!(e.contains("bad role"), "{e}");
    }

    #[test]
    fn every_job_has_its_own_role() {
        let unique: std::collections::BTreeSet<&str> = ROLES.iter().copied().collect();
        assert_eq!(ROLES.len(), unique.len(), "{ROLES:?}");
        assert_eq!(ROLES.len(), 29);
    }
}
