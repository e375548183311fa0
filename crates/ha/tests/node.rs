//! The sans-IO member on its own, driven by hand: what must hold whatever
//! the timing of threads and sockets.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use tickwire_ha::{Event, HaConfig, Node, Refused};

/// A group of one, led by its member once its election timeout passed.
fn leader_of_one(name: &str) -> (Node, u64, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tw-ha-node-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let me: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let mut cfg = HaConfig::new(name, 1, BTreeMap::from([(1, me)]), &dir);
    cfg.sync = false;
    let tick = cfg.tick.as_nanos() as u64;
    let mut node = Node::open(&cfg).unwrap();
    let mut now = 0;
    for _ in 0..10 * cfg.election_ticks {
        now += tick;
        node.handle_timeout(now);
        node.poll().unwrap();
        while let Some(ev) = node.poll_event() {
            if let Event::Leader { me: true, .. } = ev {
                return (node, now, dir);
            }
        }
    }
    panic!("a group of one elected no leader in {} ticks", 10 * cfg.election_ticks);
}

#[test]
fn a_second_membership_change_is_refused_until_the_first_is_applied() {
    let (mut node, _, dir) = leader_of_one("one-change");
    let four: SocketAddr = "127.0.0.1:4".parse().unwrap();
    node.propose_member(4, Some(four)).unwrap();
    // Not yet applied (nothing polled): raft-rs would make a second change
    // an empty entry, so the member refuses it.
    assert!(matches!(node.propose_member(4, None), Err(Refused::Busy)));
    assert!(matches!(node.propose_member(5, Some(four)), Err(Refused::Busy)));
    node.poll().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_change_applied_lets_the_next_one_through() {
    let (mut node, _, dir) = leader_of_one("next-change");
    let four: SocketAddr = "127.0.0.1:4".parse().unwrap();
    // With one voter the change commits as soon as it is in the log.
    node.propose_member(4, Some(four)).unwrap();
    node.poll().unwrap();
    let applied = std::iter::from_fn(|| node.poll_event()).any(|ev| matches!(ev, Event::Members { .. }));
    assert!(applied, "the add was not applied");
    // The leader may not remove itself; another change now goes through.
    assert!(matches!(node.propose_member(1, None), Err(Refused::Busy)), "the leader removed itself");
    node.propose_member(4, None).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
