//! The publishing side of a log: claim, write in place, commit.

use super::file::{Descriptor, LockGuard, LogFile};
use super::layout::*;
use super::order;
use crate::config::LogConfig;
use crate::counters::{publisher as pc, CounterSet, CountersFile, Kind};
use crate::error::ShmError;
use crate::sys::{self, ProcessId};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use tickwire_wire::{align_frame, data, flags, Fragmenter, FrameType, OfferError, FRAME_ALIGNMENT};

const DATA_HDR: usize = data::HEADER_LEN;
/// How often a back-pressured publisher checks whether the subscriber holding
/// it back is still alive.
const LIVENESS_CHECK_NS: u64 = 10_000_000;

mod write;
use write::CLEAR_AHEAD;

/// The single writer of a stream's log buffer.
///
/// Guarantees: messages are delivered to every attached subscriber in the
/// order offered, whole (fragmented messages are reassembled), or a lossy
/// subscriber is told exactly which byte range it lost. A tethered subscriber
/// is never overrun: the publisher is refused with
/// [`OfferError::BackPressured`] instead. `offer` and `try_claim` allocate
/// nothing and make no system call, except a futex wake when a subscriber is
/// parked, and a rescan of subscriber positions (no syscall) when the cached
/// limit is reached.
#[derive(Debug)]
#[must_use = "an appender publishes nothing unless offered to, and closes its log when dropped"]
pub struct LogAppender {
    log: LogFile,
    ring: *mut u8,
    mask: u64,
    capacity: u64,
    position: u64,
    limit: u64,
    /// The ring is zeroed from the end of the newest claim up to this stream
    /// position (see [`CLEAR_AHEAD`]).
    cleared_to: u64,
    session_id: u32,
    stream_id: u32,
    fragmenter: Fragmenter,
    max_message: usize,
    mtu: u64,
    me: ProcessId,
    last_liveness_check: u64,
    last_lock_check: u64,
    counters: CounterSet,
    tail: std::ptr::NonNull<AtomicU64>,
    waiters: std::ptr::NonNull<AtomicU32>,
    asymmetric_fence: bool,
}

// SAFETY: `ring`, `tail` and `waiters` point into the mapping owned by `log`, which moves with the
// publisher; the publisher is the single writer and is not Sync.
unsafe impl Send for LogAppender {}

impl LogAppender {
    /// Creates the stream's log in `dir` and starts publishing on it.
    ///
    /// # Errors
    /// [`ShmError::InUse`] if a live publisher owns the stream,
    /// [`ShmError::Foreign`] if a non-tickwire file holds the name,
    /// [`ShmError::Config`] for an invalid config or channel, or I/O errors.
    pub fn create(
        dir: &Path,
        channel: &str,
        stream_id: u32,
        cfg: &LogConfig,
        counters: &Arc<CountersFile>,
    ) -> Result<Self, ShmError> {
        // Asymmetric fence: with membarrier the commit needs no barrier of its
        // own (a parking subscriber forces one on us); without, we fence.
        let asymmetric = sys::membarrier_register();
        let flags = if asymmetric { FLAG_ASYMMETRIC_FENCE } else { 0 };
        let log = LogFile::create(dir, channel, stream_id, cfg, flags)?;
        Self::start(log, counters, asymmetric)
    }

    /// Creates a log of `channel`/`stream_id` in a sealed anonymous file
    /// and starts publishing on it; returns it and the file, to hand over a
    /// Unix socket ([`crate::handover`]) to the process that reads it.
    ///
    /// # Errors
    /// [`ShmError::Config`] for an invalid config or channel,
    /// [`ShmError::NoSpace`] when memory is short, or I/O errors.
    pub fn create_sealed(
        channel: &str,
        stream_id: u32,
        cfg: &LogConfig,
        counters: &Arc<CountersFile>,
    ) -> Result<(Self, std::fs::File), ShmError> {
        let asymmetric = sys::membarrier_register();
        let flags = if asymmetric { FLAG_ASYMMETRIC_FENCE } else { 0 };
        let (log, file) = LogFile::create_sealed(channel, stream_id, cfg, flags)?;
        Ok((Self::start(log, counters, asymmetric)?, file))
    }

    fn start(log: LogFile, counters: &Arc<CountersFile>, asymmetric: bool) -> Result<Self, ShmError> {
        let stream_id = log.desc.stream_id;
        let counters = counters.allocate(Kind::Publisher, stream_id, log.desc.session_id, &log.desc.channel)?;
        let ring = log.ring();
        let tail = std::ptr::NonNull::from(log.u64_at(TAIL_OFFSET));
        let waiters = std::ptr::NonNull::from(log.u32_at(WAITERS_OFFSET));
        Ok(Self {
            tail,
            waiters,
            asymmetric_fence: asymmetric,
            ring,
            mask: log.desc.capacity as u64 - 1,
            capacity: log.desc.capacity as u64,
            position: 0,
            limit: 0,
            // The file is new, so its whole first lap is zeroes.
            cleared_to: log.desc.capacity as u64,
            session_id: log.desc.session_id,
            stream_id,
            fragmenter: Fragmenter::new(log.desc.mtu),
            max_message: log.desc.max_message,
            mtu: log.desc.mtu as u64,
            me: ProcessId::current(),
            last_liveness_check: 0,
            last_lock_check: 0,
            counters,
            log,
        })
    }

    /// The log's fixed parameters.
    pub fn descriptor(&self) -> &Descriptor {
        &self.log.desc
    }
    /// Stream position after the last claimed frame.
    pub fn position(&self) -> u64 {
        self.position
    }
    /// Largest payload a single claim can hold (without topic).
    pub fn max_payload(&self) -> usize {
        self.fragmenter.max_payload()
    }
    /// This publisher's counters.
    pub fn counters(&self) -> &CounterSet {
        &self.counters
    }
    /// Whether the log was truncated or replaced under this appender,
    /// created inside [`crate::os::untrusted`]: what it writes now goes
    /// nowhere, and whoever created it ends what it served.
    pub fn is_broken(&self) -> bool {
        self.log.map.is_broken()
    }

    #[inline]
    fn tail(&self) -> &AtomicU64 {
        // SAFETY: points into the mapping owned by `self.log` (set at creation).
        unsafe { self.tail.as_ref() }
    }

    #[inline]
    fn waiters(&self) -> &AtomicU32 {
        // SAFETY: as `tail`.
        unsafe { self.waiters.as_ref() }
    }

    #[inline]
    fn commit_word(&self, ring_offset: u64) -> &AtomicU64 {
        debug_assert!(ring_offset % FRAME_ALIGNMENT as u64 == 0 && ring_offset < self.capacity);
        // SAFETY: ring_offset is masked into [0, capacity) and 32-aligned (all
        // positions the publisher computes are), so the 8 bytes are inside
        // the ring and aligned.
        unsafe { &*self.ring.add(ring_offset as usize).cast::<AtomicU64>() }
    }

    /// Whether any subscriber is attached (rescans the slots; not counted as
    /// a refused offer).
    pub fn is_connected(&mut self) -> bool {
        match self.scan_limit(self.position + 1) {
            Ok(()) | Err(OfferError::BackPressured) => true,
            Err(_) => false,
        }
    }

    /// Claims a frame for `len` payload bytes, to be written in place and
    /// committed with [`Claim::commit`]. Dropping the claim aborts it (the
    /// space becomes padding).
    ///
    /// # Errors
    /// [`OfferError::MaxPayloadExceeded`] when `len` does not fit one frame
    /// (claims are never fragmented), [`OfferError::NotConnected`],
    /// [`OfferError::BackPressured`].
    #[inline]
    pub fn try_claim(&mut self, len: usize) -> Result<Claim<'_>, OfferError> {
        self.try_claim_topic("", len)
    }

    /// [`LogAppender::try_claim`] with a topic carried in the frame.
    ///
    /// # Errors
    /// As [`LogAppender::try_claim`], plus [`OfferError::TopicTooLong`].
    #[inline]
    pub fn try_claim_topic<'a>(&'a mut self, topic: &'a str, len: usize) -> Result<Claim<'a>, OfferError> {
        let max = self.fragmenter.first_room(topic)?;
        if len > max {
            return Err(OfferError::MaxPayloadExceeded { len, max });
        }
        let frame_len = DATA_HDR + topic.len() + len;
        self.ensure_room(align_frame(frame_len) as u64)?;
        let (off, position) = self.begin_frame(frame_len);
        Ok(Claim { publisher: self, offset: off, position, frame_len, topic, done: false })
    }

    /// Publishes `msg`, fragmenting it if it exceeds one frame. Either the
    /// whole message is published or nothing is.
    ///
    /// # Errors
    /// [`OfferError::NotConnected`], [`OfferError::BackPressured`],
    /// [`OfferError::MaxMessageExceeded`].
    #[inline(always)]
    pub fn offer(&mut self, msg: &[u8]) -> Result<u64, OfferError> {
        self.offer_topic("", msg)
    }

    /// [`LogAppender::offer`] with a topic (carried in the first fragment).
    ///
    /// # Errors
    /// As [`LogAppender::offer`], plus [`OfferError::TopicTooLong`].
    #[inline(always)]
    pub fn offer_topic(&mut self, topic: &str, msg: &[u8]) -> Result<u64, OfferError> {
        let first_max = self.fragmenter.first_room(topic)?;
        if msg.len() <= first_max {
            let frame_len = DATA_HDR + topic.len() + msg.len();
            self.ensure_room(align_frame(frame_len) as u64)?;
            let (off, position) = self.begin_frame(frame_len);
            self.write_payload_last_line_first(off, off + (DATA_HDR + topic.len()) as u64, msg);
            let end = self.commit(off, position, frame_len, flags::UNFRAGMENTED, topic);
            // Counted after the commit: off the critical path to subscribers.
            self.counters.add(pc::MESSAGES, 1);
            self.counters.add(pc::BYTES, msg.len() as u64);
            return Ok(end);
        }
        self.offer_fragmented(topic, msg, first_max)
    }

    #[cold]
    fn offer_fragmented(&mut self, topic: &str, msg: &[u8], first_max: usize) -> Result<u64, OfferError> {
        if msg.len() > self.max_message {
            return Err(OfferError::MaxMessageExceeded { len: msg.len(), max: self.max_message });
        }
        // Room for every fragment plus the worst-case end-of-ring pad, checked
        // up front so that a message is published whole or not at all.
        let total = self.fragmenter.stream_len(topic.len(), first_max, msg.len());
        self.ensure_room(total + self.log.desc.mtu as u64)?;
        for frag in self.fragmenter.fragments(topic, first_max, msg) {
            let frame_len = frag.frame_len();
            let (off, position) = self.begin_frame(frame_len);
            let payload_at = off + (DATA_HDR + frag.topic.len()) as u64;
            self.write_payload_last_line_first(off, payload_at, frag.payload);
            self.commit(off, position, frame_len, frag.flags, frag.topic);
        }
        self.counters.add(pc::MESSAGES, 1);
        self.counters.add(pc::BYTES, msg.len() as u64);
        Ok(self.position)
    }

    /// Makes sure `need` bytes (plus a possible end-of-ring pad and the next
    /// frame's header) fit under the limit.
    #[inline(always)]
    fn ensure_room(&mut self, need: u64) -> Result<(), OfferError> {
        let end = self.position + need + self.pad_needed(need) + FRAME_ALIGNMENT as u64;
        if end > self.limit {
            return self.refresh_limit(end);
        }
        Ok(())
    }

    #[inline(always)]
    fn pad_needed(&self, aligned: u64) -> u64 {
        let off = self.position & self.mask;
        if off + aligned.min(self.mtu) > self.capacity {
            self.capacity - off
        } else {
            0
        }
    }

    /// Starts a frame: makes sure the commit word after it is zero (the one a
    /// reader reaches next), then publishes `tail` (joiners start there, so
    /// this order matters), then commits the pad if one is needed. The
    /// frame's header is written at commit, together with its commit word.
    /// Returns the frame's ring offset and stream position.
    #[inline(always)]
    fn begin_frame(&mut self, frame_len: usize) -> (u64, u64) {
        let aligned = align_frame(frame_len) as u64;
        let pad_at = self.position & self.mask;
        let pad = if pad_at + aligned > self.capacity { self.capacity - pad_at } else { 0 };
        let start = self.position + pad;
        let next = start + aligned;
        if next + FRAME_ALIGNMENT as u64 > self.cleared_to {
            // Not cleared far enough ahead by the last commit (a large frame,
            // or the limit was near): clear now, before the frame is visible.
            self.clear_ahead(next + FRAME_ALIGNMENT as u64);
        }
        self.tail().store(next, order::PUBLISH_TAIL);
        if pad > 0 {
            self.write_header(pad_at, self.position, "");
            let word = commit_word(pad as u32, 0, FrameType::Pad as u16);
            self.commit_word(pad_at).store(word, order::COMMIT);
            self.counters.add(pc::PADS, 1);
            // A subscriber parked on the pad's commit word sleeps on that
            // word: the frame after the pad wakes another (offset 0).
            self.wake_if_parked(pad_at);
        }
        self.position = next;
        (start & self.mask, start)
    }

    /// Writes the header and commits the frame at `off` with a release store
    /// of its commit word, then wakes parked subscribers if there are any.
    ///
    /// The wake check is one side of a Dekker handshake with `park`
    /// (store commit, load `waiters` / add `waiters`, load commit). The
    /// StoreLoad barrier it needs is supplied by the parking subscriber
    /// through `membarrier` when the publisher is registered for it, so the
    /// hot path has no locked instruction; otherwise the publisher fences.
    #[inline(always)]
    fn commit(&mut self, off: u64, position: u64, frame_len: usize, fl: u8, topic: &str) -> u64 {
        self.write_header(off, position, topic);
        let word = commit_word(frame_len as u32, fl, FrameType::Data as u16);
        self.commit_word(off).store(word, order::COMMIT);
        self.wake_if_parked(off);
        if self.cleared_to - self.position < CLEAR_AHEAD / 2 {
            self.clear_ahead(0);
        }
        self.position
    }

    #[inline(always)]
    fn wake_if_parked(&self, off: u64) {
        if self.asymmetric_fence {
            std::sync::atomic::compiler_fence(order::WAKE_FENCE);
        } else {
            std::sync::atomic::fence(order::WAKE_FENCE);
        }
        if self.waiters().load(order::WAKE_CHECK_WAITERS) != 0 {
            wake(self.futex_word(off));
        }
    }

    fn futex_word(&self, off: u64) -> &AtomicU32 {
        // SAFETY: the low half of an in-ring, 8-aligned commit word.
        unsafe { &*self.ring.add(off as usize).cast::<AtomicU32>() }
    }

    /// Recomputes the limit from subscriber positions under the coordination
    /// lock. Evicts lossy subscribers that hold the publisher back and reaps
    /// dead ones.
    #[cold]
    fn refresh_limit(&mut self, end: u64) -> Result<(), OfferError> {
        let res = self.scan_limit(end);
        match res {
            Err(OfferError::BackPressured) => self.counters.add(pc::BACK_PRESSURED, 1),
            Err(OfferError::NotConnected) => self.counters.add(pc::NOT_CONNECTED, 1),
            _ => {}
        }
        res
    }

    /// The rescan itself; `refresh_limit` counts its refusals.
    fn scan_limit(&mut self, end: u64) -> Result<(), OfferError> {
        let now = sys::monotonic_ns();
        let guard = lock_or_take_over(&self.log, self.me, &mut self.last_lock_check, &self.counters, now);
        let Some(_guard) = guard else {
            return Err(OfferError::BackPressured);
        };
        self.log.u64_at(PUB_HEARTBEAT_OFFSET).store(now, Ordering::Relaxed);
        let check_liveness = now.saturating_sub(self.last_liveness_check) > LIVENESS_CHECK_NS;
        if check_liveness {
            self.last_liveness_check = now;
        }
        let mut min = u64::MAX;
        for i in 0..self.log.desc.max_subscribers {
            let s = slot(i);
            if self.log.u32_at(s + SLOT_STATE).load(order::SCAN_STATE) != SLOT_ACTIVE {
                continue;
            }
            let pos_word = self.log.u64_at(s + SLOT_POSITION);
            let mut word = pos_word.load(order::SCAN_POSITION);
            let blocking = (word & !READING) + self.capacity < end;
            if blocking && check_liveness && !self.slot_owner(s).is_alive() {
                self.reap(s);
                continue;
            }
            let lossy = self.log.u32_at(s + SLOT_MODE).load(order::SCAN_MODE) == 1;
            if blocking && lossy && word & READING == 0 {
                // Move the subscriber to our position; it reports Lost.
                if pos_word.compare_exchange(word, self.position, order::EVICT_SUCCESS, order::EVICT_FAILURE).is_ok() {
                    self.counters.add(pc::EVICTIONS, 1);
                    word = self.position;
                } else {
                    word = pos_word.load(order::SCAN_POSITION);
                }
            }
            min = min.min(word & !READING);
        }
        if min == u64::MAX {
            self.limit = self.position;
            self.log.u64_at(PUB_LIMIT_OFFSET).store(self.limit, Ordering::Relaxed);
            return Err(OfferError::NotConnected);
        }
        self.limit = min + self.capacity;
        self.log.u64_at(PUB_LIMIT_OFFSET).store(self.limit, Ordering::Relaxed);
        if end > self.limit {
            return Err(OfferError::BackPressured);
        }
        Ok(())
    }

    fn slot_owner(&self, s: usize) -> ProcessId {
        ProcessId {
            pid: self.log.u64_at(s + SLOT_PID).load(Ordering::Relaxed) as u32,
            start_time: self.log.u64_at(s + SLOT_START).load(Ordering::Relaxed),
        }
    }

    fn reap(&self, s: usize) {
        if self.log.u32_at(s + SLOT_PARKED).swap(0, Ordering::AcqRel) != 0 {
            self.log.u32_at(WAITERS_OFFSET).fetch_sub(1, Ordering::AcqRel);
        }
        self.log.u32_at(s + SLOT_STATE).store(SLOT_FREE, Ordering::Release);
        self.counters.add(pc::REAPED, 1);
    }

    /// Duty cycle for idle moments: refreshes the heartbeat that `tickwire
    /// stat` shows and reaps dead subscribers. Returns work done (0 or 1).
    pub fn do_work(&mut self) -> usize {
        let now = sys::monotonic_ns();
        let hb = self.log.u64_at(PUB_HEARTBEAT_OFFSET);
        if now.saturating_sub(hb.load(Ordering::Relaxed)) < 100_000_000 {
            return 0;
        }
        hb.store(now, Ordering::Relaxed);
        let guard = lock_or_take_over(&self.log, self.me, &mut self.last_lock_check, &self.counters, now);
        if let Some(_g) = guard {
            for i in 0..self.log.desc.max_subscribers {
                let s = slot(i);
                if self.log.u32_at(s + SLOT_STATE).load(Ordering::Acquire) == SLOT_ACTIVE
                    && !self.slot_owner(s).is_alive()
                {
                    self.reap(s);
                }
            }
        }
        1
    }
}

/// Takes the log's lock if free. A lock left held by a dead process (a
/// subscriber killed while joining) is taken over and counted, but its holder
/// is looked at (it reads /proc) at most once per liveness interval.
fn lock_or_take_over<'a>(
    log: &'a LogFile,
    me: ProcessId,
    last_check: &mut u64,
    counters: &CounterSet,
    now: u64,
) -> Option<LockGuard<'a>> {
    if let Some(g) = log.try_lock(me) {
        return Some(g);
    }
    if now.saturating_sub(*last_check) < LIVENESS_CHECK_NS {
        return None;
    }
    *last_check = now;
    let (guard, _dead) = log.take_over_lock(me)?;
    counters.add(pc::LOCKS_TAKEN_OVER, 1);
    Some(guard)
}

impl Drop for LogAppender {
    fn drop(&mut self) {
        // End of stream: subscribers drain what is committed, then see `closed`.
        self.log.u64_at(CLOSED_OFFSET).store(self.position | 1 << 63, Ordering::SeqCst);
        wake(self.futex_word(self.position & self.mask));
        // Only if the name still leads to our file: a publisher that found it
        // stale may have replaced it with its own live log.
        self.log.map.remove_created();
    }
}

fn wake(word: &AtomicU32) {
    sys::futex_wake(word);
}

/// A frame claimed for in-place writing. Commit it, or drop it to abort.
///
/// While a claim is open, caught-up subscribers wait at it. If the publisher
/// process dies with a claim open, subscribers pad it out after the log's
/// `unblock_timeout`; a live publisher's claim is never taken away.
#[derive(Debug)]
#[must_use = "a claim is aborted (becomes padding) unless committed"]
pub struct Claim<'a> {
    publisher: &'a mut LogAppender,
    offset: u64,
    position: u64,
    frame_len: usize,
    topic: &'a str,
    done: bool,
}

impl Claim<'_> {
    /// The payload bytes to fill (exactly the claimed length).
    #[inline]
    pub fn buffer(&mut self) -> &mut [u8] {
        let topic_len = self.topic.len();
        let start = self.offset as usize + DATA_HDR + topic_len;
        let len = self.frame_len - DATA_HDR - topic_len;
        // SAFETY: [start, start+len) is inside the claimed frame, which only
        // this claim (holding &mut LogAppender) may write until it commits; no
        // subscriber reads it before the commit word is released.
        unsafe { std::slice::from_raw_parts_mut(self.publisher.ring.add(start), len) }
    }

    /// Publishes the frame. Returns the stream position after it.
    #[inline]
    pub fn commit(mut self) -> u64 {
        self.done = true;
        let p = &mut *self.publisher;
        let end = p.commit(self.offset, self.position, self.frame_len, flags::UNFRAGMENTED, self.topic);
        p.counters.add(pc::MESSAGES, 1);
        p.counters.add(pc::BYTES, (self.frame_len - DATA_HDR - self.topic.len()) as u64);
        end
    }

    /// Abandons the frame; subscribers skip it as padding.
    pub fn abort(mut self) {
        self.pad_out();
    }

    #[cold]
    fn pad_out(&mut self) {
        self.done = true;
        let aligned = align_frame(self.frame_len) as u32;
        let word = commit_word(aligned, 0, FrameType::Pad as u16);
        let p = &mut *self.publisher;
        p.write_header(self.offset, self.position, "");
        p.commit_word(self.offset).store(word, order::COMMIT);
        p.counters.add(pc::CLAIMS_ABORTED, 1);
        p.wake_if_parked(self.offset);
    }
}

impl Drop for Claim<'_> {
    #[inline]
    fn drop(&mut self) {
        if !self.done {
            self.pad_out();
        }
    }
}
