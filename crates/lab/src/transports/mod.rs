//! What the lab can drive: each module opens one kind of path between the
//! two pinned CPUs and times it, with the far side run as a worker process.
//!
//! * [`floor`]: the machine's floor, a cache line and a raw shared-memory
//!   ring (no tickwire code on the path).
//! * [`line_limit`]: the physical reference, cache lines streamed one way.
//! * [`ipc`]: tickwire's shared-memory log (ping-pong and streaming).
//! * [`sockets`]: plain kernel UDP and TCP sockets, spinning on non-blocking
//!   sockets or blocking; the baseline of every network transport.
//! * [`rudp`]: tickwire's reliable UDP.
//! * [`stream`]: both ends of an open-loop stream over UDP, TCP or reliable
//!   UDP (one-way and rate sweep over the network).
//! * [`xdp`]: datagrams over AF_XDP (`tickwire-xdp`) across a veth pair,
//!   ping-pong and throughput, beside kernel UDP on the same kind of pair.

pub mod floor;
pub mod ipc;
pub mod line_limit;
pub mod rudp;
pub mod sockets;
pub mod stream;
pub mod xdp;

use crate::output::report::ThroughputRow;
use std::time::Instant;

/// What carries the lab's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// tickwire shared-memory IPC.
    Ipc,
    /// Kernel UDP sockets on loopback.
    Udp,
    /// Kernel TCP sockets (TCP_NODELAY) on loopback.
    Tcp,
    /// Reliable UDP (tickwire's protocol over kernel UDP); its baseline is
    /// kernel UDP ping-pong instead of the raw ring.
    Rudp,
    /// Datagrams over AF_XDP across a veth pair (needs --netns); its
    /// baseline is kernel UDP across the same kind of pair.
    Xdp,
}

impl Transport {
    /// Parses `ipc`, `udp`, `tcp`, `rudp` or `xdp`.
    ///
    /// # Errors
    /// A message naming what is available.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "ipc" => Ok(Self::Ipc),
            "udp" => Ok(Self::Udp),
            "tcp" => Ok(Self::Tcp),
            "rudp" => Ok(Self::Rudp),
            "xdp" => Ok(Self::Xdp),
            other => Err(format!("transport {other:?} is not one of ipc, udp, tcp, rudp, xdp")),
        }
    }
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ipc => "ipc",
            Self::Udp => "udp",
            Self::Tcp => "tcp",
            Self::Rudp => "rudp",
            Self::Xdp => "xdp",
        }
    }
}

/// A sink's watch over its idle turns: a turn that found nothing spins
/// once, and past [`crate::worker::IDLE_LIMIT`] of idle turns in a row the
/// sink gives up (the clock is read once per 4096 idle turns).
#[derive(Debug, Default)]
pub(crate) struct IdleWatch {
    turns: u32,
    since: Option<Instant>,
}

impl IdleWatch {
    /// A turn found work; true if the turns before it were idle.
    pub(crate) fn busy(&mut self) -> bool {
        let was_idle = self.turns != 0;
        self.turns = 0;
        self.since = None;
        was_idle
    }

    /// A turn found nothing: spins once.
    ///
    /// # Errors
    /// [`LabError::Timeout`](crate::LabError::Timeout) naming `what` past
    /// the limit.
    pub(crate) fn idle(&mut self, what: &str) -> Result<(), crate::LabError> {
        std::hint::spin_loop();
        // The idle spell's start, kept until work comes (not reset when
        // the count of turns wraps).
        let since = *self.since.get_or_insert_with(Instant::now);
        self.turns = self.turns.wrapping_add(1);
        if self.turns % 4096 == 0 && since.elapsed() > crate::worker::IDLE_LIMIT {
            let limit = crate::worker::IDLE_LIMIT.as_secs();
            return Err(crate::LabError::Timeout(format!("no {what} for {limit} s")));
        }
        Ok(())
    }
}

/// A sink worker's result line: what it counted, as a JSON [`ThroughputRow`].
pub(crate) fn sink_report(count: u64, lost: u64, first: Option<Instant>) -> String {
    let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    let row = ThroughputRow {
        count,
        lost,
        duration_s: (secs * 1e6).round() / 1e6,
        msgs_per_s: if secs > 0.0 { (count as f64 / secs).round() } else { 0.0 },
        ..ThroughputRow::default()
    };
    serde_json::to_string(&row).unwrap_or_default()
}
