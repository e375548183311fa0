//! What comes back to a sender: STATUS and NAK from receivers, flow
//! control over them, and their timeouts.

use super::{Peer, PeerReplay, ReceiverChange, Retransmit, Sender};
use super::{MAX_CHALLENGES, MAX_CHANGES, MAX_RECEIVERS, MAX_RETRANSMITS, MAX_WINDOW};
use crate::auth::{self, ReplayWindow, Sealed};
use crate::invalid::Invalid;
use crate::{frames, FlowControl, Nanos};
use std::net::SocketAddrV4;
use tickwire_wire::{flags, FrameType, NakFrame, StatusFrame, FRAME_ALIGNMENT};

impl Sender {
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
        if self.cfg.auth.is_some() && auth::claims_a_sender(datagram) {
            // A sender's datagram (ours looped back on a multicast group, or
            // another's): nothing to act on, so no MAC to check. A forgery
            // claiming this is dropped all the same.
            return;
        }
        let (bytes, sealed) = match auth::unseal(self.cfg.auth.as_ref(), datagram) {
            Ok(x) => x,
            Err(why) => return self.reject(why),
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
