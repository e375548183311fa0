//! The sending side: retention ring, send window, retransmission, heartbeats.

use crate::auth::{self, AuthKey, ReplayWindow, Sealed};
use crate::bitmap::Bitmap;
use crate::invalid::{Invalid, InvalidCounts};
use crate::{frames, FlowControl, Nanos, MAX_MTU};
use std::collections::VecDeque;
use std::net::SocketAddrV4;
use tickwire_wire::{
    align_frame, flags, DataRepr, Fragment, Fragmenter, FrameType, HeartbeatRepr, NakFrame, OfferError, SetupRepr,
    StatusFrame, FRAME_ALIGNMENT,
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
    /// A receiver silent this long no longer counts for flow control
    /// ([`ReceiverChange::TimedOut`]).
    pub receiver_timeout: Nanos,
    /// A multicast group: NAKs are taken only from receivers that have
    /// sent STATUS, each from the address it first sent from.
    pub multicast: bool,
    /// The shared key: every datagram carries its MAC and every one
    /// received must (see [`crate::auth`]). `None`: no authentication.
    pub auth: Option<AuthKey>,
    /// The first sequence number of this sender's keyed datagrams.
    pub first_sequence: u64,
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
            multicast: false,
            auth: None,
            first_sequence: 1,
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
    /// Datagrams or frames dropped as invalid (the sum of `invalid_by`).
    pub invalid: u64,
    /// The same, by reason.
    pub invalid_by: InvalidCounts,
    /// Frames for another session or stream.
    pub other_session: u64,
    /// Control datagrams the caller dropped unparsed because of where they
    /// came from (unicast: anywhere but the destination, through
    /// [`Sender::note_foreign`]), and frames naming a receiver from
    /// another address than the one it joined from, or (multicast) NAKs
    /// from an address that is no receiver's.
    pub frames_foreign: u64,
    /// Receivers that started counting for flow control.
    pub receivers_joined: u64,
    /// Receivers dropped from flow control after `receiver_timeout` of
    /// silence.
    pub receivers_timed_out: u64,
}

/// A receiver starting or stopping to count for flow control, from
/// [`Sender::poll_receiver_change`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiverChange {
    /// Its first STATUS arrived.
    Joined {
        /// The receiver's id.
        receiver_id: u32,
        /// Where it sends from.
        from: SocketAddrV4,
    },
    /// It sent no STATUS for `receiver_timeout`: it no longer holds the
    /// others back.
    TimedOut {
        /// The receiver's id.
        receiver_id: u32,
        /// Where it sent from.
        from: SocketAddrV4,
        /// How far it had consumed.
        consumption: u64,
    },
}

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
    last_send: Nanos,
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

/// The datagram room for frames: the MTU less the AUTH frame on a keyed
/// channel.
fn payload_mtu(cfg: &SenderConfig) -> usize {
    cfg.mtu - if cfg.auth.is_some() { tickwire_wire::auth::LEN } else { 0 }
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
    if cfg.auth.is_some() && cfg.mtu < 192 {
        return Err("mtu must be at least 192 with a key (64 bytes of each datagram are its AUTH frame)");
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
            fragmenter: Fragmenter::new(payload_mtu(&cfg)),
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
        self.last_send = now;
        Some(n)
    }

    /// The next change in the receivers counted for flow control, if any
    /// (at most 64 are kept; older ones are dropped).
    pub fn poll_receiver_change(&mut self) -> Option<ReceiverChange> {
        self.changes.pop_front()
    }

    fn change(&mut self, c: ReceiverChange) {
        if self.changes.len() >= MAX_CHANGES {
            self.changes.pop_front();
        }
        self.changes.push_back(c);
    }

    fn reject(&mut self, why: Invalid) {
        self.stats.invalid += 1;
        self.stats.invalid_by.add(why);
    }

    fn next_datagram(&mut self, now: Nanos, buf: &mut [u8]) -> Option<usize> {
        if self.setup_now || (self.peers.is_empty() && !self.closed && now >= self.next_setup) {
            // Keyed: each SETUP answers one request, echoing its challenge.
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

    /// Expires lingering retransmissions and silent receivers (each
    /// reported by [`Sender::poll_receiver_change`]).
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.retransmits.retain(|r| r.linger_until.map_or(true, |l| l > now));
        let timeout = self.cfg.receiver_timeout;
        let mut i = 0;
        while i < self.peers.len() {
            let p = self.peers[i];
            if now < p.last_seen.saturating_add(timeout) {
                i += 1;
                continue;
            }
            self.peers.swap_remove(i);
            self.replay.retain(|r| r.id != p.id);
            self.stats.receivers_timed_out += 1;
            self.change(ReceiverChange::TimedOut { receiver_id: p.id, from: p.from, consumption: p.consumption });
            self.recompute_limit();
        }
    }

    /// Processes a control datagram (STATUS, NAK) from a receiver at `from`.
    /// What is invalid is counted by reason and changes nothing.
    pub fn handle_datagram(&mut self, now: Nanos, from: SocketAddrV4, datagram: &[u8]) {
        let (bytes, sealed) = match &self.cfg.auth {
            None if crate::ends_with_auth(datagram) => return self.reject(Invalid::Unauthenticated),
            None => (datagram, None),
            Some(key) => match auth::open(key, datagram) {
                Ok((b, s)) => (b, Some(s)),
                Err(auth::Unsealed::Unauthenticated) => return self.reject(Invalid::Unauthenticated),
            },
        };
        if let Some(s) = &sealed {
            if !self.ours(s.session_id, s.stream_id) {
                // Another sender's datagram on a shared group, or ours
                // looped back: nothing to act on.
                if s.from_receiver {
                    self.stats.other_session += 1;
                }
                return;
            }
            if !s.from_receiver {
                return; // Our own datagram looped back on a multicast group.
            }
            if let Some(r) = self.replay.iter_mut().find(|r| r.id == s.origin) {
                if !r.window.accept(s.sequence) {
                    return self.reject(Invalid::Replayed);
                }
            }
        }
        for frame in frames(bytes) {
            let Ok((ty, bytes)) = frame else { return self.reject(Invalid::Malformed) };
            if sealed.is_some_and(|s| !crate::same_session(bytes, s.session_id, s.stream_id)) {
                return self.reject(Invalid::Malformed);
            }
            match ty {
                FrameType::Status => match StatusFrame::new_checked(bytes) {
                    Ok(f) if sealed.is_some_and(|s| s.origin != f.receiver_id()) => self.reject(Invalid::Malformed),
                    Ok(f) if self.ours(f.session_id(), f.stream_id()) => self.handle_status(now, from, sealed, &f),
                    Ok(_) => self.stats.other_session += 1,
                    Err(_) => self.reject(Invalid::Malformed),
                },
                FrameType::Nak => match NakFrame::new_checked(bytes) {
                    Ok(f) if sealed.is_some_and(|s| s.origin != f.receiver_id()) => self.reject(Invalid::Malformed),
                    Ok(f) if self.ours(f.session_id(), f.stream_id()) => self.handle_nak(from, &f),
                    Ok(_) => self.stats.other_session += 1,
                    Err(_) => self.reject(Invalid::Malformed),
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

    fn handle_status(&mut self, now: Nanos, from: SocketAddrV4, sealed: Option<Sealed>, f: &StatusFrame<&[u8]>) {
        self.stats.status_received += 1;
        let (fl, consumption, window, id) = (f.flags(), f.consumption_position(), f.receiver_window(), f.receiver_id());
        if fl & flags::SEND_SETUP != 0 {
            if let Some(c) = sealed.map(|s| s.challenge).filter(|&c| c != 0) {
                if !self.challenges.contains(&c) {
                    if self.challenges.len() >= MAX_CHALLENGES {
                        self.challenges.pop_front();
                    }
                    self.challenges.push_back(c);
                }
            }
            self.setup_now = true;
            return;
        }
        if consumption > self.sent_pos || u64::from(window) > MAX_WINDOW {
            return self.reject(Invalid::BadStatus);
        }
        if consumption % FRAME_ALIGNMENT as u64 != 0 {
            return self.reject(Invalid::Misaligned);
        }
        let limit = consumption + u64::from(window);
        let end_delivered = fl & flags::END_DELIVERED != 0;
        if let Some(p) = self.peers.iter_mut().find(|p| p.id == id) {
            if p.from != from && sealed.is_none() {
                // Another host using a receiver's id: not that receiver.
                self.stats.frames_foreign += 1;
                return;
            }
            // Keyed, the MAC says who it is: follow its address.
            p.from = from;
            p.limit = p.limit.max(limit);
            p.consumption = p.consumption.max(consumption);
            p.last_seen = now;
            p.end_delivered |= end_delivered;
        } else if self.peers.len() < MAX_RECEIVERS {
            self.peers.push(Peer { id, from, limit, consumption, last_seen: now, end_delivered });
            if let Some(s) = sealed {
                self.replay.push(PeerReplay { id, window: ReplayWindow::after(s.sequence) });
            }
            self.ever_connected = true;
            self.stats.receivers_joined += 1;
            self.change(ReceiverChange::Joined { receiver_id: id, from });
        } else {
            return self.reject(Invalid::TooManyReceivers);
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

    fn handle_nak(&mut self, from: SocketAddrV4, f: &NakFrame<&[u8]>) {
        let (position, length) = (f.position(), f.length());
        // Multicast: only a receiver that joined (sent STATUS) from this
        // address draws retransmissions.
        let joined = self.peers.iter().any(|p| p.id == f.receiver_id() && (p.from == from || self.cfg.auth.is_some()));
        if self.cfg.multicast && !joined {
            self.stats.frames_foreign += 1;
            return;
        }
        self.stats.naks_received += 1;
        let to = position.saturating_add(u64::from(length)).min(self.sent_pos);
        if position >= self.sent_pos {
            return self.reject(Invalid::BadNak);
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
