//! The client protocol: what a router client and the router say to each
//! other, the same over shared memory (one frame per log message) and TCP
//! (each frame after a 4-byte little-endian length).
//!
//! ```text
//!  0               1               2               3
//!  0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7 0 1 2 3 4 5 6 7
//! +---------------+---------------+-------------------------------+
//! |     kind      |     flags     |          topic_length         | 0
//! +---------------+---------------+-------------------------------+
//! |                             value                             | 4
//! +---------------------------------------------------------------+
//! |                          sequence (u64)                       | 8
//! |                                                               |
//! +---------------------------------------------------------------+
//! |        topic (topic_length bytes of UTF-8) ...                | 16
//! |        body (the rest of the frame) ...                       |
//! +---------------------------------------------------------------+
//! ```
//!
//! | kind | from | value | sequence | topic | body |
//! | --- | --- | --- | --- | --- | --- |
//! | HELLO | client | protocol version | publisher id (random, nonzero; 0: none) | client name | credentials ([`credentials`]) |
//! | WELCOME | router | client id | the router's `max_frame` (0: not said) | | router name, then the cluster's other routers ([`welcome`]) |
//! | SUBSCRIBE | client | subscription id | 0 | pattern | durable name (with `DURABLE`) |
//! | UNSUBSCRIBE | client | subscription id | 0 | | |
//! | PUBLISH | client | 0 | publisher's sequence (`GUARANTEED`: 1, 2, … per publisher id) | topic | payload |
//! | DELIVER | router | messages discarded just before this one (`GUARANTEED`: [`guaranteed_value`]) | delivery sequence (`GUARANTEED`: journal sequence) | topic | payload |
//! | ACK | router | 0 | publisher's sequence: every guaranteed publish up to it is stored | | |
//! | ACK | client | durable subscription id | journal sequence: every delivery of it up to this is done | | |
//! | REJECT | router | [`RejectCode`] | request's id or sequence | | reason (UTF-8) |
//! | CLOSE | either | [`RejectCode`] | 0 | | reason (UTF-8) |
//! | LOSS | router | durable subscription id | first journal sequence lost | | last sequence lost (u64 LE) |
//!
//! Flags: [`flags::GUARANTEED`] (PUBLISH, DELIVER: guaranteed delivery),
//! [`flags::DURABLE`] (SUBSCRIBE: a durable subscription, named in the
//! body), [`flags::REDELIVERED`] (DELIVER: may have been delivered before),
//! [`flags::CACHED`] (DELIVER: from the last-value cache; SUBSCRIBE: send
//! the cached values first), [`flags::SLOW_CONSUMER`] (HELLO: the
//! [`SlowConsumer`] policy the client asks for), [`flags::HEADERS`]
//! (PUBLISH, DELIVER: a header block starts the payload,
//! [`crate::headers`]). Unknown flags are refused,
//! so a flag can gain a meaning later without an old peer misreading it.

use crate::field::{put_u16, put_u32, put_u64, u16_at, u32_at, u64_at};
use crate::MAX_TOPIC_LENGTH;

/// Header bytes before the topic.
pub const HEADER_LEN: usize = 16;
const KIND: usize = 0;
const FLAGS: usize = 1;
const TOPIC_LENGTH: usize = 2;
const VALUE: usize = 4;
const SEQUENCE: usize = 8;
/// Offset of `value` (DELIVER: the discard count, patched in place when a
/// queued frame's predecessors are dropped).
pub const VALUE_OFFSET: usize = VALUE;
/// The protocol version HELLO carries. 2: DELIVER may be flagged
/// `HEADERS` and `QUEUE` (version 1 clients would refuse those flags, so
/// the router refuses version 1 at HELLO, with the reason). 3: WELCOME
/// may name the cluster's other routers after the router's own name
/// ([`welcome`]; a version 2 client is welcomed with the name alone).
pub const CLIENT_PROTOCOL_VERSION: u32 = 3;
/// The oldest version a router of this one takes.
pub const CLIENT_PROTOCOL_OLDEST: u32 = 2;

pub mod welcome;

/// Over shared memory a client publishes its frames into the log
/// `IPC_IN_CHANNEL-ID` (it creates it in a sealed memfd, with a random
/// nonzero ID), logs in on the router's Unix socket [`IPC_LOGIN_SOCKET`]
/// with its ID and HELLO and the log's descriptor beside them, and reads
/// the router's frames from `IPC_OUT_CHANNEL-ID` (the router creates it
/// the same way when it takes the login, and hands it over in its answer).
pub const IPC_IN_CHANNEL: &str = "tw-router-in";
/// See [`IPC_IN_CHANNEL`].
pub const IPC_OUT_CHANNEL: &str = "tw-router-out";
/// The router's login socket in its directory: one message,
/// `[u32 length][u32 ID][HELLO frame]` little-endian (the length counts
/// what follows it), with the client's log beside it (`SCM_RIGHTS`); the
/// answer is one zero byte with the router's log beside it once the router
/// has attached, or a refusal's text, and then the close.
pub const IPC_LOGIN_SOCKET: &str = "router.sock";
/// The router's answer on [`IPC_LOGIN_SOCKET`] to a login it has taken (a
/// refusal is text, never starting with this byte).
pub const IPC_LOGIN_TAKEN: u8 = 0;

/// The login message of [`IPC_LOGIN_SOCKET`] for log `id` and `hello`.
pub fn ipc_login_message(id: u32, hello: &[u8]) -> Vec<u8> {
    let mut msg = Vec::with_capacity(8 + hello.len());
    msg.extend_from_slice(&(4 + hello.len() as u32).to_le_bytes());
    msg.extend_from_slice(&id.to_le_bytes());
    msg.extend_from_slice(hello);
    msg
}

/// Frame flags.
pub mod flags {
    /// PUBLISH / DELIVER: guaranteed delivery (journal, acknowledgement).
    pub const GUARANTEED: u8 = 0x01;
    /// DELIVER: the message comes from the last-value cache.
    /// SUBSCRIBE: deliver the cached values of matching topics first.
    pub const CACHED: u8 = 0x02;
    /// HELLO: two bits naming the [`SlowConsumer`](super::SlowConsumer)
    /// policy the client asks for (0: the router's choice).
    pub const SLOW_CONSUMER: u8 = 0x0C;
    /// SUBSCRIBE: a durable subscription, its name in the body.
    pub const DURABLE: u8 = 0x10;
    /// HELLO: this client's publishes are not delivered to its own
    /// subscriptions (NATS's `echo: false`).
    pub const NO_ECHO: u8 = 0x10;
    /// DELIVER (guaranteed): this message may have been delivered before
    /// (its delivery count is above 1, or the router restarted since).
    pub const REDELIVERED: u8 = 0x20;
    /// PUBLISH: a request, its `sequence` the requester's correlation id,
    /// answered on the requester's inbox ([`crate::request`]).
    /// DELIVER: a request, its body the inbox to reply on and the payload
    /// ([`crate::request::split_body`]).
    pub const REQUEST: u8 = 0x40;
    /// SUBSCRIBE: a member of a queue group, its name in the body.
    /// DELIVER: to this client as a member of a queue group, its body the
    /// member's subscription id then the rest ([`super::split_queue_body`]).
    pub const QUEUE: u8 = 0x80;
    /// PUBLISH / DELIVER: the payload starts with a header block
    /// ([`crate::headers`]).
    pub const HEADERS: u8 = 0x08;
    /// Every flag this version knows, on some kind
    /// ([`ClientKind::flags`](super::ClientKind::flags) says which).
    pub const KNOWN: u8 = GUARANTEED | CACHED | SLOW_CONSUMER | DURABLE | REDELIVERED | REQUEST | QUEUE | HEADERS;
}

/// Bytes a DELIVER may carry beyond the PUBLISH it delivers: a queue
/// member's subscription id (4) and a request's inbox (its length byte and
/// up to [`crate::request::INBOX_MAX`]). A client reads frames up to its
/// `max_frame` and this.
pub const DELIVER_SLACK: usize = 4 + 1 + crate::request::INBOX_MAX;

/// A DELIVER flagged [`flags::QUEUE`]'s body: `subscription` (u32,
/// little-endian), the member's subscription in its group, then `rest`
/// (the payload; for a request, the inbox and the payload); into `out`
/// (cleared first).
pub fn queue_body(subscription: u32, rest: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&subscription.to_le_bytes());
    out.extend_from_slice(rest);
}

/// Splits a DELIVER's body by its `flags`: flagged [`flags::QUEUE`], the
/// queue member's subscription it is for and the rest; else no
/// subscription and the whole body. `None` if it is too short.
pub fn split_queue_body(flags: u8, body: &[u8]) -> Option<(Option<u32>, &[u8])> {
    if flags & flags::QUEUE == 0 {
        return Some((None, body));
    }
    let (id, rest) = body.split_first_chunk::<4>()?;
    Some((Some(u32::from_le_bytes(*id)), rest))
}

/// A guaranteed DELIVER's `value`: the durable subscription's id (low 24
/// bits) and the delivery count (high 8 bits, 255 at most).
pub fn guaranteed_value(subscription: u32, deliveries: u32) -> u32 {
    (subscription & 0x00FF_FFFF) | (deliveries.min(255) << 24)
}

/// A guaranteed DELIVER's `value` read: (subscription id, delivery count).
pub fn split_guaranteed_value(v: u32) -> (u32, u32) {
    (v & 0x00FF_FFFF, v >> 24)
}

/// What the router does when a client's queue is full (it reads slower
/// than its messages come). A client may ask for one in HELLO; a policy
/// its user is given in the router's config wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum SlowConsumer {
    /// Drop its oldest queued messages; the next one it receives carries
    /// the count (Solace's discard indication).
    #[default]
    DropOldest,
    /// End its session with a CLOSE saying why (`Limit`): a client that
    /// must see every message or none.
    Disconnect,
    /// Keep its messages and stop reading the publishers that send it
    /// more until it has read half its queue (bounded by the router's
    /// `back_pressure_timeout`, after which it is disconnected).
    BackPressure,
}

impl SlowConsumer {
    /// Every policy.
    pub const ALL: [Self; 3] = [Self::DropOldest, Self::Disconnect, Self::BackPressure];

    /// Its name in the config file, on the command line and in status.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::DropOldest => "drop-oldest",
            Self::Disconnect => "disconnect",
            Self::BackPressure => "back-pressure",
        }
    }

    /// HELLO's flags asking for this policy.
    pub fn hello_flags(self) -> u8 {
        let code = match self {
            Self::DropOldest => 1,
            Self::Disconnect => 2,
            Self::BackPressure => 3,
        };
        code << flags::SLOW_CONSUMER.trailing_zeros()
    }

    /// The policy HELLO's `flags` ask for, if any.
    pub fn from_hello_flags(f: u8) -> Option<Self> {
        match (f & flags::SLOW_CONSUMER) >> flags::SLOW_CONSUMER.trailing_zeros() {
            1 => Some(Self::DropOldest),
            2 => Some(Self::Disconnect),
            3 => Some(Self::BackPressure),
            _ => None,
        }
    }
}

impl std::fmt::Display for SlowConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SlowConsumer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("{s:?}: one of drop-oldest, disconnect, back-pressure"))
    }
}

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ClientKind {
    /// Client introduces itself.
    Hello = 1,
    /// Router accepts the client.
    Welcome = 2,
    /// Client subscribes to a pattern.
    Subscribe = 3,
    /// Client drops a subscription.
    Unsubscribe = 4,
    /// Client publishes a message.
    Publish = 5,
    /// Router delivers a message.
    Deliver = 6,
    /// Acknowledgement (guaranteed delivery).
    Ack = 7,
    /// Router refuses one request; the session goes on.
    Reject = 8,
    /// The session ends, with a reason.
    Close = 9,
    /// Messages a durable subscription can no longer receive.
    Loss = 10,
    /// Either way, on a TCP link that has been quiet for an interval: the
    /// sender is alive. From the router, `value` is its interval in ms and
    /// `sequence` its receipt: one past the highest direct PUBLISH number
    /// read on this session (sent also an interval after a publish).
    Heartbeat = 11,
}

impl ClientKind {
    /// The flags a frame of this kind may carry (any other is refused:
    /// [`ClientFrameError::UnknownFlags`]).
    pub fn flags(self) -> u8 {
        use flags::*;
        match self {
            ClientKind::Hello => SLOW_CONSUMER | NO_ECHO,
            ClientKind::Subscribe => CACHED | DURABLE | QUEUE,
            ClientKind::Publish => GUARANTEED | REQUEST | HEADERS,
            ClientKind::Deliver => GUARANTEED | CACHED | REDELIVERED | REQUEST | HEADERS | QUEUE,
            _ => 0,
        }
    }

    fn from_u8(v: u8) -> Option<Self> {
        use ClientKind::*;
        Some(match v {
            1 => Hello,
            2 => Welcome,
            3 => Subscribe,
            4 => Unsubscribe,
            5 => Publish,
            6 => Deliver,
            7 => Ack,
            8 => Reject,
            9 => Close,
            10 => Loss,
            11 => Heartbeat,
            _ => return None,
        })
    }
}

/// Why a request was refused or a session closed (REJECT and CLOSE `value`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum RejectCode {
    /// A normal close.
    Normal = 0,
    /// A frame could not be parsed or broke the protocol.
    Protocol = 1,
    /// A topic or pattern broke the topic rules.
    BadTopic = 2,
    /// A frame was larger than allowed.
    TooLarge = 3,
    /// Not supported by this router.
    Unsupported = 4,
    /// Not allowed (authentication, ACLs).
    Forbidden = 5,
    /// The router is shutting down.
    Shutdown = 6,
    /// A resource limit was reached (subscriptions, clients).
    Limit = 7,
    /// A request no subscription wanted: nobody will answer it.
    NoResponders = 8,
    /// This router is not its high-availability group's leader: guaranteed
    /// publishes and durable subscriptions go to the leader (a client
    /// with the group's URL list tries the next).
    NotLeader = 9,
    /// Anything else (an unknown code read from a peer).
    Other = 255,
}

impl RejectCode {
    /// The code for a wire value (unknown values read as `Other`).
    pub fn from_u32(v: u32) -> Self {
        use RejectCode::*;
        match v {
            0 => Normal,
            1 => Protocol,
            2 => BadTopic,
            3 => TooLarge,
            4 => Unsupported,
            5 => Forbidden,
            6 => Shutdown,
            7 => Limit,
            8 => NoResponders,
            9 => NotLeader,
            _ => Other,
        }
    }
}

/// Why bytes are not a client frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClientFrameError {
    /// Shorter than the header, or than the topic it announces.
    #[error("client frame truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// An unknown kind byte.
    #[error("unknown client frame kind {0}")]
    UnknownKind(u8),
    /// Flags this version does not know for the frame's kind.
    #[error("unknown flags {0:#04x} for the frame's kind")]
    UnknownFlags(u8),
    /// A topic over the wire limit, or not UTF-8.
    #[error("client frame topic {0}")]
    BadTopic(&'static str),
}

/// A checked view of one client frame. After [`ClientFrame::new_checked`]
/// no accessor can panic.
#[derive(Debug, Clone, Copy)]
pub struct ClientFrame<'a> {
    buf: &'a [u8],
    kind: ClientKind,
    topic: &'a str,
}

impl<'a> ClientFrame<'a> {
    /// Checks `buf` (exactly one frame) once.
    ///
    /// # Errors
    /// [`ClientFrameError`] naming what is wrong.
    pub fn new_checked(buf: &'a [u8]) -> Result<Self, ClientFrameError> {
        if buf.len() < HEADER_LEN {
            return Err(ClientFrameError::Truncated { need: HEADER_LEN, have: buf.len() });
        }
        let kind = ClientKind::from_u8(buf[KIND]).ok_or(ClientFrameError::UnknownKind(buf[KIND]))?;
        if buf[FLAGS] & !kind.flags() != 0 {
            return Err(ClientFrameError::UnknownFlags(buf[FLAGS]));
        }
        let tl = usize::from(u16_at(buf, TOPIC_LENGTH));
        if tl > MAX_TOPIC_LENGTH {
            return Err(ClientFrameError::BadTopic("longer than the wire limit"));
        }
        if HEADER_LEN + tl > buf.len() {
            return Err(ClientFrameError::Truncated { need: HEADER_LEN + tl, have: buf.len() });
        }
        let topic = std::str::from_utf8(&buf[HEADER_LEN..HEADER_LEN + tl])
            .map_err(|_| ClientFrameError::BadTopic("is not UTF-8"))?;
        Ok(Self { buf, kind, topic })
    }
    /// The kind.
    #[inline]
    pub fn kind(&self) -> ClientKind {
        self.kind
    }
    /// The flags.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buf[FLAGS]
    }
    /// The value field (meaning per kind; see the module table).
    #[inline]
    pub fn value(&self) -> u32 {
        u32_at(self.buf, VALUE)
    }
    /// The sequence field.
    #[inline]
    pub fn sequence(&self) -> u64 {
        u64_at(self.buf, SEQUENCE)
    }
    /// The topic (`""` if none).
    #[inline]
    pub fn topic(&self) -> &'a str {
        self.topic
    }
    /// Everything after the topic.
    #[inline]
    pub fn body(&self) -> &'a [u8] {
        &self.buf[HEADER_LEN + self.topic.len()..]
    }
    /// The whole frame.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }
}

/// A frame's fields, to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientRepr<'a> {
    /// Kind.
    pub kind: ClientKind,
    /// Flags.
    pub flags: u8,
    /// Value field.
    pub value: u32,
    /// Sequence field.
    pub sequence: u64,
    /// Topic.
    pub topic: &'a str,
    /// Body.
    pub body: &'a [u8],
}

impl<'a> ClientRepr<'a> {
    /// A frame of `kind` with every other field empty.
    pub fn new(kind: ClientKind) -> Self {
        Self { kind, flags: 0, value: 0, sequence: 0, topic: "", body: &[] }
    }
    /// Parses a checked view.
    pub fn parse(f: &ClientFrame<'a>) -> Self {
        Self {
            kind: f.kind(),
            flags: f.flags(),
            value: f.value(),
            sequence: f.sequence(),
            topic: f.topic(),
            body: f.body(),
        }
    }
    /// Bytes [`ClientRepr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.topic.len() + self.body.len()
    }
    /// Writes the frame at the start of `buf`; returns its length.
    ///
    /// # Errors
    /// [`ClientFrameError::BadTopic`] for a topic over the wire limit,
    /// [`ClientFrameError::Truncated`] if `buf` is too small.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, ClientFrameError> {
        let len = self.buffer_len();
        if buf.len() < len {
            return Err(ClientFrameError::Truncated { need: len, have: buf.len() });
        }
        self.emit_header(buf)?;
        buf[HEADER_LEN + self.topic.len()..len].copy_from_slice(self.body);
        Ok(len)
    }
    /// Writes the header and topic only (the body goes after them, written
    /// in place by the caller: zero-copy publishing into a claim).
    ///
    /// # Errors
    /// As [`ClientRepr::emit`], for the header and topic.
    pub fn emit_header(&self, buf: &mut [u8]) -> Result<usize, ClientFrameError> {
        let tl = self.topic.len();
        if tl > MAX_TOPIC_LENGTH {
            return Err(ClientFrameError::BadTopic("longer than the wire limit"));
        }
        if buf.len() < HEADER_LEN + tl {
            return Err(ClientFrameError::Truncated { need: HEADER_LEN + tl, have: buf.len() });
        }
        buf[KIND] = self.kind as u8;
        buf[FLAGS] = self.flags;
        put_u16(buf, TOPIC_LENGTH, tl as u16);
        put_u32(buf, VALUE, self.value);
        put_u64(buf, SEQUENCE, self.sequence);
        buf[HEADER_LEN..HEADER_LEN + tl].copy_from_slice(self.topic.as_bytes());
        Ok(HEADER_LEN + tl)
    }
}

/// Sets the `value` field of an emitted frame in place (the discard count of
/// a queued DELIVER). `frame` must hold at least a header.
pub fn set_value(frame: &mut [u8], value: u32) {
    if frame.len() >= HEADER_LEN {
        put_u32(frame, VALUE, value);
    }
}

/// Reads the `value` field of an emitted frame (0 if shorter than a header).
pub fn value_of(frame: &[u8]) -> u32 {
    if frame.len() >= HEADER_LEN {
        u32_at(frame, VALUE)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_refusals() {
        let r = ClientRepr {
            kind: ClientKind::Deliver,
            flags: flags::CACHED,
            value: 3,
            sequence: 99,
            topic: "md/eu/VOD",
            body: b"bid",
        };
        let mut buf = [0u8; 64];
        let n = r.emit(&mut buf).unwrap();
        let f = ClientFrame::new_checked(&buf[..n]).unwrap();
        assert_eq!(ClientRepr::parse(&f), r);
        assert!(matches!(ClientFrame::new_checked(&buf[..10]), Err(ClientFrameError::Truncated { .. })));
        assert!(matches!(ClientFrame::new_checked(&buf[..20]), Err(ClientFrameError::Truncated { need: 25, .. })));
        let mut bad = buf;
        bad[0] = 42;
        assert_eq!(ClientFrame::new_checked(&bad[..n]).unwrap_err(), ClientFrameError::UnknownKind(42));
        let mut bad = buf;
        bad[1] = 0x10;
        assert_eq!(ClientFrame::new_checked(&bad[..n]).unwrap_err(), ClientFrameError::UnknownFlags(0x10));
        let mut bad = buf;
        bad[16] = 0xff;
        assert!(matches!(ClientFrame::new_checked(&bad[..n]), Err(ClientFrameError::BadTopic(_))));
        set_value(&mut buf[..n], 7);
        assert_eq!(value_of(&buf[..n]), 7);
    }

    proptest! {
        #[test]
        fn any_bytes_are_checked_without_panicking(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(f) = ClientFrame::new_checked(&b) {
                let r = ClientRepr::parse(&f);
                let mut out = vec![0u8; r.buffer_len()];
                prop_assert_eq!(r.emit(&mut out), Ok(b.len()));
                prop_assert_eq!(&out[..], &b[..]);
            }
        }
    }
}

/// What HELLO's body carries: nothing (anonymous), or a user and password.
///
/// ```text
///  scheme (u8: 1 = user and password) | user length (u16 LE) | user (UTF-8) | password (the rest)
/// ```
pub mod credentials {
    /// The scheme byte of a user and password.
    pub const PASSWORD: u8 = 1;

    /// HELLO's body for `user` and `password`.
    pub fn password(user: &str, password: &[u8]) -> Vec<u8> {
        let user = &user.as_bytes()[..user.len().min(u16::MAX as usize)];
        let mut b = Vec::with_capacity(3 + user.len() + password.len());
        b.push(PASSWORD);
        b.extend_from_slice(&(user.len() as u16).to_le_bytes());
        b.extend_from_slice(user);
        b.extend_from_slice(password);
        b
    }

    /// Reads HELLO's body: `None` for anonymous, else (user, password).
    ///
    /// # Errors
    /// What is malformed: an unknown scheme, a user longer than the body or
    /// not UTF-8.
    pub fn parse(body: &[u8]) -> Result<Option<(&str, &[u8])>, &'static str> {
        let Some((&scheme, rest)) = body.split_first() else { return Ok(None) };
        if scheme != PASSWORD {
            return Err("unknown credentials scheme");
        }
        let [a, b, rest @ ..] = rest else { return Err("credentials cut short") };
        let n = usize::from(u16::from_le_bytes([*a, *b]));
        if rest.len() < n {
            return Err("credentials cut short");
        }
        let (user, password) = rest.split_at(n);
        let user = std::str::from_utf8(user).map_err(|_| "user name is not UTF-8")?;
        Ok(Some((user, password)))
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn credentials_round_trip_and_bad_ones_are_named() {
            let b = super::password("desk", b"pw\0with nul");
            assert_eq!(super::parse(&b), Ok(Some(("desk", &b"pw\0with nul"[..]))));
            assert_eq!(super::parse(&[]), Ok(None));
            assert_eq!(super::parse(&[9]), Err("unknown credentials scheme"));
            assert_eq!(super::parse(&[1, 5, 0, b'a']), Err("credentials cut short"));
            assert_eq!(super::parse(&[1, 1, 0, 0xff]), Err("user name is not UTF-8"));
        }
    }
}
