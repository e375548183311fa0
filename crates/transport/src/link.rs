//! One end of a client↔router link over a byte stream (TCP, plain or
//! TLS): the one implementation of framed, batched I/O that the client
//! library and the router's TCP sessions both use.
//!
//! * [`LinkWriter`] holds frames behind their 4-byte little-endian lengths
//!   until they are written, and decides when to write by its
//!   [`Batching`]: a frame on an idle link leaves at once; frames that
//!   follow within [`Batching::window`] of the last write (while that
//!   write is, in effect, still being taken in) wait and leave together in
//!   one `writev`, with whatever the caller's own queue holds. Time is
//!   passed in (`now_ns`), never read here; nothing waits on a timer: held
//!   frames go with the next frame, [`LinkWriter::flush_due`] or
//!   [`LinkWriter::flush`].
//! * [`LinkReader`] cuts frames out of one large buffer
//!   ([`FrameReader`](crate::framing::FrameReader)): on a plain socket it
//!   reads once per readiness, and again only when that read filled the
//!   buffer (a short read of a stream socket means it was drained). Frames
//!   are handed over as slices of the buffer, no copy per frame.
//! * [`LinkStats`]: the system calls each half made (`read`, `write`/
//!   `writev`), and the frames and bytes they carried, so system calls per
//!   message can be reported from the link's own counters.
//! * [`Liveness`]: heartbeats both ways, sans-IO: from the link's counts
//!   and the time passed in, whether to send a heartbeat now, or whether
//!   the peer has been silent for two intervals (dead).
//! * [`StreamLink`]: both halves on one [`Wire`], the client's side, with
//!   its [`Liveness`] ([`StreamLink::keep_alive`]).

use crate::framing::{self, FrameError, FrameReader};
use crate::tls::Wire;
use std::io::{ErrorKind, IoSlice, Write};
use std::sync::Arc;
use std::time::Duration;

/// When a link writes what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batching {
    /// Frames made within this long of the link's last write wait for the
    /// window to pass (or for the next flush) and leave together;
    /// [`Duration::ZERO`]: every frame is written as it is made.
    pub window: Duration,
    /// Held bytes that are written at once whatever the window says.
    pub bytes: usize,
}

impl Batching {
    /// Every frame written as it is made (one system call each).
    pub const EVERY_FRAME: Self = Self { window: Duration::ZERO, bytes: 0 };

    /// The default: a 10 µs window, at most 32 KiB held. A link that has
    /// written nothing for 10 µs writes each frame at once (a stream at
    /// 50k frames/s, one every 20 µs, pays nothing); a busy one writes at
    /// most once per window, and the window widens, doubling while each
    /// write carries four frames or more, to 40 µs (4 × `window`), and
    /// narrows back as soon as a write carries one: at 1M frames/s about
    /// 40 frames share a system call.
    pub const SMART: Self = Self { window: Duration::from_micros(10), bytes: 32 << 10 };

    fn window_ns(&self) -> u64 {
        u64::try_from(self.window.as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Default for Batching {
    fn default() -> Self {
        Self::SMART
    }
}

/// What a link's halves did: system calls, and what they carried.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LinkStats {
    /// `read` calls on the socket (would-block ones included).
    pub reads: u64,
    /// `write`/`writev` calls on the socket (would-block ones included).
    pub writes: u64,
    /// Frames read.
    pub frames_in: u64,
    /// Frames written (whole ones; a frame cut by a short write counts
    /// when its last byte goes).
    pub frames_out: u64,
    /// Bytes read.
    pub bytes_in: u64,
    /// Bytes written.
    pub bytes_out: u64,
}

impl LinkStats {
    /// Sums two links' counts.
    #[must_use]
    pub fn plus(self, o: Self) -> Self {
        Self {
            reads: self.reads + o.reads,
            writes: self.writes + o.writes,
            frames_in: self.frames_in + o.frames_in,
            frames_out: self.frames_out + o.frames_out,
            bytes_in: self.bytes_in + o.bytes_in,
            bytes_out: self.bytes_out + o.bytes_out,
        }
    }
}

/// Why a link cannot take or move a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// Its write buffer holds its limit: try again after a flush.
    #[error("the link's write buffer is full")]
    Full,
    /// The connection failed or the peer closed it (why).
    #[error("{0}")]
    Broken(String),
}

/// The writing half of a link: frames held until written.
#[derive(Debug)]
pub struct LinkWriter {
    /// Bytes not yet written: whole frames behind their lengths (and, at
    /// the front, the unwritten tail of a frame a short write cut).
    buf: Vec<u8>,
    /// Frames in `buf` not yet counted as written.
    frames: u64,
    /// `buf` may grow past this by one frame; then frames are refused.
    limit: usize,
    batching: Batching,
    /// When the last batching write was made (`now_ns` of the caller's
    /// clock): the link is idle once the window has passed since.
    last_write_ns: u64,
    /// The window now, ns: from `batching.window` to 4 times it.
    window_ns: u64,
    failed: Option<String>,
    stats: LinkStats,
    /// `stats.writes` at the last trim.
    writes_at_trim: u64,
    /// The last flush stopped because the socket took no more (see
    /// [`LinkWriter::is_blocked`]).
    blocked: bool,
}

impl LinkWriter {
    /// A writer holding up to about `limit` bytes, batching by `batching`.
    pub fn new(limit: usize, batching: Batching) -> Self {
        Self {
            buf: Vec::new(),
            frames: 0,
            limit,
            batching,
            last_write_ns: 0,
            window_ns: batching.window_ns(),
            failed: None,
            stats: LinkStats::default(),
            writes_at_trim: 0,
            blocked: false,
        }
    }

    /// Appends room for one frame of `len` bytes behind its length;
    /// returns where the frame starts in [`LinkWriter::buffer_mut`]. Write
    /// the frame there, then [`LinkWriter::commit`] (or
    /// [`LinkWriter::abort`] it).
    ///
    /// # Errors
    /// [`LinkError::Full`] at the limit (after trying to write), or the
    /// link has failed.
    pub fn reserve(&mut self, wire: &Wire, len: usize) -> Result<usize, LinkError> {
        self.check()?;
        if self.buf.len() > self.limit {
            self.flush(wire, &mut [])?;
            if self.buf.len() > self.limit {
                return Err(LinkError::Full);
            }
        }
        Ok(framing::reserve_frame(&mut self.buf, len))
    }

    /// The held bytes from `at` on (a reserved frame's room).
    pub fn buffer_mut(&mut self, at: usize) -> &mut [u8] {
        &mut self.buf[at..]
    }

    /// Takes back the frame reserved at `at`.
    pub fn abort(&mut self, at: usize) {
        self.buf.truncate(at.saturating_sub(framing::PREFIX_LEN));
    }

    /// Counts the frame reserved last as made, and writes what is held if
    /// the batching says so at `now_ns`.
    ///
    /// # Errors
    /// The connection failed.
    pub fn commit(&mut self, wire: &Wire, now_ns: u64) -> Result<(), LinkError> {
        self.frames += 1;
        if self.is_due(now_ns) || self.buf.len() >= self.batching.bytes {
            self.batch_write(wire, now_ns)?;
        }
        Ok(())
    }

    /// Writes what is held, and adapts the window to what that write
    /// carried: several frames, a stream (wider, to 4 times the least);
    /// one, an idle link (back to the least).
    fn batch_write(&mut self, wire: &Wire, now_ns: u64) -> Result<(), LinkError> {
        let frames = self.frames;
        self.last_write_ns = now_ns;
        self.flush(wire, &mut [])?;
        let least = self.batching.window_ns();
        if frames >= 4 {
            self.window_ns = self.window_ns.saturating_mul(2).min(least.saturating_mul(4));
        } else if frames <= 1 {
            self.window_ns = least;
        }
        Ok(())
    }

    /// Appends a whole frame and commits it.
    ///
    /// # Errors
    /// As [`LinkWriter::reserve`] and [`LinkWriter::commit`].
    pub fn push(&mut self, wire: &Wire, frame: &[u8], now_ns: u64) -> Result<(), LinkError> {
        let at = self.reserve(wire, frame.len())?;
        self.buf[at..].copy_from_slice(frame);
        self.commit(wire, now_ns)
    }

    /// Whether held frames should go at `now_ns`: the link has been idle
    /// for the window (or batching is off).
    fn is_due(&self, now_ns: u64) -> bool {
        now_ns.saturating_sub(self.last_write_ns) >= self.window_ns
    }

    /// Writes what is held if its window has passed at `now_ns`; nothing
    /// (no system call) otherwise. Whether nothing is held now.
    ///
    /// # Errors
    /// The connection failed.
    pub fn flush_due(&mut self, wire: &Wire, now_ns: u64) -> Result<bool, LinkError> {
        if self.buf.is_empty() && !wire.wants_write() {
            return self.check().map(|()| true);
        }
        if self.is_due(now_ns) {
            self.batch_write(wire, now_ns)?;
        }
        Ok(self.buf.is_empty())
    }

    /// Writes what is held, then as much of `extra` (the caller's own
    /// queue of framed bytes) as the socket takes, in one `writev`; repeats
    /// while the socket takes everything offered and something is left.
    /// Returns the bytes of `extra` written.
    ///
    /// # Errors
    /// The connection failed (also kept: every later call fails alike).
    pub fn flush(&mut self, wire: &Wire, extra: &mut [&[u8]]) -> Result<usize, LinkError> {
        self.check()?;
        if let Err(e) = wire.flush_tls() {
            return Err(self.fail(format!("write: {e}")));
        }
        let mut taken = 0;
        self.blocked = true;
        loop {
            let rest: usize = extra.iter().map(|e| e.len()).sum::<usize>() - taken;
            if self.buf.is_empty() && rest == 0 {
                // TLS: records it could not write wait for writability too.
                self.blocked = wire.wants_write();
                return Ok(taken);
            }
            let mut slices = [IoSlice::new(&[]); 4];
            slices[0] = IoSlice::new(&self.buf);
            let mut k = 1;
            let mut skip = taken;
            for e in extra.iter() {
                if skip >= e.len() {
                    skip -= e.len();
                    continue;
                }
                if k < slices.len() {
                    slices[k] = IoSlice::new(&e[skip..]);
                    k += 1;
                }
                skip = 0;
            }
            let offered: usize = slices[..k].iter().map(|s| s.len()).sum();
            self.stats.writes += 1;
            match (&*wire).write_vectored(&slices[..k]) {
                Ok(0) => return Err(self.fail("the peer closed the connection".into())),
                Ok(n) => {
                    self.stats.bytes_out += n as u64;
                    let own = n.min(self.buf.len());
                    if own == self.buf.len() {
                        self.stats.frames_out += self.frames;
                        self.frames = 0;
                    }
                    self.buf.drain(..own);
                    taken += n - own;
                    if n < offered {
                        return Ok(taken);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(taken),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(format!("write: {e}"))),
            }
        }
    }

    /// Holds `bytes` (a frame's unwritten tail from the caller's queue)
    /// ahead of anything later.
    pub fn hold_tail(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Counts frames of the caller's queue as written.
    pub fn count_frames(&mut self, frames: u64) {
        self.stats.frames_out += frames;
    }

    fn fail(&mut self, why: String) -> LinkError {
        self.failed.get_or_insert(why.clone());
        LinkError::Broken(why)
    }

    fn check(&self) -> Result<(), LinkError> {
        match &self.failed {
            Some(why) => Err(LinkError::Broken(why.clone())),
            None => Ok(()),
        }
    }

    /// Why the connection failed, once it has.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Gives back the buffer's memory if it holds nothing and nothing was
    /// written since the last call (call it every few milliseconds).
    pub fn trim(&mut self) {
        if self.buf.is_empty() && self.stats.writes == self.writes_at_trim {
            self.buf = Vec::new();
        }
        self.writes_at_trim = self.stats.writes;
    }

    /// The batching window now (it widens on a dense stream).
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window_ns)
    }

    /// Bytes held.
    pub fn held(&self) -> usize {
        self.buf.len()
    }

    /// Whether the last [`flush`](Self::flush) stopped because the socket
    /// took no more (a short write or would-block), so trying again before
    /// it is writable would be a wasted system call.
    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    /// Whether nothing written waits (here or in the TLS layer).
    pub fn is_flushed(&self, wire: &Wire) -> bool {
        self.buf.is_empty() && !wire.wants_write()
    }

    /// What it did.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }
}

/// The reading half of a link.
#[derive(Debug)]
pub struct LinkReader {
    frames: FrameReader,
    /// The last read stopped at its limit: frames may wait in the buffer
    /// (or the TLS layer), where the socket's readiness does not show them.
    more: bool,
    stats: LinkStats,
}

impl LinkReader {
    /// A reader refusing frames under `min_frame` or over `max_frame`.
    pub fn new(min_frame: usize, max_frame: usize) -> Self {
        Self { frames: FrameReader::new(min_frame, max_frame), more: false, stats: LinkStats::default() }
    }

    /// Hands frames to `on_frame` (which may stop early by returning
    /// false), at most `limit`, reading the socket as little as it can:
    /// plain TCP is read once, and again only if that read filled the
    /// buffer; TLS until it would block. Returns the frames handed over.
    ///
    /// # Errors
    /// [`FrameError`]: a bad length, end of stream, or a socket error.
    pub fn read(
        &mut self,
        wire: &Wire,
        mut on_frame: impl FnMut(&[u8]) -> bool,
        limit: usize,
    ) -> Result<usize, FrameError> {
        let mut n = 0;
        let mut stopped = false;
        let r = self.frames.read_counted(wire, !wire.is_tls(), &mut self.stats.reads, &mut self.stats.bytes_in, |f| {
            n += 1;
            let go = on_frame(f) && n < limit;
            stopped |= !go;
            go
        });
        self.stats.frames_in += n as u64;
        self.more = stopped || self.frames.has_frame();
        r.map(|_| n)
    }

    /// Gives back the read buffer's memory when idle
    /// ([`FrameReader::trim`]).
    pub fn trim(&mut self) {
        self.frames.trim();
    }

    /// Bytes of read buffer it holds now.
    pub fn capacity(&self) -> usize {
        self.frames.capacity()
    }

    /// Whether frames may wait here, read but not handed over: the socket's
    /// readiness will not say so.
    pub fn has_buffered(&self) -> bool {
        self.more
    }

    /// What it did.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }
}

/// What [`Liveness::poll`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beat {
    /// Nothing to do.
    Quiet,
    /// Nothing was written for an interval: send a heartbeat.
    Send,
    /// Nothing was read for two intervals: the peer is gone (for this
    /// long, ns).
    Dead(u64),
}

/// Heartbeats on a link: the peer is alive while bytes come in; we are,
/// to it, while bytes go out. Sans-IO: it looks at the link's counts and
/// the time it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// 0: off.
    interval_ns: u64,
    last_in_ns: u64,
    last_out_ns: u64,
    seen_in: u64,
    seen_out: u64,
    /// The last call's time: bytes seen gone since went after it.
    last_poll_ns: u64,
}

impl Liveness {
    /// Heartbeats every `interval` (zero: none, and no peer is ever
    /// declared dead), starting at `now_ns`.
    pub fn new(interval: Duration, now_ns: u64) -> Self {
        let interval_ns = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
        Self { interval_ns, last_in_ns: now_ns, last_out_ns: now_ns, seen_in: 0, seen_out: 0, last_poll_ns: now_ns }
    }

    /// Changes the interval (a client learns the router's), counting
    /// silence from `now_ns`.
    pub fn set_interval(&mut self, interval: Duration, now_ns: u64) {
        *self = Self { seen_in: self.seen_in, seen_out: self.seen_out, ..Self::new(interval, now_ns) };
    }

    /// The interval (zero: off).
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_ns)
    }

    /// Notes what `stats` says came and went since the last call, then
    /// what to do at `now_ns` (a heartbeat due before a peer's death: the
    /// next call says that). After [`Beat::Send`] the next heartbeat is
    /// due an interval later, whether or not the caller's write went.
    pub fn poll(&mut self, stats: LinkStats, now_ns: u64) -> Beat {
        if stats.bytes_in != self.seen_in {
            (self.seen_in, self.last_in_ns) = (stats.bytes_in, now_ns);
        }
        if stats.bytes_out != self.seen_out {
            // Written at the earliest just after the last call (a
            // heartbeat of ours, for one): the next is due an interval from
            // then, not from when it was noticed.
            (self.seen_out, self.last_out_ns) = (stats.bytes_out, self.last_out_ns.max(self.last_poll_ns));
        }
        self.last_poll_ns = now_ns;
        if self.interval_ns == 0 {
            return Beat::Quiet;
        }
        // A heartbeat due goes first: one that only writes must keep
        // writing them, however long it has read nothing.
        if now_ns.saturating_sub(self.last_out_ns) >= self.interval_ns {
            self.last_out_ns = now_ns;
            return Beat::Send;
        }
        let silent = now_ns.saturating_sub(self.last_in_ns);
        if silent >= self.interval_ns.saturating_mul(2) {
            return Beat::Dead(silent);
        }
        Beat::Quiet
    }
}

/// Both halves of a link on one connection: the client's side.
#[derive(Debug)]
pub struct StreamLink {
    wire: Arc<Wire>,
    /// The reading half.
    pub reader: LinkReader,
    /// The writing half.
    pub writer: LinkWriter,
    /// Heartbeats (off until given an interval).
    pub liveness: Liveness,
}

impl StreamLink {
    /// A link on `wire`: frames between `min_frame` and `max_frame` bytes
    /// read; about `write_limit` bytes held at most; writes batched by
    /// `batching`.
    pub fn new(
        wire: Arc<Wire>,
        (min_frame, max_frame): (usize, usize),
        write_limit: usize,
        batching: Batching,
    ) -> Self {
        Self {
            wire,
            reader: LinkReader::new(min_frame, max_frame),
            writer: LinkWriter::new(write_limit, batching),
            liveness: Liveness::new(Duration::ZERO, 0),
        }
    }

    /// The connection.
    pub fn wire(&self) -> &Arc<Wire> {
        &self.wire
    }

    /// The halves and the connection, to use together.
    pub fn parts(&mut self) -> (&Wire, &mut LinkReader, &mut LinkWriter) {
        (&self.wire, &mut self.reader, &mut self.writer)
    }

    /// Keeps the link alive at `now_ns`: writes `heartbeat` (a whole frame)
    /// if nothing went for an interval. `reading`: the caller reads the
    /// link too, so silence means the peer is gone (a caller that only
    /// writes cannot tell, and never fails the link for it).
    ///
    /// # Errors
    /// The peer has been silent for two intervals (the link is failed from
    /// here), or the write failed.
    pub fn keep_alive(&mut self, now_ns: u64, heartbeat: &[u8], reading: bool) -> Result<(), LinkError> {
        match self.liveness.poll(self.stats(), now_ns) {
            Beat::Quiet => Ok(()),
            Beat::Dead(_) if !reading => Ok(()),
            Beat::Send => {
                self.writer.push(&self.wire, heartbeat, now_ns)?;
                self.writer.flush(&self.wire, &mut []).map(|_| ())
            }
            Beat::Dead(ns) => {
                let why = format!(
                    "nothing from the peer in {:.1} s (heartbeat interval {:?})",
                    ns as f64 / 1e9,
                    self.liveness.interval()
                );
                Err(self.writer.fail(why))
            }
        }
    }

    /// Both halves' counts.
    pub fn stats(&self) -> LinkStats {
        self.reader.stats().plus(self.writer.stats())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    fn wire() -> (Wire, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        c.set_nonblocking(true).unwrap();
        (Wire::plain(c), s)
    }

    #[test]
    fn the_window_widens_on_a_dense_stream_and_narrows_on_a_lone_frame() {
        let (w, _peer) = wire();
        let mut link = LinkWriter::new(1 << 20, Batching::SMART);
        let least = Batching::SMART.window;
        // A frame every microsecond (virtual time): each write carries
        // about a window's worth, and the window doubles to 4 times.
        let mut now = 1_000_000_000u64;
        for _ in 0..400 {
            link.push(&w, &[7u8; 16], now).unwrap();
            now += 1_000;
        }
        assert_eq!(link.window(), least * 4, "a dense stream widens the window to 4 x");
        let writes = link.stats().writes;
        assert!(writes < 400 / 20, "{writes} writes for 400 frames");
        // The stream's tail goes at the end of its window; quiet for a
        // millisecond, then one frame: written at once, alone, and the
        // window is back to the least.
        now += 100_000;
        assert!(link.flush_due(&w, now).unwrap());
        now += 1_000_000;
        link.push(&w, &[7u8; 16], now).unwrap();
        assert_eq!(link.held(), 0, "a frame on an idle link waits");
        assert_eq!(link.window(), least, "a write of one frame narrows the window");
    }
}
