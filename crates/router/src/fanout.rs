//! One message to the sessions that want it: the delivery loop (who they
//! are is the topic's entry's to say: [`crate::topics`]).

use crate::session::Session;
use tickwire_wire::client::SlowConsumer;

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
