//! TCP clients: the same client frames, each behind a 4-byte little-endian
//! length, on a non-blocking connection with `TCP_NODELAY`, plain or TLS
//! (`tickwire_transport::tls::Wire`).
//!
//! [`TcpOut`] writes a session's queue with one `write` per duty cycle (the
//! queue holds the frames already behind their prefixes);
//! `tickwire_transport::framing::FrameReader` cuts frames out of what the
//! connection delivers.

use crate::queue::OutQueue;
use crate::session::Sent;
use std::io::{ErrorKind, Write};
use std::sync::Arc;
use tickwire_transport::tls::Wire;

/// Bytes a connection may have waiting outside the queue (control frames
/// and the tail of a frame cut by a short write) before it counts as full.
const PENDING_LIMIT: usize = 64 << 10;

/// The writing half of a client connection.
#[derive(Debug)]
pub struct TcpOut {
    stream: Arc<Wire>,
    /// Written before the queue: control frames, a cut frame's tail.
    pending: Vec<u8>,
    /// Why the connection failed, once it has.
    pub(crate) failed: Option<String>,
}

impl TcpOut {
    pub(crate) fn new(stream: Arc<Wire>) -> Self {
        Self { stream, pending: Vec::new(), failed: None }
    }

    /// Whether bytes wait outside the queue.
    pub(crate) fn has_pending(&self) -> bool {
        (!self.pending.is_empty() || self.stream.wants_write()) && self.failed.is_none()
    }

    /// Writes `pending` (and TLS records a write left behind); whether it
    /// is now empty.
    fn write_pending(&mut self) -> bool {
        if self.failed.is_none() {
            if let Err(e) = self.stream.flush_tls() {
                self.failed = Some(format!("write: {e}"));
            }
        }
        while !self.pending.is_empty() {
            match write(&self.stream, &mut self.failed, &self.pending) {
                Some(0) | None => return false,
                Some(n) => {
                    self.pending.drain(..n);
                }
            }
        }
        true
    }

    /// Sends a control frame ahead of the queue.
    pub(crate) fn send_frame(&mut self, frame: &[u8]) -> Sent {
        if self.pending.len() > PENDING_LIMIT {
            self.write_pending();
            if self.pending.len() > PENDING_LIMIT {
                return Sent::Full;
            }
        }
        self.pending.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        self.pending.extend_from_slice(frame);
        self.write_pending();
        Sent::Yes
    }

    /// Writes what is pending, then as much of `queue` as the socket takes
    /// in one write; returns the frames and bytes written.
    pub(crate) fn write_queue(&mut self, queue: &mut OutQueue) -> (usize, usize) {
        if !self.write_pending() || queue.is_empty() {
            return (0, 0);
        }
        let Some(n) = write(&self.stream, &mut self.failed, queue.as_bytes()) else { return (0, 0) };
        let frames = queue.consume(n, &mut self.pending);
        (frames, n)
    }
}

/// One write; `None` on would-block or failure (recorded in `failed`).
fn write(stream: &Wire, failed: &mut Option<String>, bytes: &[u8]) -> Option<usize> {
    if failed.is_some() {
        return None;
    }
    match (&*stream).write(bytes) {
        Ok(n) => Some(n),
        Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => None,
        Err(e) => {
            *failed = Some(format!("write: {e}"));
            None
        }
    }
}
