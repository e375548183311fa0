//! A receiver's image of one session: the reorder ring, what is covered,
//! the gap timers, and in-order delivery from it.

use crate::auth::ReplayWindow;
use crate::bitmap::Bitmap;
use crate::receiver::ReceiverStats;
use crate::Nanos;
use std::net::SocketAddrV4;
use tickwire_wire::{align_frame, DataFrame, DeliveryStats, Event, Reassembler, FRAME_ALIGNMENT};

/// Gaps tracked (and NAKed) at once; later ones wait for these to close.
pub(crate) const MAX_GAPS: usize = 32;
pub(crate) const A: u64 = FRAME_ALIGNMENT as u64;

#[derive(Debug, Clone, Copy)]
pub(crate) struct GapTimer {
    pub from: u64,
    pub to: u64,
    pub deadline: Nanos,
    pub sent: u32,
    pub nak_at: Nanos,
    /// Times another receiver's NAK pushed this timer out (bounded, so
    /// that a stream of NAKs, forged or not, cannot hold ours back for good).
    pub suppressed: u32,
}

#[derive(Debug)]
pub(crate) struct Image {
    pub session_id: u32,
    pub stream_id: u32,
    pub rcv_pos: u64,
    pub high_water: u64,
    pub retained_from: u64,
    pub eos: Option<u64>,
    pub ended: bool,
    pub announced: bool,
    pub abandoned: bool,
    pub last_heard: Nanos,
    pub mtu: usize,
    pub ring: Vec<u8>,
    pub mask: u64,
    pub covered: Bitmap,
    pub starts: Bitmap,
    pub timers: Vec<GapTimer>,
    pub scratch: Vec<GapTimer>,
    pub gaps_dirty: bool,
    pub status_due: Nanos,
    pub status_pos: u64,
    pub status_now: bool,
    pub reasm: Reassembler,
    /// Smoothed NAK-to-repair time (0 until measured).
    pub srtt: Nanos,
    /// Where the session was set up from: its frames from anywhere else
    /// are foreign.
    pub source: SocketAddrV4,
    /// Keyed channels: the sender's datagram sequences seen.
    pub replay: ReplayWindow,
}

impl Image {
    /// A new image of `session_id` starting at `pos`.
    pub fn new(session_id: u32, stream_id: u32, pos: u64, mtu: usize, cap: usize, max_message: usize) -> Self {
        Self {
            session_id,
            stream_id,
            rcv_pos: pos,
            high_water: pos,
            retained_from: 0,
            eos: None,
            ended: false,
            announced: false,
            abandoned: false,
            last_heard: 0,
            mtu,
            ring: crate::touched_ring(cap + mtu),
            mask: cap as u64 - 1,
            covered: Bitmap::new(cap / FRAME_ALIGNMENT),
            starts: Bitmap::new(cap / FRAME_ALIGNMENT),
            timers: Vec::with_capacity(MAX_GAPS),
            scratch: Vec::with_capacity(MAX_GAPS),
            gaps_dirty: false,
            status_due: 0,
            status_pos: pos,
            status_now: true,
            reasm: Reassembler::new(session_id, stream_id, max_message),
            srtt: 0,
            source: SocketAddrV4::new(std::net::Ipv4Addr::UNSPECIFIED, 0),
            replay: ReplayWindow::new(),
        }
    }

    pub fn slot(&self, pos: u64) -> usize {
        ((pos & self.mask) / A) as usize
    }
    pub fn capacity(&self) -> u64 {
        self.mask + 1
    }
    pub fn replaceable(&self, now: Nanos, timeout: Nanos) -> bool {
        self.ended || now.saturating_sub(self.last_heard) >= timeout
    }

    /// Delivers in order up to `limit` events; returns how many.
    pub fn deliver<F: FnMut(Event<'_>)>(&mut self, handler: &mut F, limit: usize, stats: &mut ReceiverStats) -> usize {
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
    pub fn update_gaps(&mut self, now: Nanos, delay: &mut dyn FnMut() -> Nanos) {
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
                None => GapTimer { from, to, deadline: now + delay(), sent: 0, nak_at: 0, suppressed: 0 },
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
