//! # tickwire-nats: the NATS client protocol, sans I/O
//!
//! The text protocol NATS clients speak (docs.nats.io, "Client Protocol"),
//! for a router that serves them. Three layers, none doing I/O:
//!
//! * [`parse`]: what a client sends (`CONNECT`, `PUB`, `HPUB`, `SUB`,
//!   `UNSUB`, `PING`, `PONG`) parsed from the bytes read so far. One call
//!   returns the next whole operation as a view into those bytes, with how
//!   many it took, or `None` until more arrive: an operation split
//!   anywhere across reads parses the same as one read whole. Limits on
//!   the control line and the payload are checked before anything is
//!   buffered for them, and every refusal is a [`ParseError`] whose text is
//!   the `-ERR` a NATS server sends for it.
//! * [`encode`]: what a server sends (`INFO`, `MSG`, `HMSG`, `PING`,
//!   `PONG`, `+OK`, `-ERR`), appended to a caller's buffer.
//! * [`session`]: one NATS client's session in front of the router: its
//!   operations become the router's client frames, and the frames the
//!   router sends it become NATS operations.
//! * [`subject`]: NATS subjects and tickwire topics, one to the other
//!   (`md.eu.VOD` ↔ `md/eu/VOD`; `*` and `>` are the same wildcards), and
//!   the router's inboxes given a NATS spelling that maps back.
//!
//! ```
//! use tickwire_nats::parse::{parse, ClientOp, Limits};
//! let bytes = b"SUB md.eu.* 1\r\nPUB md.eu.VOD 5\r\nhello\r\nPI";
//! let limits = Limits::default();
//! let (op, used) = parse(bytes, &limits)?.unwrap();
//! assert_eq!(op, ClientOp::Sub { subject: "md.eu.*", queue: None, sid: "1" });
//! let (op, more) = parse(&bytes[used..], &limits)?.unwrap();
//! assert!(matches!(op, ClientOp::Pub { subject: "md.eu.VOD", payload: b"hello", .. }));
//! // "PI" is the start of an operation: wait for the rest.
//! assert_eq!(parse(&bytes[used + more..], &limits)?, None);
//! # Ok::<(), tickwire_nats::parse::ParseError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod encode;
pub mod parse;
pub mod session;
pub mod subject;
