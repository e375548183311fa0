//! The subscription index: which clients want a topic.
//!
//! A trie of topic levels, each node with literal children, a `*` branch
//! and the subscriptions ending there or in a `>` below it (nats-server's
//! sublist). Matching a topic walks at most `levels x 2` branches, however
//! many unrelated subscriptions the index holds. The index keeps no cache:
//! the router remembers each topic's match in its topic table
//! ([`crate::topics`]), recomputed after a subscription changes.
//!
//! What a subscription held is given back when it goes: a node left with
//! nothing is removed (no node stays for a pattern nobody holds), and a
//! list or map left at under a quarter of its room is shrunk. A node is 64
//! bytes: most are leaves, so their children's map is boxed, and made
//! only for a node that has some; lists grow from one entry, not four.

use rustc_hash::FxHashMap as HashMap;
use tickwire_topic::{Level, Pattern};

#[derive(Debug)]
struct Node<K> {
    /// Children by literal level (none: a leaf).
    literal: Option<Box<HashMap<Box<str>, Node<K>>>>,
    one: Option<Box<Node<K>>>,
    /// Patterns ending at this node: (subscriber, subscription id).
    here: Vec<(K, u32)>,
    /// Patterns ending with `>` just below this node.
    tail: Vec<(K, u32)>,
}

impl<K> Default for Node<K> {
    fn default() -> Self {
        Self { literal: None, one: None, here: Vec::new(), tail: Vec::new() }
    }
}

impl<K> Node<K> {
    fn is_empty(&self) -> bool {
        self.literal.is_none() && self.one.is_none() && self.here.is_empty() && self.tail.is_empty()
    }
}

/// Appends `e`, growing `v` from one entry by doubling (not from four).
fn push<E>(v: &mut Vec<E>, e: E) {
    if v.len() == v.capacity() {
        v.reserve_exact(v.len().max(1));
    }
    v.push(e);
}

/// Subscriptions by pattern, matched by topic. `K` names a subscriber (the
/// router's client slot); a subscriber matched by several of its patterns
/// appears once in a match.
#[derive(Debug)]
pub struct SubscriptionIndex<K> {
    root: Node<K>,
    /// [`SubscriptionIndex::matches`]'s answer (kept: no allocation per
    /// call).
    scratch: Vec<K>,
    len: usize,
}

impl<K: Copy + Ord> Default for SubscriptionIndex<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Copy + Ord> SubscriptionIndex<K> {
    /// An empty index.
    pub fn new() -> Self {
        Self { root: Node::default(), scratch: Vec::new(), len: 0 }
    }

    /// Subscriptions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds subscription `id` of `key` on `pattern`.
    pub fn insert(&mut self, pattern: &Pattern, key: K, id: u32) {
        let mut node = &mut self.root;
        for level in pattern.levels() {
            match level {
                Level::Literal(l) => {
                    node = node.literal.get_or_insert_with(Default::default).entry(l.clone()).or_default()
                }
                Level::One => node = node.one.get_or_insert_with(Default::default),
                Level::Tail => {
                    push(&mut node.tail, (key, id));
                    self.len += 1;
                    return;
                }
            }
        }
        push(&mut node.here, (key, id));
        self.len += 1;
    }

    /// Removes subscription `id` of `key` on `pattern`; whether it was there.
    pub fn remove(&mut self, pattern: &Pattern, key: K, id: u32) -> bool {
        let removed = remove_at(&mut self.root, pattern.levels(), key, id);
        if removed {
            self.len -= 1;
        }
        removed
    }

    /// The subscribers `topic` (a checked topic) goes to, each once, in key
    /// order.
    pub fn matches(&mut self, topic: &str) -> &[K] {
        let mut out = std::mem::take(&mut self.scratch);
        self.matches_into(topic, &mut out);
        self.scratch = out;
        &self.scratch
    }

    /// [`SubscriptionIndex::matches`] into `out` (emptied first), which
    /// keeps its allocation from one call to the next.
    pub fn matches_into(&self, topic: &str, out: &mut Vec<K>) {
        out.clear();
        collect(&self.root, topic, out);
        out.sort_unstable();
        out.dedup();
    }
}

fn remove_at<K: Copy + Eq>(node: &mut Node<K>, levels: &[Level], key: K, id: u32) -> bool {
    let take = |v: &mut Vec<(K, u32)>| match v.iter().position(|&e| e == (key, id)) {
        Some(i) => {
            v.swap_remove(i);
            if v.len() < v.capacity() / 4 {
                v.shrink_to(v.len() * 2);
            }
            true
        }
        None => false,
    };
    let Some((first, rest)) = levels.split_first() else {
        return take(&mut node.here);
    };
    match first {
        Level::Tail => take(&mut node.tail),
        Level::One => {
            let Some(child) = node.one.as_deref_mut() else { return false };
            let removed = remove_at(child, rest, key, id);
            if removed && child.is_empty() {
                node.one = None;
            }
            removed
        }
        Level::Literal(l) => {
            let Some(children) = node.literal.as_deref_mut() else { return false };
            let Some(child) = children.get_mut(l) else { return false };
            let removed = remove_at(child, rest, key, id);
            if removed && child.is_empty() {
                children.remove(l);
                if children.is_empty() {
                    node.literal = None;
                } else if children.len() < children.capacity() / 4 {
                    children.shrink_to(children.len() * 2);
                }
            }
            removed
        }
    }
}

fn collect<K: Copy>(node: &Node<K>, topic: &str, out: &mut Vec<K>) {
    let (level, rest) = match topic.split_once('/') {
        Some((l, r)) => (l, Some(r)),
        None => (topic, None),
    };
    // `>` below this node takes this level and everything after it.
    out.extend(node.tail.iter().map(|e| e.0));
    let mut visit = |child: &Node<K>| match rest {
        Some(r) => collect(child, r, out),
        None => out.extend(child.here.iter().map(|e| e.0)),
    };
    if let Some(child) = node.literal.as_deref().and_then(|c| c.get(level)) {
        visit(child);
    }
    if let Some(child) = node.one.as_deref() {
        visit(child);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Pattern {
        Pattern::parse(s).unwrap()
    }

    #[test]
    fn overlapping_patterns_of_one_subscriber_match_it_once() {
        let mut ix = SubscriptionIndex::new();
        ix.insert(&p("md/eu/VOD"), 1u32, 1);
        ix.insert(&p("md/*/VOD"), 1, 2);
        ix.insert(&p("md/>"), 1, 3);
        ix.insert(&p("md/>"), 2, 1);
        ix.insert(&p("fx/>"), 3, 1);
        assert_eq!(ix.matches("md/eu/VOD"), [1, 2]);
        assert_eq!(ix.matches("md"), [] as [u32; 0]);
        assert!(ix.remove(&p("md/>"), 2, 1));
        assert!(!ix.remove(&p("md/>"), 2, 1));
        assert_eq!(ix.matches("md/eu/VOD"), [1]);
        assert!(ix.remove(&p("md/eu/VOD"), 1, 1) && ix.remove(&p("md/*/VOD"), 1, 2) && ix.remove(&p("md/>"), 1, 3));
        assert_eq!(ix.matches("md/eu/VOD"), [] as [u32; 0]);
        assert_eq!(ix.len(), 1);
        assert!(ix.remove(&p("fx/>"), 3, 1));
        assert!(ix.root.is_empty(), "emptied branches are pruned");
    }

    #[test]
    fn a_node_is_64_bytes_and_lists_grow_from_one_entry() {
        println!("index node: {} bytes", std::mem::size_of::<Node<u32>>());
        assert_eq!(std::mem::size_of::<Node<u32>>(), 64);
        let mut ix = SubscriptionIndex::new();
        ix.insert(&p("md/eu/VOD"), 1u32, 1);
        let leaf = |ix: &SubscriptionIndex<u32>| {
            let md = &ix.root.literal.as_ref().unwrap()["md"];
            md.literal.as_ref().unwrap()["eu"].literal.as_ref().unwrap()["VOD"].here.capacity()
        };
        assert_eq!(leaf(&ix), 1, "one subscriber: room for one");
        for k in 2..=9 {
            ix.insert(&p("md/eu/VOD"), k, 1);
        }
        assert_eq!(leaf(&ix), 16, "doubling from one");
        for k in 2..=9 {
            assert!(ix.remove(&p("md/eu/VOD"), k, 1));
        }
        assert!(leaf(&ix) <= 6, "shrunk as they went (16 to 6 at 3 left): {}", leaf(&ix));
    }

    fn level() -> impl Strategy<Value = String> {
        prop_oneof![Just("a".to_owned()), Just("b".to_owned()), Just("c".to_owned())]
    }
    fn topic() -> impl Strategy<Value = String> {
        proptest::collection::vec(level(), 1..5).prop_map(|v| v.join("/"))
    }
    fn pattern() -> impl Strategy<Value = String> {
        (proptest::collection::vec(prop_oneof![3 => level(), 1 => Just("*".to_owned())], 1..5), any::<bool>()).prop_map(
            |(mut v, tail)| {
                if tail {
                    *v.last_mut().unwrap() = ">".into();
                }
                v.join("/")
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        /// The index agrees with the plain matcher through inserts, removals
        /// and repeated lookups.
        #[test]
        fn agrees_with_the_plain_matcher(
            subs in proptest::collection::vec((pattern(), 0u32..6), 0..24),
            drop_every in 2usize..5,
            topics in proptest::collection::vec(topic(), 1..12),
        ) {
            let mut ix = SubscriptionIndex::new();
            let mut live = Vec::new();
            for (i, (pat, key)) in subs.iter().enumerate() {
                let pat = p(pat);
                ix.insert(&pat, *key, i as u32);
                live.push((pat, *key, i as u32));
            }
            let check = |ix: &mut SubscriptionIndex<u32>, live: &[(Pattern, u32, u32)]| -> Result<(), TestCaseError> {
                for _round in 0..2 {
                    for t in &topics {
                        let mut want: Vec<u32> = live.iter().filter(|(p, _, _)| p.matches(t)).map(|e| e.1).collect();
                        want.sort_unstable();
                        want.dedup();
                        prop_assert_eq!(ix.matches(t), &want[..], "topic {}", t);
                    }
                }
                Ok(())
            };
            check(&mut ix, &live)?;
            let mut i = 0;
            live.retain(|(pat, key, id)| {
                i += 1;
                if i % drop_every == 0 { assert!(ix.remove(pat, *key, *id)); false } else { true }
            });
            check(&mut ix, &live)?;
            prop_assert_eq!(ix.len(), live.len());
        }
    }
}
