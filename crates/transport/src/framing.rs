//! Length-prefixed frames on a byte stream (TCP): each frame after a
//! 4-byte little-endian length. [`FrameReader`] cuts whole frames out of
//! whatever a non-blocking read returns, and refuses a length over its limit
//! (or under `min_frame`) before reading the frame, so a peer cannot make it
//! allocate what it claims.
//!
//! The one writer of that length is here too, for every stream that
//! carries such frames (the client and cluster links, the TCP transport,
//! the HA peer and snapshot streams): [`write_frame`] on any [`Write`],
//! [`push_frame`] into a buffer, [`reserve_frame`] for a frame written in
//! place, and [`prefix`] itself (for a buffer of another shape).

use std::io::{ErrorKind, Read, Write};

/// Bytes of the length before each frame.
pub const PREFIX_LEN: usize = 4;

/// The length before a frame of `len` bytes: `len` as a little-endian
/// `u32` (a frame is far shorter than 4 GiB: every reader's limit is).
#[inline]
pub fn prefix(len: usize) -> [u8; PREFIX_LEN] {
    debug_assert!(u32::try_from(len).is_ok(), "a frame of {len} bytes");
    (len as u32).to_le_bytes()
}

/// Writes one frame on `out`: the length of `parts` together, then each
/// part in turn (a kind byte, then fields, say).
///
/// # Errors
/// What `out` returns.
pub fn write_frame<W: Write + ?Sized>(out: &mut W, parts: &[&[u8]]) -> std::io::Result<()> {
    out.write_all(&prefix(parts.iter().map(|p| p.len()).sum()))?;
    parts.iter().try_for_each(|p| out.write_all(p))
}

/// Appends one frame to `out`: [`write_frame`] into memory (which cannot
/// fail).
#[inline]
pub fn push_frame(out: &mut Vec<u8>, parts: &[&[u8]]) {
    let len = parts.iter().map(|p| p.len()).sum();
    out.reserve(PREFIX_LEN + len);
    out.extend_from_slice(&prefix(len));
    parts.iter().for_each(|p| out.extend_from_slice(p));
}

/// Appends the length of a frame of `len` bytes, then `len` zero bytes of
/// room for the frame; returns where that room starts in `out` (the
/// frame is written there in place).
#[inline]
pub fn reserve_frame(out: &mut Vec<u8>, len: usize) -> usize {
    out.extend_from_slice(&prefix(len));
    let at = out.len();
    out.resize(at + len, 0);
    at
}

/// Why a connection's bytes are not frames.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A length prefix over the limit.
    #[error("frame of {len} bytes announced, the limit is {max}")]
    TooLarge {
        /// Announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A length prefix under the header.
    #[error("frame of {len} bytes announced, shorter than a header")]
    TooShort {
        /// Announced length.
        len: usize,
    },
    /// The peer closed or the socket failed.
    #[error("{0}")]
    Closed(String),
    /// The layer below refused the peer's bytes (a TLS alert, a
    /// certificate that does not verify): trying again will not help.
    #[error("{0}")]
    Refused(String),
}

/// Cuts length-prefixed frames out of a byte stream.
///
/// Its buffer follows the traffic: it starts at [`MIN_BUFFER`] bytes,
/// doubles whenever a read fills it (up to the largest frame, at least
/// 64 KiB and at most 1 MiB, or one frame's size as its bytes arrive: a
/// length prefix alone claims no memory), and goes back to
/// [`MIN_BUFFER`] at a [`FrameReader::trim`] that finds it empty and
/// unread since the last one: an idle connection holds a few KiB, a busy
/// one reads up to 1 MiB a system call.
#[derive(Debug)]
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max_frame: usize,
    min_frame: usize,
    /// The size reads grow the buffer to.
    most: usize,
    /// Reads since the last trim.
    reads: u64,
}

/// A reader's buffer when idle, bytes.
pub const MIN_BUFFER: usize = 4 << 10;

impl FrameReader {
    /// A reader refusing frames over `max_frame` or under `min_frame` bytes.
    pub fn new(min_frame: usize, max_frame: usize) -> Self {
        let most = (max_frame + 4).clamp(64 << 10, 1 << 20);
        Self { buf: vec![0; MIN_BUFFER], start: 0, end: 0, max_frame, min_frame, most, reads: 0 }
    }

    /// Gives the buffer back down to [`MIN_BUFFER`] if it holds nothing
    /// and nothing was read since the last call (call it every few
    /// milliseconds: a connection idle that long costs a few KiB).
    pub fn trim(&mut self) {
        if self.reads == 0 && self.start == self.end && self.buf.len() > MIN_BUFFER {
            self.buf = vec![0; MIN_BUFFER];
            (self.start, self.end) = (0, 0);
        }
        self.reads = 0;
    }

    /// The buffer's size, bytes.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Reads what `src` has (until it would block) and hands each whole
    /// frame to `on_frame`, which may stop the reading by returning false.
    /// Returns the frames handed over.
    ///
    /// # Errors
    /// [`FrameError`]: a bad length, end of stream, or a socket error.
    pub fn read_from<R: Read>(&mut self, src: R, on_frame: impl FnMut(&[u8]) -> bool) -> Result<usize, FrameError> {
        self.read_counted(src, false, &mut 0, &mut 0, on_frame)
    }

    /// Whether a whole frame waits in the buffer.
    pub fn has_frame(&self) -> bool {
        let have = self.end - self.start;
        if have < 4 {
            return false;
        }
        let mut p = [0u8; 4];
        p.copy_from_slice(&self.buf[self.start..self.start + 4]);
        have >= 4 + u32::from_le_bytes(p) as usize
    }

    /// [`FrameReader::read_from`], counting the `read` calls made in
    /// `reads` and the bytes they returned in `bytes`. With
    /// `short_read_drains` (a stream socket, whose short read means it was
    /// drained), it stops after a read that did not fill the buffer instead
    /// of reading again to see it would block.
    ///
    /// # Errors
    /// As [`FrameReader::read_from`].
    pub fn read_counted<R: Read>(
        &mut self,
        mut src: R,
        short_read_drains: bool,
        reads: &mut u64,
        bytes: &mut u64,
        mut on_frame: impl FnMut(&[u8]) -> bool,
    ) -> Result<usize, FrameError> {
        let mut frames = 0;
        let mut drained = false;
        // The frame the buffer holds the start of, whole (0: none).
        let mut want = 0;
        loop {
            // Hand over every whole frame buffered.
            loop {
                let have = self.end - self.start;
                if have < 4 {
                    break;
                }
                let mut p = [0u8; 4];
                p.copy_from_slice(&self.buf[self.start..self.start + 4]);
                let len = u32::from_le_bytes(p) as usize;
                if len > self.max_frame {
                    return Err(FrameError::TooLarge { len, max: self.max_frame });
                }
                if len < self.min_frame {
                    return Err(FrameError::TooShort { len });
                }
                if have < 4 + len {
                    // Room for it comes as its bytes do (below): a length
                    // alone claims no memory.
                    want = 4 + len;
                    break;
                }
                let at = self.start + 4;
                self.start = at + len;
                frames += 1;
                if !on_frame(&self.buf[at..at + len]) {
                    return Ok(frames);
                }
            }
            if drained {
                return Ok(frames);
            }
            // Make room, then read more.
            if self.start == self.end {
                self.start = 0;
                self.end = 0;
            } else if self.start > 0 && self.end == self.buf.len() {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            // Full of a frame's first part: twice the room, as far as the
            // frame needs (past `most` for a frame larger than it).
            if self.end == self.buf.len() {
                let grown = (self.buf.len() * 2).min(self.most.max(want));
                self.buf.resize(grown.max(self.buf.len() + 1), 0);
            }
            let room = self.buf.len() - self.end;
            *reads += 1;
            self.reads += 1;
            match src.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err(FrameError::Closed("the peer closed the connection".into())),
                Ok(n) => {
                    self.end += n;
                    *bytes += n as u64;
                    drained = short_read_drains && n < room;
                    // Filled: the next read may take twice as much.
                    if n == room && self.buf.len() < self.most {
                        let grown = (self.buf.len() * 2).min(self.most);
                        self.buf.resize(grown, 0);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(frames),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::InvalidData => return Err(FrameError::Refused(e.to_string())),
                Err(e) => return Err(FrameError::Closed(format!("read: {e}"))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hands out its bytes in pieces of `step`, then would-block.
    struct Trickle(Vec<u8>, usize);
    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0.is_empty() {
                return Err(ErrorKind::WouldBlock.into());
            }
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0.drain(..n);
            Ok(n)
        }
    }

    fn framed(frames: &[&[u8]]) -> Vec<u8> {
        let mut v = Vec::new();
        for f in frames {
            v.extend_from_slice(&(f.len() as u32).to_le_bytes());
            v.extend_from_slice(f);
        }
        v
    }

    #[test]
    fn a_frame_is_its_length_little_endian_then_its_parts_whichever_writer_made_it() {
        let want = [5, 0, 0, 0, 0x02, b'r', b'a', b'f', b't'];
        assert_eq!(prefix(5), [5, 0, 0, 0]);
        assert_eq!(prefix(0x0102_0304), [4, 3, 2, 1]);
        let mut v = vec![0xEE];
        push_frame(&mut v, &[&[0x02], b"raft"]);
        assert_eq!(v[1..], want);
        let mut w = Vec::new();
        write_frame(&mut w, &[&[0x02], b"ra", b"", b"ft"]).unwrap();
        assert_eq!(w, want);
        let mut r = vec![0xEE];
        let at = reserve_frame(&mut r, 5);
        assert_eq!((at, r.len()), (5, 10));
        r[at..].copy_from_slice(&want[4..]);
        assert_eq!(r[1..], want);
        let mut empty = Vec::new();
        push_frame(&mut empty, &[]);
        assert_eq!(empty, [0, 0, 0, 0]);
        // And the reader takes what they make.
        let mut got = Vec::new();
        let mut reader = FrameReader::new(0, 64);
        reader
            .read_from(Trickle([&v[1..], &w, &r[1..]].concat(), 3), |f| {
                got.push(f.to_vec());
                true
            })
            .unwrap();
        assert_eq!(got, vec![want[4..].to_vec(); 3]);
    }

    #[test]
    fn frames_arrive_whole_whatever_the_reads_cut() {
        let a = [1u8; 20];
        let b = [2u8; 300];
        for step in [1, 3, 7, 64, 4096] {
            let mut r = FrameReader::new(16, 1024);
            let mut src = Trickle(framed(&[&a, &b, &a]), step);
            let mut got = Vec::new();
            while !src.0.is_empty() {
                r.read_from(&mut src, |f| {
                    got.push(f.to_vec());
                    true
                })
                .unwrap();
            }
            assert_eq!(got, [a.to_vec(), b.to_vec(), a.to_vec()], "step {step}");
        }
    }

    #[test]
    fn the_buffer_grows_with_the_traffic_and_is_given_back_when_idle() {
        let mut r = FrameReader::new(16, 1 << 20);
        assert_eq!(r.capacity(), MIN_BUFFER);
        let frame = [7u8; 1000];
        let mut src = Trickle(framed(&vec![&frame[..]; 200]), usize::MAX);
        let mut n = 0;
        r.read_from(&mut src, |f| {
            assert_eq!(f, frame);
            n += 1;
            true
        })
        .unwrap();
        assert_eq!(n, 200);
        assert!(r.capacity() >= 64 << 10, "reads that fill it double it: {}", r.capacity());
        r.trim();
        assert!(r.capacity() > MIN_BUFFER, "read since the last trim: kept");
        r.trim();
        assert_eq!(r.capacity(), MIN_BUFFER, "idle for a whole trim: given back");
    }

    #[test]
    fn a_length_claims_room_only_as_the_frame_s_bytes_arrive() {
        let mut r = FrameReader::new(16, 1 << 20);
        let body = vec![9u8; 500_000];
        let whole = framed(&[&body]);
        // The prefix and 100 bytes: the buffer is still its idle size.
        let mut src = Trickle(whole[..104].to_vec(), usize::MAX);
        assert_eq!(r.read_from(&mut src, |_| true), Ok(0));
        assert_eq!(r.capacity(), MIN_BUFFER, "a length alone grew the buffer");
        // The rest: it grows as it fills, and the frame comes whole.
        let mut src = Trickle(whole[104..].to_vec(), usize::MAX);
        let mut got = Vec::new();
        r.read_from(&mut src, |f| {
            got.push(f.len());
            true
        })
        .unwrap();
        assert_eq!(got, [500_000]);
    }

    #[test]
    fn bad_lengths_are_refused_before_reading_the_frame() {
        let mut r = FrameReader::new(16, 1024);
        let src = Trickle(u32::MAX.to_le_bytes().to_vec(), 64);
        assert_eq!(r.read_from(src, |_| true), Err(FrameError::TooLarge { len: u32::MAX as usize, max: 1024 }));
        let mut r = FrameReader::new(16, 1024);
        assert_eq!(r.read_from(Trickle(framed(&[&[0u8; 3]]), 64), |_| true), Err(FrameError::TooShort { len: 3 }));
        let mut r = FrameReader::new(16, 1024);
        assert!(matches!(r.read_from(&[][..], |_| true), Err(FrameError::Closed(_))));
    }
}
