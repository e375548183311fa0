//! What a NATS client sends, parsed from the bytes read so far.
//!
//! [`parse`] looks at the unconsumed bytes of a connection and returns the
//! next whole operation as a view into them, with the number of bytes it
//! took; `None` means the bytes end inside an operation (wait for more,
//! and call again with the same bytes and what came after). Nothing is
//! copied and nothing is kept between calls, so an operation split
//! anywhere parses as if read whole.
//!
//! The control line (the operation and its arguments, up to CRLF) is at
//! most [`Limits::max_control_line`] bytes: past that without a line end
//! is an error at once, not a buffer that grows. A `PUB` or `HPUB` whose
//! size is over [`Limits::max_payload`] is refused from its control line,
//! before its payload is waited for. The text of every [`ParseError`] is
//! what a NATS server says in its `-ERR` for it.

use serde::Deserialize;

/// The bounds on what one operation may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest control line, bytes, its CRLF not counted (nats-server:
    /// 4096).
    pub max_control_line: usize,
    /// Largest payload of `PUB` or `HPUB` (headers included), bytes; the
    /// server says it in `INFO`.
    pub max_payload: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_control_line: 4096, max_payload: 1 << 20 }
    }
}

/// One operation from a client, borrowing the bytes it was parsed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientOp<'a> {
    /// `CONNECT {json}`: the JSON (see [`Connect`]).
    Connect(&'a [u8]),
    /// `PUB subject [reply] size` or `HPUB subject [reply] hsize size`.
    Pub {
        /// The subject published on.
        subject: &'a str,
        /// Where replies go, if the publisher asks for them.
        reply: Option<&'a str>,
        /// `HPUB`: the header block (from `NATS/1.0` to its blank line).
        headers: Option<&'a [u8]>,
        /// The payload (after the headers).
        payload: &'a [u8],
    },
    /// `SUB subject [queue] sid`.
    Sub {
        /// The subject or wildcard pattern.
        subject: &'a str,
        /// The queue group joined, if any.
        queue: Option<&'a str>,
        /// The client's id for it.
        sid: &'a str,
    },
    /// `UNSUB sid [max]`: now, or after `max` messages in all.
    Unsub {
        /// The subscription.
        sid: &'a str,
        /// Messages it may have received in all before it ends.
        max: Option<u64>,
    },
    /// `PING`.
    Ping,
    /// `PONG`.
    Pong,
}

/// Why bytes from a client are not an operation. The text is the `-ERR`
/// message a NATS server sends; every one ends the connection, as there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not an operation a client sends.
    #[error("Unknown Protocol Operation")]
    UnknownOp,
    /// No line end within the limit.
    #[error("Maximum Control Line Exceeded")]
    ControlLine {
        /// The limit.
        max: usize,
    },
    /// A payload over the limit.
    #[error("Maximum Payload Violation")]
    MaxPayload {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// Arguments that do not fit the operation.
    #[error("{0}")]
    Arguments(&'static str),
}

/// `CONNECT`'s JSON: what a tickwire router uses of it (the rest is
/// ignored, as a NATS server ignores what it does not know).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Connect {
    /// `+OK` after every well-formed operation.
    pub verbose: bool,
    /// Strict checking of subjects.
    pub pedantic: bool,
    /// The client wants TLS.
    pub tls_required: bool,
    /// Token authentication.
    pub auth_token: Option<String>,
    /// User and password authentication.
    pub user: Option<String>,
    /// See `user`.
    pub pass: Option<String>,
    /// The client's name.
    pub name: Option<String>,
    /// The client library's language and version.
    pub lang: Option<String>,
    /// See `lang`.
    pub version: Option<String>,
    /// Protocol level: 1 takes dynamic cluster updates.
    pub protocol: u32,
    /// Whether its own publishes come back to its subscriptions.
    pub echo: bool,
    /// It understands `HMSG`.
    pub headers: bool,
    /// A request with no subscriber gets a 503 status message.
    pub no_responders: bool,
}

impl Default for Connect {
    fn default() -> Self {
        Self {
            verbose: false,
            pedantic: false,
            tls_required: false,
            auth_token: None,
            user: None,
            pass: None,
            name: None,
            lang: None,
            version: None,
            protocol: 0,
            echo: true,
            headers: false,
            no_responders: false,
        }
    }
}

impl Connect {
    /// `CONNECT`'s JSON parsed.
    ///
    /// # Errors
    /// JSON that is not an object of the known fields' types, as a NATS
    /// server's `-ERR` text.
    pub fn parse(json: &[u8]) -> Result<Self, ParseError> {
        serde_json::from_slice(json).map_err(|_| ParseError::Arguments("Invalid CONNECT JSON"))
    }
}

/// Arguments of one control line, at most 5 (`HPUB s r h t` has the most).
struct Args<'a> {
    all: [&'a str; 5],
    n: usize,
}

impl<'a> Args<'a> {
    /// Splits on runs of spaces and tabs; `None` with more than 5.
    fn split(s: &'a str) -> Option<Self> {
        let mut all = [""; 5];
        let mut n = 0;
        for a in s.split([' ', '\t']).filter(|a| !a.is_empty()) {
            *all.get_mut(n)? = a;
            n += 1;
        }
        Some(Self { all, n })
    }

    fn get(&self) -> &[&'a str] {
        &self.all[..self.n]
    }
}

/// A size argument: decimal digits only.
fn size(s: &str) -> Result<usize, ParseError> {
    if s.is_empty() || s.len() > 12 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ParseError::Arguments("Invalid size"));
    }
    s.parse().map_err(|_| ParseError::Arguments("Invalid size"))
}

/// The next whole operation in `buf` and how many bytes it took, or
/// `None` if `buf` ends inside one.
///
/// # Errors
/// [`ParseError`]: the connection is to be told and closed.
pub fn parse<'a>(buf: &'a [u8], limits: &Limits) -> Result<Option<(ClientOp<'a>, usize)>, ParseError> {
    let window = &buf[..buf.len().min(limits.max_control_line + 2)];
    let Some(nl) = window.iter().position(|&b| b == b'\n') else {
        if buf.len() > limits.max_control_line + 1 {
            return Err(ParseError::ControlLine { max: limits.max_control_line });
        }
        return Ok(None);
    };
    let line = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    if line.len() > limits.max_control_line {
        return Err(ParseError::ControlLine { max: limits.max_control_line });
    }
    let after = nl + 1;
    let line = std::str::from_utf8(line).map_err(|_| ParseError::Arguments("Control line is not UTF-8"))?;
    let (op, rest) = match line.find([' ', '\t']) {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => (line, ""),
    };
    let is = |name: &str| op.eq_ignore_ascii_case(name);
    if is("CONNECT") {
        return Ok(Some((ClientOp::Connect(rest.trim_matches([' ', '\t']).as_bytes()), after)));
    }
    let args = Args::split(rest).ok_or(ParseError::Arguments("Too many arguments"))?;
    let args = args.get();
    if is("PUB") || is("HPUB") {
        let headers = is("HPUB");
        let (subject, reply, hsize, total) = match (headers, args) {
            (false, [s, n]) => (*s, None, 0, size(n)?),
            (false, [s, r, n]) => (*s, Some(*r), 0, size(n)?),
            (true, [s, h, n]) => (*s, None, size(h)?, size(n)?),
            (true, [s, r, h, n]) => (*s, Some(*r), size(h)?, size(n)?),
            _ => {
                return Err(ParseError::Arguments(if headers {
                    "Invalid HPUB arguments"
                } else {
                    "Invalid PUB arguments"
                }))
            }
        };
        if total > limits.max_payload {
            return Err(ParseError::MaxPayload { size: total, max: limits.max_payload });
        }
        let end = after + total;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(ParseError::Arguments("Payload not followed by CRLF (its size is wrong)"));
        }
        let body = &buf[after..end];
        let (headers, payload) = if headers {
            if hsize > total || !body.starts_with(b"NATS/1.0") || !body[..hsize].ends_with(b"\r\n\r\n") {
                return Err(ParseError::Arguments("Invalid header block"));
            }
            (Some(&body[..hsize]), &body[hsize..])
        } else {
            (None, body)
        };
        return Ok(Some((ClientOp::Pub { subject, reply, headers, payload }, end + 2)));
    }
    let op = if is("SUB") {
        match args {
            [subject, sid] => ClientOp::Sub { subject, queue: None, sid },
            [subject, queue, sid] => ClientOp::Sub { subject, queue: Some(queue), sid },
            _ => return Err(ParseError::Arguments("Invalid SUB arguments")),
        }
    } else if is("UNSUB") {
        match args {
            [sid] => ClientOp::Unsub { sid, max: None },
            [sid, max] => ClientOp::Unsub { sid, max: Some(size(max)? as u64) },
            _ => return Err(ParseError::Arguments("Invalid UNSUB arguments")),
        }
    } else if is("PING") && args.is_empty() {
        ClientOp::Ping
    } else if is("PONG") && args.is_empty() {
        ClientOp::Pong
    } else {
        return Err(ParseError::UnknownOp);
    };
    Ok(Some((op, after)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(b: &[u8]) -> Result<Option<(ClientOp<'_>, usize)>, ParseError> {
        parse(b, &Limits::default())
    }

    #[test]
    fn each_operation_parses_in_either_case_with_tabs_and_runs_of_spaces() {
        assert_eq!(one(b"ping\r\n"), Ok(Some((ClientOp::Ping, 6))));
        assert_eq!(one(b"PoNg\r\n"), Ok(Some((ClientOp::Pong, 6))));
        let sub = one(b"SUB  md.>\tq  7\r\n").unwrap().unwrap().0;
        assert_eq!(sub, ClientOp::Sub { subject: "md.>", queue: Some("q"), sid: "7" });
        assert_eq!(one(b"unsub 7 10\r\n").unwrap().unwrap().0, ClientOp::Unsub { sid: "7", max: Some(10) });
        let c = one(b"CONNECT {\"verbose\":true,\"user\":\"a\"}\r\n").unwrap().unwrap().0;
        let ClientOp::Connect(json) = c else { panic!("{c:?}") };
        let c = Connect::parse(json).unwrap();
        assert!(c.verbose && c.echo && c.user.as_deref() == Some("a"));
        let p = one(b"PUB a.b _INBOX.x 3\r\nabc\r\n").unwrap().unwrap();
        assert_eq!(p, (ClientOp::Pub { subject: "a.b", reply: Some("_INBOX.x"), headers: None, payload: b"abc" }, 25));
        let h = b"HPUB a 18 21\r\nNATS/1.0\r\nK: v\r\n\r\nabc\r\n";
        let (op, used) = one(h).unwrap().unwrap();
        let hdr: &[u8] = b"NATS/1.0\r\nK: v\r\n\r\n";
        assert_eq!(hdr.len(), 18);
        assert_eq!(op, ClientOp::Pub { subject: "a", reply: None, headers: Some(hdr), payload: b"abc" });
        assert_eq!(used, h.len());
    }

    #[test]
    fn refusals_are_the_nats_server_s_words() {
        assert_eq!(one(b"FOO\r\n").unwrap_err().to_string(), "Unknown Protocol Operation");
        assert_eq!(one(b"PING x\r\n").unwrap_err(), ParseError::UnknownOp);
        let big = format!("PUB a {}\r\n", 2 << 20);
        assert_eq!(one(big.as_bytes()).unwrap_err().to_string(), "Maximum Payload Violation");
        assert_eq!(one(&[b'x'; 5000]).unwrap_err().to_string(), "Maximum Control Line Exceeded");
        assert!(matches!(one(b"PUB a 2\r\nabc\r\n"), Err(ParseError::Arguments(_))));
        assert!(matches!(one(b"PUB a -1\r\n"), Err(ParseError::Arguments(_))));
        assert!(matches!(one(b"SUB a\r\n"), Err(ParseError::Arguments(_))));
        assert!(matches!(one(b"HPUB a 5 3\r\nabc\r\n"), Err(ParseError::Arguments(_))));
        assert!(matches!(one(b"HPUB a 3 3\r\nabc\r\n"), Err(ParseError::Arguments(_))));
        assert!(matches!(one(b"SUB a b c d e f\r\n"), Err(ParseError::Arguments(_))));
        assert!(matches!(one(b"SUB \xff 1\r\n"), Err(ParseError::Arguments(_))));
        assert_eq!(Connect::parse(b"{\"verbose\":\"yes\"}").unwrap_err().to_string(), "Invalid CONNECT JSON");
    }

    #[test]
    fn a_control_line_at_the_limit_is_taken_and_one_byte_past_it_refused() {
        let limits = Limits { max_control_line: 16, max_payload: 64 };
        assert_eq!(parse(b"SUB abcdefghij 1\r\n", &limits).unwrap().unwrap().1, 18);
        assert!(parse(b"SUB abcdefghijk 1\r\n", &limits).is_err());
        // Without its line end yet: waiting up to the limit, refused past it.
        assert_eq!(parse(b"SUB abcdefghij 1\r", &limits), Ok(None));
        assert!(parse(b"SUB abcdefghijk 1\r", &limits).is_err());
    }

    proptest::proptest! {
        /// Operations cut anywhere, fed as a connection reads them, parse
        /// to the same operations as the bytes read whole.
        #[test]
        fn operations_split_anywhere_parse_as_if_read_whole(cuts in proptest::collection::vec(0usize..200, 0..6)) {
            let stream: &[u8] = b"CONNECT {\"headers\":true}\r\nSUB md.> 1\r\nPUB md.eu 5\r\nhello\r\n\
                HPUB x r 12 14\r\nNATS/1.0\r\n\r\nhi\r\nUNSUB 1 3\r\nPING\r\n";
            let limits = Limits::default();
            let mut whole = Vec::new();
            let mut at = 0;
            while let Some((op, n)) = parse(&stream[at..], &limits).unwrap() {
                whole.push(format!("{op:?}"));
                at += n;
            }
            proptest::prop_assert_eq!(at, stream.len());
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(stream.len())).collect();
            cuts.sort_unstable();
            cuts.push(stream.len());
            let (mut got, mut buf, mut from) = (Vec::new(), Vec::new(), 0);
            for c in cuts {
                buf.extend_from_slice(&stream[from..c]);
                from = c;
                let mut used = 0;
                while let Some((op, n)) = parse(&buf[used..], &limits).unwrap() {
                    got.push(format!("{op:?}"));
                    used += n;
                }
                buf.drain(..used);
            }
            proptest::prop_assert_eq!(got, whole);
        }
    }
}
