//! Message headers: a block of `Name: value` lines before a message's
//! payload, in NATS's format (`NATS/1.0`, an optional status, then
//! `Name: value` lines, each ended by CRLF, and an empty line), so a NATS
//! client's headers pass through the router unchanged and a native client
//! reads and writes the same ones.
//!
//! A PUBLISH or DELIVER flagged [`HEADERS`](crate::client::flags::HEADERS)
//! has a payload (for a delivered request, what follows its inbox) of the
//! block's length (u32, little-endian), the block, then the message's
//! bytes ([`put`], [`put_block`]). [`split`] checks it once: the length
//! fits, the block starts with `NATS/1.0` and ends with an empty line;
//! [`Headers`] then reads it without failing.

use std::fmt;

/// What every header block starts with.
pub const VERSION_LINE: &str = "NATS/1.0";

/// The longest header block a message may carry.
pub const MAX_BLOCK: usize = 64 << 10;

/// Why a headed payload, or a header to put in one, is not good.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The payload is shorter than the block's length says.
    #[error("the header block's length ({0} bytes) runs past the payload")]
    Truncated(usize),
    /// The block is longer than [`MAX_BLOCK`].
    #[error("a header block of {0} bytes (at most {MAX_BLOCK})")]
    TooLong(usize),
    /// The block does not start with `NATS/1.0` or end with an empty line.
    #[error("a header block must start with {VERSION_LINE:?} and end with an empty line")]
    Malformed,
    /// A name or value that would break the block: a name empty or holding
    /// `:`, white space or a control character; a value holding CR or LF.
    #[error("header {0:?}: a name is printable ASCII without ':' or spaces, a value holds no CR or LF")]
    BadHeader(String),
}

/// A checked header block (see the module docs).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Headers<'a> {
    block: &'a [u8],
}

impl fmt::Debug for Headers<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> Headers<'a> {
    /// Checks a block on its own (what NATS's `HPUB` carries).
    ///
    /// # Errors
    /// [`HeaderError::TooLong`], [`HeaderError::Malformed`].
    pub fn new_checked(block: &'a [u8]) -> Result<Self, HeaderError> {
        if block.len() > MAX_BLOCK {
            return Err(HeaderError::TooLong(block.len()));
        }
        if !block.starts_with(VERSION_LINE.as_bytes()) || !block.ends_with(b"\r\n\r\n") {
            return Err(HeaderError::Malformed);
        }
        Ok(Self { block })
    }

    /// The block's bytes, `NATS/1.0` to the empty line.
    pub fn block(&self) -> &'a [u8] {
        self.block
    }

    /// The status on the first line (`NATS/1.0 503` is 503), if any.
    pub fn status(&self) -> Option<u16> {
        let first = self.block.split(|&b| b == b'\n').next()?;
        let rest = std::str::from_utf8(&first[VERSION_LINE.len()..]).ok()?.trim();
        rest.get(..3)?.parse().ok()
    }

    /// Every `(name, value)` in order (a name may come more than once);
    /// lines that are not UTF-8 or hold no `:` are passed over.
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
        let block: &'a [u8] = self.block;
        block.split(|&b| b == b'\n').skip(1).filter_map(|line| {
            let line = std::str::from_utf8(line).ok()?.trim_end_matches('\r');
            let (name, value) = line.split_once(':')?;
            Some((name, value.trim()))
        })
    }

    /// The first value of `name` (compared ignoring ASCII case).
    pub fn get(&self, name: &str) -> Option<&'a str> {
        self.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v)
    }
}

/// Splits a headed payload into its headers and the message's bytes.
///
/// # Errors
/// [`HeaderError`]: the length runs past the payload, or the block is
/// not one.
pub fn split(payload: &[u8]) -> Result<(Headers<'_>, &[u8]), HeaderError> {
    let Some(len) = payload.get(..4) else { return Err(HeaderError::Truncated(4)) };
    let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
    let rest = &payload[4..];
    if len > rest.len() {
        return Err(HeaderError::Truncated(len));
    }
    let (block, body) = rest.split_at(len);
    Ok((Headers::new_checked(block)?, body))
}

/// A delivered payload's headers, if its frame's `flags` say it has any
/// ([`crate::client::flags::HEADERS`]), and the message's bytes.
///
/// # Errors
/// As [`split`], for a payload flagged so.
pub fn split_flagged(flags: u8, payload: &[u8]) -> Result<(Option<Headers<'_>>, &[u8]), HeaderError> {
    if flags & crate::client::flags::HEADERS == 0 {
        return Ok((None, payload));
    }
    split(payload).map(|(h, p)| (Some(h), p))
}

/// Appends a headed payload of a checked `block` and `body` to `out`.
pub fn put_block(out: &mut Vec<u8>, block: &Headers<'_>, body: &[u8]) {
    out.extend_from_slice(&(block.block.len() as u32).to_le_bytes());
    out.extend_from_slice(block.block);
    out.extend_from_slice(body);
}

/// Writes the block of `headers` (after a `NATS/1.0` line) to `out`.
///
/// # Errors
/// [`HeaderError::BadHeader`] for a name or value that would break the
/// block, [`HeaderError::TooLong`].
pub fn encode_block(out: &mut Vec<u8>, headers: &[(&str, &str)]) -> Result<(), HeaderError> {
    let start = out.len();
    out.extend_from_slice(VERSION_LINE.as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        let bad_name = name.is_empty() || name.bytes().any(|b| b == b':' || !b.is_ascii_graphic());
        if bad_name || value.bytes().any(|b| b == b'\r' || b == b'\n') {
            out.truncate(start);
            return Err(HeaderError::BadHeader((*name).to_owned()));
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if out.len() - start > MAX_BLOCK {
        let n = out.len() - start;
        out.truncate(start);
        return Err(HeaderError::TooLong(n));
    }
    Ok(())
}

/// Appends a headed payload of `headers` and `body` to `out`.
///
/// # Errors
/// See [`encode_block`].
pub fn put(out: &mut Vec<u8>, headers: &[(&str, &str)], body: &[u8]) -> Result<(), HeaderError> {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    if let Err(e) = encode_block(out, headers) {
        out.truncate(at);
        return Err(e);
    }
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    out.extend_from_slice(body);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_put_then_split_give_back_every_pair_and_the_body() {
        let mut p = Vec::new();
        put(&mut p, &[("Trace-Id", "abc"), ("X", "1"), ("X", "2")], b"bid 101.5").unwrap();
        let (h, body) = split(&p).unwrap();
        assert_eq!(body, b"bid 101.5");
        assert_eq!(h.iter().collect::<Vec<_>>(), [("Trace-Id", "abc"), ("X", "1"), ("X", "2")]);
        assert_eq!(h.get("trace-id"), Some("abc"));
        assert_eq!(h.get("nope"), None);
        assert_eq!(h.status(), None);
        let mut again = Vec::new();
        put_block(&mut again, &h, body);
        assert_eq!(again, p);
    }

    #[test]
    fn a_status_line_is_read() {
        let h = Headers::new_checked(b"NATS/1.0 503\r\n\r\n").unwrap();
        assert_eq!(h.status(), Some(503));
        assert_eq!(h.iter().count(), 0);
    }

    #[test]
    fn bad_blocks_and_bad_headers_are_refused() {
        assert_eq!(split(&[1, 0]), Err(HeaderError::Truncated(4)));
        assert_eq!(split(&[9, 0, 0, 0, b'N']), Err(HeaderError::Truncated(9)));
        let mut p = 14u32.to_le_bytes().to_vec();
        p.extend_from_slice(b"HTTP/1.1\r\n\r\nxx");
        assert_eq!(split(&p), Err(HeaderError::Malformed));
        assert_eq!(Headers::new_checked(b"NATS/1.0\r\nA: b\r\n"), Err(HeaderError::Malformed));
        let mut out = b"keep".to_vec();
        for bad in [("", "v"), ("a:b", "v"), ("a b", "v"), ("ok", "x\r\ny: z")] {
            assert!(matches!(put(&mut out, &[bad], b""), Err(HeaderError::BadHeader(_))), "{bad:?}");
            assert_eq!(out, b"keep");
        }
        let long = "v".repeat(MAX_BLOCK);
        assert!(matches!(put(&mut out, &[("a", &long)], b""), Err(HeaderError::TooLong(_))));
        assert_eq!(out, b"keep");
    }
}
