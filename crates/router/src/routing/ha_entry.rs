//! A replicated entry's form ([`super::replicated`] proposes and applies
//! them), checked when applied:
//!
//! ```text
//! kind: u8 | proposer: u64 LE | token: u64 LE | body
//! kind 1 (publishes): { publisher u64 | sequence u64 | topic_len u16 | payload_len u32 | topic | payload }*
//! kind 2 (positions): the durable subscriptions' and queues' states, JSON
//! kind 3 (removals): the names of durable subscriptions and queues gone, JSON
//! ```

/// Kind 1: guaranteed publishes.
pub(super) const PUBLISHES: u8 = 1;
/// Kind 2: durable states.
pub(super) const POSITIONS: u8 = 2;
/// Kind 3: durable subscriptions and queues removed.
pub(super) const REMOVALS: u8 = 3;
/// Kind, proposer and token.
pub(super) const HEADER: usize = 17;
/// A publish's fixed fields.
pub(super) const RECORD_HEADER: usize = 22;

/// A publish in a committed entry.
pub(super) struct Publish<'a> {
    pub(super) publisher: u64,
    pub(super) seq: u64,
    pub(super) topic: &'a str,
    pub(super) payload: &'a [u8],
}

/// The publishes of a kind-1 entry's body, or why it does not parse.
pub(super) fn publishes(mut b: &[u8]) -> Result<Vec<Publish<'_>>, &'static str> {
    let mut out = Vec::new();
    while !b.is_empty() {
        if b.len() < RECORD_HEADER {
            return Err("a publish's header is cut short");
        }
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
        let (publisher, seq) = (u64_at(0), u64_at(8));
        let tlen = u16::from_le_bytes([b[16], b[17]]) as usize;
        let plen = u32::from_le_bytes(b[18..22].try_into().unwrap_or_default()) as usize;
        let rest = &b[RECORD_HEADER..];
        if rest.len() < tlen || rest.len() - tlen < plen {
            return Err("a publish is cut short");
        }
        let topic = std::str::from_utf8(&rest[..tlen]).map_err(|_| "a topic is not UTF-8")?;
        out.push(Publish { publisher, seq, topic, payload: &rest[tlen..tlen + plen] });
        b = &rest[tlen + plen..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_batch_parses_back() {
        let mut b = Vec::new();
        for (p, s, t, d) in [(7u64, 1u64, "a/b", &b"x"[..]), (7, 2, "c", &b""[..]), (9, 5, "d/e/f", &[0u8; 300][..])] {
            b.extend_from_slice(&p.to_le_bytes());
            b.extend_from_slice(&s.to_le_bytes());
            b.extend_from_slice(&(t.len() as u16).to_le_bytes());
            b.extend_from_slice(&(d.len() as u32).to_le_bytes());
            b.extend_from_slice(t.as_bytes());
            b.extend_from_slice(d);
        }
        let got: Vec<(u64, u64, String, usize)> =
            publishes(&b).unwrap().iter().map(|p| (p.publisher, p.seq, p.topic.to_owned(), p.payload.len())).collect();
        assert_eq!(got, [(7, 1, "a/b".into(), 1), (7, 2, "c".into(), 0), (9, 5, "d/e/f".into(), 300)]);
        assert!(publishes(&b[..b.len() - 1]).is_err());
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_are_refused(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = publishes(&b);
        }
    }
}
