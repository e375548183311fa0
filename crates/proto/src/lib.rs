//! # tickwire-proto: the reliable UDP protocol, without I/O
//!
//! A sans-IO core in the manner of quinn-proto: no sockets, no threads, no
//! clock. Time (`now`, nanoseconds on any monotonic clock) is passed in;
//! datagrams go in through `handle_*` and come out of `poll_*`;
//! `poll_timeout` says when to call again. The driver crate runs it over real
//! sockets; the tests here run it over a simulated network in virtual time.
//!
//! ```text
//!  offer ─► Sender ── DATA / HEARTBEAT / SETUP ──► Receiver ─► poll_messages
//!             ▲  (retention ring, send window,        │  (reorder window,
//!             │   retransmit + linger, heartbeats)     │   gap scan, NAK timers,
//!             └──────────── STATUS / NAK ◄─────────────┘   Lost events)
//! ```
//!
//! * [`Sender`]: keeps the last `retention` bytes of the stream for
//!   retransmission, sends no further than the flow-control limit that the
//!   receivers' STATUS frames grant ([`FlowControl`] min or max for
//!   multicast), retransmits a NAKed range once and then *lingers*, ignoring
//!   repeats of it, heartbeats when idle so that a lost tail is noticed, and
//!   announces the session with SETUP.
//! * [`Receiver`]: places frames by stream position in a reorder window,
//!   delivers in order exactly once, NAKs each gap after a delay
//!   ([`NakDelay`]: static for unicast, randomised for multicast so that one
//!   receiver's NAK, seen by the others, suppresses theirs), retries if the
//!   repair is lost, and raises [`Event::Lost`] with the exact range when the
//!   sender no longer retains a gap.
//!
//! Fragmentation and reassembly are the message layer of `tickwire-wire`,
//! the same code the shared-memory log runs.
//!
//! Stream positions count bytes of 32-byte-aligned frames, as in the
//! shared-memory log, so a gap is a range of positions and `Lost { from, to }`
//! is exact.
//!
//! # Examples
//!
//! A sender and a receiver joined by a vector of datagrams, in virtual time:
//!
//! ```
//! use std::net::SocketAddrV4;
//! use tickwire_proto::{Event, Receiver, ReceiverConfig, Sender, SenderConfig};
//! let (sender_addr, receiver_addr): (SocketAddrV4, SocketAddrV4) =
//!     ("10.0.0.1:40000".parse()?, "10.0.0.2:40123".parse()?);
//! let mut now = 0;
//! let mut sender = Sender::new(SenderConfig::default(), now).unwrap();
//! let mut receiver = Receiver::new(ReceiverConfig::default()).unwrap();
//! let mut buf = vec![0u8; 2048];
//! let mut got = Vec::new();
//! for round in 0..4 {
//!     if round == 2 {
//!         sender.offer("md/eu/VOD", b"bid 101.25").unwrap(); // connected by now
//!     }
//!     while let Some(n) = sender.poll_transmit(now, &mut buf) {
//!         receiver.handle_datagram(now, sender_addr, &buf[..n]); // SETUP, then DATA
//!     }
//!     receiver.poll_messages(|e| if let Event::Message(m) = e { got.push(m.payload.to_vec()) }, 10);
//!     receiver.handle_timeout(now);
//!     while let Some((n, to)) = receiver.poll_transmit(now, &mut buf) {
//!         assert_eq!(to, sender_addr); // control goes back to the session's source
//!         sender.handle_datagram(now, receiver_addr, &buf[..n]); // STATUS opens the window
//!     }
//!     now += 1_000;
//! }
//! assert_eq!(got, [b"bid 101.25"]);
//! # Ok::<(), std::net::AddrParseError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod auth;
mod bitmap;
mod image;
mod invalid;
mod receiver;
mod sender;

pub use auth::{AuthKey, KeyError, ReplayWindow};
pub use invalid::{Invalid, InvalidCounts};
pub use receiver::{Receiver, ReceiverConfig, ReceiverStats};
pub use sender::{ReceiverChange, Sender, SenderConfig, SenderStats};
pub use tickwire_wire::{Event, Message, OfferError};

use tickwire_impair::Rng;
use tickwire_wire::{align_frame, FrameHeader, FrameType, WireError};

/// Nanoseconds on the caller's monotonic clock.
pub type Nanos = u64;

/// Largest datagram payload a session may use: the largest multiple of 32
/// that fits a UDP datagram.
pub const MAX_MTU: usize = 65_504;

/// How a multicast sender combines its receivers' windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlowControl {
    /// Never send beyond the slowest receiver's window: no receiver falls
    /// behind the retention, and the slowest one sets the pace for all.
    #[default]
    Min,
    /// Follow the fastest receiver: a slow receiver can fall beyond the
    /// sender's retention and then gets [`Event::Lost`] for what it missed.
    Max,
}

/// How long a receiver waits after detecting a gap before it NAKs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NakDelay {
    /// Always this long (unicast: one receiver, nothing to suppress).
    Static(Nanos),
    /// A random delay in `[0, max]` drawn from a truncated exponential
    /// distribution (Nonnenmacher and Biersack's optimal multicast feedback
    /// timer): most receivers wait long, a few answer early, and their NAK
    /// suppresses the others'. `group_size` is the expected receiver count.
    Optimal {
        /// Longest delay.
        max: Nanos,
        /// Expected number of receivers.
        group_size: u32,
    },
}

impl NakDelay {
    pub(crate) fn sample(self, rng: &mut Rng) -> Nanos {
        match self {
            NakDelay::Static(d) => d,
            NakDelay::Optimal { max, group_size } => {
                let lambda = (f64::from(group_size.max(1))).ln() + 1.0;
                let u = rng.next_f64();
                let x = (u * (lambda.exp() - 1.0) + 1.0).ln() / lambda;
                (x * max as f64) as Nanos
            }
        }
    }
}

/// The frames of a datagram: each item is a checked header's type and the
/// frame's bytes (`frame_length` long); frames are 32-byte aligned. Stops at
/// the first invalid frame, which is yielded as an error.
pub fn frames(datagram: &[u8]) -> impl Iterator<Item = Result<(FrameType, &[u8]), WireError>> {
    let mut rest = datagram;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || rest.is_empty() {
            return None;
        }
        match FrameHeader::new_checked(rest) {
            Ok(h) => {
                let len = h.frame_length();
                let ty = h.frame_type();
                let frame = &rest[..len];
                rest = rest.get(align_frame(len)..).unwrap_or(&[]);
                Some(Ok((ty, frame)))
            }
            Err(e) => {
                failed = true;
                Some(Err(e))
            }
        }
    })
}

/// Whether a frame (at least a checked header) belongs to `session`/`stream`:
/// a keyed datagram's frames must all be of the session its AUTH frame names.
pub(crate) fn same_session(frame: &[u8], session: u32, stream: u32) -> bool {
    let h = FrameHeader::new_unchecked(frame);
    h.session_id() == session && h.stream_id() == stream
}

/// A zeroed ring of `len` bytes with every page already touched: a large
/// zeroed allocation is mapped lazily, and each first write to one of its
/// pages would be a page fault on the send or receive path (1 to 3 us on a
/// VM, once per 4 KiB: one message in forty at 96 bytes each, until the ring
/// has been through once). Touching the pages here moves that cost to
/// set-up, as Aeron's pre-touch of its term buffers does.
pub(crate) fn touched_ring(len: usize) -> Vec<u8> {
    let mut ring = vec![0u8; len];
    // black_box: the compiler may not assume the memory is still zero, so
    // the stores stay.
    let r = std::hint::black_box(&mut ring[..]);
    for i in (0..r.len()).step_by(4096) {
        r[i] = 0;
    }
    ring
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn optimal_delay_stays_in_range_and_favours_late() {
        let mut rng = Rng::new(1);
        let d = NakDelay::Optimal { max: 1_000_000, group_size: 10 };
        let samples: Vec<_> = (0..10_000).map(|_| d.sample(&mut rng)).collect();
        assert!(samples.iter().all(|&s| s <= 1_000_000));
        let early = samples.iter().filter(|&&s| s < 100_000).count();
        let late = samples.iter().filter(|&&s| s > 900_000).count();
        assert!(early < late, "early {early} late {late}");
        assert!(early > 0);
    }
}
