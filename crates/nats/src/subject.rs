//! NATS subjects and tickwire topics, one to the other.
//!
//! A NATS subject's tokens are a topic's levels: `md.eu.VOD` is
//! `md/eu/VOD`, and the wildcards are the same (`*` one token, `>` the
//! rest). The topic rules (length, depth, no empty level, wildcards whole)
//! are the router's, checked on the topic; here only what has no topic is
//! refused: a subject whose token holds `/`.
//!
//! The router's inboxes (`_inbox/AGENT.SESSION.SERIAL/ID`, and
//! `_inbox/@PEER.RUN/AGENT.SESSION.SERIAL/ID` for a requester on another
//! router of a cluster) hold dots in a level, so a NATS client sees one
//! with dashes for them, `_inbox.AGENT-SESSION-SERIAL.ID`, a reply subject
//! it can publish to, which maps back to the inbox. (NATS clients' own
//! inboxes are `_INBOX.…`, upper case: ordinary subjects.)

/// The router's inbox namespace, as topic and as subject.
const INBOX: &str = "_inbox";

/// Why a subject has no topic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    /// Nothing at all.
    #[error("Invalid Subject: empty")]
    Empty,
    /// A token holding `/`, the topics' level separator.
    #[error("Invalid Subject: {0:?} holds '/', which tickwire topics use between levels")]
    Slash(String),
}

/// The topic (or pattern) of a NATS `subject`, written into `out`.
///
/// # Errors
/// [`SubjectError`].
pub fn to_topic(subject: &str, out: &mut String) -> Result<(), SubjectError> {
    out.clear();
    if subject.is_empty() {
        return Err(SubjectError::Empty);
    }
    if subject.contains('/') {
        return Err(SubjectError::Slash(subject.to_owned()));
    }
    if let Some(rest) = subject.strip_prefix("_inbox.") {
        out.push_str(INBOX);
        out.push('/');
        out.extend(rest.chars().map(|c| match c {
            '.' => '/',
            '-' => '.',
            c => c,
        }));
        return Ok(());
    }
    out.extend(subject.chars().map(|c| if c == '.' { '/' } else { c }));
    Ok(())
}

/// The NATS subject of a tickwire `topic`, written into `out`.
pub fn to_subject(topic: &str, out: &mut String) {
    out.clear();
    if let Some(rest) = topic.strip_prefix("_inbox/") {
        out.push_str(INBOX);
        out.push('.');
        out.extend(rest.chars().map(|c| match c {
            '/' => '.',
            '.' => '-',
            c => c,
        }));
        return;
    }
    out.extend(topic.chars().map(|c| if c == '/' { '.' } else { c }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(s: &str) -> Result<String, SubjectError> {
        let mut t = String::new();
        to_topic(s, &mut t).map(|()| t)
    }

    fn subject(t: &str) -> String {
        let mut s = String::new();
        to_subject(t, &mut s);
        s
    }

    #[test]
    fn tokens_are_levels_and_the_wildcards_are_the_same() {
        assert_eq!(topic("md.eu.VOD").unwrap(), "md/eu/VOD");
        assert_eq!(topic("md.*.VOD").unwrap(), "md/*/VOD");
        assert_eq!(topic(">").unwrap(), ">");
        assert_eq!(topic("_INBOX.abc.def").unwrap(), "_INBOX/abc/def");
        assert_eq!(subject("md/eu/VOD"), "md.eu.VOD");
        assert_eq!(topic("a/b"), Err(SubjectError::Slash("a/b".into())));
        assert_eq!(topic(""), Err(SubjectError::Empty));
    }

    #[test]
    fn a_router_inbox_has_a_subject_that_maps_back_to_it() {
        let inbox = "_inbox/0.12.7/42";
        let s = subject(inbox);
        assert_eq!(s, "_inbox.0-12-7.42");
        assert_eq!(topic(&s).unwrap(), inbox);
        // A requester's on another router of a cluster.
        let inbox = "_inbox/@1.77/0.12.7/42";
        let s = subject(inbox);
        assert_eq!(s, "_inbox.@1-77.0-12-7.42");
        assert_eq!(topic(&s).unwrap(), inbox);
    }

    proptest::proptest! {
        /// Any topic of plain levels comes back from its subject.
        #[test]
        fn a_topic_comes_back_from_its_subject(levels in proptest::collection::vec("[a-zA-Z0-9_*>-]{1,8}", 1..6)) {
            let t = levels.join("/");
            proptest::prop_assert_eq!(topic(&subject(&t)).unwrap(), t);
        }
    }
}
