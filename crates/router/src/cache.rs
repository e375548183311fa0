//! The last-value cache: the newest message of each topic that matches the
//! configured patterns, for subscribers that ask for it.
//!
//! ```toml
//! [router.cache]
//! patterns = ["md/>"]          # topics whose last message is kept
//! max_topics = 100000
//! max_bytes = 268435456        # payload bytes kept, all topics together
//! ```
//!
//! A publish on a cached topic replaces the topic's value in place (one
//! hash lookup and a copy). A SUBSCRIBE with the `CACHED` flag is answered,
//! before anything else reaches the subscriber, with the value of every
//! cached topic the pattern matches, each flagged `CACHED`; since a routing
//! agent handles one frame at a time, every message routed before the
//! subscription is in those values and every one after comes live: no gap
//! and no duplicate at the seam. Finding the topics a pattern matches walks
//! a tree of topic levels, so a literal pattern costs its levels and a
//! wildcard the topics it matches, whatever else is cached.
//!
//! When `max_topics` or `max_bytes` is reached, new topics are not cached
//! (counted in [`LastValues::refused`]); a cached topic whose new value
//! would pass `max_bytes` is dropped from the cache.

use rustc_hash::FxHashMap;
use tickwire_topic::{Level, Pattern};
#[cfg(doc)]
use tickwire_wire::client::flags;

/// Topics remembered as not matching the patterns, beyond which that memory
/// is cleared.
const NOT_CACHED_LIMIT: usize = 64 * 1024;
/// In `by_topic`: a topic seen that no pattern matches.
const NOT_CACHED: u32 = u32::MAX;
/// A [`Slot`] not yet known.
const UNKNOWN: u32 = u32::MAX - 1;

/// Where the cache keeps a topic, remembered by the router between the
/// topic's messages ([`LastValues::update_at`]): no hash lookup per message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot(u32);

impl Slot {
    /// Not yet known: the next update looks the topic up.
    pub(crate) const UNKNOWN: Slot = Slot(UNKNOWN);
}

impl Default for Slot {
    fn default() -> Self {
        Self::UNKNOWN
    }
}

/// `[router.cache]`'s limits and patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// Topics whose last message is kept.
    pub patterns: Vec<Pattern>,
    /// Topics kept at most.
    pub max_topics: usize,
    /// Payload bytes kept at most.
    pub max_bytes: usize,
}

#[derive(Debug, Default)]
struct Node {
    children: FxHashMap<Box<str>, Node>,
    /// The entry of the topic ending here.
    entry: Option<u32>,
}

#[derive(Debug)]
struct Entry {
    topic: Box<str>,
    payload: Vec<u8>,
    /// The value's DELIVER flags ([`flags::HEADERS`]: it carries headers).
    flags: u8,
}

/// The cache.
#[derive(Debug)]
pub struct LastValues {
    cfg: CacheConfig,
    entries: Vec<Option<Entry>>,
    free: Vec<u32>,
    by_topic: FxHashMap<Box<str>, u32>,
    tree: Node,
    topics: usize,
    bytes: usize,
    not_cached: usize,
    /// New topics not cached because the cache was full, and topics
    /// dropped for outgrowing it.
    pub refused: u64,
}

impl LastValues {
    /// An empty cache.
    pub fn new(cfg: CacheConfig) -> Self {
        Self {
            cfg,
            entries: Vec::new(),
            free: Vec::new(),
            by_topic: FxHashMap::default(),
            tree: Node::default(),
            topics: 0,
            bytes: 0,
            not_cached: 0,
            refused: 0,
        }
    }

    /// The patterns of the topics it keeps.
    pub fn patterns(&self) -> &[Pattern] {
        &self.cfg.patterns
    }

    /// Topics cached.
    pub fn topics(&self) -> usize {
        self.topics
    }

    /// Payload bytes cached.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Keeps `payload` as `topic`'s value (a checked topic) if the topic is
    /// one to cache.
    #[inline]
    pub fn update(&mut self, topic: &str, payload: &[u8]) {
        self.update_slot(topic, payload, 0);
    }

    /// [`LastValues::update`] of a topic last kept in `slot`, which is
    /// moved if the topic moved: one comparison of topics, not a hash
    /// lookup, for a topic whose slot is known (a topic no pattern matches
    /// costs nothing: the patterns do not change). `flags` are the
    /// message's ([`flags::HEADERS`]), delivered with it.
    #[inline]
    pub(crate) fn update_at(&mut self, slot: &mut Slot, topic: &str, payload: &[u8], flags: u8) {
        match slot.0 {
            NOT_CACHED => return,
            i => {
                if let Some(Some(e)) = self.entries.get(i as usize) {
                    if *e.topic == *topic {
                        *slot = Slot(self.replace(i, payload, flags));
                        return;
                    }
                }
            }
        }
        *slot = Slot(self.update_slot(topic, payload, flags));
    }

    /// [`LastValues::update`]; returns where the topic is kept now
    /// (`NOT_CACHED`, `UNKNOWN` if not kept).
    #[inline]
    fn update_slot(&mut self, topic: &str, payload: &[u8], flags: u8) -> u32 {
        match self.by_topic.get(topic) {
            Some(&NOT_CACHED) => NOT_CACHED,
            Some(&i) => self.replace(i, payload, flags),
            None => self.first(topic, payload, flags),
        }
    }

    fn replace(&mut self, i: u32, payload: &[u8], flags: u8) -> u32 {
        let Some(Some(e)) = self.entries.get_mut(i as usize) else { return UNKNOWN };
        let bytes = self.bytes - e.payload.len() + payload.len();
        if bytes > self.cfg.max_bytes {
            let topic = e.topic.clone();
            self.remove(&topic);
            self.refused += 1;
            return UNKNOWN;
        }
        self.bytes = bytes;
        e.payload.clear();
        e.payload.extend_from_slice(payload);
        e.flags = flags;
        i
    }

    /// A topic seen for the first time.
    #[cold]
    fn first(&mut self, topic: &str, payload: &[u8], flags: u8) -> u32 {
        if !self.cfg.patterns.iter().any(|p| p.matches(topic)) {
            if self.not_cached >= NOT_CACHED_LIMIT {
                self.by_topic.retain(|_, i| *i != NOT_CACHED);
                self.not_cached = 0;
            }
            self.by_topic.insert(topic.into(), NOT_CACHED);
            self.not_cached += 1;
            return NOT_CACHED;
        }
        if self.topics >= self.cfg.max_topics || self.bytes + payload.len() > self.cfg.max_bytes {
            // Not remembered: it may fit later.
            self.refused += 1;
            return UNKNOWN;
        }
        let e = Entry { topic: topic.into(), payload: payload.to_vec(), flags };
        let i = crate::slots::put(&mut self.entries, &mut self.free, e);
        self.by_topic.insert(topic.into(), i);
        let mut node = &mut self.tree;
        for level in topic.split('/') {
            node = node.children.entry(level.into()).or_default();
        }
        node.entry = Some(i);
        self.topics += 1;
        self.bytes += payload.len();
        i
    }

    fn remove(&mut self, topic: &str) {
        let Some(i) = self.by_topic.remove(topic) else { return };
        if let Some(e) = self.entries.get_mut(i as usize).and_then(Option::take) {
            self.bytes -= e.payload.len();
            self.topics -= 1;
            self.free.push(i);
        }
        let levels: Vec<&str> = topic.split('/').collect();
        prune(&mut self.tree, &levels);
    }

    /// Hands `f(topic, payload, flags)` the value of every cached topic
    /// `pattern` matches, with its flags ([`flags::HEADERS`]).
    pub fn each_match(&self, pattern: &Pattern, mut f: impl FnMut(&str, &[u8], u8)) {
        let mut found = Vec::new();
        walk(&self.tree, pattern.levels(), &mut found);
        for i in found {
            if let Some(Some(e)) = self.entries.get(i as usize) {
                f(&e.topic, &e.payload, e.flags);
            }
        }
    }
}

/// Removes `levels`' entry, and the nodes left empty by it.
fn prune(node: &mut Node, levels: &[&str]) -> bool {
    match levels.split_first() {
        None => node.entry = None,
        Some((first, rest)) => {
            if let Some(child) = node.children.get_mut(*first) {
                if prune(child, rest) {
                    node.children.remove(*first);
                }
            }
        }
    }
    node.entry.is_none() && node.children.is_empty()
}

/// Collects the entries under `node` that `levels` match.
fn walk(node: &Node, levels: &[Level], found: &mut Vec<u32>) {
    let Some((first, rest)) = levels.split_first() else {
        found.extend(node.entry);
        return;
    };
    match first {
        Level::Literal(l) => {
            if let Some(child) = node.children.get(&**l) {
                walk(child, rest, found);
            }
        }
        Level::One => {
            for child in node.children.values() {
                walk(child, rest, found);
            }
        }
        Level::Tail => {
            for child in node.children.values() {
                all(child, found);
            }
        }
    }
}

/// Every entry at or under `node`.
fn all(node: &Node, found: &mut Vec<u32>) {
    found.extend(node.entry);
    for child in node.children.values() {
        all(child, found);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(patterns: &[&str], max_topics: usize, max_bytes: usize) -> LastValues {
        let patterns = patterns.iter().map(|p| Pattern::parse(p).unwrap()).collect();
        LastValues::new(CacheConfig { patterns, max_topics, max_bytes })
    }

    fn matched(c: &LastValues, p: &str) -> Vec<(String, Vec<u8>)> {
        let mut v = Vec::new();
        c.each_match(&Pattern::parse(p).unwrap(), |t, b, _| v.push((t.to_owned(), b.to_vec())));
        v.sort();
        v
    }

    #[test]
    fn keeps_the_newest_value_of_matching_topics_only() {
        let mut c = cache(&["md/>"], 10, 1 << 20);
        c.update("md/eu/VOD", b"1");
        c.update("md/eu/VOD", b"22");
        c.update("md/us/IBM", b"3");
        c.update("fx/EURUSD", b"x");
        assert_eq!((c.topics(), c.bytes()), (2, 3));
        assert_eq!(matched(&c, "md/eu/VOD"), [("md/eu/VOD".into(), b"22".to_vec())]);
        assert_eq!(matched(&c, "md/*/IBM"), [("md/us/IBM".into(), b"3".to_vec())]);
        assert_eq!(matched(&c, "md/>").len(), 2);
        assert_eq!(matched(&c, ">").len(), 2);
        assert!(matched(&c, "fx/>").is_empty());
        assert!(matched(&c, "md/eu").is_empty(), "> takes one level or more, * exactly one");
    }

    #[test]
    fn limits_refuse_new_topics_and_drop_one_that_outgrows_the_bytes() {
        let mut c = cache(&[">"], 2, 10);
        c.update("a", b"1234");
        c.update("b", b"1234");
        c.update("c", b"1");
        assert_eq!((c.topics(), c.refused), (2, 1), "max_topics");
        c.update("a", b"123456789");
        assert_eq!((c.topics(), c.bytes(), c.refused), (1, 4, 2), "a dropped: 13 bytes is over 10");
        assert!(matched(&c, "a").is_empty());
        c.update("c", b"12345");
        assert_eq!((c.topics(), c.bytes()), (2, 9), "room again for a topic refused before");
        assert_eq!(matched(&c, ">").len(), 2);
    }

    #[test]
    fn a_remembered_slot_follows_its_topic() {
        let mut c = cache(&["md/>"], 10, 10);
        let (mut a, mut b, mut x) = (Slot::UNKNOWN, Slot::UNKNOWN, Slot::UNKNOWN);
        c.update_at(&mut x, "fx/EURUSD", b"1", 0);
        assert_eq!((x, c.topics()), (Slot(NOT_CACHED), 0));
        c.update_at(&mut a, "md/a", b"1234", 0);
        let mut stale = a;
        c.update_at(&mut a, "md/a", b"12345678901", 0);
        assert_eq!((a, c.topics()), (Slot::UNKNOWN, 0), "outgrew the bytes: dropped");
        c.update_at(&mut b, "md/b", b"22", 0);
        assert_eq!(b, stale, "md/b took the slot md/a left");
        c.update_at(&mut stale, "md/a", b"9", 0);
        assert_ne!(stale, b);
        assert_eq!(matched(&c, "md/>"), [("md/a".into(), b"9".to_vec()), ("md/b".into(), b"22".to_vec())]);
    }
}
