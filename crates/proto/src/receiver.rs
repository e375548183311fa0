//! The receiving side: reorder window, gap scan, NAK timers, loss reports.

use crate::bitmap::Bitmap;
use crate::{frames, NakDelay, Nanos, MAX_MTU};
use tickwire_impair::Rng;
use tickwire_wire::{
    align_frame, flags, DataFrame, DeliveryStats, Event, FrameType, HeartbeatFrame, NakFrame, NakRepr, Reassembler,
    SetupFrame, StatusRepr, FRAME_ALIGNMENT,
};

/// Gaps tracked (and NAKed) at once; later ones wait for these to close.
const MAX_GAPS: usize = 32;
/// A heartbeat or frame further than this past the window is rejected.
const MAX_JUMP: u64 = 1 << 40;
const A: u64 = FRAME_ALIGNMENT as u64;

/// Receiver settings. `Default` suits unicast.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceiverConfig {
    /// Stream to accept.
    pub stream_id: u32,
    /// This receiver's identity in STATUS and NAK frames.
    pub receiver_id: u32,
    /// Reorder window and flow-control grant (power of two, 64 KiB..1 GiB).
    pub window: usize,
    /// Delay before the first NAK of a gap.
    pub nak_delay: NakDelay,
    /// Least delay before NAKing a gap again (the repair was lost). The
    /// receiver stretches it to twice the measured NAK-to-repair time (a
    /// bulk transfer queues repairs behind data) and doubles it per retry.
    pub nak_retry: Nanos,
    /// The retry delay before any repair time has been measured: a bulk
    /// stream can queue a repair behind a full window of data, so the first
    /// guess is conservative, as TCP's initial RTO is.
    pub nak_retry_initial: Nanos,
    /// STATUS is sent at least this often (and whenever a quarter of the
    /// window has been consumed since the last one).
    pub status_interval: Nanos,
    /// A session silent this long may be replaced by a new one.
    pub session_timeout: Nanos,
    /// How often to ask an unknown session for SETUP.
    pub setup_request_interval: Nanos,
    /// Largest message reassembled (bounds memory).
    pub max_message: usize,
    /// Seeds the NAK back-off.
    pub seed: u64,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        Self {
            stream_id: 1,
            receiver_id: 1,
            window: 1 << 20,
            nak_delay: NakDelay::Static(20_000),
            nak_retry: 500_000,
            nak_retry_initial: 10_000_000,
            status_interval: 1_000_000,
            session_timeout: 1_000_000_000,
            setup_request_interval: 1_000_000,
            max_message: 1 << 20,
            seed: 0,
        }
    }
}

/// What a receiver has seen and done, for counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    /// Datagrams handled.
    pub datagrams: u64,
    /// Messages delivered.
    pub messages: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
    /// Frames received twice (dropped).
    pub duplicates: u64,
    /// Gaps opened (a frame or heartbeat beyond the highest position seen).
    pub gaps_detected: u64,
    /// NAK frames sent (first NAKs and retries).
    pub naks_sent: u64,
    /// NAKs sent again because the repair did not arrive.
    pub nak_retries: u64,
    /// NAKs of ours held back because another receiver's NAK was seen.
    pub naks_suppressed: u64,
    /// `Lost` events.
    pub lost_events: u64,
    /// Bytes of stream reported lost.
    pub lost_bytes: u64,
    /// Malformed datagrams or frames, and frames inconsistent with the stream.
    pub invalid: u64,
    /// Frames of a session or stream not being received.
    pub other_session: u64,
    /// Frames beyond the window (dropped, NAKed later).
    pub window_overruns: u64,
    /// Partial messages dropped (a fragment was lost).
    pub reassembly_dropped: u64,
    /// Heartbeats received.
    pub heartbeats: u64,
    /// STATUS frames sent.
    pub status_sent: u64,
    /// Datagrams dropped before parsing because they came from another
    /// source than the session's (unicast: counted by the driver, which
    /// knows addresses, through [`Receiver::note_foreign`]).
    pub frames_foreign: u64,
}

#[derive(Debug, Clone, Copy)]
struct GapTimer {
    from: u64,
    to: u64,
    deadline: Nanos,
    sent: u32,
    nak_at: Nanos,
}

#[derive(Debug)]
struct Image {
    session_id: u32,
    stream_id: u32,
    rcv_pos: u64,
    high_water: u64,
    retained_from: u64,
    eos: Option<u64>,
    ended: bool,
    announced: bool,
    abandoned: bool,
    last_heard: Nanos,
    mtu: usize,
    ring: Vec<u8>,
    mask: u64,
    covered: Bitmap,
    starts: Bitmap,
    timers: Vec<GapTimer>,
    scratch: Vec<GapTimer>,
    gaps_dirty: bool,
    status_due: Nanos,
    status_pos: u64,
    status_now: bool,
    reasm: Reassembler,
    /// Smoothed NAK-to-repair time (0 until measured).
    srtt: Nanos,
}

impl Image {
    fn slot(&self, pos: u64) -> usize {
        ((pos & self.mask) / A) as usize
    }
    fn capacity(&self) -> u64 {
        self.mask + 1
    }
    fn replaceable(&self, now: Nanos, timeout: Nanos) -> bool {
        self.ended || now.saturating_sub(self.last_heard) >= timeout
    }

    /// Delivers in order up to `limit` events; returns how many.
    fn deliver<F: FnMut(Event<'_>)>(&mut self, handler: &mut F, limit: usize, stats: &mut ReceiverStats) -> usize {
        let mut d = DeliveryStats::default();
        let mut n = 0;
        while n < limit {
            let slot = self.slot(self.rcv_pos);
            if self.rcv_pos < self.high_water && self.starts.get(slot) {
                let off = (self.rcv_pos & self.mask) as usize;
                let b = &self.ring[off..off + 4];
                let flen = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
                let alen = align_frame(flen);
                let frame = DataFrame::new_unchecked(&self.ring[off..off + flen]);
                if self.reasm.on_frame(&frame, self.rcv_pos, &mut d, handler) {
                    n += 1;
                }
                self.covered.set_range(slot, alen / FRAME_ALIGNMENT, false);
                self.starts.set(slot, false);
                self.rcv_pos += alen as u64;
            } else if self.rcv_pos < self.high_water && (self.rcv_pos < self.retained_from || self.abandoned) {
                let window_end = self.high_water.min(self.rcv_pos + self.capacity());
                let span = ((window_end - self.rcv_pos) / A) as usize;
                let next = self.starts.find(slot, span, true).map(|k| self.rcv_pos + k as u64 * A);
                let mut to = next.unwrap_or(self.high_water);
                if !self.abandoned {
                    to = to.min(self.retained_from);
                }
                self.reasm.on_lost(self.rcv_pos, to, &mut d, handler);
                self.rcv_pos = to;
                self.gaps_dirty = true;
                n += 1;
            } else if !self.ended && (self.eos == Some(self.rcv_pos) || self.abandoned) {
                self.ended = true;
                self.status_now = true;
                handler(Event::Ended { session_id: self.session_id, position: self.rcv_pos });
                n += 1;
                break;
            } else {
                break;
            }
        }
        stats.messages += d.messages;
        stats.bytes += d.bytes;
        stats.reassembly_dropped += d.reassembly_dropped;
        stats.lost_events += d.lost_events;
        stats.lost_bytes += d.lost_bytes;
        n
    }

    /// Rebuilds the gap list (at most `MAX_GAPS`), keeping the timers of gaps
    /// that persist.
    fn update_gaps(&mut self, now: Nanos, delay: &mut dyn FnMut() -> Nanos) {
        if !self.gaps_dirty {
            return;
        }
        self.gaps_dirty = false;
        let end = self.high_water.min(self.rcv_pos + self.capacity());
        let mut pos = self.rcv_pos.max(self.retained_from);
        self.scratch.clear();
        while pos < end && self.scratch.len() < MAX_GAPS {
            let span = ((end - pos) / A) as usize;
            let Some(k) = self.covered.find(self.slot(pos), span, false) else { break };
            let from = pos + k as u64 * A;
            let rest = ((end - from) / A) as usize;
            let to = self.covered.find(self.slot(from), rest, true).map_or(end, |j| from + j as u64 * A);
            let timer = match self.timers.iter().find(|t| t.from < to && from < t.to) {
                Some(t) => GapTimer { from, to, ..*t },
                None => GapTimer { from, to, deadline: now + delay(), sent: 0, nak_at: 0 },
            };
            self.scratch.push(timer);
            pos = to;
        }
        // A NAKed gap that is gone was repaired: a sample of the repair time
        // (NAK to retransmission, including any queue in front of it).
        for t in &self.timers {
            let repaired = t.sent > 0
                && t.from >= self.retained_from
                && !self.scratch.iter().any(|g| g.from < t.to && t.from < g.to);
            if repaired {
                let sample = now.saturating_sub(t.nak_at);
                self.srtt = if self.srtt == 0 { sample } else { (self.srtt * 7 + sample) / 8 };
            }
        }
        std::mem::swap(&mut self.timers, &mut self.scratch);
    }
}

/// The receiving half of a session. See the crate docs.
#[derive(Debug)]
pub struct Receiver {
    cfg: ReceiverConfig,
    rng: Rng,
    image: Option<Image>,
    old: Option<Image>,
    setup_for: Option<u32>,
    setup_due: Nanos,
    stats: ReceiverStats,
}

impl Receiver {
    /// A receiver waiting for a session.
    ///
    /// # Errors
    /// A description of the first unusable setting.
    pub fn new(cfg: ReceiverConfig) -> Result<Self, &'static str> {
        if !cfg.window.is_power_of_two() || cfg.window < 64 << 10 || cfg.window > 1 << 30 {
            return Err("window must be a power of two between 64 KiB and 1 GiB");
        }
        Ok(Self {
            rng: Rng::new(cfg.seed),
            cfg,
            image: None,
            old: None,
            setup_for: None,
            setup_due: 0,
            stats: Default::default(),
        })
    }

    /// Counters.
    pub fn stats(&self) -> &ReceiverStats {
        &self.stats
    }
    /// Counts a datagram the caller dropped because of where it came from.
    pub fn note_foreign(&mut self) {
        self.stats.frames_foreign += 1;
    }
    /// The settings.
    pub fn config(&self) -> &ReceiverConfig {
        &self.cfg
    }
    /// The session being received and the next position to deliver.
    pub fn session(&self) -> Option<(u32, u64)> {
        self.image.as_ref().map(|im| (im.session_id, im.rcv_pos))
    }
    /// The current session has ended and everything of it was delivered.
    pub fn is_ended(&self) -> bool {
        self.old.is_none() && self.image.as_ref().is_some_and(|im| im.ended)
    }

    /// Processes one datagram from the data path (DATA, HEARTBEAT, SETUP, and
    /// on multicast other receivers' NAKs). Never panics; malformed input is
    /// counted in `invalid` and the rest of the datagram is dropped.
    pub fn handle_datagram(&mut self, now: Nanos, datagram: &[u8]) {
        self.stats.datagrams += 1;
        for frame in frames(datagram) {
            let Ok((ty, bytes)) = frame else {
                self.stats.invalid += 1;
                return;
            };
            let ok = match ty {
                FrameType::Data => DataFrame::new_checked(bytes).map(|f| self.on_data(now, &f)).is_ok(),
                FrameType::Heartbeat => HeartbeatFrame::new_checked(bytes).map(|f| self.on_heartbeat(now, &f)).is_ok(),
                FrameType::Setup => SetupFrame::new_checked(bytes).map(|f| self.on_setup(now, &f)).is_ok(),
                FrameType::Nak => NakFrame::new_checked(bytes).map(|f| self.on_peer_nak(now, &f)).is_ok(),
                // Other receivers' STATUS on a shared group: not ours to act on.
                FrameType::Status => true,
                FrameType::Pad | FrameType::Error => {
                    self.stats.other_session += 1;
                    true
                }
            };
            if !ok {
                self.stats.invalid += 1;
                return;
            }
        }
    }

    /// The image for `session` if it is the one being received; otherwise
    /// notes a SETUP request if the session may replace the current one.
    fn route(&mut self, now: Nanos, session: u32, stream: u32) -> bool {
        if stream != self.cfg.stream_id {
            self.stats.other_session += 1;
            return false;
        }
        match &self.image {
            Some(im) if im.session_id == session => true,
            Some(im) if !im.replaceable(now, self.cfg.session_timeout) => {
                self.stats.other_session += 1;
                false
            }
            _ => {
                self.setup_for = Some(session);
                false
            }
        }
    }

    fn on_data(&mut self, now: Nanos, f: &DataFrame<&[u8]>) {
        let (session, stream) = (f.session_id(), f.stream_id());
        if !self.route(now, session, stream) {
            return;
        }
        let Self { image: Some(im), stats, .. } = self else { return };
        im.last_heard = now;
        let pos = f.position();
        let bytes = f.as_bytes();
        let flen = bytes.len();
        let alen = align_frame(flen) as u64;
        if pos % A != 0 || flen > im.mtu {
            stats.invalid += 1;
            return;
        }
        if pos + alen <= im.rcv_pos {
            stats.duplicates += 1;
            return;
        }
        if pos < im.rcv_pos {
            stats.invalid += 1;
            return;
        }
        if pos + alen > im.rcv_pos + im.capacity() {
            stats.window_overruns += 1;
            return;
        }
        let slot = im.slot(pos);
        let n = (alen / A) as usize;
        if im.covered.find(slot, n, true).is_some() {
            if im.starts.get(slot) {
                stats.duplicates += 1;
            } else {
                stats.invalid += 1;
            }
            return;
        }
        let off = (pos & im.mask) as usize;
        im.ring[off..off + flen].copy_from_slice(bytes);
        im.covered.set_range(slot, n, true);
        im.starts.set(slot, true);
        if pos > im.high_water {
            stats.gaps_detected += 1;
        }
        if pos != im.high_water {
            im.gaps_dirty = true;
        }
        im.high_water = im.high_water.max(pos + alen);
    }

    fn on_heartbeat(&mut self, now: Nanos, f: &HeartbeatFrame<&[u8]>) {
        let (session, stream) = (f.session_id(), f.stream_id());
        self.stats.heartbeats += 1;
        if !self.route(now, session, stream) {
            return;
        }
        let Self { image: Some(im), stats, .. } = self else { return };
        im.last_heard = now;
        let (pos, retained) = (f.position(), f.retained_from());
        let eos = f.flags() & flags::END_OF_STREAM != 0;
        // Checked against the stream before anything changes: a sender
        // never retains beyond what it has sent, and never ends the stream
        // before data it already sent.
        if pos % A != 0
            || retained % A != 0
            || pos > im.rcv_pos + MAX_JUMP
            || retained > pos
            || (eos && pos < im.high_water)
        {
            stats.invalid += 1;
            return;
        }
        if retained > im.retained_from {
            im.retained_from = retained;
            im.gaps_dirty = true;
        }
        if pos > im.high_water {
            stats.gaps_detected += 1;
            im.high_water = pos;
            im.gaps_dirty = true;
        }
        if eos {
            im.eos = Some(pos);
            // Still hearing the end after delivering it: our STATUS saying
            // so was lost; answer again.
            im.status_now |= im.ended;
        }
    }

    fn on_setup(&mut self, now: Nanos, f: &SetupFrame<&[u8]>) {
        if f.stream_id() != self.cfg.stream_id {
            self.stats.other_session += 1;
            return;
        }
        let session = f.session_id();
        if let Some(im) = &mut self.image {
            if im.session_id == session {
                // Our STATUS may have been lost: answer again.
                im.status_now = true;
                return;
            }
            if !im.replaceable(now, self.cfg.session_timeout) || self.old.is_some() {
                self.stats.other_session += 1;
                return;
            }
        }
        let (pos, mtu) = (f.initial_position(), f.mtu() as usize);
        if pos % A != 0 || mtu % FRAME_ALIGNMENT != 0 || mtu > MAX_MTU {
            self.stats.invalid += 1;
            return;
        }
        if let Some(mut old) = self.image.take() {
            if !old.ended {
                old.abandoned = true;
                self.old = Some(old);
            }
        }
        let cap = self.cfg.window;
        self.image = Some(Image {
            session_id: session,
            stream_id: f.stream_id(),
            rcv_pos: pos,
            high_water: pos,
            retained_from: 0,
            eos: None,
            ended: false,
            announced: false,
            abandoned: false,
            last_heard: now,
            mtu,
            ring: vec![0; cap + mtu],
            mask: cap as u64 - 1,
            covered: Bitmap::new(cap / FRAME_ALIGNMENT),
            starts: Bitmap::new(cap / FRAME_ALIGNMENT),
            timers: Vec::with_capacity(MAX_GAPS),
            scratch: Vec::with_capacity(MAX_GAPS),
            gaps_dirty: false,
            status_due: now,
            status_pos: pos,
            status_now: true,
            reasm: Reassembler::new(session, f.stream_id(), self.cfg.max_message),
            srtt: 0,
        });
        self.setup_for = None;
    }

    fn on_peer_nak(&mut self, now: Nanos, f: &NakFrame<&[u8]>) {
        if f.receiver_id() == self.cfg.receiver_id {
            return;
        }
        let retry = self.cfg.nak_retry;
        let Some(im) = self.image.as_mut().filter(|im| im.session_id == f.session_id()) else { return };
        let (from, to) = (f.position(), f.position().saturating_add(u64::from(f.length())));
        for t in im.timers.iter_mut().filter(|t| t.from < to && from < t.to) {
            if t.deadline > now {
                if t.sent == 0 {
                    self.stats.naks_suppressed += 1;
                }
                t.deadline = t.deadline.max(now + retry);
            }
        }
    }

    /// Delivers up to `limit` events in stream order: messages exactly once,
    /// `Lost` for what cannot be repaired, `Joined`/`Ended` at session
    /// boundaries. Returns how many were delivered.
    pub fn poll_messages<F: FnMut(Event<'_>)>(&mut self, mut handler: F, limit: usize) -> usize {
        let mut n = 0;
        if let Some(old) = &mut self.old {
            n += old.deliver(&mut handler, limit, &mut self.stats);
            if !old.ended {
                return n;
            }
            self.old = None;
        }
        if let Some(im) = &mut self.image {
            if !im.announced && n < limit {
                im.announced = true;
                handler(Event::Joined { session_id: im.session_id, position: im.rcv_pos });
                n += 1;
            }
            n += im.deliver(&mut handler, limit - n, &mut self.stats);
        }
        n
    }

    /// Writes the next control datagram (SETUP request, NAKs, STATUS) into
    /// `buf` and returns its length, or `None` if nothing is due.
    pub fn poll_transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Option<usize> {
        let mut n = 0;
        let id = self.cfg.receiver_id;
        if let Some(session) = self.setup_for {
            if now >= self.setup_due {
                self.setup_due = now + self.cfg.setup_request_interval;
                let s = StatusRepr {
                    session_id: session,
                    stream_id: self.cfg.stream_id,
                    flags: flags::SEND_SETUP,
                    consumption_position: 0,
                    receiver_window: 0,
                    receiver_id: id,
                };
                n += s.emit(&mut buf[n..]).ok()?;
            }
        }
        let Self { image, cfg, stats, .. } = self;
        if let Some(im) = image {
            for t in im.timers.iter_mut() {
                if t.deadline > now || buf.len() - n < tickwire_wire::nak::LEN {
                    continue;
                }
                let nak = NakRepr {
                    session_id: im.session_id,
                    stream_id: im.stream_id,
                    position: t.from,
                    length: (t.to - t.from).min(u64::from(u32::MAX) & !(A - 1)) as u32,
                    receiver_id: id,
                };
                n += nak.emit(&mut buf[n..]).unwrap_or(0);
                t.sent += 1;
                t.nak_at = now;
                // Retry after the configured time or twice the measured repair
                // time, whichever is longer, doubling with each retry (capped).
                let rto = if im.srtt == 0 {
                    cfg.nak_retry.max(cfg.nak_retry_initial)
                } else {
                    cfg.nak_retry.max(im.srtt.saturating_mul(2))
                };
                t.deadline = now + (rto << (t.sent - 1).min(4));
                stats.naks_sent += 1;
                if t.sent > 1 {
                    stats.nak_retries += 1;
                }
            }
            let consumed = im.rcv_pos - im.status_pos;
            let due = im.status_now || (!im.ended && (now >= im.status_due || consumed >= im.capacity() / 4));
            if due && buf.len() - n >= tickwire_wire::status::LEN {
                let s = StatusRepr {
                    session_id: im.session_id,
                    stream_id: im.stream_id,
                    flags: if im.ended { flags::END_DELIVERED } else { 0 },
                    consumption_position: im.rcv_pos,
                    receiver_window: im.capacity().min(u64::from(u32::MAX)) as u32,
                    receiver_id: id,
                };
                n += s.emit(&mut buf[n..]).unwrap_or(0);
                im.status_now = false;
                im.status_due = now + cfg.status_interval;
                im.status_pos = im.rcv_pos;
                stats.status_sent += 1;
            }
        }
        (n > 0).then_some(n)
    }

    /// Advances the receiver's timers to `now`: rebuilds the gap list after
    /// new data or a loss, starting a (randomised, for multicast) NAK timer
    /// for each new gap and measuring repair times for closed ones. Call it
    /// when [`Receiver::poll_timeout`] is due, before `poll_transmit`.
    pub fn handle_timeout(&mut self, now: Nanos) {
        let Self { image, rng, cfg, .. } = self;
        if let Some(im) = image {
            let nak_delay = cfg.nak_delay;
            im.update_gaps(now, &mut || nak_delay.sample(rng));
        }
    }

    /// The earliest time `handle_timeout` or `poll_transmit` may have
    /// something to do: `Some(0)` if something is pending now, `None` if
    /// nothing will be until a datagram arrives.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let mut t = Nanos::MAX;
        if self.setup_for.is_some() {
            t = t.min(self.setup_due);
        }
        if let Some(im) = &self.image {
            if im.gaps_dirty || im.status_now {
                return Some(0);
            }
            if !im.ended {
                t = t.min(im.status_due);
            }
            for g in &im.timers {
                t = t.min(g.deadline);
            }
        }
        (t != Nanos::MAX).then_some(t)
    }
}
