//! Authentication with a shared key: a MAC on every datagram, replay
//! protection by origin and sequence, and challenges that make a SETUP
//! fresh.
//!
//! A datagram on a keyed channel ends with an AUTH frame
//! ([`tickwire_wire::auth`]) whose MAC, HMAC-SHA256 truncated to 24 bytes
//! (as RFC 4868 truncates it for IPsec, to 192 bits here), covers every byte
//! before it: the frames and the AUTH frame's session, stream, sequence,
//! challenge and origin. Nothing of a datagram is parsed for meaning before
//! its MAC is checked.
//!
//! HMAC-SHA256 comes from `ring` (already the TLS stack's), which uses the
//! CPU's SHA extensions. It replaced a keyed BLAKE3 hash, which costs more
//! on full datagrams (`tickwire lab auth-cost`, in `docs/PERFORMANCE.md`).
//!
//! * **Forgery.** Without the key no datagram passes: it is dropped and
//!   counted (`unauthenticated`).
//! * **Replay.** Each origin (a sender's session, a receiver's id) numbers
//!   its datagrams; the other end keeps a [`ReplayWindow`] of the last 1024
//!   numbers per origin and drops repeats and older ones (`replayed`).
//! * **Replay of a whole session.** A receiver joins a session only through
//!   a SETUP that echoes the challenge it sent in its SETUP request, so a
//!   captured session cannot be replayed to a receiver as a new one.

use crate::invalid::Invalid;
use tickwire_wire::auth::{AuthFrame, AuthRepr, LEN, MAC, MAC_LEN};
use tickwire_wire::{FrameHeader, FrameType};

/// A 256-bit shared key, with its HMAC state ready.
#[derive(Clone)]
pub struct AuthKey {
    bytes: [u8; 32],
    hmac: ring::hmac::Key,
}

impl PartialEq for AuthKey {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}
impl Eq for AuthKey {}

impl std::fmt::Debug for AuthKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuthKey(..)")
    }
}

/// Why a key's text is unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Not 64 hexadecimal digits.
    #[error("a key is 64 hexadecimal digits (32 bytes), found {0} characters")]
    Length(usize),
    /// A character that is not a hexadecimal digit.
    #[error("a key is hexadecimal digits only, found {0:?}")]
    Character(char),
    /// Every byte the same: not a key anyone generated.
    #[error("the key has every byte equal: generate one with `tickwire keygen FILE`")]
    Weak,
}

impl AuthKey {
    /// A key from its bytes.
    pub fn new(bytes: [u8; 32]) -> Self {
        Self { bytes, hmac: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes) }
    }

    /// Parses 64 hexadecimal digits (surrounding whitespace ignored).
    ///
    /// # Errors
    /// [`KeyError`] naming what is wrong.
    pub fn from_hex(text: &str) -> Result<Self, KeyError> {
        let t = text.trim();
        if t.len() != 64 {
            return Err(KeyError::Length(t.chars().count()));
        }
        let mut out = [0u8; 32];
        for (i, c) in t.chars().enumerate() {
            let d = c.to_digit(16).ok_or(KeyError::Character(c))? as u8;
            out[i / 2] |= if i % 2 == 0 { d << 4 } else { d };
        }
        if out.iter().all(|&b| b == out[0]) {
            return Err(KeyError::Weak);
        }
        Ok(Self::new(out))
    }

    /// The key as 64 hexadecimal digits.
    pub fn to_hex(&self) -> String {
        self.bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn mac(&self, bytes: &[u8]) -> [u8; MAC_LEN] {
        let tag = ring::hmac::sign(&self.hmac, bytes);
        let mut out = [0; MAC_LEN];
        out.copy_from_slice(&tag.as_ref()[..MAC_LEN]);
        out
    }
}

/// What an AUTH frame says, once its MAC has been checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed {
    /// The session of every frame in the datagram.
    pub session_id: u32,
    /// From a receiver (`origin` is its id), not a sender.
    pub from_receiver: bool,
    /// The stream of every frame in the datagram.
    pub stream_id: u32,
    /// The origin's datagram number.
    pub sequence: u64,
    /// A receiver's nonce, or a sender's echo of one (0: none).
    pub challenge: u64,
    /// The sender's session id or the receiver's id.
    pub origin: u32,
}

/// Why a datagram on a keyed channel was dropped before its frames were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsealed {
    /// No AUTH frame at the end, or a wrong MAC.
    Unauthenticated,
}

/// Appends an AUTH frame to the `len` bytes of frames in `buf` (`len` is a
/// multiple of 32) and returns the datagram's length, or `None` if `buf` has
/// no room.
pub fn seal(key: &AuthKey, buf: &mut [u8], len: usize, s: Sealed) -> Option<usize> {
    let end = len + LEN;
    let frame = buf.get_mut(len..end)?;
    let repr = AuthRepr {
        session_id: s.session_id,
        flags: if s.from_receiver { tickwire_wire::flags::FROM_RECEIVER } else { 0 },
        stream_id: s.stream_id,
        sequence: s.sequence,
        challenge: s.challenge,
        origin: s.origin,
        mac: [0; MAC_LEN],
    };
    repr.emit(frame).ok()?;
    let mac = key.mac(&buf[..len + MAC]);
    buf[len + MAC..end].copy_from_slice(&mac);
    Some(end)
}

/// Checks the AUTH frame that ends `datagram` and returns the frames before
/// it with what the AUTH frame says.
///
/// # Errors
/// [`Unsealed::Unauthenticated`] if the datagram does not end with an AUTH
/// frame whose MAC under `key` matches.
pub fn open<'a>(key: &AuthKey, datagram: &'a [u8]) -> Result<(&'a [u8], Sealed), Unsealed> {
    let Some((at, tail)) = auth_tail(datagram).filter(|(at, _)| at % tickwire_wire::FRAME_ALIGNMENT == 0) else {
        return Err(Unsealed::Unauthenticated);
    };
    let Ok(f) = AuthFrame::new_checked(tail) else { return Err(Unsealed::Unauthenticated) };
    let want = key.mac(&datagram[..at + MAC]);
    // Constant time: how much of a MAC matched says nothing.
    if want.iter().zip(f.mac()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) != 0 {
        return Err(Unsealed::Unauthenticated);
    }
    let s = Sealed {
        session_id: f.session_id(),
        from_receiver: f.flags() & tickwire_wire::flags::FROM_RECEIVER != 0,
        stream_id: f.stream_id(),
        sequence: f.sequence(),
        challenge: f.challenge(),
        origin: f.origin(),
    };
    Ok((&datagram[..at], s))
}

/// A received datagram's frames and, on a keyed channel, what its AUTH
/// frame says; or why it is dropped unread: keyed, no valid AUTH frame;
/// unkeyed, a keyed datagram (the other end has a key, this one none).
pub(crate) fn unseal<'a>(key: Option<&AuthKey>, datagram: &'a [u8]) -> Result<(&'a [u8], Option<Sealed>), Invalid> {
    match key {
        None if ends_with_auth(datagram) => Err(Invalid::Unauthenticated),
        None => Ok((datagram, None)),
        Some(key) => open(key, datagram).map(|(b, s)| (b, Some(s))).map_err(|_| Invalid::Unauthenticated),
    }
}

/// Whether an unkeyed endpoint got a keyed datagram (its last 64 bytes are
/// an AUTH frame): the other end has a key and this one has none, so
/// nothing in it is read.
fn ends_with_auth(datagram: &[u8]) -> bool {
    auth_tail(datagram).is_some()
}

/// The last 64 bytes of `datagram` and where they start, if they begin
/// with a valid AUTH frame header (the MAC is not checked).
fn auth_tail(datagram: &[u8]) -> Option<(usize, &[u8])> {
    let at = datagram.len().checked_sub(LEN)?;
    let tail = &datagram[at..];
    FrameHeader::new_checked(tail).is_ok_and(|h| h.frame_type() == FrameType::Auth).then_some((at, tail))
}

/// Whether a datagram ends with an AUTH frame that says it comes from a
/// sender (unchecked: only to skip what would be dropped anyway).
pub(crate) fn claims_a_sender(datagram: &[u8]) -> bool {
    auth_tail(datagram)
        .is_some_and(|(_, tail)| FrameHeader::new_unchecked(tail).flags() & tickwire_wire::flags::FROM_RECEIVER == 0)
}

/// The sequences seen from one origin: the highest, and which of the 1024
/// before it (as IPsec's and WireGuard's anti-replay windows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayWindow {
    /// One past the highest sequence seen (0: none yet).
    top: u64,
    bits: [u64; WORDS],
}

const WORDS: usize = 16;
const SPAN: u64 = (WORDS * 64) as u64;

impl Default for ReplayWindow {
    fn default() -> Self {
        Self::new()
    }
}

impl ReplayWindow {
    /// Nothing seen.
    pub const fn new() -> Self {
        Self { top: 0, bits: [0; WORDS] }
    }

    /// Whether `seq` is new: not seen before and not older than the window.
    /// Does not record it (see [`ReplayWindow::accept`]).
    pub fn is_fresh(&self, seq: u64) -> bool {
        if seq >= self.top {
            return seq != u64::MAX;
        }
        seq.saturating_add(SPAN) >= self.top && !self.get(seq)
    }

    /// A window that has seen `seq` and takes everything before it as seen
    /// too: an origin's datagrams from before the window was made (a
    /// sender's announcements before a receiver joined, a receiver's SETUP
    /// requests before it counted) cannot be replayed into it.
    pub fn after(seq: u64) -> Self {
        let mut w = Self { top: seq.saturating_add(1), bits: [u64::MAX; WORDS] };
        w.set(seq, true);
        w
    }

    /// Records `seq` if it is fresh; returns whether it was.
    pub fn accept(&mut self, seq: u64) -> bool {
        if !self.is_fresh(seq) {
            return false;
        }
        if seq >= self.top {
            let advance = seq + 1 - self.top;
            if advance >= SPAN {
                self.bits = [0; WORDS];
            } else {
                for s in self.top..=seq {
                    self.set(s, false);
                }
            }
            self.top = seq + 1;
        }
        self.set(seq, true);
        true
    }

    fn get(&self, seq: u64) -> bool {
        let i = (seq % SPAN) as usize;
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }
    fn set(&mut self, seq: u64, on: bool) {
        let i = (seq % SPAN) as usize;
        if on {
            self.bits[i / 64] |= 1 << (i % 64);
        } else {
            self.bits[i / 64] &= !(1 << (i % 64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> AuthKey {
        AuthKey::from_hex(&"0123456789abcdef".repeat(4)).unwrap()
    }
    fn sealed() -> Sealed {
        Sealed { session_id: 7, from_receiver: true, stream_id: 1, sequence: 42, challenge: 9, origin: 7 }
    }

    #[test]
    fn a_sealed_datagram_opens_and_any_flipped_bit_does_not() {
        let mut buf = vec![0u8; 256];
        buf[..64].iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        let n = seal(&key(), &mut buf, 64, sealed()).unwrap();
        assert_eq!(n, 128);
        let (frames, s) = open(&key(), &buf[..n]).unwrap();
        assert_eq!((frames.len(), s), (64, sealed()));
        for bit in 0..n * 8 {
            let mut d = buf[..n].to_vec();
            d[bit / 8] ^= 1 << (bit % 8);
            assert!(open(&key(), &d).is_err(), "bit {bit} flipped and still opened");
        }
        let other = AuthKey::new([3; 32]);
        assert!(open(&other, &buf[..n]).is_err());
        assert!(open(&key(), &buf[..n - 32]).is_err());
        assert!(open(&key(), &[]).is_err());
        assert!(seal(&key(), &mut buf[..100], 64, sealed()).is_none());
    }

    #[test]
    fn keys_parse_from_hex_and_bad_text_is_named() {
        assert_eq!(AuthKey::from_hex(&format!(" {}\n", key().to_hex())).unwrap(), key());
        assert_eq!(AuthKey::from_hex("abc"), Err(KeyError::Length(3)));
        assert_eq!(AuthKey::from_hex(&"g".repeat(64)), Err(KeyError::Character('g')));
        assert_eq!(AuthKey::from_hex(&"0".repeat(64)), Err(KeyError::Weak));
    }

    #[test]
    fn the_replay_window_takes_each_sequence_once_and_nothing_too_old() {
        let mut w = ReplayWindow::new();
        assert!(w.accept(5));
        assert!(!w.accept(5));
        assert!(w.accept(3), "reordered but within the window");
        assert!(!w.accept(3));
        assert!(w.accept(5 + SPAN - 1));
        assert!(!w.accept(4), "fell out of the window");
        assert!(w.accept(6));
        assert!(w.accept(100_000));
        assert!(!w.accept(6));
        assert!(!w.accept(100_000 - SPAN));
        assert!(w.accept(100_000 - SPAN + 1));
        assert!(!w.accept(u64::MAX));
        let mut w = ReplayWindow::after(5_000);
        assert!(!w.accept(5_000) && !w.accept(4_999) && !w.accept(3_000));
        assert!(w.accept(5_002) && w.accept(5_001));
    }
}
