//! Queue groups across a cluster, sans I/O.
//!
//! A queue group's members may be clients of several routers; each
//! message is still delivered to one member of the group, cluster-wide.
//! As nats-server's routes do (`RS+ subject queue weight`, and a routed
//! message naming the groups its receiver serves), each router tells the
//! others, for every (pattern, group) its clients hold, how many member
//! subscriptions it has, again at each change (GROUP). Then:
//!
//! * **Local first.** The publisher's router delivers to a member of each
//!   group it has members of, as it always did, and tells its cluster agent
//!   which groups it served.
//! * **One router for each other group.** For each group it did not
//!   serve, the cluster agent picks one router with members, by weighted
//!   round-robin (the weight is the router's count of members) among the
//!   routers whose links are up (among all of them when none is up: the
//!   message is then counted lost), and sends that router a GROUP_MESSAGE
//!   naming the groups it is to serve.
//! * **The receiver serves only what is named.** A plain MESSAGE serves no
//!   queue group; a GROUP_MESSAGE serves those it names (one member of
//!   each, as a local publish does) and the plain subscribers as usual.
//!
//! So a message reaches one member of each group however many routers
//! hold members, and a group's pattern is wanted by the cluster (the
//! routing agents forward matching messages to its agent) while any
//! router holds members.
//!
//! * [`LocalGroups`]: what this router's routing agents hold, and what
//!   the other routers are told.
//! * [`RemoteGroups`]: what each other router told, and the pick.

use crate::index::SubscriptionIndex;
use std::collections::{BTreeMap, BTreeSet};
use tickwire_topic::Pattern;
use tickwire_wire::cluster::group_list;

/// A (pattern, group) pair, as text.
type Key = (Box<str>, Box<str>);

/// The queue-group subscriptions of this router's clients, by routing
/// agent.
#[derive(Debug, Default)]
pub struct LocalGroups {
    /// (pattern, group) to members per routing agent.
    held: BTreeMap<Key, BTreeMap<u32, u32>>,
    /// Group to the routing agents holding members of it, each with the
    /// patterns it holds them on.
    by_group: BTreeMap<Box<str>, BTreeMap<u32, u32>>,
}

impl LocalGroups {
    /// Routing agent `agent` now has `members` on `pattern` in `group`:
    /// the router's new total, to tell the other routers, if it changed.
    pub fn set(&mut self, agent: u32, pattern: &str, group: &str, members: u32) -> Option<u32> {
        let key: Key = (pattern.into(), group.into());
        let before = self.total(&key);
        let by_agent = self.held.entry(key.clone()).or_default();
        let had = if members == 0 { by_agent.remove(&agent) } else { by_agent.insert(agent, members) };
        if by_agent.is_empty() {
            self.held.remove(&key);
        }
        let agents = self.by_group.entry(group.into()).or_default();
        match (had.is_some(), members > 0) {
            (false, true) => *agents.entry(agent).or_insert(0) += 1,
            (true, false) => {
                if let Some(n) = agents.get_mut(&agent) {
                    *n -= 1;
                    if *n == 0 {
                        agents.remove(&agent);
                    }
                }
            }
            _ => {}
        }
        if agents.is_empty() {
            self.by_group.remove(group);
        }
        let after = self.total(&key);
        (after != before).then_some(after)
    }

    fn total(&self, key: &Key) -> u32 {
        self.held.get(key).map_or(0, |m| m.values().fold(0u32, |a, &n| a.saturating_add(n)))
    }

    /// Every (pattern, group, members) held: told in full on a new link.
    pub fn told(&self) -> impl Iterator<Item = (&str, &str, u32)> {
        self.held.keys().map(|k| (&*k.0, &*k.1, self.total(k)))
    }

    /// The first (pattern, group, members) held after `after` in their
    /// order (from the first without it): a new link's retelling goes on
    /// from where it was.
    pub fn told_after(&self, after: Option<(&str, &str)>) -> Option<(&str, &str, u32)> {
        use std::ops::Bound::{Excluded, Unbounded};
        let from = after.map_or(Unbounded, |(p, g)| Excluded((p.into(), g.into())));
        self.held.range((from, Unbounded)).next().map(|(k, _)| (&*k.0, &*k.1, self.total(k)))
    }

    /// The routing agents holding members of any of `groups` (names
    /// separated by a space), added to `out`, each once.
    pub fn agents_into(&self, groups: &str, out: &mut Vec<u32>) {
        for name in groups.split(' ') {
            if let Some(agents) = self.by_group.get(name) {
                out.extend(agents.keys());
            }
        }
        out.sort_unstable();
        out.dedup();
    }

    /// (pattern, group) pairs held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// One router's members of one group on one pattern.
#[derive(Debug, Clone, Copy)]
struct Entry {
    peer: u32,
    /// The group's id ([`RemoteGroups::name`]).
    group: u32,
    members: u32,
}

/// What a [`RemoteGroups::set`] changed in the patterns the cluster wants
/// for its groups, for the routing agents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// A (peer, pattern, group) came: its pattern is wanted once more.
    More(Pattern),
    /// One went: once less.
    Less(Pattern),
}

/// A group's name interned: its id, the entries naming it, its next pick.
#[derive(Debug)]
struct Name {
    text: Box<str>,
    entries: usize,
    next: u64,
}

/// The queue-group members of the other routers.
#[derive(Debug, Default)]
pub struct RemoteGroups {
    index: SubscriptionIndex<u32>,
    /// Entry slots (a slot is reused).
    entries: Vec<Option<Entry>>,
    free: Vec<u32>,
    by_key: BTreeMap<(u32, Key), u32>,
    /// Entries per peer.
    per_peer: BTreeMap<u32, usize>,
    /// Group names by id (an id is reused once no entry names it), and
    /// their ids.
    names: Vec<Option<Name>>,
    free_names: Vec<u32>,
    ids: BTreeMap<Box<str>, u32>,
    /// Each peer's entries told before its link came up again and not told
    /// since ([`RemoteGroups::begin_retelling`]).
    stale: BTreeMap<u32, BTreeSet<Key>>,
    /// Scratch: entries matched, and (group, peer, weight) candidates.
    matched: Vec<u32>,
    candidates: Vec<(u32, u32, u32)>,
}

impl RemoteGroups {
    /// Peer `peer` now has `members` on `pattern` in `group` (0: none);
    /// what that changed in what the cluster wants.
    pub fn set(&mut self, peer: u32, pattern: &Pattern, group: &str, members: u32) -> Option<Wanted> {
        let key: Key = (pattern.as_str().into(), group.into());
        if let Some(s) = self.stale.get_mut(&peer) {
            s.remove(&key);
        }
        let at = (peer, key);
        match (self.by_key.get(&at).copied(), members) {
            (Some(slot), 0) => {
                self.by_key.remove(&at);
                self.index.remove(pattern, slot, 0);
                if let Some(e) = self.entries[slot as usize].take() {
                    self.let_go_name(e.group);
                }
                self.free.push(slot);
                if let Some(n) = self.per_peer.get_mut(&peer) {
                    *n -= 1;
                    if *n == 0 {
                        self.per_peer.remove(&peer);
                    }
                }
                Some(Wanted::Less(pattern.clone()))
            }
            (Some(slot), n) => {
                if let Some(e) = self.entries[slot as usize].as_mut() {
                    e.members = n;
                }
                None
            }
            (None, 0) => None,
            (None, n) => {
                let e = Entry { peer, group: self.hold_name(group), members: n };
                let slot = crate::slots::put(&mut self.entries, &mut self.free, e);
                self.by_key.insert(at, slot);
                self.index.insert(pattern, slot, 0);
                *self.per_peer.entry(peer).or_insert(0) += 1;
                Some(Wanted::More(pattern.clone()))
            }
        }
    }

    fn hold_name(&mut self, group: &str) -> u32 {
        if let Some(&id) = self.ids.get(group) {
            if let Some(n) = self.names[id as usize].as_mut() {
                n.entries += 1;
            }
            return id;
        }
        let name = Name { text: group.into(), entries: 1, next: 0 };
        let id = crate::slots::put(&mut self.names, &mut self.free_names, name);
        self.ids.insert(group.into(), id);
        id
    }

    fn let_go_name(&mut self, id: u32) {
        let Some(n) = self.names.get_mut(id as usize).and_then(Option::as_mut) else { return };
        n.entries -= 1;
        if n.entries == 0 {
            let text = std::mem::take(&mut n.text);
            self.names[id as usize] = None;
            self.ids.remove(&text);
            self.free_names.push(id);
        }
    }

    /// Group `id`'s name ([`RemoteGroups::pick_into`]'s output).
    pub fn name(&self, id: u32) -> &str {
        self.names.get(id as usize).and_then(Option::as_ref).map_or("", |n| &n.text)
    }

    /// (pattern, group) pairs peer `peer` told.
    pub fn len(&self, peer: u32) -> usize {
        self.per_peer.get(&peer).copied().unwrap_or(0)
    }

    /// Whether peer `peer` told members on `pattern` in `group`.
    pub fn holds(&self, peer: u32, pattern: &str, group: &str) -> bool {
        self.by_key.contains_key(&(peer, (pattern.into(), group.into())))
    }

    /// Peer `peer`'s link came up: it tells its groups again; those it
    /// does not are withdrawn at [`RemoteGroups::end_retelling`].
    pub fn begin_retelling(&mut self, peer: u32) {
        let keys = self.keys(peer);
        self.stale.insert(peer, keys);
    }

    /// Peer `peer` has told again all it holds: what it did not tell again
    /// goes (and what that changed is returned).
    pub fn end_retelling(&mut self, peer: u32) -> Vec<Wanted> {
        let stale = self.stale.remove(&peer).unwrap_or_default();
        self.drop_keys(peer, stale)
    }

    /// Forgets every group of peer `peer`.
    pub fn forget(&mut self, peer: u32) -> Vec<Wanted> {
        self.stale.remove(&peer);
        let keys = self.keys(peer);
        self.drop_keys(peer, keys)
    }

    fn keys(&self, peer: u32) -> BTreeSet<Key> {
        self.by_key.keys().filter(|(p, _)| *p == peer).map(|(_, k)| k.clone()).collect()
    }

    fn drop_keys(&mut self, peer: u32, keys: BTreeSet<Key>) -> Vec<Wanted> {
        let mut out = Vec::new();
        for (pattern, group) in keys {
            if let Some(c) = Pattern::parse(&pattern).ok().and_then(|p| self.set(peer, &p, &group, 0)) {
                out.push(c);
            }
        }
        out
    }

    /// Whether any peer holds a group.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// For a message on `topic` whose router served the groups `served`
    /// (names separated by a space), one peer for each other group with
    /// members matching it: (peer, group id) pairs into `out` (emptied
    /// first), in peer order. A peer is picked by weighted round-robin
    /// among those `up` says are reachable (among all when none is).
    pub fn pick_into(&mut self, topic: &str, served: &str, up: impl Fn(u32) -> bool, out: &mut Vec<(u32, u32)>) {
        out.clear();
        if self.by_key.is_empty() {
            return;
        }
        self.index.matches_into(topic, &mut self.matched);
        self.candidates.clear();
        for &slot in &self.matched {
            let Some(e) = self.entries.get(slot as usize).and_then(|e| *e) else { continue };
            let name = self.names.get(e.group as usize).and_then(Option::as_ref).map_or("", |n| &n.text);
            if !group_list::contains(served, name) {
                self.candidates.push((e.group, e.peer, e.members));
            }
        }
        // A peer once per group, with its members on every pattern that
        // matched.
        self.candidates.sort_unstable();
        self.candidates.dedup_by(|b, a| {
            let same = a.0 == b.0 && a.1 == b.1;
            if same {
                a.2 = a.2.saturating_add(b.2);
            }
            same
        });
        for group in self.candidates.chunk_by(|a, b| a.0 == b.0) {
            let any_up = group.iter().any(|c| up(c.1));
            let weight = |c: &(u32, u32, u32)| if !any_up || up(c.1) { u64::from(c.2) } else { 0 };
            let total: u64 = group.iter().map(weight).sum();
            let Some(name) = self.names.get_mut(group[0].0 as usize).and_then(Option::as_mut) else { continue };
            if total == 0 {
                continue;
            }
            let mut at = name.next % total;
            name.next = name.next.wrapping_add(1);
            for c in group {
                let w = weight(c);
                if at < w {
                    out.push((c.1, c.0));
                    break;
                }
                at -= w;
            }
        }
        out.sort_unstable();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Pattern {
        Pattern::parse(s).unwrap()
    }

    #[test]
    fn the_router_tells_its_total_of_members_when_it_changes() {
        let mut l = LocalGroups::default();
        assert_eq!(l.set(0, "rfq/>", "pricers", 1), Some(1));
        assert_eq!(l.set(1, "rfq/>", "pricers", 2), Some(3), "two routing agents add up");
        assert_eq!(l.set(1, "rfq/>", "pricers", 2), None, "no change, nothing to tell");
        assert_eq!(l.told().collect::<Vec<_>>(), vec![("rfq/>", "pricers", 3)]);
        let mut agents = Vec::new();
        l.agents_into("audit pricers", &mut agents);
        assert_eq!(agents, vec![0, 1]);
        assert_eq!(l.set(0, "rfq/>", "pricers", 0), Some(2));
        agents.clear();
        l.agents_into("pricers", &mut agents);
        assert_eq!(agents, vec![1]);
        assert_eq!(l.set(1, "rfq/>", "pricers", 0), Some(0));
        assert!(l.is_empty() && l.by_group.is_empty());
    }

    #[test]
    fn each_group_goes_to_one_router_weighted_by_its_members() {
        let mut r = RemoteGroups::default();
        assert_eq!(r.set(1, &p("rfq/>"), "pricers", 1), Some(Wanted::More(p("rfq/>"))));
        assert_eq!(r.set(2, &p("rfq/*"), "pricers", 3), Some(Wanted::More(p("rfq/*"))));
        assert!(r.set(2, &p("rfq/eu"), "audit", 1).is_some());
        let mut got = BTreeMap::<(u32, String), u32>::new();
        let mut out = Vec::new();
        let named = |r: &RemoteGroups, out: &[(u32, u32)]| -> Vec<(u32, String)> {
            out.iter().map(|&(k, g)| (k, r.name(g).to_owned())).collect()
        };
        for _ in 0..400 {
            r.pick_into("rfq/eu", "", |_| true, &mut out);
            let picked = named(&r, &out);
            assert_eq!(picked.iter().filter(|(_, g)| g == "pricers").count(), 1, "one router per group: {picked:?}");
            assert_eq!(picked.iter().filter(|(_, g)| g == "audit").count(), 1);
            for k in picked {
                *got.entry(k).or_default() += 1;
            }
        }
        assert_eq!(got[&(1, "pricers".into())], 100, "1 member of 4");
        assert_eq!(got[&(2, "pricers".into())], 300, "3 of 4");
        assert_eq!(got[&(2, "audit".into())], 400);
        // A group served where it was published goes nowhere else.
        r.pick_into("rfq/eu", "pricers", |_| true, &mut out);
        assert_eq!(named(&r, &out), vec![(2, "audit".to_owned())]);
        // A router whose link is down is passed over while another is up.
        for _ in 0..10 {
            r.pick_into("rfq/us", "", |k| k != 2, &mut out);
            assert_eq!(named(&r, &out), vec![(1, "pricers".to_owned())]);
        }
        r.pick_into("rfq/us", "", |_| false, &mut out);
        assert_eq!(out.len(), 1, "none up: one still picked (and counted lost)");
        r.pick_into("fx/usd", "", |_| true, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn groups_not_told_again_after_a_reconnect_are_withdrawn_and_a_forgotten_routers_go() {
        let mut r = RemoteGroups::default();
        r.set(1, &p("a"), "g", 1);
        r.set(1, &p("b"), "g", 1);
        r.set(2, &p("a"), "g", 2);
        r.begin_retelling(1);
        assert_eq!(r.set(1, &p("a"), "g", 4), None, "told again");
        assert_eq!(r.end_retelling(1), vec![Wanted::Less(p("b"))]);
        assert_eq!((r.len(1), r.len(2)), (1, 1));
        assert_eq!(r.forget(2), vec![Wanted::Less(p("a"))]);
        assert_eq!(r.set(1, &p("a"), "g", 0), Some(Wanted::Less(p("a"))));
        assert!(r.is_empty());
        assert_eq!(r.set(1, &p("c"), "g", 0), None, "a withdrawal of nothing held");
        assert!(r.names.iter().all(Option::is_none) && r.ids.is_empty(), "no name outlives its entries");
        assert_eq!(r.per_peer.len(), 0);
    }
}
