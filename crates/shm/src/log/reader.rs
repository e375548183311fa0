//! The subscribing side of a log: poll frames in place, reassemble, report
//! loss, pad out claims abandoned by a dead publisher, park on a futex.

use super::file::{Descriptor, LogFile};
use super::layout::*;
use super::order;
use crate::counters::{subscriber as sc, CounterSet, CountersFile, Kind};
use crate::error::{PollError, ShmError};
use crate::sys::{self, ProcessId};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tickwire_wire::{
    align_frame, data, DataFrame, DeliveryStats, Event, FrameType, GoneReason, Reassembler, FRAME_ALIGNMENT,
    MAX_TOPIC_LENGTH, VERSION,
};

/// How a subscriber relates to the publisher when it falls behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// The publisher waits for this subscriber (`BackPressured`); nothing is
    /// ever lost.
    #[default]
    Tethered,
    /// The publisher does not wait: when this subscriber holds it back, it is
    /// moved to the publisher's position and receives [`Event::Lost`] with
    /// the exact byte range skipped. Never torn data: the publisher only
    /// moves it between polls.
    Lossy,
}

/// Options for attaching a subscriber.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReaderOptions {
    /// Tethered or lossy.
    pub mode: Mode,
    /// How long to wait for the log's coordination lock when joining.
    pub join_timeout: Duration,
    /// Report [`Event::PublisherGone`] (silent) when the publisher neither
    /// publishes nor refreshes its heartbeat for this long. `None` (the
    /// default): only a dead publisher process is reported. A publisher
    /// refreshes its heartbeat whenever it rescans its limit and in
    /// `do_work`, so one that idles must call `do_work` more often than this.
    pub publisher_timeout: Option<Duration>,
}

impl Default for ReaderOptions {
    fn default() -> Self {
        Self { mode: Mode::Tethered, join_timeout: Duration::from_secs(1), publisher_timeout: None }
    }
}

/// How often an idle reader looks at its publisher's liveness (/proc).
const GONE_CHECK_NS: u64 = 50_000_000;

/// What an idle reader knows about its publisher's liveness.
#[derive(Debug, Default)]
struct Liveness {
    /// Last check (monotonic ns); 0: check at the next idle poll.
    checked_at: u64,
    /// Position at the last check, and when it last moved.
    position: u64,
    moved_at: u64,
    /// `PublisherGone` was delivered.
    reported: bool,
}

/// A reader of a stream's log. Each subscriber has its own position.
#[derive(Debug)]
#[must_use = "a reader delivers nothing unless polled, and frees its slot when dropped"]
pub struct LogReader {
    log: LogFile,
    ring: *mut u8,
    mask: u64,
    capacity: u64,
    slot: usize,
    position: u64,
    lossy: bool,
    reasm: Reassembler,
    counters: CounterSet,
    stall_since: u64,
    stall_position: u64,
    idle_polls: u32,
    corrupt: Option<PollError>,
    publisher_timeout_ns: Option<u64>,
    liveness: Liveness,
}

// SAFETY: `ring` points into the mapping owned by `log`, which moves with the
// subscriber; the subscriber is used from one thread at a time (not Sync).
unsafe impl Send for LogReader {}

impl LogReader {
    /// Attaches to a stream, starting at the publisher's current position.
    ///
    /// # Errors
    /// [`ShmError::NoPublisher`] if the stream does not exist,
    /// [`ShmError::Stale`] if its publisher is dead, [`ShmError::Foreign`],
    /// [`ShmError::Corrupt`] or [`ShmError::VersionMismatch`] for a bad
    /// file, [`ShmError::NoFreeSlot`], [`ShmError::LockTimeout`].
    pub fn open(
        dir: &Path,
        channel: &str,
        stream_id: u32,
        opts: ReaderOptions,
        counters: &Arc<CountersFile>,
    ) -> Result<Self, ShmError> {
        Self::attach(LogFile::open(dir, channel, stream_id)?, opts, counters)
    }

    /// Attaches to a log handed over a Unix socket by its publisher
    /// ([`crate::handover`]); `label` names it in errors. The file must be
    /// sealed against shrinking, so its publisher cannot fault this
    /// process by truncating it.
    ///
    /// # Errors
    /// As [`LogReader::open`], and [`ShmError::Io`] (`InvalidInput`) for
    /// a file that is not a sealed memfd.
    pub fn open_fd(
        file: &std::fs::File,
        label: &Path,
        opts: ReaderOptions,
        counters: &Arc<CountersFile>,
    ) -> Result<Self, ShmError> {
        Self::attach(LogFile::open_fd(file, label)?, opts, counters)
    }

    fn attach(log: LogFile, opts: ReaderOptions, counters: &Arc<CountersFile>) -> Result<Self, ShmError> {
        let stream_id = log.desc.stream_id;
        let publisher = log.desc.publisher;
        if !publisher.is_alive() {
            return Err(ShmError::Stale { path: log.path.clone(), pid: publisher.pid });
        }
        if log.u64_at(CLOSED_OFFSET).load(Ordering::Acquire) != 0 {
            return Err(ShmError::NoPublisher { path: log.path.clone() });
        }
        let me = ProcessId::current();
        let (slot, position) = {
            let _guard = log.lock(me, opts.join_timeout)?;
            let free = (0..log.desc.max_subscribers)
                .map(slot)
                .find(|&s| log.u32_at(s + SLOT_STATE).load(Ordering::Acquire) == SLOT_FREE)
                .ok_or_else(|| ShmError::NoFreeSlot { path: log.path.clone(), max: log.desc.max_subscribers })?;
            let tail = log.u64_at(TAIL_OFFSET).load(order::JOIN_TAIL);
            if tail % FRAME_ALIGNMENT as u64 != 0 {
                return Err(ShmError::Corrupt { path: log.path.clone(), reason: format!("tail {tail} misaligned") });
            }
            log.u64_at(free + SLOT_PID).store(u64::from(me.pid), order::JOIN_SLOT_FIELDS);
            log.u64_at(free + SLOT_START).store(me.start_time, order::JOIN_SLOT_FIELDS);
            log.u64_at(free + SLOT_HEARTBEAT).store(sys::monotonic_ns(), order::JOIN_SLOT_FIELDS);
            log.u32_at(free + SLOT_PARKED).store(0, order::JOIN_SLOT_FIELDS);
            log.u32_at(free + SLOT_MODE).store(u32::from(opts.mode == Mode::Lossy), order::JOIN_SLOT_FIELDS);
            log.u64_at(free + SLOT_POSITION).store(tail, order::JOIN_SLOT_FIELDS);
            log.u32_at(free + SLOT_STATE).store(SLOT_ACTIVE, order::JOIN_ACTIVATE);
            (free, tail)
        };
        let counters = counters.allocate(Kind::Subscriber, stream_id, log.desc.session_id, &log.desc.channel)?;
        Ok(Self {
            ring: log.ring(),
            mask: log.desc.capacity as u64 - 1,
            capacity: log.desc.capacity as u64,
            slot,
            position,
            lossy: opts.mode == Mode::Lossy,
            reasm: Reassembler::new(log.desc.session_id, stream_id, log.desc.max_message),
            counters,
            stall_since: 0,
            stall_position: 0,
            idle_polls: 0,
            corrupt: None,
            publisher_timeout_ns: opts.publisher_timeout.map(|t| t.as_nanos().min(u128::from(u64::MAX)) as u64),
            liveness: Liveness { moved_at: sys::monotonic_ns(), ..Liveness::default() },
            log,
        })
    }

    /// The log's fixed parameters.
    pub fn descriptor(&self) -> &Descriptor {
        &self.log.desc
    }
    /// The next stream position this subscriber will read.
    pub fn position(&self) -> u64 {
        self.position
    }
    /// This subscriber's counters.
    pub fn counters(&self) -> &CounterSet {
        &self.counters
    }
    /// Whether the log was truncated or replaced under this reader, opened
    /// inside [`crate::os::untrusted`]: it now reads zeros, and whoever
    /// opened it ends what it served (nothing it read since can be trusted).
    pub fn is_broken(&self) -> bool {
        self.log.map.is_broken()
    }
    /// Whether the publisher process is alive (reads /proc: not for hot loops).
    pub fn is_publisher_alive(&self) -> bool {
        self.log.desc.publisher.is_alive()
    }
    /// Whether the publisher closed the stream (one load of a shared word:
    /// cheap enough for a hot path). What it committed before may still be
    /// unread.
    #[inline]
    pub fn is_closed(&self) -> bool {
        self.log.u64_at(CLOSED_OFFSET).load(Ordering::Acquire) != 0
    }

    /// Whether the publisher closed the stream and everything it committed has
    /// been read.
    pub fn is_end_of_stream(&self) -> bool {
        let c = self.log.u64_at(CLOSED_OFFSET).load(Ordering::Acquire);
        c != 0 && (c & !(1 << 63)) <= self.position
    }

    #[inline]
    fn commit_word(&self, off: u64) -> &AtomicU64 {
        // SAFETY: `off` is masked into the ring and 32-aligned (positions are
        // checked for alignment whenever they come from shared memory).
        unsafe { &*self.ring.add(off as usize).cast::<AtomicU64>() }
    }

    fn futex_word(&self, off: u64) -> &AtomicU32 {
        // SAFETY: the low half of an in-ring, aligned commit word.
        unsafe { &*self.ring.add(off as usize).cast::<AtomicU32>() }
    }

    /// Delivers up to `fragment_limit` frames' worth of events to `handler`
    /// and returns the number of frames read (0: nothing new).
    ///
    /// # Errors
    /// [`PollError::Corrupt`] if the log holds a frame that breaks the
    /// protocol; the subscriber stays stopped before it (and counts it).
    #[inline]
    pub fn poll<F: FnMut(Event<'_>)>(&mut self, mut handler: F, fragment_limit: usize) -> Result<usize, PollError> {
        // Fast idle path, first thing: a caught-up tethered subscriber spins
        // here, and the shorter this loop the sooner it sees a commit.
        if !self.lossy
            && self.corrupt.is_none()
            && self.commit_word(self.position & self.mask).load(order::ACQUIRE_COMMIT) == 0
        {
            self.on_idle_poll(&mut handler);
            return Ok(0);
        }
        if let Some(e) = self.corrupt {
            return Err(e);
        }
        let mut stats = DeliveryStats::default();
        let mut pos = self.position;
        if self.lossy {
            pos = match self.enter_lossy(&mut stats, &mut handler) {
                Ok(p) => p,
                Err(reason) => {
                    self.add_counters(0, &stats);
                    return Err(self.fail(pos, reason));
                }
            };
        }
        let mut frames = 0;
        let mut pads = 0u64;
        let mut err = None;
        while frames < fragment_limit {
            let off = pos & self.mask;
            let word = self.commit_word(off).load(order::ACQUIRE_COMMIT);
            if word == 0 {
                break;
            }
            let (len, ty) = match self.check_commit(off, word) {
                Ok(v) => v,
                Err(reason) => {
                    err = Some(reason);
                    break;
                }
            };
            let aligned = align_frame(len) as u64;
            if ty == FrameType::Pad {
                pos += aligned;
                frames += 1;
                pads += 1;
                continue;
            }
            // SAFETY: [off, off+len) is inside the ring (checked by
            // `check_commit`) and committed (acquire load of its commit
            // word); the publisher does not write it again until this
            // reader's position passes it (tethered) or while READING is set
            // (lossy).
            let bytes_in = unsafe { std::slice::from_raw_parts(self.ring.add(off as usize), len) };
            let frame = match check_data(bytes_in, pos) {
                Ok(f) => f,
                Err(reason) => {
                    err = Some(reason);
                    break;
                }
            };
            self.reasm.on_frame(&frame, pos, &mut stats, &mut handler);
            pos += aligned;
            frames += 1;
        }
        self.position = pos;
        if frames > 0 || self.lossy {
            // Also clears READING for a lossy reader.
            self.log.u64_at(self.slot + SLOT_POSITION).store(pos, order::STORE_POSITION);
        }
        if frames > 0 || stats.lost_events > 0 {
            self.add_counters(pads, &stats);
        }
        if let Some(reason) = err {
            return Err(self.fail(pos, reason));
        }
        if frames == 0 {
            self.on_idle_poll(&mut handler);
        }
        Ok(frames)
    }

    /// Marks a lossy reader as READING so the appender cannot move it, first
    /// reporting any range the appender moved it over. Returns the position
    /// to read from.
    #[inline]
    fn enter_lossy<F: FnMut(Event<'_>)>(
        &mut self,
        stats: &mut DeliveryStats,
        handler: &mut F,
    ) -> Result<u64, &'static str> {
        let mut pos = self.position;
        loop {
            let slot_pos = self.log.u64_at(self.slot + SLOT_POSITION);
            match slot_pos.compare_exchange(pos, pos | READING, order::ENTER_LOSSY_SUCCESS, order::ENTER_LOSSY_FAILURE)
            {
                Ok(_) => return Ok(pos),
                Err(cur) => {
                    let to = cur & !READING;
                    if to % FRAME_ALIGNMENT as u64 != 0 || to < pos {
                        return Err("subscriber position moved backwards or misaligned");
                    }
                    self.reasm.on_lost(pos, to, stats, handler);
                    pos = to;
                    self.position = to;
                }
            }
        }
    }

    /// Checks a commit word read at ring offset `off`: returns the frame's
    /// length and type, or why the log is corrupt.
    #[inline]
    fn check_commit(&self, off: u64, word: u64) -> Result<(usize, FrameType), &'static str> {
        let (len, version, _flags, ty) = split_commit(word);
        let len = len as usize;
        if version != VERSION {
            return Err("unknown frame version");
        }
        if len < FrameType::Data.header_len() || off + align_frame(len) as u64 > self.capacity {
            return Err("frame length out of bounds");
        }
        if ty == FrameType::Pad as u16 {
            return Ok((len, FrameType::Pad));
        }
        if len > self.log.desc.mtu {
            return Err("frame longer than mtu");
        }
        if ty != FrameType::Data as u16 {
            return Err("unexpected frame type in log");
        }
        Ok((len, FrameType::Data))
    }

    fn add_counters(&self, pads: u64, stats: &DeliveryStats) {
        if pads > 0 {
            self.counters.add(sc::PADS, pads);
        }
        if stats.messages > 0 {
            self.counters.add(sc::MESSAGES, stats.messages);
            self.counters.add(sc::BYTES, stats.bytes);
        }
        if stats.reassembly_dropped > 0 {
            self.counters.add(sc::REASSEMBLY_DROPPED, stats.reassembly_dropped);
        }
        if stats.lost_events > 0 {
            self.counters.add(sc::LOST_NOTICES, stats.lost_events);
            self.counters.add(sc::LOST_BYTES, stats.lost_bytes);
        }
    }

    #[cold]
    fn fail(&mut self, position: u64, reason: &'static str) -> PollError {
        self.counters.add(sc::INVALID_FRAMES, 1);
        let e = PollError::Corrupt { position, reason };
        self.corrupt = Some(e);
        e
    }

    /// Pads out a claim that has stayed uncommitted for the unblock timeout
    /// *and* whose publisher process is dead, so this subscriber and the
    /// others can go on. (A dead process cannot commit, so padding cannot race
    /// a late commit; a live publisher's claim is waited for.) Called from
    /// idle polls and `park`.
    #[cold]
    fn check_stall(&mut self) {
        let tail = self.log.u64_at(TAIL_OFFSET).load(Ordering::Acquire);
        let pos = self.position;
        if tail <= pos || self.commit_word(pos & self.mask).load(Ordering::Acquire) != 0 {
            self.stall_since = 0;
            return;
        }
        let now = sys::monotonic_ns();
        if self.stall_since == 0 || self.stall_position != pos {
            self.stall_since = now;
            self.stall_position = pos;
            return;
        }
        if now - self.stall_since < self.log.desc.unblock_timeout_ns || self.log.desc.publisher.is_alive() {
            return;
        }
        let off = pos & self.mask;
        let mtu = align_frame(self.log.desc.mtu) as u64;
        let len = (tail - pos).min(self.capacity - off).min(mtu);
        if len % FRAME_ALIGNMENT as u64 != 0 {
            self.fail(pos, "publisher tail misaligned");
            return;
        }
        let word = commit_word(len as u32, 0, FrameType::Pad as u16);
        if self.commit_word(off).compare_exchange(0, word, Ordering::SeqCst, Ordering::Relaxed).is_ok() {
            self.counters.add(sc::UNBLOCKED, 1);
            if self.log.u32_at(WAITERS_OFFSET).load(Ordering::SeqCst) != 0 {
                sys::futex_wake(self.futex_word(off));
            }
        }
        self.stall_since = 0;
    }

    /// Counts an idle poll; every 1024th (or the first after a park) pads
    /// out a dead publisher's stuck claim and reports a gone publisher.
    #[inline]
    fn on_idle_poll<F: FnMut(Event<'_>)>(&mut self, handler: &mut F) {
        self.idle_polls = self.idle_polls.wrapping_add(1);
        if self.idle_polls % 1024 == 0 || self.liveness.checked_at == 0 {
            self.check_stall();
            if let Some(gone) = self.check_gone() {
                handler(gone);
            }
        }
    }

    /// The `PublisherGone` event, once, when this idle reader's publisher has
    /// died or (with a publisher timeout) fallen silent and nothing more is
    /// claimed past this reader's position. At most one /proc read per
    /// [`GONE_CHECK_NS`]; never once the stream was closed normally.
    #[cold]
    fn check_gone(&mut self) -> Option<Event<'static>> {
        let now = sys::monotonic_ns();
        let l = &mut self.liveness;
        if l.checked_at != 0 && now.saturating_sub(l.checked_at) < GONE_CHECK_NS {
            return None;
        }
        l.checked_at = now;
        if l.reported {
            return None;
        }
        if l.position != self.position {
            (l.position, l.moved_at) = (self.position, now);
        }
        // A closed stream ended normally; a claim past us is still to come
        // (or to be padded out by `check_stall` once its dead owner is seen).
        if self.log.u64_at(CLOSED_OFFSET).load(Ordering::Acquire) != 0
            || self.log.u64_at(TAIL_OFFSET).load(Ordering::Acquire) > self.position
        {
            return None;
        }
        let reason = if !self.log.desc.publisher.is_alive() {
            GoneReason::Died { pid: self.log.desc.publisher.pid }
        } else {
            let timeout = self.publisher_timeout_ns?;
            let heartbeat = self.log.u64_at(PUB_HEARTBEAT_OFFSET).load(Ordering::Relaxed);
            let silent = now.saturating_sub(heartbeat.max(l.moved_at));
            if silent <= timeout {
                return None;
            }
            GoneReason::Silent { for_ms: silent / 1_000_000 }
        };
        l.reported = true;
        self.counters.add(sc::PUBLISHERS_GONE, 1);
        Some(Event::PublisherGone { session_id: self.log.desc.session_id, position: self.position, reason })
    }

    /// Whether [`Event::PublisherGone`] was delivered: the publisher died or
    /// fell silent, and nothing more will come from it.
    pub fn is_publisher_gone(&self) -> bool {
        self.liveness.reported
    }

    /// Sleeps until a frame is committed at this subscriber's position, the
    /// stream is closed, or `timeout` passes. Costs no CPU while asleep.
    pub fn park(&mut self, timeout: Duration) {
        let off = self.position & self.mask;
        let waiters = self.log.u32_at(WAITERS_OFFSET);
        let parked = self.log.u32_at(self.slot + SLOT_PARKED);
        parked.store(1, Ordering::Relaxed);
        waiters.fetch_add(1, order::PARK_ADD_WAITER);
        let mut timeout = timeout;
        // The publisher does not fence after its commit store: force a
        // barrier on it so that either it sees `waiters` or we see its commit.
        if self.log.desc.flags & FLAG_ASYMMETRIC_FENCE != 0 && !sys::membarrier_global() {
            timeout = timeout.min(Duration::from_millis(1)); // cannot happen if it registered; bound it anyway
        }
        let evicted =
            self.lossy && self.log.u64_at(self.slot + SLOT_POSITION).load(order::PARK_RECHECK) != self.position;
        if self.commit_word(off).load(order::PARK_RECHECK) == 0
            && self.log.u64_at(CLOSED_OFFSET).load(order::PARK_RECHECK) == 0
            && !evicted
        {
            sys::futex_wait(self.futex_word(off), 0, timeout);
        }
        // The publisher may have reaped our slot's flag if it thought us dead.
        if parked.swap(0, Ordering::AcqRel) != 0 {
            waiters.fetch_sub(1, Ordering::SeqCst);
        }
        if self.commit_word(off).load(Ordering::Acquire) == 0 {
            self.check_stall();
            // A parked reader polls rarely: look at the publisher on the next one.
            if sys::monotonic_ns().saturating_sub(self.liveness.checked_at) >= GONE_CHECK_NS {
                self.liveness.checked_at = 0;
            }
        }
    }
}

/// Checks what the DATA accessors rely on beyond the commit word (which
/// already gave version, type and length), once.
#[inline]
fn check_data(bytes: &[u8], pos: u64) -> Result<DataFrame<&[u8]>, &'static str> {
    let frame = DataFrame::new_unchecked(bytes);
    let topic_len = frame.topic_length();
    if topic_len > MAX_TOPIC_LENGTH || data::HEADER_LEN + topic_len > bytes.len() {
        return Err("topic runs past frame end");
    }
    if frame.position() != pos {
        return Err("frame position does not match its place in the log");
    }
    if topic_len > 0 && DataFrame::new_checked(bytes).is_err() {
        return Err("malformed DATA frame");
    }
    Ok(frame)
}

impl Drop for LogReader {
    fn drop(&mut self) {
        self.log.u32_at(self.slot + SLOT_STATE).store(SLOT_FREE, Ordering::Release);
    }
}
