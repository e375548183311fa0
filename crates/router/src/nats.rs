//! NATS clients' connections (`nats_listen`): the NATS text protocol on a
//! port of its own, in front of the same routing core as native clients.
//!
//! The session's queue holds the router's client frames as for any TCP
//! client (so drop-oldest, conflation and the memory bounds apply
//! unchanged); [`NatsOut`] turns them into NATS operations
//! ([`tickwire_nats::session`]) when it writes, a batch of them per
//! `write`, and the agent reads with [`NatsIn`]: the bytes of one
//! readiness, parsed into operations in place (`tickwire_nats::parse`),
//! each made into client frames for the router.

use crate::queue::OutQueue;
use crate::session::Sent;
use std::sync::Arc;
use tickwire_nats::encode::{self, Info};
use tickwire_nats::parse::Limits as NatsLimits;
use tickwire_nats::session::{After, NatsSession};
use tickwire_transport::link::{Batching, LinkStats, LinkWriter};
use tickwire_transport::tls::Wire;
use tickwire_wire::ClientFrame;

/// NATS bytes a connection may have waiting to be written (control
/// operations, a batch cut by a short write) before it counts as full.
const PENDING_LIMIT: usize = 256 << 10;

/// Queued frames turned into NATS bytes per write at most.
const BATCH_BYTES: usize = 256 << 10;

/// NATS bytes a connection may have staged at all: past this (one
/// delivery to thousands of its subscriptions, answers to a client that
/// sends and never reads) it is a slow consumer and is closed.
const STAGED_MAX: usize = 16 << 20;

/// The version a tickwire router answers as in `INFO`: clients enable
/// headers and no responders from 2.2 on.
pub const NATS_VERSION: &str = "2.10.0";

/// The writing half of a NATS client's connection, and its session.
#[derive(Debug)]
pub struct NatsOut {
    stream: Arc<Wire>,
    /// Write accounting, failure and blocking (its own buffer stays empty:
    /// `staged` is written as the caller's bytes).
    writer: LinkWriter,
    /// NATS bytes not yet written.
    pub(crate) staged: Vec<u8>,
    /// The translation of this client's operations and frames.
    pub(crate) session: NatsSession,
    /// Client frames its translation made for the router while writing
    /// (an `UNSUB` whose count ran out), taken by the router's flush.
    pub(crate) to_router: Vec<Vec<u8>>,
    /// Why it was given up: its staged bytes passed [`STAGED_MAX`].
    overflow: Option<String>,
}

impl NatsOut {
    /// A new connection's: its `INFO` staged (`None`: sent already, in
    /// the clear before TLS); an `auth_token` logs in as `token_user`.
    pub(crate) fn new(stream: Arc<Wire>, info: Option<&Info>, token_user: Option<String>) -> Self {
        let mut staged = Vec::new();
        if let Some(info) = info {
            encode::info(&mut staged, info);
        }
        Self {
            stream,
            writer: LinkWriter::new(PENDING_LIMIT, Batching::EVERY_FRAME),
            staged,
            session: NatsSession::new().with_token_user(token_user),
            to_router: Vec::new(),
            overflow: None,
        }
    }

    /// Whether bytes wait to be written.
    pub(crate) fn has_pending(&self) -> bool {
        (!self.staged.is_empty() || self.stream.wants_write()) && self.writer.failure().is_none()
    }

    /// Whether its last write found the socket full.
    pub(crate) fn is_blocked(&self) -> bool {
        self.writer.is_blocked() && self.writer.failure().is_none()
    }

    /// Why the connection failed, once it has.
    pub(crate) fn failure(&self) -> Option<&str> {
        self.overflow.as_deref().or(self.writer.failure())
    }

    /// Gives the connection up if its staged bytes passed their bound;
    /// whether it did.
    pub(crate) fn check_staged(&mut self) -> bool {
        if self.overflow.is_none() && self.staged.len() > STAGED_MAX {
            self.overflow = Some(format!(
                "slow consumer: {} bytes for the client wait to be written (at most {STAGED_MAX})",
                self.staged.len()
            ));
            self.staged = Vec::new();
        }
        self.overflow.is_some()
    }

    /// What its writes did.
    pub(crate) fn stats(&self) -> LinkStats {
        self.writer.stats()
    }

    /// Gives back its buffers' memory when idle.
    pub(crate) fn trim(&mut self) {
        if self.staged.is_empty() {
            self.staged = Vec::new();
        }
        self.writer.trim();
    }

    /// One frame from the router, translated.
    fn translate(&mut self, frame: &[u8]) {
        if self.overflow.is_some() {
            return;
        }
        let Ok(f) = ClientFrame::new_checked(frame) else { return };
        if let After::Frames(mut fs) = self.session.handle_frame(&f, &mut self.staged) {
            self.to_router.append(&mut fs);
        }
        self.check_staged();
    }

    /// Sends a control frame ahead of the queue.
    pub(crate) fn send_frame(&mut self, frame: &[u8]) -> Sent {
        if self.staged.len() > PENDING_LIMIT {
            self.write();
            if self.staged.len() > PENDING_LIMIT {
                return Sent::Full;
            }
        }
        self.translate(frame);
        Sent::Yes
    }

    /// Writes what is staged; returns the bytes written.
    fn write(&mut self) -> usize {
        // TLS records left unsent (handshake replies) go even with nothing
        // staged.
        if self.staged.is_empty() && !self.stream.wants_write() {
            return 0;
        }
        let Ok(n) = self.writer.flush(&self.stream, &mut [&self.staged]) else { return 0 };
        self.staged.drain(..n);
        n
    }

    /// Writes what is staged, then turns queued frames into NATS bytes (a
    /// batch at a time) and writes them while the socket takes them;
    /// returns the frames and bytes of the queue moved.
    pub(crate) fn write_queue(&mut self, queue: &mut OutQueue) -> (usize, usize) {
        let (mut frames, mut bytes) = (0, 0);
        loop {
            self.write();
            if !self.staged.is_empty() || queue.is_empty() || self.failure().is_some() {
                return (frames, bytes);
            }
            let before = frames;
            while self.staged.len() < BATCH_BYTES {
                let Some(f) = queue.front() else { break };
                bytes += f.len();
                self.translate(f);
                queue.pop();
                frames += 1;
            }
            self.writer.count_frames((frames - before) as u64);
        }
    }
}

/// The reading half of a NATS client's connection: the bytes read and not
/// yet parsed.
#[derive(Debug)]
pub(crate) struct NatsIn {
    /// Read into in place: zeroed once as it grows, never per read.
    pub(crate) buf: Vec<u8>,
    /// Bytes of `buf` read and not yet parsed.
    pub(crate) filled: usize,
    pub(crate) limits: NatsLimits,
    /// Reads made (would-block ones included).
    pub(crate) reads: u64,
    /// Bytes read (the peer's liveness).
    pub(crate) bytes_in: u64,
}

impl NatsIn {
    pub(crate) fn new(max_payload: usize) -> Self {
        let limits = NatsLimits { max_payload, ..NatsLimits::default() };
        Self { buf: Vec::new(), filled: 0, limits, reads: 0, bytes_in: 0 }
    }

    /// Gives back its buffer's memory when it holds nothing.
    pub(crate) fn trim(&mut self) {
        if self.filled == 0 {
            self.buf = Vec::new();
        }
    }

    /// Most bytes it holds: one whole operation at its limits.
    pub(crate) fn capacity(&self) -> usize {
        self.limits.max_control_line + self.limits.max_payload + 4
    }
}

/// The largest payload a NATS client may publish (`INFO`'s `max_payload`):
/// what a client frame of `max_frame` bytes holds beside its header, the
/// longest topic and a header block's length.
pub fn nats_max_payload(max_frame: usize) -> usize {
    // An HPUB's payload is its header block and message after a u32 length.
    max_frame.saturating_sub(tickwire_wire::client::HEADER_LEN + tickwire_topic::MAX_LEN + 1 + 4).max(1)
}
