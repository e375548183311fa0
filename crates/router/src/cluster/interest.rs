//! Interest across a cluster, sans I/O.
//!
//! * [`LocalInterest`]: the patterns this router's clients hold (as its
//!   routing agents announce them), and which of them its peers are told:
//!   only those no other held pattern covers ([`Pattern::covers`]: `md/>` covers
//!   `md/eu/*`), so a router with a thousand subscriptions under `md/>`
//!   sends one pattern. A change says what to tell and withdraw, tells
//!   first, so no topic is without interest in between.
//! * [`RemoteInterest`]: the patterns each peer router told, in one index
//!   keyed by peer, and their union, which the routing agents are told as
//!   the interest of one more agent (the cluster's) so that they forward
//!   matching messages to it.

use crate::index::SubscriptionIndex;
use crate::peers::Interest;
use std::collections::{BTreeMap, BTreeSet};
use tickwire_topic::Pattern;

/// A change to what peers are told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Told {
    /// Tell them: this router wants topics matching it.
    Interest(Pattern),
    /// ... no longer.
    Withdraw(Pattern),
}

/// The patterns this router's clients hold, across its routing agents.
///
/// Only a pattern with a wildcard can cover another, so a literal one
/// (most subscriptions: one instrument each) is checked against the told
/// patterns with wildcards alone, and covers nothing when it comes or goes.
#[derive(Debug, Default)]
pub struct LocalInterest {
    /// Pattern text to (pattern, agents holding it).
    held: BTreeMap<Box<str>, (Pattern, u32)>,
    /// The held patterns no other held pattern covers: what peers know.
    told: BTreeSet<Box<str>>,
    /// Those of them with a wildcard.
    told_wild: BTreeSet<Box<str>>,
}

impl LocalInterest {
    /// Whether a told pattern other than `q` covers `q`.
    fn covered(&self, q: &Pattern) -> bool {
        self.told_wild.iter().any(|t| **t != *q.as_str() && self.held.get(t).is_some_and(|(w, _)| w.covers(q)))
    }

    fn tell(&mut self, p: &Pattern, out: &mut Vec<Told>) {
        self.told.insert(p.as_str().into());
        if !p.is_literal() {
            self.told_wild.insert(p.as_str().into());
        }
        out.push(Told::Interest(p.clone()));
    }

    /// A routing agent now holds `p`; what to tell peers goes to `out`.
    pub fn hold(&mut self, p: &Pattern, out: &mut Vec<Told>) {
        if let Some((_, n)) = self.held.get_mut(p.as_str()) {
            *n += 1;
            return;
        }
        self.held.insert(p.as_str().into(), (p.clone(), 1));
        if self.covered(p) {
            return;
        }
        self.tell(p, out);
        if p.is_literal() {
            return;
        }
        let covered: Vec<Box<str>> = self
            .told
            .iter()
            .filter(|t| ***t != *p.as_str() && self.held.get(*t).is_some_and(|(q, _)| p.covers(q)))
            .cloned()
            .collect();
        for t in covered {
            self.told.remove(&t);
            self.told_wild.remove(&t);
            if let Some((q, _)) = self.held.get(&t) {
                out.push(Told::Withdraw(q.clone()));
            }
        }
    }

    /// A routing agent let go of `p`; what to tell peers goes to `out`.
    pub fn release(&mut self, p: &Pattern, out: &mut Vec<Told>) {
        let Some((_, n)) = self.held.get_mut(p.as_str()) else { return };
        *n -= 1;
        if *n > 0 {
            return;
        }
        self.held.remove(p.as_str());
        if !self.told.remove(p.as_str()) {
            return;
        }
        self.told_wild.remove(p.as_str());
        if !p.is_literal() {
            // What it covered and no other told pattern covers is told
            // again, but for what another of those covers.
            let freed: Vec<Pattern> =
                self.held.values().filter(|(q, _)| p.covers(q) && !self.covered(q)).map(|(q, _)| q.clone()).collect();
            let wild: Vec<&Pattern> = freed.iter().filter(|q| !q.is_literal()).collect();
            let keep: Vec<Pattern> = freed
                .iter()
                .filter(|q| !wild.iter().any(|r| r.as_str() != q.as_str() && r.covers(q)))
                .cloned()
                .collect();
            for q in &keep {
                self.tell(q, out);
            }
        }
        out.push(Told::Withdraw(p.clone()));
    }

    /// What peers are told now (all of it, for a link just made).
    pub fn told(&self) -> impl Iterator<Item = &str> {
        self.told.iter().map(|t| &**t)
    }

    /// The first pattern told after `after` in their order (from the first
    /// without it): a new link's retelling goes on from where it was.
    pub fn told_after(&self, after: Option<&str>) -> Option<&str> {
        use std::ops::Bound::{Excluded, Unbounded};
        let from = after.map_or(Unbounded, Excluded);
        self.told.range::<str, _>((from, Unbounded)).next().map(|t| &**t)
    }

    /// Patterns held, and how many of them peers are told.
    pub fn counts(&self) -> (usize, usize) {
        (self.held.len(), self.told.len())
    }
}

/// The patterns peer routers told: which peers want a topic, and their
/// union, announced to the routing agents as agent `agent`'s interest.
#[derive(Debug)]
pub struct RemoteInterest {
    /// The cluster's number among the routing agents' links.
    agent: u32,
    index: SubscriptionIndex<u32>,
    /// Each peer's patterns.
    by_peer: Vec<BTreeSet<Box<str>>>,
    /// Pattern text to (its id, peers telling it).
    union: BTreeMap<Box<str>, (u32, u32)>,
    next_id: u32,
}

impl RemoteInterest {
    /// Announcing to the routing agents as agent `agent`.
    pub fn new(agent: u32) -> Self {
        Self { agent, index: SubscriptionIndex::new(), by_peer: Vec::new(), union: BTreeMap::new(), next_id: 0 }
    }

    fn peer(&mut self, peer: u32) -> &mut BTreeSet<Box<str>> {
        let k = peer as usize;
        if self.by_peer.len() <= k {
            self.by_peer.resize_with(k + 1, BTreeSet::new);
        }
        &mut self.by_peer[k]
    }

    /// Patterns peer `peer` told.
    pub fn len(&self, peer: u32) -> usize {
        self.by_peer.get(peer as usize).map_or(0, BTreeSet::len)
    }

    /// Peer `peer` wants `p`: a change for the routing agents when no
    /// other peer did.
    pub fn add(&mut self, peer: u32, p: &Pattern) -> Option<Interest> {
        if !self.peer(peer).insert(p.as_str().into()) {
            return None;
        }
        let (id, change) = self.hold(p);
        self.index.insert(p, peer, id);
        change
    }

    /// Peer `peer` no longer wants `p`: a change for the routing agents
    /// when no other peer does.
    pub fn remove(&mut self, peer: u32, p: &Pattern) -> Option<Interest> {
        if !self.peer(peer).remove(p.as_str()) {
            return None;
        }
        let &(id, _) = self.union.get(p.as_str())?;
        self.index.remove(p, peer, id);
        self.let_go(p)
    }

    /// The union holds `p` once more (a peer's pattern, or a queue group's
    /// on a peer: [`super::groups`]); its id, and the change for the
    /// routing agents when it is new.
    fn hold(&mut self, p: &Pattern) -> (u32, Option<Interest>) {
        if let Some((id, n)) = self.union.get_mut(p.as_str()) {
            *n += 1;
            return (*id, None);
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.union.insert(p.as_str().into(), (id, 1));
        (id, Some(Interest::Add { agent: self.agent, id, pattern: p.clone() }))
    }

    /// The union holds `p` once less; the change for the routing agents
    /// when nothing holds it now.
    fn let_go(&mut self, p: &Pattern) -> Option<Interest> {
        let (id, n) = self.union.get_mut(p.as_str())?;
        let id = *id;
        *n -= 1;
        if *n > 0 {
            return None;
        }
        self.union.remove(p.as_str());
        Some(Interest::Remove { agent: self.agent, id, pattern: p.clone() })
    }

    /// What a peer's queue group changed ([`super::groups::Wanted`]): the
    /// routing agents forward messages on a group's pattern to the
    /// cluster while any peer holds members, whatever the peers'
    /// own patterns.
    pub fn group(&mut self, w: &super::groups::Wanted) -> Option<Interest> {
        match w {
            super::groups::Wanted::More(p) => self.hold(p).1,
            super::groups::Wanted::Less(p) => self.let_go(p),
        }
    }

    /// The patterns peer `peer` told.
    pub fn patterns(&self, peer: u32) -> BTreeSet<Box<str>> {
        self.by_peer.get(peer as usize).cloned().unwrap_or_default()
    }

    /// Peer `peer` no longer wants any of `patterns`; the changes for the
    /// routing agents (patterns no other peer wants) are returned.
    pub fn remove_all(&mut self, peer: u32, patterns: BTreeSet<Box<str>>) -> Vec<Interest> {
        let mut out = Vec::new();
        for text in patterns {
            if let Some(c) = Pattern::parse(&text).ok().and_then(|p| self.remove(peer, &p)) {
                out.push(c);
            }
        }
        out
    }

    /// The peers wanting `topic` (a checked topic), into `out` (emptied
    /// first), each once.
    pub fn matches_into(&self, topic: &str, out: &mut Vec<u32>) {
        if self.index.is_empty() {
            out.clear();
            return;
        }
        self.index.matches_into(topic, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Pattern {
        Pattern::parse(s).unwrap()
    }

    #[test]
    fn a_covered_pattern_is_not_told_and_comes_back_when_its_cover_goes() {
        let mut l = LocalInterest::default();
        let mut out = Vec::new();
        l.hold(&p("md/eu/*"), &mut out);
        l.hold(&p("md/us/x"), &mut out);
        assert_eq!(out, vec![Told::Interest(p("md/eu/*")), Told::Interest(p("md/us/x"))]);
        out.clear();
        l.hold(&p("md/>"), &mut out);
        assert_eq!(
            out,
            vec![Told::Interest(p("md/>")), Told::Withdraw(p("md/eu/*")), Told::Withdraw(p("md/us/x"))],
            "the cover is told before what it covers is withdrawn"
        );
        out.clear();
        l.hold(&p("md/eu/VOD"), &mut out);
        l.hold(&p("md/>"), &mut out);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(l.told().collect::<Vec<_>>(), vec!["md/>"]);
        l.release(&p("md/>"), &mut out);
        assert!(out.is_empty(), "another agent still holds it");
        l.release(&p("md/>"), &mut out);
        assert_eq!(
            out,
            vec![Told::Interest(p("md/eu/*")), Told::Interest(p("md/us/x")), Told::Withdraw(p("md/>"))],
            "md/eu/VOD stays covered by md/eu/*"
        );
        out.clear();
        l.release(&p("md/eu/*"), &mut out);
        assert_eq!(out, vec![Told::Interest(p("md/eu/VOD")), Told::Withdraw(p("md/eu/*"))]);
        out.clear();
        l.release(&p("not/held"), &mut out);
        assert!(out.is_empty());
        assert_eq!(l.counts(), (2, 2));
    }

    /// After any holds and releases, what is told is what the definition
    /// says: the held patterns no other held pattern covers, and the
    /// changes sent add up to it.
    #[test]
    fn what_is_told_is_always_the_uncovered_held_patterns() {
        let pool = ["md/>", "md/*", "md/eu/*", "md/eu/VOD", "md/eu/SAP", "*/eu/*", "md/us/x", "fx/>", ">", "md/eu"];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut l = LocalInterest::default();
        let mut holders = std::collections::BTreeMap::<&str, u32>::new();
        let mut told = BTreeSet::<String>::new();
        for _ in 0..5000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let text = pool[(seed % pool.len() as u64) as usize];
            let mut out = Vec::new();
            if seed & (1 << 20) != 0 || holders.get(text).copied().unwrap_or(0) == 0 {
                *holders.entry(text).or_default() += 1;
                l.hold(&p(text), &mut out);
            } else {
                *holders.get_mut(text).unwrap() -= 1;
                l.release(&p(text), &mut out);
            }
            for c in out {
                match c {
                    Told::Interest(q) => assert!(told.insert(q.as_str().into()), "{q:?} told twice"),
                    Told::Withdraw(q) => assert!(told.remove(q.as_str()), "{q:?} withdrawn, not told"),
                }
            }
            let held: Vec<Pattern> = holders.iter().filter(|(_, n)| **n > 0).map(|(t, _)| p(t)).collect();
            let want: BTreeSet<String> = held
                .iter()
                .filter(|q| !held.iter().any(|r| r.as_str() != q.as_str() && r.covers(q)))
                .map(|q| q.as_str().to_owned())
                .collect();
            assert_eq!(told, want, "held {held:?}");
            assert_eq!(l.told().map(str::to_owned).collect::<BTreeSet<_>>(), want);
        }
    }

    #[test]
    fn the_agents_hear_of_a_pattern_once_whatever_the_peers_holding_it() {
        let mut r = RemoteInterest::new(2);
        assert!(matches!(r.add(0, &p("md/>")), Some(Interest::Add { agent: 2, .. })));
        assert_eq!(r.add(1, &p("md/>")), None);
        assert_eq!(r.add(1, &p("md/>")), None, "told twice counts once");
        assert!(r.add(1, &p("fx/*")).is_some());
        let mut v = Vec::new();
        r.matches_into("md/eu", &mut v);
        assert_eq!(v, vec![0, 1]);
        r.matches_into("fx/usd", &mut v);
        assert_eq!(v, vec![1]);
        assert_eq!(r.remove(0, &p("md/>")), None);
        assert_eq!(r.patterns(1).len(), 2);
        assert!(matches!(r.remove(1, &p("md/>")), Some(Interest::Remove { agent: 2, .. })), "its last holder");
        assert!(r.remove(1, &p("fx/*")).is_some());
        r.matches_into("md/eu", &mut v);
        assert!(v.is_empty());
        assert_eq!((r.len(0), r.len(1)), (0, 0));
    }

    #[test]
    fn a_groups_pattern_is_wanted_beside_the_peers_own_patterns() {
        use super::super::groups::Wanted;
        let mut r = RemoteInterest::new(2);
        assert!(matches!(r.group(&Wanted::More(p("rfq/>"))), Some(Interest::Add { .. })));
        let mut v = Vec::new();
        r.matches_into("rfq/eu", &mut v);
        assert!(v.is_empty(), "a group's pattern sends no plain MESSAGE to any peer");
        assert_eq!(r.add(0, &p("rfq/>")), None, "already wanted");
        assert_eq!(r.group(&Wanted::Less(p("rfq/>"))), None, "peer 0 still wants it");
        assert!(matches!(r.remove(0, &p("rfq/>")), Some(Interest::Remove { .. })));
        assert_eq!(r.group(&Wanted::Less(p("rfq/>"))), None, "let go of what is not held");
    }
}
