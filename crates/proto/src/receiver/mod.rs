//! The receiving side: reorder window, gap scan, NAK timers, loss reports.
//! Settings and counters are in [`config`]; an image of one session (its
//! ring, gaps and in-order delivery) in `crate::image`.

mod config;

pub use config::{ReceiverConfig, ReceiverStats};

use crate::auth::{self, ReplayWindow, Sealed};
use crate::image::{Image, A};
use crate::invalid::Invalid;
use crate::{frames, Nanos, MAX_MTU};
use std::net::SocketAddrV4;
use tickwire_impair::Rng;
use tickwire_wire::{
    align_frame, flags, DataFrame, Event, FrameType, HeartbeatFrame, NakFrame, NakRepr, SetupFrame, StatusRepr,
    FRAME_ALIGNMENT,
};

/// A heartbeat or frame further than this past the window is rejected.
const MAX_JUMP: u64 = 1 << 40;
/// The furthest a session may start: 2^62 bytes, 146 years at 1 GB/s, so
/// that no position sum can overflow.
const MAX_POSITION: u64 = 1 << 62;
/// Times another receiver's NAK may hold back ours for one gap.
const MAX_SUPPRESSIONS: u32 = 4;
/// Other receivers (multicast, keyed) whose NAK sequences are tracked.
const MAX_PEERS: usize = 64;

/// The receiving half of a session. See the crate docs.
#[derive(Debug)]
pub struct Receiver {
    cfg: ReceiverConfig,
    rng: Rng,
    challenges: Rng,
    image: Option<Image>,
    old: Option<Image>,
    /// A session seen but not joined, and where it came from: SETUP
    /// requests go there.
    setup_for: Option<(u32, SocketAddrV4)>,
    setup_due: Nanos,
    /// Keyed: the nonce in this receiver's SETUP requests; a SETUP joins
    /// only if it echoes it.
    challenge: u64,
    tx_sequence: u64,
    /// Keyed multicast: other receivers' datagram sequences.
    peers: Vec<(u32, ReplayWindow)>,
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
        let mut challenges = Rng::new(cfg.challenge_seed);
        Ok(Self {
            challenge: challenges.next_u64() | 1,
            challenges,
            rng: Rng::new(cfg.seed),
            tx_sequence: cfg.first_sequence,
            cfg,
            image: None,
            old: None,
            setup_for: None,
            setup_due: 0,
            peers: Vec::new(),
            stats: Default::default(),
        })
    }

    /// Counters.
    pub fn stats(&self) -> &ReceiverStats {
        &self.stats
    }
    /// The settings.
    pub fn config(&self) -> &ReceiverConfig {
        &self.cfg
    }
    /// The session being received and the next position to deliver.
    pub fn session(&self) -> Option<(u32, u64)> {
        self.image.as_ref().map(|im| (im.session_id, im.rcv_pos))
    }
    /// Where the session being received was set up from.
    pub fn source(&self) -> Option<SocketAddrV4> {
        self.image.as_ref().map(|im| im.source)
    }
    #[doc(hidden)]
    pub fn debug_state(&self) -> String {
        let f = |im: &Image| {
            format!(
                "sess {} src {} rcv {} hw {} ret {} eos {:?} ended {} abandoned {} last_heard {}",
                im.session_id,
                im.source,
                im.rcv_pos,
                im.high_water,
                im.retained_from,
                im.eos,
                im.ended,
                im.abandoned,
                im.last_heard
            )
        };
        format!(
            "image [{}] old [{}] setup_for {:?}",
            self.image.as_ref().map_or("-".into(), f),
            self.old.as_ref().map_or("-".into(), f),
            self.setup_for
        )
    }
    /// The current session has ended and everything of it was delivered.
    pub fn is_ended(&self) -> bool {
        self.old.is_none() && self.image.as_ref().is_some_and(|im| im.ended)
    }

    fn reject(&mut self, why: Invalid) {
        self.stats.invalid += 1;
        self.stats.invalid_by.add(why);
    }

    /// Processes one datagram from `from` on the data path (DATA,
    /// HEARTBEAT, SETUP, and on multicast other receivers' NAKs). Never
    /// panics; what is invalid is counted by reason and the rest of the
    /// datagram is dropped. Unicast: while a session is live, datagrams
    /// from anywhere but its source are dropped unread (`frames_foreign`).
    pub fn handle_datagram(&mut self, now: Nanos, from: SocketAddrV4, datagram: &[u8]) {
        self.stats.datagrams += 1;
        // Unkeyed unicast: the source address is all there is to go by.
        // Keyed, the MAC and the replay window decide, and the source is
        // wherever the session's latest fresh datagram came from.
        if !self.cfg.multicast && self.cfg.auth.is_none() {
            let live = self.image.as_ref().filter(|im| !im.replaceable(now, self.cfg.session_timeout));
            if live.is_some_and(|im| im.source != from) {
                self.stats.frames_foreign += 1;
                return;
            }
        }
        let (bytes, sealed) = match auth::unseal(self.cfg.auth.as_ref(), datagram) {
            Ok(x) => x,
            Err(why) => return self.reject(why),
        };
        if let Some(s) = &sealed {
            if !self.fresh(s) {
                return self.reject(Invalid::Replayed);
            }
        }
        for frame in frames(bytes) {
            let Ok((ty, bytes)) = frame else { return self.reject(Invalid::Malformed) };
            if sealed.is_some_and(|s| !crate::same_session(bytes, s.session_id, s.stream_id)) {
                return self.reject(Invalid::Malformed);
            }
            let ok = match ty {
                FrameType::Data => DataFrame::new_checked(bytes).map(|f| self.on_data(now, from, &f)).is_ok(),
                FrameType::Heartbeat => {
                    HeartbeatFrame::new_checked(bytes).map(|f| self.on_heartbeat(now, from, &f)).is_ok()
                }
                FrameType::Setup => {
                    SetupFrame::new_checked(bytes).map(|f| self.on_setup(now, from, sealed, &f)).is_ok()
                }
                FrameType::Nak => NakFrame::new_checked(bytes).map(|f| self.on_peer_nak(now, &f)).is_ok(),
                // Other receivers' STATUS on a shared group: not ours to act on.
                FrameType::Status => true,
                FrameType::Pad | FrameType::Error => {
                    self.stats.other_session += 1;
                    true
                }
                // Only ever the last frame, removed by `auth::open`.
                FrameType::Auth => false,
            };
            if !ok {
                return self.reject(Invalid::Malformed);
            }
        }
    }

    /// Keyed: records a datagram's sequence for its origin; false if it
    /// was seen before (or is older than the window).
    fn fresh(&mut self, s: &Sealed) -> bool {
        if !s.from_receiver {
            // A sender's datagram. A session not joined has no window: its
            // datagrams can only draw a SETUP request, and joining needs
            // the echo of a fresh challenge.
            let im =
                [self.image.as_mut(), self.old.as_mut()].into_iter().flatten().find(|im| im.session_id == s.session_id);
            return im.map_or(true, |im| im.replay.accept(s.sequence));
        }
        // Another receiver's NAK (multicast).
        if let Some((_, w)) = self.peers.iter_mut().find(|(id, _)| *id == s.origin) {
            return w.accept(s.sequence);
        }
        if self.peers.len() >= MAX_PEERS {
            self.peers.remove(0);
        }
        let mut w = ReplayWindow::new();
        w.accept(s.sequence);
        self.peers.push((s.origin, w));
        true
    }

    /// Whether a frame of `session` from `from` is for the joined session;
    /// otherwise notes a SETUP request if that session may replace it.
    fn route(&mut self, now: Nanos, from: SocketAddrV4, session: u32, stream: u32) -> bool {
        if stream != self.cfg.stream_id {
            self.stats.other_session += 1;
            return false;
        }
        let keyed = self.cfg.auth.is_some();
        match &mut self.image {
            Some(im) if im.session_id == session && im.source == from => {
                self.setup_for = self.setup_for.filter(|(s, _)| *s != session);
                true
            }
            Some(im) if im.session_id == session && keyed => {
                // Authentic and fresh, from another address: the sender
                // moved, or a copy raced the original (which then counts
                // as the replay). Control follows.
                im.source = from;
                true
            }
            Some(im) if !im.replaceable(now, self.cfg.session_timeout) => {
                if im.session_id == session {
                    self.stats.frames_foreign += 1;
                } else {
                    self.stats.other_session += 1;
                }
                false
            }
            // The session ended or fell silent: any session, even one with
            // the same id from another source (whoever set it up first may
            // have been a forger), may be set up again.
            _ => {
                self.want_setup(session, from);
                false
            }
        }
    }

    /// Notes a session to ask for SETUP, at the address it was last heard
    /// from (so that a stray source cannot keep the requests to itself).
    fn want_setup(&mut self, session: u32, from: SocketAddrV4) {
        self.setup_for = Some((session, from));
    }

    fn on_data(&mut self, now: Nanos, from: SocketAddrV4, f: &DataFrame<&[u8]>) {
        if !self.route(now, from, f.session_id(), f.stream_id()) {
            return;
        }
        let Some(im) = self.image.as_mut() else { return };
        im.last_heard = now;
        let pos = f.position();
        let bytes = f.as_bytes();
        let flen = bytes.len();
        let alen = align_frame(flen) as u64;
        // Bounds first: every sum below then stays far from overflow.
        let why = if pos > im.rcv_pos + MAX_JUMP {
            Some(Invalid::TooFar)
        } else if pos % A != 0 {
            Some(Invalid::Misaligned)
        } else if flen > im.mtu {
            Some(Invalid::Oversized)
        } else if im.eos.is_some_and(|e| pos + alen > e) {
            Some(Invalid::BadEnd)
        } else if pos < im.rcv_pos && pos + alen > im.rcv_pos {
            Some(Invalid::Overlap)
        } else {
            None
        };
        if let Some(why) = why {
            return self.reject(why);
        }
        let stats = &mut self.stats;
        if pos + alen <= im.rcv_pos {
            stats.duplicates += 1;
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
                self.reject(Invalid::Overlap);
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

    fn on_heartbeat(&mut self, now: Nanos, from: SocketAddrV4, f: &HeartbeatFrame<&[u8]>) {
        self.stats.heartbeats += 1;
        if !self.route(now, from, f.session_id(), f.stream_id()) {
            return;
        }
        let Some(im) = self.image.as_mut() else { return };
        im.last_heard = now;
        let (pos, retained) = (f.position(), f.retained_from());
        let eos = f.flags() & flags::END_OF_STREAM != 0;
        // Checked against the stream before anything changes: a sender
        // never retains beyond what it has sent, never ends the stream
        // before data it already sent, and never moves its end.
        let why = if pos % A != 0 || retained % A != 0 {
            Some(Invalid::Misaligned)
        } else if pos > im.rcv_pos + MAX_JUMP {
            Some(Invalid::TooFar)
        } else if retained > pos {
            Some(Invalid::BadRetained)
        } else if (eos && pos < im.high_water) || im.eos.is_some_and(|e| pos > e || (eos && pos != e)) {
            Some(Invalid::BadEnd)
        } else {
            None
        };
        if let Some(why) = why {
            return self.reject(why);
        }
        if retained > im.retained_from {
            im.retained_from = retained;
            im.gaps_dirty = true;
        }
        if pos > im.high_water {
            self.stats.gaps_detected += 1;
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

    fn on_setup(&mut self, now: Nanos, from: SocketAddrV4, sealed: Option<Sealed>, f: &SetupFrame<&[u8]>) {
        if f.stream_id() != self.cfg.stream_id {
            self.stats.other_session += 1;
            return;
        }
        let session = f.session_id();
        let keyed = sealed.is_some();
        if let Some(im) = &mut self.image {
            if im.session_id == session && (im.source == from || keyed) {
                // Our STATUS may have been lost: answer again. (A request
                // for this session, drawn by a stray while the session was
                // silent, is answered.)
                im.source = from;
                im.status_now = true;
                im.last_heard = now;
                self.setup_for = self.setup_for.filter(|(s, _)| *s != session);
                return;
            }
            if !im.replaceable(now, self.cfg.session_timeout) || self.old.is_some() {
                if im.session_id == session {
                    self.stats.frames_foreign += 1;
                } else {
                    self.stats.other_session += 1;
                }
                return;
            }
        }
        if sealed.is_some_and(|s| s.challenge != self.challenge) {
            // Keyed: an announcement, or an answer to an earlier request
            // (or a replay). Ask, with the current challenge.
            self.want_setup(session, from);
            return;
        }
        let (pos, mtu) = (f.initial_position(), f.mtu() as usize);
        if pos % A != 0 || pos > MAX_POSITION || mtu % FRAME_ALIGNMENT != 0 || mtu > MAX_MTU {
            return self.reject(Invalid::BadSetup);
        }
        if let Some(mut old) = self.image.take() {
            if !old.ended {
                old.abandoned = true;
                self.old = Some(old);
            }
        }
        let mut im = Image::new(session, f.stream_id(), pos, mtu, self.cfg.window, self.cfg.max_message);
        im.source = from;
        im.last_heard = now;
        im.status_due = now;
        if let Some(s) = sealed {
            im.replay = ReplayWindow::after(s.sequence);
        }
        self.image = Some(im);
        self.setup_for = None;
        self.challenge = self.challenges.next_u64() | 1;
    }

    fn on_peer_nak(&mut self, now: Nanos, f: &NakFrame<&[u8]>) {
        if !self.cfg.multicast || f.receiver_id() == self.cfg.receiver_id {
            return;
        }
        let retry = self.cfg.nak_retry;
        let Some(im) = self.image.as_mut().filter(|im| im.session_id == f.session_id()) else { return };
        let (from, to) = (f.position(), f.position().saturating_add(u64::from(f.length())));
        for t in im.timers.iter_mut().filter(|t| t.from < to && from < t.to) {
            if t.deadline > now && t.suppressed < MAX_SUPPRESSIONS {
                if t.sent == 0 {
                    self.stats.naks_suppressed += 1;
                }
                t.suppressed += 1;
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

    /// Writes the next control datagram (a SETUP request, or NAKs and
    /// STATUS) into `buf` and returns its length and where it goes: the
    /// session's source, or the source of the session whose SETUP is
    /// requested. (A multicast receiver sends to the group instead.)
    /// `None` if nothing is due.
    pub fn poll_transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Option<(usize, SocketAddrV4)> {
        let room = buf.len().saturating_sub(if self.cfg.auth.is_some() { tickwire_wire::auth::LEN } else { 0 });
        let id = self.cfg.receiver_id;
        if let Some((session, to)) = self.setup_for {
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
                let n = s.emit(&mut buf[..room]).ok()?;
                return self.seal(buf, n, session, self.challenge).map(|n| (n, to));
            }
        }
        let Self { image, cfg, stats, .. } = self;
        let im = image.as_mut()?;
        let mut n = 0;
        for t in im.timers.iter_mut() {
            if t.deadline > now || room - n < tickwire_wire::nak::LEN {
                continue;
            }
            let nak = NakRepr {
                session_id: im.session_id,
                stream_id: im.stream_id,
                position: t.from,
                length: (t.to - t.from).min(u64::from(u32::MAX) & !(A - 1)) as u32,
                receiver_id: id,
            };
            n += nak.emit(&mut buf[n..room]).unwrap_or(0);
            t.sent += 1;
            t.nak_at = now;
            // Retry after the configured time or twice the measured repair
            // time, whichever is longer, doubling with each retry (capped).
            let rto = if im.srtt == 0 {
                cfg.nak_retry.max(cfg.nak_retry_initial)
            } else {
                cfg.nak_retry.max(im.srtt.saturating_mul(2))
            };
            t.deadline = now + (rto << (t.sent - 1).min(4)).min(cfg.nak_retry_max.max(cfg.nak_retry));
            stats.naks_sent += 1;
            if t.sent > 1 {
                stats.nak_retries += 1;
            }
        }
        let consumed = im.rcv_pos - im.status_pos;
        let due = im.status_now || (!im.ended && (now >= im.status_due || consumed >= im.capacity() / 4));
        if due && room - n >= tickwire_wire::status::LEN {
            let s = StatusRepr {
                session_id: im.session_id,
                stream_id: im.stream_id,
                flags: if im.ended { flags::END_DELIVERED } else { 0 },
                consumption_position: im.rcv_pos,
                receiver_window: im.capacity().min(u64::from(u32::MAX)) as u32,
                receiver_id: id,
            };
            n += s.emit(&mut buf[n..room]).unwrap_or(0);
            im.status_now = false;
            im.status_due = now + cfg.status_interval;
            im.status_pos = im.rcv_pos;
            stats.status_sent += 1;
        }
        if n == 0 {
            return None;
        }
        let (session, to) = (im.session_id, im.source);
        self.seal(buf, n, session, 0).map(|n| (n, to))
    }

    /// Keyed: appends the AUTH frame to `n` bytes of frames.
    fn seal(&mut self, buf: &mut [u8], n: usize, session_id: u32, challenge: u64) -> Option<usize> {
        let Some(key) = &self.cfg.auth else { return Some(n) };
        let s = Sealed {
            session_id,
            from_receiver: true,
            stream_id: self.cfg.stream_id,
            sequence: self.tx_sequence,
            challenge,
            origin: self.cfg.receiver_id,
        };
        self.tx_sequence += 1;
        auth::seal(key, buf, n, s)
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
