//! The sending side: retention ring, send window, retransmission, heartbeats.

use crate::bitmap::Bitmap;
use crate::{frames, FlowControl, Nanos, MAX_MTU};
use tickwire_wire::{
    align_frame, flags, DataRepr, Fragment, Fragmenter, FrameType, HeartbeatRepr, NakFrame, OfferError, SetupRepr,
    StatusFrame, FRAME_ALIGNMENT,
};

/// Receivers tracked for flow control; STATUS from more are counted and ignored.
const MAX_RECEIVERS: usize = 256;
/// Retransmissions active or lingering at once; NAKs beyond are dropped (the
/// receiver retries).
const MAX_RETRANSMITS: usize = 64;

/// Sender settings. `Default` suits unicast on a LAN or loopback.
#[derive(Debug, Clone, PartialEq)]
pub struct SenderConfig {
    /// Session identifier (new for every sender instance).
    pub session_id: u32,
    /// Stream identifier.
    pub stream_id: u32,
    /// Largest datagram, a multiple of 32 (frames are batched up to it).
    pub mtu: usize,
    /// Bytes of stream kept for retransmission (a power of two, at least
    /// 64 KiB). A gap older than this is reported lost.
    pub retention: usize,
    /// Largest message (at most half the retention).
    pub max_message: usize,
    /// A heartbeat is sent after this long without any datagram.
    pub heartbeat_interval: Nanos,
    /// SETUP is repeated this often until a receiver answers.
    pub setup_interval: Nanos,
    /// After retransmitting a range, NAKs for it are ignored this long.
    pub linger: Nanos,
    /// How receivers' windows combine.
    pub flow_control: FlowControl,
    /// A receiver silent this long no longer counts for flow control.
    pub receiver_timeout: Nanos,
}

impl Default for SenderConfig {
    fn default() -> Self {
        Self {
            session_id: 1,
            stream_id: 1,
            mtu: 1408,
            retention: 16 << 20,
            max_message: 1 << 20,
            heartbeat_interval: 1_000_000,
            setup_interval: 10_000_000,
            linger: 200_000,
            flow_control: FlowControl::Min,
            receiver_timeout: 1_000_000_000,
        }
    }
}

/// What a sender has done, for counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// Messages accepted by `offer`.
    pub messages: u64,
    /// Payload bytes accepted.
    pub bytes: u64,
    /// Datagrams produced (all kinds).
    pub datagrams: u64,
    /// HEARTBEAT frames sent.
    pub heartbeats: u64,
    /// SETUP frames sent.
    pub setups: u64,
    /// NAK frames received for this session.
    pub naks_received: u64,
    /// NAKs ignored because the range was being or had just been retransmitted.
    pub naks_coalesced: u64,
    /// NAKs for bytes no longer retained (answered with a heartbeat).
    pub naks_unrecoverable: u64,
    /// Datagrams retransmitted.
    pub retransmits: u64,
    /// Stream bytes retransmitted.
    pub retransmitted_bytes: u64,
    /// Offers refused with `BackPressured`.
    pub back_pressured: u64,
    /// Offers refused with `NotConnected`.
    pub not_connected: u64,
    /// STATUS frames received.
    pub status_received: u64,
    /// Malformed frames or datagrams received.
    pub invalid: u64,
    /// Frames for another session or stream.
    pub other_session: u64,
    /// Control datagrams the caller dropped unparsed because of where they
    /// came from (unicast: anywhere but the destination), through
    /// [`Sender::note_foreign`].
    pub frames_foreign: u64,
}

#[derive(Debug, Clone, Copy)]
struct Peer {
    id: u32,
    limit: u64,
    consumption: u64,
    last_seen: Nanos,
    /// It said it delivered the end of the stream.
    end_delivered: bool,
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
    last_send: Nanos,
    next_setup: Nanos,
    setup_now: bool,
    heartbeat_now: bool,
    closed: bool,
    stats: SenderStats,
}

/// Why a configuration is unusable.
pub(crate) fn check_sender(cfg: &SenderConfig) -> Result<(), &'static str> {
    if cfg.mtu % FRAME_ALIGNMENT != 0 || cfg.mtu < 128 || cfg.mtu > MAX_MTU {
        return Err("mtu must be a multiple of 32 between 128 and 65504");
    }
    if !cfg.retention.is_power_of_two() || cfg.retention < 64 << 10 || cfg.retention > 1 << 30 {
        return Err("retention must be a power of two between 64 KiB and 1 GiB");
    }
    if cfg.max_message > cfg.retention / 2 {
        return Err("max message must be at most half the retention");
    }
    Ok(())
}

impl Sender {
    /// A sender at stream position 0.
    ///
    /// # Errors
    /// A description of the first unusable setting.
    pub fn new(cfg: SenderConfig, now: Nanos) -> Result<Self, &'static str> {
        check_sender(&cfg)?;
        Ok(Self {
            fragmenter: Fragmenter::new(cfg.mtu),
            ring: vec![0; cfg.retention + cfg.mtu],
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
            next_setup: now,
            setup_now: true,
            heartbeat_now: false,
            closed: false,
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
        let n = self.next_datagram(now, buf)?;
        self.stats.datagrams += 1;
        self.last_send = now;
        Some(n)
    }

    fn next_datagram(&mut self, now: Nanos, buf: &mut [u8]) -> Option<usize> {
        if self.setup_now || (self.peers.is_empty() && !self.closed && now >= self.next_setup) {
            self.setup_now = false;
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

    /// Expires lingering retransmissions and silent receivers.
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.retransmits.retain(|r| r.linger_until.map_or(true, |l| l > now));
        let before = self.peers.len();
        let timeout = self.cfg.receiver_timeout;
        self.peers.retain(|p| now < p.last_seen + timeout);
        if self.peers.len() != before {
            self.recompute_limit();
        }
    }

    /// Processes a control datagram (STATUS, NAK) from a receiver.
    pub fn handle_datagram(&mut self, now: Nanos, datagram: &[u8]) {
        for frame in frames(datagram) {
            let Ok((ty, bytes)) = frame else {
                self.stats.invalid += 1;
                return;
            };
            match ty {
                FrameType::Status => match StatusFrame::new_checked(bytes) {
                    Ok(s) if self.ours(s.session_id(), s.stream_id()) => self.handle_status(
                        now,
                        s.flags(),
                        s.consumption_position(),
                        s.receiver_window(),
                        s.receiver_id(),
                    ),
                    Ok(_) => self.stats.other_session += 1,
                    Err(_) => self.stats.invalid += 1,
                },
                FrameType::Nak => match NakFrame::new_checked(bytes) {
                    Ok(n) if self.ours(n.session_id(), n.stream_id()) => self.handle_nak(n.position(), n.length()),
                    Ok(_) => self.stats.other_session += 1,
                    Err(_) => self.stats.invalid += 1,
                },
                // Our own data looped back on a multicast group, or another
                // sender's: nothing for a sender to do.
                _ => {}
            }
        }
    }

    fn ours(&self, session: u32, stream: u32) -> bool {
        session == self.cfg.session_id && stream == self.cfg.stream_id
    }

    fn handle_status(&mut self, now: Nanos, fl: u8, consumption: u64, window: u32, id: u32) {
        self.stats.status_received += 1;
        if fl & flags::SEND_SETUP != 0 {
            self.setup_now = true;
            return;
        }
        if consumption > self.sent_pos || consumption % FRAME_ALIGNMENT as u64 != 0 {
            self.stats.invalid += 1;
            return;
        }
        let limit = consumption + u64::from(window);
        if let Some(p) = self.peers.iter_mut().find(|p| p.id == id) {
            p.limit = p.limit.max(limit);
            p.consumption = p.consumption.max(consumption);
            p.last_seen = now;
            p.end_delivered |= fl & flags::END_DELIVERED != 0;
        } else if self.peers.len() < MAX_RECEIVERS {
            let end_delivered = fl & flags::END_DELIVERED != 0;
            self.peers.push(Peer { id, limit, consumption, last_seen: now, end_delivered });
            self.ever_connected = true;
        } else {
            self.stats.invalid += 1;
            return;
        }
        self.recompute_limit();
    }

    fn recompute_limit(&mut self) {
        let limits = self.peers.iter().map(|p| p.limit);
        let l = match self.cfg.flow_control {
            FlowControl::Min => limits.min(),
            FlowControl::Max => limits.max(),
        };
        // The limit never moves back: data already accepted stays accepted.
        self.limit = self.limit.max(l.unwrap_or(0));
    }

    fn handle_nak(&mut self, position: u64, length: u32) {
        self.stats.naks_received += 1;
        let to = position.saturating_add(u64::from(length)).min(self.sent_pos);
        if position >= self.sent_pos {
            self.stats.invalid += 1;
            return;
        }
        if position < self.retained_from {
            self.stats.naks_unrecoverable += 1;
            self.heartbeat_now = true;
        }
        let Some(from) = self.next_start(position) else { return };
        if from >= to {
            return;
        }
        if self.retransmits.iter().any(|r| r.from <= from && from < r.to) {
            self.stats.naks_coalesced += 1;
            return;
        }
        if self.retransmits.len() >= MAX_RETRANSMITS {
            self.stats.naks_coalesced += 1;
            return;
        }
        self.retransmits.push(Retransmit { from, to, cursor: from, linger_until: None });
    }
}
