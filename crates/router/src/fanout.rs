//! One message to the sessions that want it: the delivery loop and the
//! per-topic answers it needs (which subscribers may read a topic, whether
//! a topic is conflated), each one hash lookup per message.

use crate::session::Session;
use rustc_hash::FxHashMap;
use tickwire_topic::Pattern;
use tickwire_wire::client::SlowConsumer;

/// Topics whose readable subscribers are remembered, beyond which that
/// memory starts again.
const READABLE_LIMIT: usize = 64 * 1024;

/// Delivers a message to each of `targets` (session slots), putting those
/// left with frames waiting in the backlog; returns (deliveries, discards).
#[inline]
pub(crate) fn deliver_all(
    sessions: &mut [Option<Session>],
    (backlog, slow, held): (&mut Vec<u32>, &mut Vec<u32>, &mut Vec<u32>),
    targets: &[u32],
    (topic, payload): (&str, &[u8]),
    (discarded, local, conflate): (u32, bool, bool),
) -> (u64, u64) {
    let (mut n, mut discards) = (0u64, 0u64);
    for &c in targets {
        if let Some(Some(s)) = sessions.get_mut(c as usize) {
            n += 1;
            let dropped = s.deliver(topic, payload, 0, discarded, (local, conflate));
            match s.policy {
                SlowConsumer::Disconnect if dropped > 0 => slow.push(c),
                SlowConsumer::BackPressure if local && s.queue.is_over() => held.push(c),
                _ => {}
            }
            discards += u64::from(dropped);
            s.mark(c, backlog);
        }
    }
    (n, discards)
}

/// Whether `topic` is conflated: never without patterns; else one lookup
/// for a topic seen before.
#[inline]
pub(crate) fn conflated(patterns: &[Pattern], seen: &mut FxHashMap<Box<str>, bool>, topic: &str) -> bool {
    if patterns.is_empty() {
        return false;
    }
    if let Some(&c) = seen.get(topic) {
        return c;
    }
    if seen.len() >= READABLE_LIMIT {
        seen.clear();
    }
    let c = patterns.iter().any(|p| p.matches(topic));
    seen.insert(topic.into(), c);
    c
}

/// `targets` (the sessions whose patterns match `topic`) less those whose
/// user may not read it (a wildcard wider than its ACL), remembered per
/// topic in `cache` until a subscription or the users change: one lookup
/// per message, not one per delivery.
#[inline]
pub(crate) fn readable<'a>(
    targets: &[u32],
    cache: &'a mut FxHashMap<Box<str>, Box<[u32]>>,
    sessions: &mut [Option<Session>],
    topic: &str,
) -> &'a [u32] {
    if !cache.contains_key(topic) {
        if cache.len() >= READABLE_LIMIT {
            cache.clear();
        }
        let mut may = |c: &u32| match sessions.get_mut(*c as usize) {
            Some(Some(s)) => !s.filtered || s.may(topic, false),
            _ => false,
        };
        let list: Box<[u32]> = targets.iter().copied().filter(|c| may(c)).collect();
        cache.insert(topic.into(), list);
    }
    cache.get(topic).map_or(&[], |l| l)
}
