//! The topic table: one entry per topic seen, found with one hash lookup,
//! holding everything a publish on that topic needs.
//!
//! ```text
//!  publish(topic) ─► TopicTable::find ─► TopicEntry (epoch current?) ─┬─► targets: the sessions it goes to
//!                     one hash lookup        │ no: recomputed          ├─► agents: other routing agents wanting it
//!                                            ▼                         ├─► conflate, its counters, its
//!                      SubscriptionIndex, ACLs, peers' interest        │   last-value slot
//! ```
//!
//! An entry's `targets` (the sessions whose patterns match the topic and
//! whose user may read it) and `agents` (the other routing agents whose
//! clients want it) hold for one **epoch**: the router starts a new one
//! whenever a subscription is added or removed (a session ending removes
//! its own), the users change or another agent's interest changes, and an
//! entry of an older epoch is recomputed when next used. What never
//! changes for a topic (whether it is conflated, which counters it counts
//! into, where the last-value cache keeps it) is worked out once, when its
//! entry is made.
//!
//! Topics are the clients' to choose, so the table is bounded: past its
//! limit, a new topic takes the slot of one not used lately (the CLOCK
//! policy: a hand sweeps the slots, sparing once each one used since it
//! last passed), and each eviction is counted.

use crate::cache::Slot;
use crate::index::SubscriptionIndex;
use crate::peers::Peers;
use crate::session::Session;
use rustc_hash::FxHashMap;
use std::sync::Arc;
use tickwire_topic::Pattern;

/// Topics the router remembers at most (each entry is about a hundred
/// bytes beside its topic and its lists).
pub const TOPIC_LIMIT: usize = 64 * 1024;

/// A bounded map from topic to `V`: one hash lookup to find a topic's slot,
/// a CLOCK sweep to free one when full.
#[derive(Debug)]
pub struct TopicTable<V> {
    map: FxHashMap<Arc<str>, u32>,
    slots: Vec<Entry<V>>,
    hand: usize,
    limit: usize,
    evictions: u64,
}

#[derive(Debug)]
struct Entry<V> {
    topic: Arc<str>,
    /// Found since the hand last passed.
    used: bool,
    value: V,
}

impl<V> TopicTable<V> {
    /// An empty table of at most `limit` topics (at least one).
    pub fn new(limit: usize) -> Self {
        Self { map: FxHashMap::default(), slots: Vec::new(), hand: 0, limit: limit.max(1), evictions: 0 }
    }

    /// The slot of `topic`, if it has one.
    #[inline]
    pub fn find(&mut self, topic: &str) -> Option<usize> {
        let i = *self.map.get(topic)? as usize;
        self.slots[i].used = true;
        Some(i)
    }

    /// The value in slot `i` (from [`TopicTable::find`] or
    /// [`TopicTable::insert`]).
    ///
    /// # Panics
    /// For a slot the table does not have.
    #[inline]
    pub fn value_mut(&mut self, i: usize) -> &mut V {
        &mut self.slots[i].value
    }

    /// Topics held.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Topics it holds at most.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Topics dropped to make room for others, since it was made.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Forgets every topic (not counted as evictions).
    pub fn clear(&mut self) {
        self.map.clear();
        self.slots.clear();
        self.hand = 0;
    }
}

impl<V: Default> TopicTable<V> {
    /// Gives `topic` (not in the table) a slot holding `value`, taking the
    /// slot of a topic not used lately if the table is full; returns the
    /// slot.
    pub fn insert(&mut self, topic: &str, value: V) -> usize {
        self.insert_with(topic, |_| value)
    }

    /// [`TopicTable::insert`] of `make(the value evicted, if any)`: what
    /// the evicted value holds can be reused.
    pub fn insert_with(&mut self, topic: &str, make: impl FnOnce(Option<V>) -> V) -> usize {
        let topic: Arc<str> = topic.into();
        if self.slots.len() < self.limit {
            self.map.insert(Arc::clone(&topic), self.slots.len() as u32);
            self.slots.push(Entry { topic, used: false, value: make(None) });
            return self.slots.len() - 1;
        }
        // At most one sweep: the second pass finds every slot spared.
        let i = loop {
            let i = self.hand;
            self.hand = (self.hand + 1) % self.slots.len();
            let e = &mut self.slots[i];
            if !std::mem::take(&mut e.used) {
                break i;
            }
        };
        self.map.remove(&*self.slots[i].topic);
        self.evictions += 1;
        self.map.insert(Arc::clone(&topic), i as u32);
        let old = std::mem::take(&mut self.slots[i].value);
        self.slots[i] = Entry { topic, used: false, value: make(Some(old)) };
        i
    }
}

/// What the router knows of one topic.
#[derive(Debug)]
pub(crate) struct TopicEntry {
    /// The epoch `targets` and `agents` were worked out in.
    epoch: u64,
    /// The sessions a message on it goes to, each once, in order.
    pub(crate) targets: Vec<u32>,
    /// The other routing agents whose clients want it.
    pub(crate) agents: Vec<u32>,
    /// The queue groups with members it goes to: one member of each.
    pub(crate) groups: Vec<GroupTargets>,
    /// Whether it is conflated ([`Limits::conflate`](crate::Limits::conflate)).
    pub(crate) conflate: bool,
    /// Its counters ([`crate::counters::TopicCounts`]).
    pub(crate) counted: crate::counters::Counted,
    /// Where the last-value cache keeps it.
    pub(crate) last_value: Slot,
}

/// An entry's epoch before it is first worked out.
const NEVER: u64 = u64::MAX;

impl Default for TopicEntry {
    /// An entry to be worked out on its first use.
    fn default() -> Self {
        Self {
            epoch: NEVER,
            targets: Vec::new(),
            agents: Vec::new(),
            groups: Vec::new(),
            conflate: false,
            counted: crate::counters::Counted::NOT_YET,
            last_value: Slot::UNKNOWN,
        }
    }
}

/// What an entry is worked out from, beside the subscriptions.
pub(crate) struct Sources<'a> {
    /// The sessions (their users' ACLs).
    pub(crate) sessions: &'a mut [Option<Session>],
    /// Some session's subscription reaches topics its user may not read:
    /// targets are checked against their ACLs.
    pub(crate) filtered: bool,
    /// The other routing agents' interest.
    pub(crate) peers: Option<&'a Peers>,
    /// The conflated patterns.
    pub(crate) conflate: &'a [Pattern],
}

/// The members of one queue group a topic's messages go to, and which
/// one is next (round-robin).
#[derive(Debug, Default)]
pub(crate) struct GroupTargets {
    /// The group's name.
    pub(crate) name: Box<str>,
    /// Sessions, each once.
    pub(crate) members: Vec<u32>,
    /// Each member's subscription in the group (its first, if it holds
    /// several): a delivery names it (DELIVER flagged `QUEUE`).
    pub(crate) subscriptions: Vec<u32>,
    /// Where the next pick starts.
    pub(crate) next: usize,
}

/// Queue-group subscriptions: their own index (keyed by member slot), and
/// what each slot is.
#[derive(Debug, Default)]
struct Queues {
    index: SubscriptionIndex<u32>,
    /// Member slot: (session, group, subscription); `None` when free.
    members: Vec<Option<(u32, u32, u32)>>,
    free: Vec<u32>,
    /// (session, subscription) to its member slot.
    by_subscription: FxHashMap<(u32, u32), u32>,
    /// Group names to ids, with how many members hold each, and back.
    groups: FxHashMap<Box<str>, (u32, usize)>,
    names: FxHashMap<u32, Box<str>>,
    next_group: u32,
    /// Member slots matched (kept: no allocation per entry worked out).
    scratch: Vec<u32>,
}

/// The local subscriptions and the topic table they are cached in.
#[derive(Debug)]
pub(crate) struct Topics {
    index: SubscriptionIndex<u32>,
    queues: Queues,
    table: TopicTable<TopicEntry>,
    epoch: u64,
}

impl Topics {
    pub(crate) fn new(limit: usize) -> Self {
        Self { index: SubscriptionIndex::new(), queues: Queues::default(), table: TopicTable::new(limit), epoch: 0 }
    }

    /// The entry of `topic`, worked out now if it has none or an old one.
    /// An unseen topic is checked first (`check`); a topic in the table
    /// passed it before.
    ///
    /// # Errors
    /// What `check` returns for an unseen topic.
    #[inline]
    pub(crate) fn entry<E>(
        &mut self,
        topic: &str,
        check: impl FnOnce(&str) -> Result<(), E>,
        src: Sources<'_>,
    ) -> Result<&mut TopicEntry, E> {
        let i = match self.table.find(topic) {
            Some(i) => i,
            None => {
                check(topic)?;
                let conflate = src.conflate.iter().any(|p| p.matches(topic));
                self.table.insert_with(topic, |old| {
                    // An evicted entry's lists keep their room (they are
                    // worked out again before use).
                    let (targets, agents) = old.map(|o| (o.targets, o.agents)).unwrap_or_default();
                    TopicEntry { targets, agents, conflate, ..TopicEntry::default() }
                })
            }
        };
        let e = self.table.value_mut(i);
        if e.epoch != self.epoch {
            e.epoch = self.epoch;
            self.index.matches_into(topic, &mut e.targets);
            if src.filtered {
                e.targets.retain(|&c| match src.sessions.get_mut(c as usize) {
                    Some(Some(s)) => !s.filtered || s.may(topic, false),
                    _ => false,
                });
            }
            e.agents.clear();
            if let Some(p) = src.peers {
                p.interested(topic, &mut e.agents);
            }
            e.groups.clear();
            if !self.queues.by_subscription.is_empty() {
                self.queues.groups_of(topic, &mut e.groups, &mut src.sessions[..], src.filtered);
            }
        }
        Ok(e)
    }

    /// Adds subscription `sid` of session `id` as a member of queue group
    /// `group`: each message it matches goes to one member of the group.
    pub(crate) fn subscribe_queue(&mut self, pattern: &Pattern, id: u32, sid: u32, group: &str) {
        let q = &mut self.queues;
        let g = match q.groups.get_mut(group) {
            Some((g, holders)) => {
                *holders += 1;
                *g
            }
            None => {
                let g = q.next_group;
                q.next_group = q.next_group.wrapping_add(1);
                q.groups.insert(group.into(), (g, 1));
                q.names.insert(g, group.into());
                g
            }
        };
        let slot = crate::slots::put(&mut q.members, &mut q.free, (id, g, sid));
        q.by_subscription.insert((id, sid), slot);
        q.index.insert(pattern, slot, sid);
        self.invalidate();
    }

    /// Adds subscription `sid` of session `id`.
    pub(crate) fn subscribe(&mut self, pattern: &Pattern, id: u32, sid: u32) {
        self.index.insert(pattern, id, sid);
        self.invalidate();
    }

    /// The queue group subscription `sid` of session `id` is a member of,
    /// if it is one (for status: a scan of the groups).
    pub(crate) fn queue_group_of(&self, id: u32, sid: u32) -> Option<&str> {
        let q = &self.queues;
        let slot = *q.by_subscription.get(&(id, sid))?;
        let (_, g, _) = q.members.get(slot as usize).copied().flatten()?;
        q.names.get(&g).map(|n| &**n)
    }

    /// Removes subscription `sid` of session `id` (plain or a queue
    /// group's).
    pub(crate) fn unsubscribe(&mut self, pattern: &Pattern, id: u32, sid: u32) {
        let q = &mut self.queues;
        match q.by_subscription.remove(&(id, sid)) {
            Some(slot) => {
                q.index.remove(pattern, slot, sid);
                if let Some((_, g, _)) = q.members[slot as usize].take() {
                    q.free.push(slot);
                    let name = q.names.get(&g).cloned().unwrap_or_default();
                    if let Some((_, holders)) = q.groups.get_mut(&name) {
                        *holders -= 1;
                        if *holders == 0 {
                            q.groups.remove(&name);
                            q.names.remove(&g);
                        }
                    }
                }
            }
            None => {
                self.index.remove(pattern, id, sid);
            }
        }
        self.invalidate();
    }

    /// Starts a new epoch: who gets what may have changed (the users, the
    /// other agents' interest), and every entry is worked out again when
    /// next used.
    pub(crate) fn invalidate(&mut self) {
        self.epoch = self.epoch.wrapping_add(1) % NEVER;
    }

    /// Forgets every topic (what is worked out once per entry changed).
    pub(crate) fn clear(&mut self) {
        self.table.clear();
    }

    /// The table's size and evictions.
    pub(crate) fn table_stats(&self) -> TopicTableStats {
        TopicTableStats { topics: self.table.len(), limit: self.table.limit(), evictions: self.table.evictions() }
    }
}

impl Queues {
    /// The groups whose members' patterns match `topic`, each with its
    /// members (each once, by session; filtered by their users' ACLs when
    /// `filtered`), into `out`.
    fn groups_of(
        &mut self,
        topic: &str,
        out: &mut Vec<GroupTargets>,
        sessions: &mut [Option<Session>],
        filtered: bool,
    ) {
        self.index.matches_into(topic, &mut self.scratch);
        let mut found: Vec<(u32, u32, u32)> = self
            .scratch
            .iter()
            .filter_map(|&slot| self.members.get(slot as usize).copied().flatten())
            .map(|(session, group, sid)| (group, session, sid))
            .collect();
        if filtered {
            found.retain(|&(_, c, _)| match sessions.get_mut(c as usize) {
                Some(Some(s)) => !s.filtered || s.may(topic, false),
                _ => false,
            });
        }
        found.sort_unstable();
        // A session once per group (by its first subscription in it).
        found.dedup_by_key(|&mut (g, c, _)| (g, c));
        for chunk in found.chunk_by(|a, b| a.0 == b.0) {
            let name = self.names.get(&chunk[0].0).map_or("", |n| &**n);
            out.push(GroupTargets {
                name: name.into(),
                members: chunk.iter().map(|&(_, c, _)| c).collect(),
                subscriptions: chunk.iter().map(|&(_, _, sid)| sid).collect(),
                next: 0,
            });
        }
    }
}

/// The router's topic table ([`crate::topics`]), for operators and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopicTableStats {
    /// Topics held.
    pub topics: usize,
    /// Topics held at most.
    pub limit: usize,
    /// Topics dropped to make room for others.
    pub evictions: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_stays_bounded_and_spares_a_topic_in_use() {
        let mut t = TopicTable::new(4);
        for i in 0..4 {
            t.insert(&format!("t/{i}"), i);
        }
        assert_eq!((t.len(), t.evictions()), (4, 0));
        // A hostile stream of new topics; `t/0` is published between each.
        for i in 4..1000 {
            assert!(t.find("t/0").is_some(), "the topic in use stays, at {i}");
            if t.find(&format!("t/{i}")).is_none() {
                t.insert(&format!("t/{i}"), i);
            }
            assert!(t.len() <= 4);
        }
        assert_eq!(t.evictions(), 996);
        let i = t.find("t/0").unwrap();
        assert_eq!(*t.value_mut(i), 0);
        assert!(t.find("t/998").is_some() && t.find("t/3").is_none());
        t.clear();
        assert!(t.is_empty() && t.find("t/0").is_none());
    }
}
