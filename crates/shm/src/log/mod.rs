//! Log buffers: one publisher, many subscribers, over a shared-memory ring.
//!
//! See [`layout`] for the bytes. The protocol, in short:
//!
//! * **Claim.** The publisher checks its cached limit (`min subscriber
//!   position + capacity`), rescanning subscriber slots only when a claim
//!   would cross it. It makes sure the *next* frame's commit word is zero
//!   (the ring is kept zeroed in whole lines a little ahead of the newest
//!   claim, topped up after commits, never past the limit), then stores
//!   `tail` (the end of the claim).
//! * **Commit.** The header is written, then a release store of the frame's
//!   commit word (its first 8 bytes: length, version, flags, type).
//!   Subscribers acquire-load that word; non-zero means the whole frame is
//!   visible. Because the publisher cleared the word before anyone could
//!   reach it, a frame from the previous lap is never mistaken for a new one.
//! * **Back-pressure.** A claim that would overwrite bytes a tethered
//!   subscriber has not read is refused with `BackPressured`. A lossy
//!   subscriber is instead moved to the publisher's position by a CAS on its
//!   position word, which only succeeds while it is outside `poll` (its
//!   READING bit clear); it then reports `Lost { from, to }`.
//! * **Dead publishers.** If `tail` is past a subscriber's position, the
//!   commit word stays zero for `unblock_timeout` and the publisher process
//!   is dead, the subscriber CASes a PAD into it (subscribers race each
//!   other, not the dead publisher). A live publisher's claim is waited for.
//! * **Joins** take a small pid-owned lock that the publisher also takes to
//!   rescan, so a joiner never sits behind a limit computed without it.
//! * **Parking.** A subscriber bumps `waiters`, forces a barrier on the
//!   publisher with `membarrier` (asymmetric Dekker fence: the publisher's
//!   hot path has no fence), re-checks the commit word and futex-waits on it;
//!   the publisher wakes only when `waiters != 0`. Without membarrier the
//!   publisher fences after each commit instead.

mod appender;
pub mod file;
pub mod layout;
pub mod order;
mod reader;

pub use appender::{Claim, LogAppender};
pub use reader::{LogReader, Mode, ReaderOptions};
