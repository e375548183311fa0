//! The sending side: retention ring, send window, retransmission, heartbeats.
//!
//! * [`config`]: settings, counters, receiver changes.
//! * this file: offers, the retention ring and what goes out (`poll_*`).
//! * [`control`]: what comes back (STATUS, NAK), flow control and the
//!   receivers' timeouts (`handle_*`).

mod config;
mod control;

pub(crate) use config::check_sender;
use config::payload_mtu;
pub use config::{ReceiverChange, SenderConfig, SenderStats};

use crate::auth::{self, ReplayWindow, Sealed};
use crate::bitmap::Bitmap;
use crate::Nanos;
use std::collections::VecDeque;
use std::net::SocketAddrV4;
use tickwire_wire::{
    align_frame, flags, DataRepr, Fragment, Fragmenter, HeartbeatRepr, OfferError, SetupRepr, FRAME_ALIGNMENT,
};

/// Receivers tracked for flow control; STATUS from more are counted and ignored.
const MAX_RECEIVERS: usize = 256;
/// Retransmissions active or lingering at once; NAKs beyond are dropped (the
/// receiver retries).
const MAX_RETRANSMITS: usize = 64;
/// Keyed: SETUP requests' challenges waiting for an answer.
const MAX_CHALLENGES: usize = 16;
/// Receiver changes kept until polled.
const MAX_CHANGES: usize = 64;
/// The largest window a receiver may grant (the receiver's own limit).
const MAX_WINDOW: u64 = 1 << 30;

#[derive(Debug, Clone, Copy)]
struct Peer {
    id: u32,
    from: SocketAddrV4,
    limit: u64,
    consumption: u64,
    last_seen: Nanos,
    /// It said it delivered the end of the stream.
    end_delivered: bool,
}

/// A receiver's keyed datagram sequences (kept apart from `Peer`, which is
/// `Copy`).
#[derive(Debug)]
struct PeerReplay {
    id: u32,
    window: ReplayWindow,
}

#[derive(Debug, Clone, Copy)]
struct Retransmit {
    from: u64,
    to: u64,
    cursor: u64,
    linger_until: Option<Nanos>,
}

/// The sending half of a session. See the crate docs.
#[derive(Debug)]
pub struct Sender {
    cfg: SenderConfig,
    fragmenter: Fragmenter,
    ring: Vec<u8>,
    mask: u64,
    starts: Bitmap,
    pub_pos: u64,
    sent_pos: u64,
    retained_from: u64,
    peers: Vec<Peer>,
    ever_connected: bool,
    limit: u64,
    retransmits: Vec<Retransmit>,
    /// Last DATA or HEARTBEAT sent (not SETUP): heartbeats follow idleness.
    last_send: Nanos,
    /// The datagram being written is a SETUP.
    setup_sent: bool,
    next_setup: Nanos,
    setup_now: bool,
    heartbeat_now: bool,
    closed: bool,
    /// Keyed: challenges of SETUP requests to echo, oldest first.
    challenges: VecDeque<u64>,
    /// Keyed: the challenge the datagram being written echoes.
    echo: u64,
    tx_sequence: u64,
    replay: Vec<PeerReplay>,
    changes: VecDeque<ReceiverChange>,
    stats: SenderStats,
}

impl Sender {
    /// A sender at stream position 0.
    ///
    /// # Errors
    /// A description of the first unusable setting.
    pub fn new(cfg: SenderConfig, now: Nanos) -> Result<Self, &'static str> {
        check_sender(&cfg)?;
        Ok(Self {
            fragmenter: Fragmenter::new(payload_mtu(&cfg)),
            ring: crate::touched_ring(cfg.retention + cfg.mtu),
            mask: cfg.retention as u64 - 1,
            starts: Bitmap::new(cfg.retention / FRAME_ALIGNMENT),
            pub_pos: 0,
            sent_pos: 0,
            retained_from: 0,
            peers: Vec::new(),
            ever_connected: false,
            limit: 0,
            retransmits: Vec::new(),
            last_send: now,
            setup_sent: false,
            next_setup: now,
            setup_now: true,
            heartbeat_now: false,
            closed: false,
            challenges: VecDeque::new(),
            echo: 0,
            tx_sequence: cfg.first_sequence,
            replay: Vec::new(),
            changes: VecDeque::new(),
            stats: SenderStats::default(),
            cfg,
        })
    }

    /// The settings.
    pub fn config(&self) -> &SenderConfig {
        &self.cfg
    }
    /// Counters.
    pub fn stats(&self) -> &SenderStats {
        &self.stats
    }
    /// End of the last accepted message.
    pub fn position(&self) -> u64 {
        self.pub_pos
    }
    /// Everything accepted has been sent at least once.
    pub fn is_sent(&self) -> bool {
        self.sent_pos == self.pub_pos
    }
    /// Oldest position that can still be retransmitted.
    pub fn retained_from(&self) -> u64 {
        self.retained_from
    }
    /// At least one receiver grants a window.
    pub fn is_connected(&self) -> bool {
        !self.peers.is_empty()
    }
    /// There is at least one receiver, and every one has consumed
    /// everything offered; once closed, every one has also said it
    /// delivered the end. False with no receiver: nothing was delivered.
    pub fn is_drained(&self) -> bool {
        !self.peers.is_empty() && self.acknowledged() == self.peers.len()
    }
    /// Receivers that have consumed everything offered (and, once closed,
    /// said they delivered the end).
    pub fn acknowledged(&self) -> usize {
        self.peers.iter().filter(|p| p.consumption >= self.pub_pos && (!self.closed || p.end_delivered)).count()
    }
    /// A receiver has answered at some point in this session's life.
    pub fn ever_connected(&self) -> bool {
        self.ever_connected
    }
    /// Counts a control datagram the caller dropped because of where it
    /// came from.
    pub fn note_foreign(&mut self) {
        self.stats.frames_foreign += 1;
    }
    /// Receivers currently counted for flow control.
    pub fn receivers(&self) -> usize {
        self.peers.len()
    }

    /// Stops accepting messages; the rest is sent, then heartbeats carry
    /// END_OF_STREAM. Keep driving the sender until `is_drained` to serve NAKs.
    pub fn close(&mut self) {
        self.closed = true;
        self.heartbeat_now = true;
    }

    /// Appends a message (fragmented to the MTU) and returns the stream
    /// position after it. The bytes go out on the next `poll_transmit`.
    ///
    /// # Errors
    /// [`OfferError::Closed`], [`OfferError::MaxMessageExceeded`],
    /// [`OfferError::TopicTooLong`], [`OfferError::NotConnected`] before a
    /// receiver answers, [`OfferError::BackPressured`] at the flow-control
    /// limit; nothing is appended.
    pub fn offer(&mut self, topic: &str, payload: &[u8]) -> Result<u64, OfferError> {
        let first_room = self.reserve(topic, payload.len())?;
        for frag in self.fragmenter.fragments(topic, first_room, payload) {
            self.append(frag);
        }
        self.stats.messages += 1;
        self.stats.bytes += payload.len() as u64;
        Ok(self.pub_pos)
    }

    /// Checks that a message of `len` bytes with `topic` may be appended now
    /// and evicts what the retention must give up for it. Returns the
    /// payload room of the message's first frame.
    fn reserve(&mut self, topic: &str, len: usize) -> Result<usize, OfferError> {
        if self.closed {
            return Err(OfferError::Closed);
        }
        if len > self.cfg.max_message {
            return Err(OfferError::MaxMessageExceeded { len, max: self.cfg.max_message });
        }
        let first_room = self.fragmenter.first_room(topic)?;
        if self.peers.is_empty() {
            self.stats.not_connected += 1;
            return Err(OfferError::NotConnected);
        }
        let total = self.fragmenter.stream_len(topic.len(), first_room, len);
        // Never beyond the flow-control limit, and never evicting bytes that
        // have not been sent once.
        if self.pub_pos + total > self.limit.min(self.sent_pos + self.cfg.retention as u64) {
            self.stats.back_pressured += 1;
            return Err(OfferError::BackPressured);
        }
        self.evict(self.pub_pos + total);
        Ok(first_room)
    }

    fn append(&mut self, frag: Fragment<'_>) {
        let repr = DataRepr {
            session_id: self.cfg.session_id,
            stream_id: self.cfg.stream_id,
            position: self.pub_pos,
            flags: frag.flags,
            topic: frag.topic,
            payload: frag.payload,
        };
        let off = (self.pub_pos & self.mask) as usize;
        let alen = align_frame(repr.buffer_len());
        // The ring has `mtu` bytes of slack, so a frame is contiguous.
        let slot = &mut self.ring[off..off + alen];
        let len = repr.emit(slot).unwrap_or(0);
        slot[len..].fill(0);
        self.starts.set(off / FRAME_ALIGNMENT, true);
        self.pub_pos += alen as u64;
    }

    /// Drops the oldest frames until `new_end` fits in the retention.
    fn evict(&mut self, new_end: u64) {
        while new_end - self.retained_from > self.cfg.retention as u64 {
            let off = (self.retained_from & self.mask) as usize;
            self.starts.set(off / FRAME_ALIGNMENT, false);
            self.retained_from += align_frame(self.frame_len(off)) as u64;
        }
    }

    fn frame_len(&self, off: usize) -> usize {
        let b = &self.ring[off..off + 4];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
    }

    /// Copies whole frames from `from` (a frame start), stopping before `to`
    /// or when `buf` is full. Returns (bytes written, next position).
    fn fill(&self, buf: &mut [u8], from: u64, to: u64) -> (usize, u64) {
        let mut pos = from;
        let mut n = 0;
        while pos < to {
            let off = (pos & self.mask) as usize;
            let alen = align_frame(self.frame_len(off));
            // A zero length is never written by `append`; stop rather than
            // spin if the ring ever holds one (seen once under fuzzing with
            // a mid-frame cursor; the cause is not yet found).
            if alen == 0 || n + alen > buf.len() {
                break;
            }
            buf[n..n + alen].copy_from_slice(&self.ring[off..off + alen]);
            n += alen;
            pos += alen as u64;
        }
        (n, pos)
    }

    /// The next frame start at or after `pos`, below `sent_pos`.
    fn next_start(&self, pos: u64) -> Option<u64> {
        let from = pos.max(self.retained_from);
        let span = self.sent_pos.checked_sub(from)? as usize / FRAME_ALIGNMENT;
        let base = (from & self.mask) as usize / FRAME_ALIGNMENT;
        let k = self.starts.find(base, span, true)?;
        Some(from + (k * FRAME_ALIGNMENT) as u64)
    }

    /// Writes the next datagram to send into `buf` (at least `mtu` long) and
    /// returns its length, or `None` if there is nothing to send now.
    /// Order: SETUP, retransmissions, new data, heartbeat.
    pub fn poll_transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Option<usize> {
        let buf = &mut buf[..self.cfg.mtu];
        let room = payload_mtu(&self.cfg);
        self.echo = 0;
        self.setup_sent = false;
        let mut n = self.next_datagram(now, &mut buf[..room])?;
        if let Some(key) = &self.cfg.auth {
            let s = Sealed {
                session_id: self.cfg.session_id,
                from_receiver: false,
                stream_id: self.cfg.stream_id,
                sequence: self.tx_sequence,
                challenge: self.echo,
                origin: self.cfg.session_id,
            };
            self.tx_sequence += 1;
            n = auth::seal(key, buf, n, s)?;
        }
        self.stats.datagrams += 1;
        // A SETUP says nothing to a receiver that has joined: answering
        // SETUP requests must not hold back the heartbeats that tell it
        // where the stream stands.
        if !self.setup_sent {
            self.last_send = now;
        }
        Some(n)
    }

    fn next_datagram(&mut self, now: Nanos, buf: &mut [u8]) -> Option<usize> {
        if self.setup_now || (self.peers.is_empty() && !self.closed && now >= self.next_setup) {
            // Keyed: each SETUP answers one request, echoing its challenge.
            self.setup_sent = true;
            self.echo = self.challenges.pop_front().unwrap_or(0);
            self.setup_now = !self.challenges.is_empty();
            self.next_setup = now + self.cfg.setup_interval;
            self.stats.setups += 1;
            let setup = SetupRepr {
                session_id: self.cfg.session_id,
                stream_id: self.cfg.stream_id,
                initial_position: self.sent_pos,
                mtu: self.cfg.mtu as u32,
                max_message: self.cfg.max_message as u32,
            };
            return setup.emit(buf).ok();
        }
        for i in 0..self.retransmits.len() {
            let r = self.retransmits[i];
            if r.linger_until.is_some() {
                continue;
            }
            let from = if r.cursor < self.retained_from {
                self.heartbeat_now = true;
                self.retained_from
            } else {
                r.cursor
            };
            let (n, next) = self.fill(buf, from, r.to);
            let r = &mut self.retransmits[i];
            r.cursor = next;
            if next >= r.to || n == 0 {
                r.linger_until = Some(now + self.cfg.linger);
            }
            if n > 0 {
                self.stats.retransmits += 1;
                self.stats.retransmitted_bytes += next - from;
                return Some(n);
            }
        }
        if self.sent_pos < self.pub_pos {
            let (n, next) = self.fill(buf, self.sent_pos, self.pub_pos);
            self.sent_pos = next;
            return Some(n);
        }
        let idle = now.saturating_sub(self.last_send) >= self.cfg.heartbeat_interval;
        if self.heartbeat_now || ((self.closed || !self.peers.is_empty()) && idle) {
            self.heartbeat_now = false;
            self.stats.heartbeats += 1;
            let hb = HeartbeatRepr {
                session_id: self.cfg.session_id,
                stream_id: self.cfg.stream_id,
                flags: if self.closed { flags::END_OF_STREAM } else { 0 },
                position: self.sent_pos,
                retained_from: self.retained_from,
            };
            return hb.emit(buf).ok();
        }
        None
    }

    /// The earliest time at which `poll_transmit` or `handle_timeout` may have
    /// something to do: `Some(0)` if something is pending right now, `None`
    /// if nothing will be until new input arrives.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        if self.setup_now || self.heartbeat_now || self.sent_pos < self.pub_pos {
            return Some(0);
        }
        let mut t = Nanos::MAX;
        if self.closed || !self.peers.is_empty() {
            t = self.last_send + self.cfg.heartbeat_interval;
        }
        if self.peers.is_empty() && !self.closed {
            t = t.min(self.next_setup);
        }
        for r in &self.retransmits {
            if let Some(l) = r.linger_until {
                t = t.min(l);
            }
        }
        for p in &self.peers {
            t = t.min(p.last_seen + self.cfg.receiver_timeout);
        }
        (t != Nanos::MAX).then_some(t)
    }
}
