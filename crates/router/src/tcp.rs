//! TCP clients: the same client frames, each behind a 4-byte little-endian
//! length, on a non-blocking connection with `TCP_NODELAY`, plain or TLS
//! (`tickwire_transport::tls::Wire`), through the link the client library
//! uses too (`tickwire_transport::link`).
//!
//! [`TcpOut`] writes a session's control frames and queue with one
//! `writev` per duty cycle (the queue holds the frames already behind
//! their prefixes); the agent reads with a `LinkReader`, once per
//! readiness.

use crate::queue::OutQueue;
use crate::session::Sent;
use std::sync::Arc;
use tickwire_transport::link::{Batching, LinkStats, LinkWriter};
use tickwire_transport::tls::Wire;

/// Bytes a connection may have waiting outside the queue (control frames
/// and the tail of a frame cut by a short write) before it counts as full.
const PENDING_LIMIT: usize = 64 << 10;

/// The writing half of a client connection.
#[derive(Debug)]
pub struct TcpOut {
    stream: Arc<Wire>,
    /// Written before the queue: control frames, a cut frame's tail.
    writer: LinkWriter,
}

impl TcpOut {
    pub(crate) fn new(stream: Arc<Wire>) -> Self {
        // The router batches by its duty cycle (the queue), not by time.
        Self { stream, writer: LinkWriter::new(PENDING_LIMIT, Batching::EVERY_FRAME) }
    }

    /// Whether bytes wait outside the queue.
    pub(crate) fn has_pending(&self) -> bool {
        !self.writer.is_flushed(&self.stream) && self.writer.failure().is_none()
    }

    /// Whether its last write found the socket full: nothing more can go
    /// until the socket is writable again.
    pub(crate) fn is_blocked(&self) -> bool {
        self.writer.is_blocked() && self.writer.failure().is_none()
    }

    /// Why the connection failed, once it has.
    pub(crate) fn failure(&self) -> Option<&str> {
        self.writer.failure()
    }

    /// Gives back its buffer's memory when idle.
    pub(crate) fn trim(&mut self) {
        self.writer.trim();
    }

    /// What its writes did.
    pub(crate) fn stats(&self) -> LinkStats {
        self.writer.stats()
    }

    /// Sends a control frame ahead of the queue.
    pub(crate) fn send_frame(&mut self, frame: &[u8]) -> Sent {
        if self.writer.held() > PENDING_LIMIT {
            let _ = self.writer.flush(&self.stream, &mut []);
            if self.writer.held() > PENDING_LIMIT {
                return Sent::Full;
            }
        }
        // A failure is kept and seen by the next flush.
        let _ = self.writer.push(&self.stream, frame, 0);
        Sent::Yes
    }

    /// Writes what is pending, then as much of `queue` as the socket takes,
    /// in one `writev`; returns the frames and bytes of the queue written.
    pub(crate) fn write_queue(&mut self, queue: &mut OutQueue) -> (usize, usize) {
        let (a, b) = queue.as_slices();
        let Ok(n) = self.writer.flush(&self.stream, &mut [a, b]) else { return (0, 0) };
        if n == 0 {
            return (0, 0);
        }
        let mut tail = Vec::new();
        let frames = queue.consume(n, &mut tail);
        self.writer.hold_tail(&tail);
        self.writer.count_frames(frames as u64);
        (frames, n)
    }
}
