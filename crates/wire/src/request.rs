//! Request/reply over the router: inboxes and the body of a delivered
//! request.
//!
//! A client sends a request as a PUBLISH flagged
//! [`REQUEST`](crate::client::flags::REQUEST) whose `sequence` is its
//! correlation id. The router delivers it, flagged the same, to every
//! subscriber of the topic (one member of each queue group), with a body
//! of the inbox to answer on and the payload ([`body`], [`split_body`]).
//! An inbox is a topic the router makes for the requester,
//! `_inbox/AGENT.SESSION.SERIAL/CORRELATION` ([`Inbox`]): a reply is a
//! PUBLISH on it, which the router hands to that session alone, never to a
//! subscription (no pattern, not even `>`, matches an inbox, and a pattern
//! naming one is refused). When no subscription wants a request, the
//! router answers at once with REJECT `NoResponders`, its `sequence` the
//! correlation id.
//!
//! Across a router cluster a request reaches responders on other routers
//! too. The router that takes it from a link names the link in its inbox,
//! `_inbox/@PEER.RUN/AGENT.SESSION.SERIAL/CORRELATION` ([`via_peer`]): a
//! reply on that inbox goes back over the link to router `PEER` (its
//! number at this router) in its run `RUN`, as the plain inbox, and that
//! router hands it to the session ([`peer_of`]).

/// The first level of every inbox topic.
pub const INBOX_PREFIX: &str = "_inbox/";

/// The longest inbox topic: the prefix, four 20-digit numbers, and a
/// peer's part (`@`, a 10-digit and a 20-digit number, `.` and `/`).
pub const INBOX_MAX: usize = INBOX_PREFIX.len() + 4 * 20 + 3 + 33;

/// Where a reply goes: the requester's routing agent, its session there
/// (id and serial: an id reused by a later session does not get it), and
/// the requester's correlation id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inbox {
    /// The routing agent serving the requester.
    pub agent: u32,
    /// The requester's session id at that agent.
    pub session: u32,
    /// That session's serial number (unique per router run).
    pub serial: u64,
    /// The requester's correlation id.
    pub correlation: u64,
}

impl Inbox {
    /// Its topic, `_inbox/AGENT.SESSION.SERIAL/CORRELATION`.
    pub fn topic(&self) -> String {
        format!("{INBOX_PREFIX}{}.{}.{}/{}", self.agent, self.session, self.serial, self.correlation)
    }

    /// Reads an inbox topic; `None` for any other topic.
    pub fn parse(topic: &str) -> Option<Self> {
        let rest = topic.strip_prefix(INBOX_PREFIX)?;
        let (who, correlation) = rest.split_once('/')?;
        let mut parts = who.split('.');
        let agent = parts.next()?.parse().ok()?;
        let session = parts.next()?.parse().ok()?;
        let serial = parts.next()?.parse().ok()?;
        if parts.next().is_some() {
            return None;
        }
        Some(Self { agent, session, serial, correlation: correlation.parse().ok()? })
    }
}

/// The inbox `inbox` (a plain one, [`Inbox::parse`]) as a router names it
/// when the request came over its link from router `peer` in that
/// router's run `run`; `None` if `inbox` is not a plain inbox.
pub fn via_peer(peer: u32, run: u64, inbox: &str) -> Option<String> {
    // Rebuilt from its numbers: at most INBOX_MAX whatever the peer sent.
    let i = Inbox::parse(inbox)?;
    Some(format!("{INBOX_PREFIX}@{peer}.{run}/{}.{}.{}/{}", i.agent, i.session, i.serial, i.correlation))
}

/// The peer, its run and the plain inbox (rebuilt from its numbers) of an
/// inbox made by [`via_peer`]; `None` for any other topic.
pub fn peer_of(topic: &str) -> Option<(u32, u64, String)> {
    let rest = topic.strip_prefix(INBOX_PREFIX)?.strip_prefix('@')?;
    let (who, plain) = rest.split_once('/')?;
    let (peer, run) = who.split_once('.')?;
    let plain = Inbox::parse(&format!("{INBOX_PREFIX}{plain}"))?.topic();
    Some((peer.parse().ok()?, run.parse().ok()?, plain))
}

/// Whether `topic` is in the inbox namespace (`_inbox/...`): the router's
/// to route, never a subscription's.
pub fn is_inbox(topic: &str) -> bool {
    topic.starts_with(INBOX_PREFIX) || topic == "_inbox"
}

/// The correlation id of a reply's topic (its last level), if it is an
/// inbox.
pub fn correlation_of(topic: &str) -> Option<u64> {
    let rest = topic.strip_prefix(INBOX_PREFIX)?;
    rest.rsplit_once('/')?.1.parse().ok()
}

/// A delivered request's body: the inbox's length (u8), the inbox, then
/// the payload; into `out` (cleared first).
pub fn body(inbox: &str, payload: &[u8], out: &mut Vec<u8>) {
    debug_assert!(inbox.len() <= usize::from(u8::MAX));
    out.clear();
    out.push(inbox.len() as u8);
    out.extend_from_slice(inbox.as_bytes());
    out.extend_from_slice(payload);
}

/// [`body`] of `inbox`'s topic, written in place (no allocation once
/// `out` has grown).
pub fn body_of(inbox: &Inbox, payload: &[u8], out: &mut Vec<u8>) {
    use std::io::Write;
    out.clear();
    out.push(0);
    let _ = write!(out, "{INBOX_PREFIX}{}.{}.{}/{}", inbox.agent, inbox.session, inbox.serial, inbox.correlation);
    out[0] = (out.len() - 1) as u8;
    out.extend_from_slice(payload);
}

/// Splits a delivered request's body into (inbox, payload); `None` when it
/// is malformed (too short, or the inbox not one).
pub fn split_body(b: &[u8]) -> Option<(&str, &[u8])> {
    let n = usize::from(*b.first()?);
    let inbox = std::str::from_utf8(b.get(1..1 + n)?).ok()?;
    is_inbox(inbox).then(|| (inbox, &b[1 + n..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inbox_round_trips_and_anything_else_is_not_one() {
        let i = Inbox { agent: 2, session: 17, serial: u64::MAX, correlation: 0xdead_beef_0000_0001 };
        let t = i.topic();
        assert!(t.len() <= INBOX_MAX);
        assert_eq!(Inbox::parse(&t), Some(i));
        assert_eq!(correlation_of(&t), Some(i.correlation));
        for bad in ["md/x", "_inbox/1.2/3", "_inbox/1.2.3.4/5", "_inbox/a.2.3/4", "_inbox/1.2.3/x", "_inbox/1.2.3"] {
            assert_eq!(Inbox::parse(bad), None, "{bad}");
        }
        assert!(is_inbox("_inbox") && is_inbox("_inbox/x") && !is_inbox("_inboxes/x"));
    }

    #[test]
    fn an_inbox_named_by_the_link_it_came_over_gives_back_the_peer_its_run_and_the_plain_inbox() {
        let i = Inbox { agent: u32::MAX, session: u32::MAX, serial: u64::MAX, correlation: u64::MAX };
        let plain = i.topic();
        let via = via_peer(u32::MAX, u64::MAX, &plain).unwrap();
        assert!(via.len() <= INBOX_MAX && via.len() <= usize::from(u8::MAX), "{via}");
        assert_eq!(peer_of(&via), Some((u32::MAX, u64::MAX, plain.clone())));
        // Not an inbox of this router's sessions, nor a plain one of a peer's.
        assert_eq!(Inbox::parse(&via), None);
        assert_eq!(peer_of(&plain), None);
        assert_eq!(via_peer(1, 2, &via), None, "a peer's inbox is not named again");
        // Numbers padded by a peer come back in their shortest form.
        let padded = format!("_inbox/{}1.2.3/4", "0".repeat(200));
        assert_eq!(via_peer(5, 6, &padded).as_deref(), Some("_inbox/@5.6/1.2.3/4"));
        assert_eq!(peer_of("_inbox/@5.6/+01.2.3/4"), Some((5, 6, "_inbox/1.2.3/4".to_owned())));
        for bad in ["_inbox/@1/0.1.2/3", "_inbox/@x.2/0.1.2/3", "_inbox/@1.2/0.1/3", "_inbox/@1.2", "md/@1.2/0.1.2/3"] {
            assert_eq!(peer_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_request_body_splits_into_its_inbox_and_payload() {
        let mut b = Vec::new();
        body("_inbox/0.1.2/3", b"rfq", &mut b);
        assert_eq!(split_body(&b), Some(("_inbox/0.1.2/3", &b"rfq"[..])));
        assert_eq!(split_body(&[]), None);
        assert_eq!(split_body(&[40, b'x']), None);
        body("md/not-an-inbox", b"", &mut b);
        assert_eq!(split_body(&b), None);
        let i = Inbox { agent: 1, session: 2, serial: 3, correlation: u64::MAX };
        body_of(&i, b"x", &mut b);
        assert_eq!(split_body(&b), Some((i.topic().as_str(), &b"x"[..])));
    }
}
