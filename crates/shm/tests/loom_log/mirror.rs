//! The model's mirror of the product: the shared file, the publisher's and the reader's
//! steps, one for one with `LogAppender` and `LogReader`, and the protocol
//! whose orderings and steps a mutant may change. The scenarios and the
//! mutants that drive it are in `loom_log.rs`, whose doc says what the
//! model leaves out.

use loom::cell::UnsafeCell;
use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use tickwire_shm::log::layout::{commit_word, READING};
use tickwire_shm::log::order;

/// Ring slots (frames) in the model.
pub(super) const CAPACITY: u64 = 2;
pub(super) const SLOT_FREE: u32 = 0;
pub(super) const SLOT_ACTIVE: u32 = 1;
/// The commit word of every DATA frame in the model (a 64-byte frame).
pub(super) const DATA_WORD: u64 = commit_word(64, 0, tickwire_wire::FrameType::Data as u16);
/// What the publisher's lock word holds while it rescans.
pub(super) const PUBLISHER_LOCK: u64 = 1;

/// The payload of the message at stream position `p`.
pub(super) fn payload_of(p: u64) -> u64 {
    1000 + p
}

/// The protocol's orderings and the steps a mutant may change.
#[derive(Debug, Clone, Copy)]
pub(super) struct Protocol {
    pub(super) clear_commit: Ordering,
    pub(super) publish_tail: Ordering,
    pub(super) commit: Ordering,
    pub(super) acquire_commit: Ordering,
    pub(super) store_position: Ordering,
    pub(super) scan_state: Ordering,
    pub(super) scan_position: Ordering,
    pub(super) scan_mode: Ordering,
    pub(super) evict_success: Ordering,
    pub(super) evict_failure: Ordering,
    pub(super) enter_lossy_success: Ordering,
    pub(super) enter_lossy_failure: Ordering,
    pub(super) lock_acquire: Ordering,
    pub(super) lock_release: Ordering,
    pub(super) join_tail: Ordering,
    pub(super) join_slot_fields: Ordering,
    pub(super) join_activate: Ordering,
    pub(super) wake_fence: Ordering,
    pub(super) wake_check_waiters: Ordering,
    pub(super) park_add_waiter: Ordering,
    pub(super) park_recheck: Ordering,
    /// `begin_frame` zeroes the next frame's commit word before `tail` and
    /// the commit (false: a mutant that zeroes it after the commit).
    pub(super) clear_next_before_commit: bool,
    /// `scan_limit` moves a lossy subscriber only with READING clear.
    pub(super) evict_only_outside_poll: bool,
    /// `park` calls `membarrier_global()` (the log has
    /// `FLAG_ASYMMETRIC_FENCE`).
    pub(super) membarrier: bool,
}

/// The product's protocol: every ordering from `tickwire_shm::log::order`.
pub(super) const PRODUCT: Protocol = Protocol {
    clear_commit: order::CLEAR_COMMIT,
    publish_tail: order::PUBLISH_TAIL,
    commit: order::COMMIT,
    acquire_commit: order::ACQUIRE_COMMIT,
    store_position: order::STORE_POSITION,
    scan_state: order::SCAN_STATE,
    scan_position: order::SCAN_POSITION,
    scan_mode: order::SCAN_MODE,
    evict_success: order::EVICT_SUCCESS,
    evict_failure: order::EVICT_FAILURE,
    enter_lossy_success: order::ENTER_LOSSY_SUCCESS,
    enter_lossy_failure: order::ENTER_LOSSY_FAILURE,
    lock_acquire: order::LOCK_ACQUIRE,
    lock_release: order::LOCK_RELEASE,
    join_tail: order::JOIN_TAIL,
    join_slot_fields: order::JOIN_SLOT_FIELDS,
    join_activate: order::JOIN_ACTIVATE,
    wake_fence: order::WAKE_FENCE,
    wake_check_waiters: order::WAKE_CHECK_WAITERS,
    park_add_waiter: order::PARK_ADD_WAITER,
    park_recheck: order::PARK_RECHECK,
    clear_next_before_commit: true,
    evict_only_outside_poll: true,
    membarrier: true,
};

/// One ring slot: the commit word (the frame's first 8 bytes), the rest of
/// the header (here: its stream position) and the payload.
pub(super) struct Frame {
    pub(super) commit: AtomicU64,
    pub(super) position: UnsafeCell<u64>,
    pub(super) payload: UnsafeCell<u64>,
}

/// A subscriber slot.
pub(super) struct Sub {
    pub(super) state: AtomicU32,
    pub(super) lossy: AtomicU32,
    pub(super) position: AtomicU64,
}

/// The shared file: publisher line (`tail`), coordination line (`waiters`,
/// lock), subscriber slots, ring.
pub(super) struct Log {
    pub(super) tail: AtomicU64,
    pub(super) waiters: AtomicU32,
    pub(super) lock: AtomicU64,
    pub(super) subs: Vec<Sub>,
    pub(super) ring: [Frame; CAPACITY as usize],
}

// SAFETY: the frame cells are shared between the model's threads on purpose:
// loom checks every access to them against the model's happens-before.
unsafe impl Sync for Log {}

impl Log {
    /// A log with `slots` subscriber slots.
    pub(super) fn new(slots: usize) -> Arc<Self> {
        let frame = || Frame { commit: AtomicU64::new(0), position: UnsafeCell::new(0), payload: UnsafeCell::new(0) };
        let sub = || Sub { state: AtomicU32::new(SLOT_FREE), lossy: AtomicU32::new(0), position: AtomicU64::new(0) };
        Arc::new(Self {
            tail: AtomicU64::new(0),
            waiters: AtomicU32::new(0),
            lock: AtomicU64::new(0),
            subs: (0..slots).map(|_| sub()).collect(),
            ring: [frame(), frame()],
        })
    }
    pub(super) fn frame(&self, position: u64) -> &Frame {
        &self.ring[(position % CAPACITY) as usize]
    }
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refused {
    BackPressured,
    NotConnected,
}

/// `LogAppender`, step for step.
pub(super) struct Publisher {
    pub(super) log: Arc<Log>,
    pub(super) p: Protocol,
    pub(super) position: u64,
    pub(super) limit: u64,
    /// A subscriber is parking: its membarrier forces a full barrier on this
    /// thread (see the module doc). Only the park model sets it.
    pub(super) forced_barrier: bool,
}

impl Publisher {
    pub(super) fn new(log: &Arc<Log>, p: Protocol) -> Self {
        Self { log: Arc::clone(log), p, position: 0, limit: 0, forced_barrier: false }
    }

    /// `offer`: ensure_room, begin_frame, write_payload, commit (header, then
    /// commit word), wake_if_parked. Returns whether it would wake.
    pub(super) fn offer(&mut self) -> Result<bool, Refused> {
        // ensure_room: the frame plus the next frame's header.
        let end = self.position + 2;
        if end > self.limit {
            self.scan_limit(end)?;
        }
        let (frame, position) = self.begin_frame();
        let log = Arc::clone(&self.log);
        let f = log.frame(frame);
        // SAFETY: a valid pointer to the cell; loom reports this write if it
        // is not ordered after every read of the frame it replaces.
        f.payload.with_mut(|x| unsafe { *x = payload_of(position) });
        // commit: write_header, then the commit word.
        // SAFETY: as above.
        f.position.with_mut(|x| unsafe { *x = position });
        f.commit.store(DATA_WORD, self.p.commit);
        if !self.p.clear_next_before_commit {
            log.frame(position + 1).commit.store(0, self.p.clear_commit);
        }
        Ok(self.wake_if_parked())
    }

    /// `begin_frame`: clear the next frame's commit word, publish `tail`.
    /// (The product clears ahead in whole lines, up to the limit, and tops
    /// the cleared range up after a commit; with two slots, everything up to
    /// the limit is the next frame's word, and a clear after the commit can
    /// only reach words no reader reaches before a later commit.)
    /// Returns the frame's ring position and stream position.
    pub(super) fn begin_frame(&mut self) -> (u64, u64) {
        let start = self.position;
        let next = start + 1;
        if self.p.clear_next_before_commit {
            self.log.frame(next).commit.store(0, self.p.clear_commit);
        }
        self.log.tail.store(next, self.p.publish_tail);
        self.position = next;
        (start, start)
    }

    /// `wake_if_parked`: the barrier, then the `waiters` check.
    pub(super) fn wake_if_parked(&self) -> bool {
        if self.forced_barrier && self.p.membarrier {
            fence(self.p.wake_fence);
        }
        self.log.waiters.load(self.p.wake_check_waiters) != 0
    }

    /// `scan_limit`: under the lock, the minimum subscriber position; lossy
    /// subscribers holding the publisher back are moved to its position.
    pub(super) fn scan_limit(&mut self, end: u64) -> Result<(), Refused> {
        let log = Arc::clone(&self.log);
        if log.lock.compare_exchange(0, PUBLISHER_LOCK, self.p.lock_acquire, Ordering::Relaxed).is_err() {
            return Err(Refused::BackPressured);
        }
        let mut min = u64::MAX;
        for sub in &log.subs {
            if sub.state.load(self.p.scan_state) != SLOT_ACTIVE {
                continue;
            }
            let mut word = sub.position.load(self.p.scan_position);
            let blocking = (word & !READING) + CAPACITY < end;
            let lossy = sub.lossy.load(self.p.scan_mode) == 1;
            if blocking && lossy && (word & READING == 0 || !self.p.evict_only_outside_poll) {
                if sub
                    .position
                    .compare_exchange(word, self.position, self.p.evict_success, self.p.evict_failure)
                    .is_ok()
                {
                    word = self.position;
                } else {
                    word = sub.position.load(self.p.scan_position);
                }
            }
            min = min.min(word & !READING);
        }
        log.lock.store(0, self.p.lock_release);
        if min == u64::MAX {
            self.limit = self.position;
            return Err(Refused::NotConnected);
        }
        self.limit = min + CAPACITY;
        if end > self.limit {
            return Err(Refused::BackPressured);
        }
        Ok(())
    }

    /// Offers the next message, retrying a refused offer up to `attempts`
    /// times in all. Returns whether it was published.
    pub(super) fn offer_retrying(&mut self, attempts: &mut u32) -> bool {
        while *attempts > 0 {
            *attempts -= 1;
            if self.offer().is_ok() {
                return true;
            }
            thread::yield_now();
        }
        false
    }
}

/// `LogReader`, step for step. Records what its handler would be given.
pub(super) struct Reader {
    pub(super) log: Arc<Log>,
    pub(super) p: Protocol,
    pub(super) slot: usize,
    pub(super) position: u64,
    pub(super) lossy: bool,
    /// Stream positions of the messages delivered.
    pub(super) delivered: Vec<u64>,
    /// `Lost { from, to }` ranges.
    pub(super) lost: Vec<(u64, u64)>,
}

impl Reader {
    /// `LogReader::open`: under the lock, start at `tail`, fill the slot,
    /// activate it.
    pub(super) fn join(log: &Arc<Log>, p: Protocol, slot: usize, lossy: bool) -> Self {
        while log.lock.compare_exchange(0, 2 + slot as u64, p.lock_acquire, Ordering::Relaxed).is_err() {
            thread::yield_now();
        }
        let sub = &log.subs[slot];
        assert_eq!(sub.state.load(Ordering::Acquire), SLOT_FREE);
        let tail = log.tail.load(p.join_tail);
        sub.lossy.store(u32::from(lossy), p.join_slot_fields);
        sub.position.store(tail, p.join_slot_fields);
        sub.state.store(SLOT_ACTIVE, p.join_activate);
        log.lock.store(0, p.lock_release);
        Self { log: Arc::clone(log), p, slot, position: tail, lossy, delivered: Vec::new(), lost: Vec::new() }
    }

    /// `poll`: up to `limit` frames, then publish the position.
    pub(super) fn poll(&mut self, limit: usize) -> usize {
        let log = Arc::clone(&self.log);
        if !self.lossy && log.frame(self.position).commit.load(self.p.acquire_commit) == 0 {
            return 0;
        }
        let mut pos = self.position;
        if self.lossy {
            pos = self.enter_lossy();
        }
        let mut frames = 0;
        while frames < limit {
            let f = log.frame(pos);
            let word = f.commit.load(self.p.acquire_commit);
            if word == 0 {
                break;
            }
            assert_eq!(word, DATA_WORD);
            // check_data: the header's position.
            // SAFETY: a valid pointer to the cell; loom reports this read if
            // it is not ordered after the write of the frame it reads.
            let header = f.position.with(|x| unsafe { *x });
            assert_eq!(
                header, pos,
                "stale frame: the reader at stream position {pos} took the commit word of the frame of position \
                 {header} (another lap) for a new one; the product would stop with PollError::Corrupt"
            );
            // SAFETY: as above.
            let payload = f.payload.with(|x| unsafe { *x });
            assert_eq!(payload, payload_of(pos), "torn frame at {pos}");
            self.delivered.push(pos);
            pos += 1;
            frames += 1;
        }
        self.position = pos;
        if frames > 0 || self.lossy {
            // Also clears READING for a lossy reader.
            log.subs[self.slot].position.store(pos, self.p.store_position);
        }
        frames
    }

    /// `enter_lossy`: set READING, first reporting where the publisher moved
    /// this reader.
    pub(super) fn enter_lossy(&mut self) -> u64 {
        let sub = &self.log.subs[self.slot];
        let mut pos = self.position;
        loop {
            match sub.position.compare_exchange(
                pos,
                pos | READING,
                self.p.enter_lossy_success,
                self.p.enter_lossy_failure,
            ) {
                Ok(_) => return pos,
                Err(cur) => {
                    let to = cur & !READING;
                    assert!(to > pos, "moved backwards: {pos} -> {to}");
                    self.lost.push((pos, to));
                    pos = to;
                    self.position = to;
                }
            }
        }
    }

    /// `park` up to the futex call: returns whether it would sleep.
    pub(super) fn park(&mut self) -> bool {
        let log = &self.log;
        log.waiters.fetch_add(1, self.p.park_add_waiter);
        if self.p.membarrier {
            // membarrier_global(): the barrier on the calling thread (the one
            // on the publisher is in `Publisher::wake_if_parked`).
            fence(Ordering::SeqCst);
        }
        let evicted = self.lossy && log.subs[self.slot].position.load(self.p.park_recheck) != self.position;
        log.frame(self.position).commit.load(self.p.park_recheck) == 0 && !evicted
    }

    /// Every stream position from `start` to the reader's position was
    /// delivered or reported lost, exactly once and in order.
    pub(super) fn check_accounting(&self, start: u64) {
        let mut next = start;
        let mut lost = self.lost.iter().peekable();
        let mut delivered = self.delivered.iter().peekable();
        while next < self.position {
            if let Some(&&(from, to)) = lost.peek() {
                if from == next {
                    next = to;
                    lost.next();
                    continue;
                }
            }
            assert_eq!(delivered.next(), Some(&next), "delivered {:?}, lost {:?}", self.delivered, self.lost);
            next += 1;
        }
        assert!(lost.next().is_none() && delivered.next().is_none(), "{:?} {:?}", self.delivered, self.lost);
    }
}
