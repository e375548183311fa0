//! The router-to-router protocol of a cluster: frames between two routers
//! of one cluster, each behind the 4-byte little-endian length that every
//! stream link carries (`tickwire_transport::link`).
//!
//! A frame is one kind byte and its fields, little-endian:
//!
//! | kind | frame | fields |
//! |---|---|---|
//! | 1 | HELLO | version u16, incarnation u64, nonce `[u8; 16]`, heartbeat ms u32, cluster, name, listen, clients (each u16 length + UTF-8) |
//! | 2 | PROOF | HMAC-SHA256 `[u8; 32]` |
//! | 3 | ROUTERS | count u16, then (name, listen) each |
//! | 4 | INTEREST | pattern (to the end) |
//! | 5 | WITHDRAW | pattern (to the end) |
//! | 6 | MESSAGE | sequence u64, discards u32, flags u8, topic (u16 length + UTF-8), payload (to the end) |
//! | 7 | HEARTBEAT | none |
//! | 8 | CLOSE | reason (to the end) |
//! | 9 | PING | stamp u64 (the sender's clock, opaque to the receiver) |
//! | 10 | PONG | stamp u64 (a PING's, sent back at once) |
//! | 11 | GROUP | members u32, group (u16 length + UTF-8), pattern (to the end) |
//! | 12 | GROUP_MESSAGE | sequence u64, discards u32, flags u8, topic, groups (each u16 length + UTF-8), payload (to the end) |
//!
//! Both routers send HELLO first; each then sends PROOF, a keyed hash of
//! both nonces that only a holder of the cluster's secret can make, and
//! checks the other's before acting on anything else. What they are
//! checked against is the router's business; this module only cuts and
//! makes frames, checking each field once ([`ClusterFrame::parse`]).

use thiserror::Error;

/// The protocol version HELLO carries.
/// (2: PING and PONG; 3: GROUP and GROUP_MESSAGE; 4: HELLO's clients.)
pub const CLUSTER_PROTOCOL_VERSION: u16 = 4;
/// Bytes of a HELLO's nonce.
pub const NONCE_LEN: usize = 16;
/// Bytes of a PROOF.
pub const PROOF_LEN: usize = 32;
/// Bytes of a MESSAGE before its topic's text.
pub const MESSAGE_HEADER: usize = 1 + 8 + 4 + 1 + 2;

/// The kind byte of each frame.
pub mod kind {
    /// HELLO.
    pub const HELLO: u8 = 1;
    /// PROOF.
    pub const PROOF: u8 = 2;
    /// ROUTERS.
    pub const ROUTERS: u8 = 3;
    /// INTEREST.
    pub const INTEREST: u8 = 4;
    /// WITHDRAW.
    pub const WITHDRAW: u8 = 5;
    /// MESSAGE.
    pub const MESSAGE: u8 = 6;
    /// HEARTBEAT.
    pub const HEARTBEAT: u8 = 7;
    /// CLOSE.
    pub const CLOSE: u8 = 8;
    /// PING.
    pub const PING: u8 = 9;
    /// PONG.
    pub const PONG: u8 = 10;
    /// GROUP.
    pub const GROUP: u8 = 11;
    /// GROUP_MESSAGE.
    pub const GROUP_MESSAGE: u8 = 12;
}

/// What is wrong with a cluster frame.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ClusterError {
    /// The frame ends before a field does.
    #[error("{frame} frame truncated: {field} runs past its end")]
    Truncated {
        /// The frame.
        frame: &'static str,
        /// The field cut short.
        field: &'static str,
    },
    /// A text field is not UTF-8.
    #[error("{frame} frame: {field} is not UTF-8")]
    NotUtf8 {
        /// The frame.
        frame: &'static str,
        /// The field.
        field: &'static str,
    },
    /// An unknown kind byte (or an empty frame).
    #[error("unknown cluster frame kind {0}")]
    UnknownKind(u8),
    /// Bytes after the last field of a frame that has no open-ended one.
    #[error("{frame} frame has {extra} bytes after its last field")]
    Trailing {
        /// The frame.
        frame: &'static str,
        /// The bytes left over.
        extra: usize,
    },
    /// A field too long to be written in its length.
    #[error("{field} of {len} bytes is too long for its frame")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
    },
}

/// One router's HELLO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello<'a> {
    /// [`CLUSTER_PROTOCOL_VERSION`].
    pub version: u16,
    /// This run of the router (chosen at random at its start): the
    /// sequence of its messages starts again with a new one.
    pub incarnation: u64,
    /// The challenge the other router's PROOF must answer.
    pub nonce: [u8; NONCE_LEN],
    /// Its heartbeat interval, ms: both ends of a link use the shorter.
    pub heartbeat_ms: u32,
    /// The cluster's name.
    pub cluster: &'a str,
    /// The router's name (unique in its cluster).
    pub name: &'a str,
    /// Where it takes cluster links (`host:port`), for the others to dial.
    pub listen: &'a str,
    /// Where its clients connect: URIs separated by commas
    /// (`tcp://10.0.0.1:7600`), told to the other routers' clients; empty:
    /// none told.
    pub clients: &'a str,
}

/// A cluster frame, parsed (fields borrowed from the frame).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterFrame<'a> {
    /// The first frame each way.
    Hello(Hello<'a>),
    /// The answer to the other's nonce.
    Proof([u8; PROOF_LEN]),
    /// The other routers the sender has links with: (name, listen).
    Routers(Vec<(&'a str, &'a str)>),
    /// The sender's clients now want topics matching this pattern.
    Interest(&'a str),
    /// ... no longer.
    Withdraw(&'a str),
    /// A message one of the sender's clients published.
    Message {
        /// This link's count of messages, from 1 for each incarnation: a
        /// gap is messages lost.
        sequence: u64,
        /// Messages the sender dropped for this link before this one,
        /// that the sequence does not show.
        discards: u32,
        /// What its client frame carried (`REQUEST`, `HEADERS`).
        flags: u8,
        /// Its topic.
        topic: &'a str,
        /// Its payload.
        payload: &'a [u8],
    },
    /// Nothing: the link is alive.
    Heartbeat,
    /// The sender closes the link, and why.
    Close(&'a str),
    /// Answer with PONG and this stamp (a round trip is measured).
    Ping(u64),
    /// The stamp of a PING received.
    Pong(u64),
    /// The sender's clients now hold `members` subscriptions in queue
    /// group `group` on `pattern` (0: none any more). Told again at each
    /// change: the count weighs the sender when the others pick which
    /// router serves the group.
    Group {
        /// Member subscriptions.
        members: u32,
        /// The group's name.
        group: &'a str,
        /// The pattern its members hold.
        pattern: &'a str,
    },
    /// A MESSAGE that the receiver also delivers to one member of each of
    /// `groups` (names separated by a space), which the sender picked it
    /// to serve. A plain MESSAGE serves no queue group.
    GroupMessage {
        /// As MESSAGE's.
        sequence: u64,
        /// ...
        discards: u32,
        /// ...
        flags: u8,
        /// ...
        topic: &'a str,
        /// The queue groups the receiver serves.
        groups: &'a str,
        /// ...
        payload: &'a [u8],
    },
}

/// Reads fields off the front of a frame.
struct Fields<'a> {
    rest: &'a [u8],
    frame: &'static str,
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], ClusterError> {
        if self.rest.len() < n {
            return Err(ClusterError::Truncated { frame: self.frame, field });
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }
    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], ClusterError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, field)?);
        Ok(a)
    }
    fn text(&mut self, field: &'static str) -> Result<&'a str, ClusterError> {
        let n = usize::from(u16::from_le_bytes(self.array(field)?));
        let b = self.take(n, field)?;
        std::str::from_utf8(b).map_err(|_| ClusterError::NotUtf8 { frame: self.frame, field })
    }
    fn rest_text(&mut self, field: &'static str) -> Result<&'a str, ClusterError> {
        let b = std::mem::take(&mut self.rest);
        std::str::from_utf8(b).map_err(|_| ClusterError::NotUtf8 { frame: self.frame, field })
    }
    fn end(&self) -> Result<(), ClusterError> {
        match self.rest.len() {
            0 => Ok(()),
            extra => Err(ClusterError::Trailing { frame: self.frame, extra }),
        }
    }
}

fn put_text(out: &mut Vec<u8>, field: &'static str, s: &str) -> Result<(), ClusterError> {
    let n = u16::try_from(s.len()).map_err(|_| ClusterError::TooLong { field, len: s.len() })?;
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

impl<'a> ClusterFrame<'a> {
    /// Parses one frame (without its length prefix), checking every field.
    ///
    /// # Errors
    /// [`ClusterError`] naming the frame and the field at fault.
    pub fn parse(frame: &'a [u8]) -> Result<Self, ClusterError> {
        let Some((&k, body)) = frame.split_first() else { return Err(ClusterError::UnknownKind(0)) };
        let name = match k {
            kind::HELLO => "HELLO",
            kind::PROOF => "PROOF",
            kind::ROUTERS => "ROUTERS",
            kind::INTEREST => "INTEREST",
            kind::WITHDRAW => "WITHDRAW",
            kind::MESSAGE => "MESSAGE",
            kind::HEARTBEAT => "HEARTBEAT",
            kind::CLOSE => "CLOSE",
            kind::PING => "PING",
            kind::PONG => "PONG",
            kind::GROUP => "GROUP",
            kind::GROUP_MESSAGE => "GROUP_MESSAGE",
            other => return Err(ClusterError::UnknownKind(other)),
        };
        let mut f = Fields { rest: body, frame: name };
        let parsed = match k {
            kind::HELLO => ClusterFrame::Hello(Hello {
                version: u16::from_le_bytes(f.array("version")?),
                incarnation: u64::from_le_bytes(f.array("incarnation")?),
                nonce: f.array("nonce")?,
                heartbeat_ms: u32::from_le_bytes(f.array("heartbeat")?),
                cluster: f.text("cluster")?,
                name: f.text("name")?,
                listen: f.text("listen")?,
                // (Absent from an older router's HELLO: refused at its
                // version, with the reason, not here.)
                clients: if f.rest.is_empty() { "" } else { f.text("clients")? },
            }),
            kind::PROOF => ClusterFrame::Proof(f.array("proof")?),
            kind::ROUTERS => {
                let n = u16::from_le_bytes(f.array("count")?);
                let mut v = Vec::with_capacity(usize::from(n).min(f.rest.len() / 4));
                for _ in 0..n {
                    v.push((f.text("name")?, f.text("listen")?));
                }
                ClusterFrame::Routers(v)
            }
            kind::INTEREST => ClusterFrame::Interest(f.rest_text("pattern")?),
            kind::WITHDRAW => ClusterFrame::Withdraw(f.rest_text("pattern")?),
            kind::MESSAGE => ClusterFrame::Message {
                sequence: u64::from_le_bytes(f.array("sequence")?),
                discards: u32::from_le_bytes(f.array("discards")?),
                flags: f.array::<1>("flags")?[0],
                topic: f.text("topic")?,
                payload: std::mem::take(&mut f.rest),
            },
            kind::HEARTBEAT => ClusterFrame::Heartbeat,
            kind::PING => ClusterFrame::Ping(u64::from_le_bytes(f.array("stamp")?)),
            kind::PONG => ClusterFrame::Pong(u64::from_le_bytes(f.array("stamp")?)),
            kind::GROUP => ClusterFrame::Group {
                members: u32::from_le_bytes(f.array("members")?),
                group: f.text("group")?,
                pattern: f.rest_text("pattern")?,
            },
            kind::GROUP_MESSAGE => ClusterFrame::GroupMessage {
                sequence: u64::from_le_bytes(f.array("sequence")?),
                discards: u32::from_le_bytes(f.array("discards")?),
                flags: f.array::<1>("flags")?[0],
                topic: f.text("topic")?,
                groups: f.text("groups")?,
                payload: std::mem::take(&mut f.rest),
            },
            _ => ClusterFrame::Close(f.rest_text("reason")?),
        };
        f.end()?;
        Ok(parsed)
    }

    /// Appends the frame (without its length prefix) to `out`.
    ///
    /// # Errors
    /// [`ClusterError::TooLong`]: a text field over 65,535 bytes, or more
    /// than 65,535 routers; `out` is then left as it was.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<(), ClusterError> {
        let start = out.len();
        let r = self.emit_fields(out);
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    fn emit_fields(&self, out: &mut Vec<u8>) -> Result<(), ClusterError> {
        match self {
            ClusterFrame::Hello(h) => {
                out.push(kind::HELLO);
                out.extend_from_slice(&h.version.to_le_bytes());
                out.extend_from_slice(&h.incarnation.to_le_bytes());
                out.extend_from_slice(&h.nonce);
                out.extend_from_slice(&h.heartbeat_ms.to_le_bytes());
                put_text(out, "cluster", h.cluster)?;
                put_text(out, "name", h.name)?;
                put_text(out, "listen", h.listen)?;
                put_text(out, "clients", h.clients)?;
            }
            ClusterFrame::Proof(p) => {
                out.push(kind::PROOF);
                out.extend_from_slice(p);
            }
            ClusterFrame::Routers(v) => {
                out.push(kind::ROUTERS);
                let n = u16::try_from(v.len()).map_err(|_| ClusterError::TooLong { field: "routers", len: v.len() })?;
                out.extend_from_slice(&n.to_le_bytes());
                for (name, listen) in v {
                    put_text(out, "name", name)?;
                    put_text(out, "listen", listen)?;
                }
            }
            ClusterFrame::Interest(p) | ClusterFrame::Withdraw(p) => {
                out.push(if matches!(self, ClusterFrame::Interest(_)) { kind::INTEREST } else { kind::WITHDRAW });
                out.extend_from_slice(p.as_bytes());
            }
            ClusterFrame::Message { sequence, discards, flags, topic, payload } => {
                emit_message_header(out, *sequence, *discards, *flags, topic)?;
                out.extend_from_slice(payload);
            }
            ClusterFrame::GroupMessage { sequence, discards, flags, topic, groups, payload } => {
                emit_group_message_header(out, (*sequence, *discards, *flags), topic, groups)?;
                out.extend_from_slice(payload);
            }
            ClusterFrame::Group { members, group, pattern } => {
                out.push(kind::GROUP);
                out.extend_from_slice(&members.to_le_bytes());
                put_text(out, "group", group)?;
                out.extend_from_slice(pattern.as_bytes());
            }
            ClusterFrame::Heartbeat => out.push(kind::HEARTBEAT),
            ClusterFrame::Ping(stamp) | ClusterFrame::Pong(stamp) => {
                out.push(if matches!(self, ClusterFrame::Ping(_)) { kind::PING } else { kind::PONG });
                out.extend_from_slice(&stamp.to_le_bytes());
            }
            ClusterFrame::Close(reason) => {
                out.push(kind::CLOSE);
                out.extend_from_slice(reason.as_bytes());
            }
        }
        Ok(())
    }
}

/// Appends a MESSAGE's fields up to its payload (which the caller appends):
/// the hot path writes the payload straight into the link's buffer.
///
/// # Errors
/// [`ClusterError::TooLong`]: a topic over 65,535 bytes.
pub fn emit_message_header(
    out: &mut Vec<u8>,
    sequence: u64,
    discards: u32,
    flags: u8,
    topic: &str,
) -> Result<(), ClusterError> {
    emit_numbered(out, kind::MESSAGE, (sequence, discards, flags), topic)
}

/// A MESSAGE's or GROUP_MESSAGE's fields up to the end of its topic.
fn emit_numbered(
    out: &mut Vec<u8>,
    kind: u8,
    (sequence, discards, flags): (u64, u32, u8),
    topic: &str,
) -> Result<(), ClusterError> {
    out.push(kind);
    out.extend_from_slice(&sequence.to_le_bytes());
    out.extend_from_slice(&discards.to_le_bytes());
    out.push(flags);
    put_text(out, "topic", topic)
}

/// [`emit_message_header`] of a GROUP_MESSAGE serving `groups` (names
/// separated by a space).
///
/// # Errors
/// [`ClusterError::TooLong`]: a topic or a list of groups over 65,535
/// bytes.
pub fn emit_group_message_header(
    out: &mut Vec<u8>,
    (sequence, discards, flags): (u64, u32, u8),
    topic: &str,
    groups: &str,
) -> Result<(), ClusterError> {
    emit_numbered(out, kind::GROUP_MESSAGE, (sequence, discards, flags), topic)?;
    put_text(out, "groups", groups)
}

/// A list of queue-group names, separated by a space, as GROUP_MESSAGE
/// carries it (and the router's agents pass it to each other).
pub mod group_list {
    /// Whether `list` names `group`.
    pub fn contains(list: &str, group: &str) -> bool {
        !list.is_empty() && list.split(' ').any(|n| n == group)
    }

    /// Appends `group` to `list`.
    pub fn push(list: &mut String, group: &str) {
        if !list.is_empty() {
            list.push(' ');
        }
        list.push_str(group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(f: &ClusterFrame<'_>) {
        let mut b = Vec::new();
        f.emit(&mut b).unwrap();
        assert_eq!(&ClusterFrame::parse(&b).unwrap(), f);
    }

    #[test]
    fn every_frame_round_trips() {
        round_trip(&ClusterFrame::Hello(Hello {
            version: CLUSTER_PROTOCOL_VERSION,
            incarnation: 0x0102_0304_0506_0708,
            nonce: [9; NONCE_LEN],
            heartbeat_ms: 1000,
            cluster: "prod",
            name: "ldn-1",
            listen: "10.0.0.1:7700",
            clients: "tcp://10.0.0.1:7600,tls://10.0.0.1:7601",
        }));
        round_trip(&ClusterFrame::Proof([3; PROOF_LEN]));
        round_trip(&ClusterFrame::Routers(vec![("a", "10.0.0.1:7700"), ("b", "10.0.0.2:7700")]));
        round_trip(&ClusterFrame::Routers(vec![]));
        round_trip(&ClusterFrame::Interest("md/>"));
        round_trip(&ClusterFrame::Withdraw("md/eu/*"));
        round_trip(&ClusterFrame::Message { sequence: 7, discards: 2, flags: 4, topic: "md/eu/VOD", payload: b"bid" });
        round_trip(&ClusterFrame::Message { sequence: 1, discards: 0, flags: 0, topic: "t", payload: b"" });
        round_trip(&ClusterFrame::Heartbeat);
        round_trip(&ClusterFrame::Close("bad proof"));
        round_trip(&ClusterFrame::Ping(123_456_789));
        round_trip(&ClusterFrame::Pong(u64::MAX));
        round_trip(&ClusterFrame::Group { members: 3, group: "pricers", pattern: "rfq/>" });
        round_trip(&ClusterFrame::Group { members: 0, group: "g", pattern: "t" });
        round_trip(&ClusterFrame::GroupMessage {
            sequence: 9,
            discards: 1,
            flags: 4,
            topic: "rfq/eu",
            groups: "pricers audit",
            payload: b"q",
        });
    }

    #[test]
    fn a_group_list_names_whole_names() {
        let mut l = String::new();
        assert!(!group_list::contains(&l, ""), "an empty list names nothing");
        group_list::push(&mut l, "pricers");
        group_list::push(&mut l, "audit");
        assert_eq!(l, "pricers audit");
        assert!(group_list::contains(&l, "audit") && !group_list::contains(&l, "price"));
    }

    #[test]
    fn a_bad_frame_names_what_is_wrong() {
        assert_eq!(ClusterFrame::parse(&[]), Err(ClusterError::UnknownKind(0)));
        assert_eq!(ClusterFrame::parse(&[99]), Err(ClusterError::UnknownKind(99)));
        assert_eq!(
            ClusterFrame::parse(&[kind::PONG, 1, 2, 3]),
            Err(ClusterError::Truncated { frame: "PONG", field: "stamp" })
        );
        assert_eq!(
            ClusterFrame::parse(&[kind::PROOF, 1, 2]),
            Err(ClusterError::Truncated { frame: "PROOF", field: "proof" })
        );
        assert_eq!(
            ClusterFrame::parse(&[kind::HEARTBEAT, 0]),
            Err(ClusterError::Trailing { frame: "HEARTBEAT", extra: 1 })
        );
        assert_eq!(
            ClusterFrame::parse(&[kind::INTEREST, 0xff]),
            Err(ClusterError::NotUtf8 { frame: "INTEREST", field: "pattern" })
        );
        let mut b = Vec::new();
        emit_message_header(&mut b, 1, 0, 0, "topic").unwrap();
        b.truncate(b.len() - 1);
        assert_eq!(ClusterFrame::parse(&b), Err(ClusterError::Truncated { frame: "MESSAGE", field: "topic" }));
        let long = "x".repeat(70_000);
        let mut out = vec![1, 2];
        let r = ClusterFrame::Routers(vec![(&long, "a")]).emit(&mut out);
        assert_eq!(r, Err(ClusterError::TooLong { field: "name", len: 70_000 }));
        assert_eq!(out, vec![1, 2], "a frame that cannot be written leaves the buffer as it was");
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_fail_without_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(f) = ClusterFrame::parse(&b) {
                let mut again = Vec::new();
                f.emit(&mut again).unwrap();
                prop_assert_eq!(again, b);
            }
        }
    }
}
