//! The peer protocol between the members of a group: length-prefixed
//! frames (`tickwire_transport::framing`) on TCP, each a kind byte and a
//! body, checked once.
//!
//! ```text
//! HELLO  0x01 | from: u64 LE | to: u64 LE | group: UTF-8, 1..=64 bytes
//! RAFT   0x02 | a raft-rs Message (protobuf)
//! ```
//!
//! Each member dials every other member and sends on the connection it
//! dialed; it reads on the connections it accepted. A connection opens
//! with HELLO, which names the sender and the receiver and the group; a
//! HELLO for another group or another member closes it. After it, every
//! RAFT message must come from the member the HELLO named and be for this
//! one (checked by [`crate::Node::handle_message`]).

use tickwire_transport::framing::push_frame;

/// A frame's first byte.
pub const HELLO: u8 = 1;
/// A frame's first byte.
pub const RAFT: u8 = 2;
/// The longest group name.
pub const MAX_GROUP: usize = 64;
/// The largest frame a member accepts (an append carries at most
/// [`crate::HaConfig::max_append`] bytes of entries).
pub const MAX_FRAME: usize = 16 << 20;

/// Why a peer's frame is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// Shorter than its kind's fields, or of no known kind.
    #[error("malformed peer frame: {0}")]
    Malformed(&'static str),
    /// A HELLO naming another group.
    #[error("HELLO for group {got:?}, this is {want:?}")]
    Group {
        /// The group named.
        got: String,
        /// This member's group.
        want: String,
    },
    /// A HELLO for another member, or from one not in the group.
    #[error("HELLO from member {from} to member {to}: {why}")]
    Member {
        /// Who it says it is.
        from: u64,
        /// Whom it is for.
        to: u64,
        /// What is wrong.
        why: &'static str,
    },
}

/// A checked HELLO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello<'a> {
    /// The sender.
    pub from: u64,
    /// The receiver.
    pub to: u64,
    /// The group.
    pub group: &'a str,
}

impl<'a> Hello<'a> {
    /// Parses a frame's body (after the length) as a HELLO.
    ///
    /// # Errors
    /// [`PeerError::Malformed`].
    pub fn parse(frame: &'a [u8]) -> Result<Self, PeerError> {
        if frame.len() < 18 || frame[0] != HELLO {
            return Err(PeerError::Malformed("not a HELLO of at least 18 bytes"));
        }
        let from = u64::from_le_bytes(frame[1..9].try_into().map_err(|_| PeerError::Malformed("from"))?);
        let to = u64::from_le_bytes(frame[9..17].try_into().map_err(|_| PeerError::Malformed("to"))?);
        let group = std::str::from_utf8(&frame[17..]).map_err(|_| PeerError::Malformed("group is not UTF-8"))?;
        if group.len() > MAX_GROUP {
            return Err(PeerError::Malformed("group longer than 64 bytes"));
        }
        Ok(Self { from, to, group })
    }

    /// Appends the frame (length prefix included) to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        push_frame(out, &[&[HELLO], &self.from.to_le_bytes(), &self.to.to_le_bytes(), self.group.as_bytes()]);
    }
}

/// Appends a RAFT frame carrying `message` (encoded) to `out`.
pub fn emit_raft(message: &[u8], out: &mut Vec<u8>) {
    push_frame(out, &[&[RAFT], message]);
}

/// The body of a RAFT frame.
///
/// # Errors
/// [`PeerError::Malformed`] for another kind.
pub fn raft_body(frame: &[u8]) -> Result<&[u8], PeerError> {
    match frame.split_first() {
        Some((&RAFT, body)) => Ok(body),
        _ => Err(PeerError::Malformed("not a RAFT frame")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hello_round_trips() {
        let mut out = Vec::new();
        Hello { from: 3, to: 1, group: "ldn" }.emit(&mut out);
        assert_eq!(out.len(), 4 + 17 + 3);
        assert_eq!(Hello::parse(&out[4..]), Ok(Hello { from: 3, to: 1, group: "ldn" }));
    }

    #[test]
    fn frames_are_their_length_then_kind_and_fields_little_endian() {
        let mut out = Vec::new();
        Hello { from: 0x0102, to: 7, group: "ab" }.emit(&mut out);
        emit_raft(b"xyz", &mut out);
        #[rustfmt::skip]
        let want: &[u8] = &[
            19, 0, 0, 0, HELLO, 2, 1, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, b'a', b'b',
            4, 0, 0, 0, RAFT, b'x', b'y', b'z',
        ];
        assert_eq!(out, want);
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_are_refused(b in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = Hello::parse(&b);
            let _ = raft_body(&b);
        }
    }
}
