//! # tickwire-topic: topics and subscription patterns
//!
//! A **topic** names what a message is about: levels separated by `/`,
//! such as `md/eu/VOD`. A **pattern** is what a subscriber asks for: a topic
//! whose levels may also be wildcards (Solace and NATS semantics):
//!
//! | pattern    | matches                          | does not match        |
//! | ---------- | -------------------------------- | --------------------- |
//! | `md/eu/VOD`| `md/eu/VOD`                      | `md/eu/VOD/bid`       |
//! | `md/*/VOD` | `md/eu/VOD`, `md/us/VOD`         | `md/VOD`, `md/a/b/VOD`|
//! | `md/>`     | `md/eu`, `md/eu/VOD/bid`         | `md`                  |
//! | `>`        | every topic                      |                       |
//!
//! The rules, the same for topics and patterns unless said:
//! * 1 to [`MAX_LEN`] bytes of UTF-8 (the wire's topic limit), at most
//!   [`MAX_LEVELS`] levels.
//! * No empty level: `a//b`, `/a` and `a/` are refused (an empty level is
//!   almost always a bug in the code that built the topic).
//! * No whitespace and no control characters.
//! * `*` matches exactly one level; `>` matches one or more levels and may
//!   only be the last level. Wildcards are whole levels: `a*` or `>b` are
//!   refused, in topics and in patterns, so no level is ambiguous.
//! * A published topic holds no wildcard: `md/*` is refused with
//!   [`TopicError::WildcardInTopic`].
//!
//! Nothing here does I/O. The router's subscription index (a trie with
//! wildcard branches) uses [`Pattern`] and is checked against
//! [`Pattern::matches`], the plain level-by-level matcher. Patterns also
//! compare with each other: [`Pattern::covers`] (every topic one matches,
//! the other does: the cluster tells its peers only the patterns nothing
//! else covers) and [`Pattern::meets`] (some topic both match: an ACL that
//! meets a subscription without covering it filters its topics one by one).
//!
//! # Examples
//!
//! ```
//! use tickwire_topic::{check_topic, Pattern, TopicError};
//! let p = Pattern::parse("md/*/VOD")?;
//! assert!(p.matches("md/eu/VOD"));
//! assert!(!p.matches("md/eu/VOD/bid"));
//! assert!(Pattern::parse("md/>")?.matches("md/eu/VOD/bid"));
//! assert!(matches!(check_topic("md/*/VOD"), Err(TopicError::WildcardInTopic { .. })));
//! # Ok::<(), TopicError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// Longest topic or pattern, in bytes (the wire's topic field limit).
pub const MAX_LEN: usize = 250;
/// Most levels in a topic or pattern.
pub const MAX_LEVELS: usize = 32;

/// Why a topic or pattern was refused. Each names the offending text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// Nothing at all.
    #[error("empty topic")]
    Empty,
    /// Longer than [`MAX_LEN`] bytes.
    #[error("topic of {len} bytes is longer than {MAX_LEN}")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// More than [`MAX_LEVELS`] levels.
    #[error("topic {topic:?} has {levels} levels, more than {MAX_LEVELS}")]
    TooDeep {
        /// The text.
        topic: String,
        /// Its levels.
        levels: usize,
    },
    /// An empty level (`a//b`, `/a`, `a/`).
    #[error("topic {topic:?} has an empty level {level} (levels are counted from 1)")]
    EmptyLevel {
        /// The text.
        topic: String,
        /// Which level, from 1.
        level: usize,
    },
    /// Whitespace or a control character.
    #[error("topic {topic:?} holds {ch:?}: no whitespace or control characters")]
    BadChar {
        /// The text.
        topic: String,
        /// The character.
        ch: char,
    },
    /// A `*` or `>` in a published topic.
    #[error("published topic {topic:?} holds a wildcard; wildcards are for subscriptions")]
    WildcardInTopic {
        /// The text.
        topic: String,
    },
    /// A wildcard that is not a whole level (`a*`, `>b`).
    #[error("pattern {topic:?} level {level}: a wildcard must be a whole level (`*` or `>`)")]
    PartialWildcard {
        /// The text.
        topic: String,
        /// Which level, from 1.
        level: usize,
    },
    /// `>` before the last level.
    #[error("pattern {topic:?}: `>` may only be the last level")]
    TailNotLast {
        /// The text.
        topic: String,
    },
}

/// One level of a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Level {
    /// Matches this text exactly.
    Literal(Box<str>),
    /// `*`: exactly one level.
    One,
    /// `>`: one or more levels; always the last.
    Tail,
}

/// Checks the shape shared by topics and patterns; `wildcards` says whether
/// `*` and `>` may stand as whole levels.
fn check(s: &str, wildcards: bool) -> Result<(), TopicError> {
    if s.is_empty() {
        return Err(TopicError::Empty);
    }
    if s.len() > MAX_LEN {
        return Err(TopicError::TooLong { len: s.len() });
    }
    if let Some(ch) = s.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(TopicError::BadChar { topic: s.into(), ch });
    }
    let levels = s.split('/').count();
    if levels > MAX_LEVELS {
        return Err(TopicError::TooDeep { topic: s.into(), levels });
    }
    for (i, level) in s.split('/').enumerate() {
        if level.is_empty() {
            return Err(TopicError::EmptyLevel { topic: s.into(), level: i + 1 });
        }
        let wild = level.contains(['*', '>']);
        if !wild {
            continue;
        }
        if !wildcards {
            return Err(TopicError::WildcardInTopic { topic: s.into() });
        }
        match level {
            "*" => {}
            ">" if i + 1 == levels => {}
            ">" => return Err(TopicError::TailNotLast { topic: s.into() }),
            _ => return Err(TopicError::PartialWildcard { topic: s.into(), level: i + 1 }),
        }
    }
    Ok(())
}

/// Checks a topic a message is published on.
///
/// # Errors
/// The first rule it breaks, as a [`TopicError`] naming it.
pub fn check_topic(topic: &str) -> Result<(), TopicError> {
    // Every publish checks its topic: one pass over the bytes says yes for
    // a plain ASCII topic; anything else (non-ASCII, or a rule broken)
    // takes the full check, which names the rule.
    if plain_topic(topic.as_bytes()) {
        return Ok(());
    }
    check(topic, false)
}

/// Whether `b` is a valid topic made of printable ASCII: no empty level,
/// no wildcard, no space or control, within the length and depth limits.
/// False does not mean invalid (non-ASCII may be fine): ask [`check`].
#[inline]
fn plain_topic(b: &[u8]) -> bool {
    if b.is_empty() || b.len() > MAX_LEN {
        return false;
    }
    let (mut levels, mut after_slash) = (1, true);
    for &c in b {
        if c == b'/' {
            if after_slash {
                return false;
            }
            levels += 1;
            after_slash = true;
        } else if c <= b' ' || c >= 0x7f || c == b'*' || c == b'>' {
            return false;
        } else {
            after_slash = false;
        }
    }
    !after_slash && levels <= MAX_LEVELS
}

/// A checked subscription pattern: its text and its levels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pattern {
    text: Box<str>,
    levels: Vec<Level>,
}

impl Pattern {
    /// Parses and checks `text`.
    ///
    /// # Errors
    /// The first rule it breaks, as a [`TopicError`] naming it.
    pub fn parse(text: &str) -> Result<Self, TopicError> {
        check(text, true)?;
        let levels = text
            .split('/')
            .map(|l| match l {
                "*" => Level::One,
                ">" => Level::Tail,
                lit => Level::Literal(lit.into()),
            })
            .collect();
        Ok(Self { text: text.into(), levels })
    }

    /// The text it was parsed from.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its levels, in order.
    pub fn levels(&self) -> &[Level] {
        &self.levels
    }

    /// Whether it holds no wildcard (it matches one topic only).
    pub fn is_literal(&self) -> bool {
        self.levels.iter().all(|l| matches!(l, Level::Literal(_)))
    }

    /// Whether `topic` (a checked topic) matches: the plain level-by-level
    /// matcher that the router's index is tested against.
    pub fn matches(&self, topic: &str) -> bool {
        let mut t = topic.split('/');
        for level in &self.levels {
            match level {
                Level::Tail => return t.next().is_some(),
                Level::One => {
                    if t.next().is_none() {
                        return false;
                    }
                }
                Level::Literal(lit) => {
                    if t.next() != Some(&**lit) {
                        return false;
                    }
                }
            }
        }
        t.next().is_none()
    }

    /// Whether every topic `other` matches is matched by `self`: `md/>`
    /// covers `md/eu/*`, `md/*` does not cover `md/>`. The cluster tells
    /// its peers only patterns no other covers, and an ACL that covers a
    /// subscription lets it through whole.
    pub fn covers(&self, other: &Pattern) -> bool {
        covers(&self.levels, &other.levels)
    }

    /// Whether some topic is matched by both `self` and `other`: an ACL
    /// that meets a subscription but does not cover it lets through some of
    /// its topics.
    pub fn meets(&self, other: &Pattern) -> bool {
        meets(&self.levels, &other.levels)
    }
}

fn covers(a: &[Level], p: &[Level]) -> bool {
    match (a.first(), p.first()) {
        (None, None) => true,
        // `>` takes one or more levels, and `p` has at least one left.
        (Some(Level::Tail), Some(_)) => true,
        (Some(_), None) | (None, Some(_)) => false,
        // `*` takes any one level, but not the several a `>` may stand for.
        (Some(Level::One), Some(Level::Literal(_) | Level::One)) => covers(&a[1..], &p[1..]),
        (Some(Level::Literal(x)), Some(Level::Literal(y))) => x == y && covers(&a[1..], &p[1..]),
        (Some(Level::One | Level::Literal(_)), Some(_)) => false,
    }
}

fn meets(a: &[Level], p: &[Level]) -> bool {
    match (a.first(), p.first()) {
        (None, None) => true,
        // A `>` takes whatever the other has left, if it has a level left.
        (Some(Level::Tail), Some(_)) | (Some(_), Some(Level::Tail)) => true,
        (None, Some(_)) | (Some(_), None) => false,
        (Some(Level::Literal(x)), Some(Level::Literal(y))) => x == y && meets(&a[1..], &p[1..]),
        (Some(_), Some(_)) => meets(&a[1..], &p[1..]),
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Pattern {
    type Err = TopicError;
    fn from_str(s: &str) -> Result<Self, TopicError> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn the_one_pass_check_agrees_with_the_full_one(s in "[a-z/*> \\t\u{e9}\u{2003}]{0,12}") {
            prop_assert_eq!(check_topic(&s).is_ok(), check(&s, false).is_ok(), "{:?}", s);
        }
    }

    fn level() -> impl Strategy<Value = String> {
        prop_oneof!["a", "b", Just("*".to_owned())]
    }
    fn pattern() -> impl Strategy<Value = String> {
        (prop::collection::vec(level(), 1..4), any::<bool>()).prop_map(|(mut ls, tail)| {
            if tail {
                ls.push(">".into());
            }
            ls.join("/")
        })
    }
    fn topic() -> impl Strategy<Value = String> {
        prop::collection::vec(prop_oneof!["a", "b", "c"], 1..6).prop_map(|ls| ls.join("/"))
    }
    fn pat(p: &str) -> Pattern {
        Pattern::parse(p).unwrap()
    }

    proptest! {
        /// Against the plain matcher: a topic both match proves they meet;
        /// a topic `p` matches that `a` does not disproves covering.
        #[test]
        fn covers_and_meets_agree_with_matching(a in pattern(), p in pattern(), topics in prop::collection::vec(topic(), 1..64)) {
            let (a, p) = (pat(&a), pat(&p));
            for t in &topics {
                if a.matches(t) && p.matches(t) {
                    prop_assert!(a.meets(&p), "{} and {} both match {t}", a, p);
                }
                if p.matches(t) && !a.matches(t) {
                    prop_assert!(!a.covers(&p), "{} said to cover {} but not {t}", a, p);
                }
            }
        }
    }

    #[test]
    fn covering_is_level_by_level() {
        for (a, b, want) in [
            ("md/>", "md/eu/*", true),
            ("md/>", "md/eu", true),
            ("md/>", "md/>", true),
            ("md/>", "md", false),
            ("md/*", "md/eu", true),
            ("*/eu", "md/eu", true),
            ("md/*", "md/>", false),
            ("md/*", "md/eu/x", false),
            ("md/eu", "md/*", false),
            ("md/eu/x", "md/eu", false),
            ("a/b", "a/b", true),
        ] {
            assert_eq!(pat(a).covers(&pat(b)), want, "{a} covers {b}");
        }
    }

    #[test]
    fn meeting_needs_one_topic_both_match() {
        for (a, b, want) in [
            ("md/eu/>", "md/>", true),
            ("md/*/VOD", "md/eu/*", true),
            ("md/eu", "md/*", true),
            ("md/eu", "md/us", false),
            ("md/>", "md", false),
            ("md/*", "md/eu/x", false),
            (">", "a/b/c", true),
        ] {
            assert_eq!(pat(a).meets(&pat(b)), want, "{a} meets {b}");
            assert_eq!(pat(b).meets(&pat(a)), want, "{b} meets {a}: meeting is symmetric");
        }
    }

    #[test]
    fn the_table_of_cases() {
        let cases: &[(&str, &str, bool)] = &[
            ("md/eu/VOD", "md/eu/VOD", true),
            ("md/eu/VOD", "md/eu/VODA", false),
            ("md/eu/VOD", "md/eu", false),
            ("md/eu/VOD", "md/eu/VOD/bid", false),
            ("md/*/VOD", "md/eu/VOD", true),
            ("md/*/VOD", "md/VOD", false),
            ("md/*/VOD", "md/a/b/VOD", false),
            ("*", "md", true),
            ("*", "md/eu", false),
            ("*/*", "md/eu", true),
            ("md/>", "md/eu", true),
            ("md/>", "md/eu/VOD/bid", true),
            ("md/>", "md", false),
            ("md/>", "mdx/eu", false),
            (">", "md", true),
            (">", "a/b/c/d", true),
            ("*/>", "md", false),
            ("*/>", "md/eu", true),
            ("md/*/>", "md/eu/VOD", true),
            ("md/*/>", "md/eu", false),
            ("é/*", "é/ü", true),
        ];
        for &(p, t, want) in cases {
            check_topic(t).unwrap();
            assert_eq!(Pattern::parse(p).unwrap().matches(t), want, "{p} vs {t}");
        }
    }

    #[test]
    fn refusals_name_the_rule() {
        assert_eq!(check_topic(""), Err(TopicError::Empty));
        assert!(matches!(check_topic("a//b"), Err(TopicError::EmptyLevel { level: 2, .. })));
        assert!(matches!(check_topic("/a"), Err(TopicError::EmptyLevel { level: 1, .. })));
        assert!(matches!(check_topic("a/"), Err(TopicError::EmptyLevel { level: 2, .. })));
        assert!(matches!(check_topic("a b"), Err(TopicError::BadChar { ch: ' ', .. })));
        assert!(matches!(check_topic("a\0"), Err(TopicError::BadChar { ch: '\0', .. })));
        assert!(matches!(check_topic("md/*"), Err(TopicError::WildcardInTopic { .. })));
        assert!(matches!(check_topic("md/a>"), Err(TopicError::WildcardInTopic { .. })));
        assert!(matches!(Pattern::parse("md/a*"), Err(TopicError::PartialWildcard { level: 2, .. })));
        assert!(matches!(Pattern::parse(">/a"), Err(TopicError::TailNotLast { .. })));
        assert_eq!(check_topic(&"a".repeat(MAX_LEN + 1)), Err(TopicError::TooLong { len: MAX_LEN + 1 }));
        check_topic(&"a".repeat(MAX_LEN)).unwrap();
        let deep = vec!["a"; MAX_LEVELS + 1].join("/");
        assert!(matches!(check_topic(&deep), Err(TopicError::TooDeep { levels: 33, .. })));
        check_topic(&vec!["a"; MAX_LEVELS].join("/")).unwrap();
        let e = check_topic("md/*").unwrap_err().to_string();
        assert!(e.contains("md/*") && e.contains("wildcard"), "{e}");
    }
}
