//! The memory orderings of the log protocol, named, in one place.
//!
//! The appender and the reader use these constants for every atomic access
//! of the publication, reading, eviction, join and park/wake paths, and the
//! loom model of the protocol (`crates/shm/tests/loom_log.rs`) takes its
//! orderings from them: weakening one here weakens the model too, and the
//! model's checks fail. (The atomics themselves live in the mapped file,
//! where loom's cannot, so the model mirrors the steps; see that file.)
//!
//! Not an API: public only so that the model, an integration test, can
//! reach it.
#![doc(hidden)]

use std::sync::atomic::Ordering::{self, AcqRel, Acquire, Relaxed, Release, SeqCst};

// ---- Publication (appender: `begin_frame`, `commit`, `Claim::pad_out`) ----

/// Zeroing the commit words a reader may reach next: the appender keeps the
/// ring zeroed from the end of the newest claim to up to `CLEAR_AHEAD` bytes
/// past it (never past the limit), and at least the commit word after the
/// frame being claimed before `tail` is stored and that frame committed.
/// The product zeroes with plain stores, since no reader reads those bytes
/// while they are written (but a lossy reader evicted and not yet polled,
/// which may look at its old commit word there, as it may while frames are
/// written, and discards what it saw); the model stores with this ordering,
/// Relaxed, the weakest an atomic has. Made visible by the `tail` release
/// (to joiners), by the commit release of the frame before it (to readers
/// going frame by frame) and by an eviction's release (to an evicted
/// reader).
pub const CLEAR_COMMIT: Ordering = Relaxed;
/// Storing `tail`, the end of the newest claim, after zeroing the commit word
/// there: a joiner that acquires it starts at a cleared commit word.
pub const PUBLISH_TAIL: Ordering = Release;
/// Storing a frame's commit word after its header and payload (DATA, PAD and
/// aborted claims alike): publishes the frame.
pub const COMMIT: Ordering = Release;

// ---- Reading (reader: `poll`) ----

/// Loading a frame's commit word; non-zero means header and payload are
/// visible.
pub const ACQUIRE_COMMIT: Ordering = Acquire;
/// Storing the reader's position after a poll (and clearing READING): the
/// reader's reads of the frames before it happen before the publisher
/// overwrites them.
pub const STORE_POSITION: Ordering = Release;

// ---- Limit rescan and eviction (appender: `scan_limit`) ----

/// Loading a subscriber slot's state in a rescan.
pub const SCAN_STATE: Ordering = Acquire;
/// Loading a subscriber's position in a rescan (pairs with `STORE_POSITION`).
pub const SCAN_POSITION: Ordering = Acquire;
/// Loading a subscriber's mode (lossy or tethered) in a rescan; written before
/// the slot is activated (`JOIN_ACTIVATE` / `SCAN_STATE`).
pub const SCAN_MODE: Ordering = Relaxed;
/// The eviction CAS moving a lossy subscriber whose READING bit is clear to
/// the publisher's position: success and failure orderings.
pub const EVICT_SUCCESS: Ordering = AcqRel;
/// See [`EVICT_SUCCESS`].
pub const EVICT_FAILURE: Ordering = Acquire;
/// A lossy reader's CAS setting READING on entering `poll`: success and
/// failure (it was evicted: it learns where to) orderings.
pub const ENTER_LOSSY_SUCCESS: Ordering = AcqRel;
/// See [`ENTER_LOSSY_SUCCESS`].
pub const ENTER_LOSSY_FAILURE: Ordering = Acquire;

// ---- Joining (reader: `open`, under the coordination lock) ----

/// Taking the coordination lock (CAS success; failure is relaxed).
pub const LOCK_ACQUIRE: Ordering = Acquire;
/// Releasing the coordination lock.
pub const LOCK_RELEASE: Ordering = Release;
/// A joiner loading `tail` (pairs with [`PUBLISH_TAIL`]).
pub const JOIN_TAIL: Ordering = Acquire;
/// A joiner storing its slot's fields before activating it.
pub const JOIN_SLOT_FIELDS: Ordering = Relaxed;
/// A joiner activating its slot (pairs with [`SCAN_STATE`]).
pub const JOIN_ACTIVATE: Ordering = Release;

// ---- Park / wake (a Dekker handshake: reader `park`, appender `wake_if_parked`) ----

/// The publisher's barrier between its commit store and its load of
/// `waiters`: a `compiler_fence` of this ordering when a parking subscriber
/// forces a full barrier on it with `membarrier`, a `fence` otherwise.
pub const WAKE_FENCE: Ordering = SeqCst;
/// The publisher's load of `waiters` after a commit.
pub const WAKE_CHECK_WAITERS: Ordering = Relaxed;
/// A parking subscriber's increment of `waiters`.
pub const PARK_ADD_WAITER: Ordering = SeqCst;
/// A parking subscriber's re-check of the commit word (and of `closed` and
/// its own position) before it sleeps.
pub const PARK_RECHECK: Ordering = SeqCst;
