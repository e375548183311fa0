//! The protocol over a simulated network in virtual time: seeded loss,
//! reorder and duplication on every path, one sender, one or more receivers.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, SocketAddrV4};
use tickwire_impair::{ImpairConfig, Impairment, Rng};
use tickwire_proto::*;

const LATENCY: Nanos = 20_000;

/// Deterministic message `i`: its index, then 0..3000 bytes (some
/// fragmented at MTU 1408).
fn message(i: u64) -> Vec<u8> {
    let mut r = Rng::new(i);
    let len = if i % 50 == 0 { 2000 + (r.next_u64() % 1000) as usize } else { (r.next_u64() % 200) as usize };
    i.to_le_bytes().into_iter().chain((0..len).map(|_| r.next_u64() as u8)).collect()
}

#[derive(Default, Clone)]
struct Got {
    next: u64,
    lost: Vec<(u64, u64)>,
    joined: Vec<(u32, u64)>,
    ended: Vec<(u32, u64)>,
    first_index: Option<u64>,
    resync: bool,
    bad: Vec<String>,
}

/// (arrival time, sequence, destination and source (`SENDER` or a
/// receiver index), bytes)
type InFlight = (Nanos, u64, usize, usize, Vec<u8>);

/// The address of the sender (`SENDER`) or of receiver `i`.
fn addr(who: usize) -> SocketAddrV4 {
    if who == SENDER {
        SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000)
    } else {
        SocketAddrV4::new(Ipv4Addr::new(10, 0, 1, who as u8), 2000)
    }
}

struct Sim {
    now: Nanos,
    seq: u64,
    queue: BinaryHeap<Reverse<InFlight>>,
    sender: Sender,
    receivers: Vec<Receiver>,
    got: Vec<Got>,
    send_data: Impairment,
    send_ctrl: Vec<Impairment>,
    recv_data: Vec<Impairment>,
    multicast: bool,
    offered: u64,
    total: u64,
    buf: Vec<u8>,
}

const SENDER: usize = usize::MAX;

impl Sim {
    fn new(scfg: SenderConfig, rcfgs: Vec<ReceiverConfig>, data: ImpairConfig, ctrl: ImpairConfig, total: u64) -> Self {
        let n = rcfgs.len();
        let scfg = SenderConfig { multicast: n > 1, ..scfg };
        let rcfgs: Vec<_> = rcfgs.into_iter().map(|c| ReceiverConfig { multicast: n > 1, ..c }).collect();
        Self {
            now: 1,
            seq: 0,
            queue: BinaryHeap::new(),
            sender: Sender::new(scfg, 1).unwrap(),
            receivers: rcfgs.into_iter().map(|c| Receiver::new(c).unwrap()).collect(),
            got: vec![Got::default(); n],
            send_data: Impairment::new(data),
            send_ctrl: (0..n).map(|i| Impairment::new(ImpairConfig { seed: ctrl.seed + i as u64, ..ctrl })).collect(),
            recv_data: (0..n).map(|_| Impairment::new(ImpairConfig::default())).collect(),
            multicast: n > 1,
            offered: 0,
            total,
            buf: vec![0; 65_536],
        }
    }

    fn push(&mut self, dest: usize, src: usize, d: &[u8]) {
        self.seq += 1;
        self.queue.push(Reverse((self.now + LATENCY, self.seq, dest, src, d.to_vec())));
    }

    fn step(&mut self) {
        // Offer while the window allows.
        while self.offered < self.total {
            match self.sender.offer("", &message(self.offered)) {
                Ok(_) => self.offered += 1,
                Err(_) => break,
            }
        }
        if self.offered == self.total && !self.sender.is_drained() {
            self.sender.close();
        }
        let now = self.now;
        self.sender.handle_timeout(now);
        while let Some(n) = self.sender.poll_transmit(now, &mut self.buf) {
            let d = self.buf[..n].to_vec();
            let mut out = Vec::new();
            self.send_data.process(now, &d, &mut |x| out.push(x.to_vec()));
            for x in out {
                for r in 0..self.receivers.len() {
                    self.push(r, SENDER, &x);
                }
            }
        }
        for r in 0..self.receivers.len() {
            let got = &mut self.got[r];
            self.receivers[r].poll_messages(
                |ev| match ev {
                    Event::Message(m) => {
                        // A late joiner starts wherever it joined.
                        if got.first_index.is_none() || std::mem::take(&mut got.resync) {
                            let idx = m.payload.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
                            got.next = idx.unwrap_or(0);
                            got.first_index.get_or_insert(got.next);
                        }
                        if m.payload != message(got.next).as_slice() {
                            got.bad.push(format!("message {} differs at position {}", got.next, m.position));
                        }
                        got.next += 1;
                    }
                    Event::Lost { from, to, .. } => {
                        got.lost.push((from, to));
                        got.resync = true;
                    }
                    Event::Joined { session_id, position } => {
                        got.joined.push((session_id, position));
                        got.first_index = None;
                    }
                    Event::Ended { session_id, position } => got.ended.push((session_id, position)),
                    Event::PublisherGone { .. } => got.bad.push("a network receiver reported PublisherGone".into()),
                },
                usize::MAX,
            );
            self.receivers[r].handle_timeout(now);
            while let Some((n, _)) = self.receivers[r].poll_transmit(now, &mut self.buf) {
                let d = self.buf[..n].to_vec();
                let mut out = Vec::new();
                self.send_ctrl[r].process(now, &d, &mut |x| out.push(x.to_vec()));
                for x in out {
                    self.push(SENDER, r, &x);
                    if self.multicast {
                        for o in 0..self.receivers.len() {
                            if o != r {
                                self.push(o, r, &x);
                            }
                        }
                    }
                }
            }
        }
        // Advance to the next event.
        let mut next = self.sender.poll_timeout().unwrap_or(u64::MAX).max(now + 1);
        for r in &self.receivers {
            next = next.min(r.poll_timeout().unwrap_or(u64::MAX).max(now + 1));
        }
        if let Some(Reverse((t, ..))) = self.queue.peek() {
            next = next.min(*t);
        }
        self.now = next.max(now + 1);
        while let Some(Reverse((t, ..))) = self.queue.peek() {
            if *t > self.now {
                break;
            }
            let Reverse((_, _, dest, src, d)) = self.queue.pop().unwrap();
            if dest == SENDER {
                self.sender.handle_datagram(self.now, addr(src), &d);
            } else {
                let mut out = Vec::new();
                self.recv_data[dest].process(self.now, &d, &mut |x| out.push(x.to_vec()));
                for x in out {
                    self.receivers[dest].handle_datagram(self.now, addr(src), &x);
                }
            }
        }
    }

    fn run(&mut self, limit: Nanos) {
        self.run_until(limit, |s| s.offered == s.total && s.receivers.iter().all(|r| r.is_ended()));
    }

    fn run_for(&mut self, d: Nanos) {
        let limit = self.now + d;
        while self.now < limit {
            self.step();
        }
    }

    fn run_until(&mut self, limit: Nanos, done: impl Fn(&Sim) -> bool) {
        let limit = self.now + limit;
        while self.now < limit {
            self.step();
            if done(self) {
                return;
            }
        }
        panic!(
            "not done after {limit} ns: offered {}, got {:?}",
            self.offered,
            self.got.iter().map(|g| g.next).collect::<Vec<_>>()
        );
    }

    fn add_receiver(&mut self, cfg: ReceiverConfig) {
        let i = self.receivers.len();
        self.receivers.push(Receiver::new(ReceiverConfig { multicast: true, ..cfg }).unwrap());
        self.got.push(Got::default());
        self.send_ctrl.push(Impairment::new(ImpairConfig::default()));
        self.recv_data.push(Impairment::new(ImpairConfig::default()));
        self.multicast = i > 0 || self.multicast;
    }
}

fn unicast(total: u64, data: ImpairConfig, ctrl: ImpairConfig) -> Sim {
    Sim::new(SenderConfig::default(), vec![ReceiverConfig::default()], data, ctrl, total)
}

fn assert_complete(sim: &Sim) {
    for g in &sim.got {
        assert!(g.bad.is_empty(), "{:?}", &g.bad[..g.bad.len().min(3)]);
        assert!(g.lost.is_empty(), "lost {:?}", g.lost);
        assert_eq!(g.next, sim.total);
        assert_eq!(g.ended.len(), 1);
        assert_eq!(g.first_index, Some(0));
    }
}

#[test]
fn clean_transfer_needs_no_repair() {
    let mut sim = unicast(20_000, ImpairConfig::default(), ImpairConfig::default());
    sim.run(10_000_000_000);
    assert_complete(&sim);
    assert_eq!(sim.receivers[0].stats().naks_sent, 0);
    assert_eq!(sim.sender.stats().retransmits, 0);
}

#[test]
fn one_fixed_gap_costs_one_nak_and_one_retransmission() {
    let data = ImpairConfig { drop_range: Some((100_000, 100_001)), ..Default::default() };
    let mut sim = unicast(20_000, data, ImpairConfig::default());
    sim.run(10_000_000_000);
    assert_complete(&sim);
    assert_eq!(sim.send_data.stats().range_dropped, 1);
    assert_eq!(sim.receivers[0].stats().naks_sent, 1);
    assert_eq!(sim.sender.stats().retransmits, 1);
}

#[test]
fn random_loss_reorder_and_duplication_on_every_path() {
    for (loss, seed) in [(0.01, 1), (0.05, 2), (0.20, 3)] {
        let data = ImpairConfig { loss, reorder: 0.01, duplicate: 0.01, seed, ..Default::default() };
        let ctrl = ImpairConfig { loss, reorder: 0.01, duplicate: 0.01, seed: seed + 100, ..Default::default() };
        let mut sim = unicast(20_000, data, ctrl);
        sim.run(60_000_000_000);
        assert_complete(&sim);
        let st = sim.receivers[0].stats();
        assert!(st.naks_sent > 0 && st.duplicates > 0, "{loss}: {st:?}");
        eprintln!("{loss}: t={} ms {st:?} {:?}", sim.now / 1_000_000, sim.sender.stats());
    }
}

#[test]
fn lost_naks_are_retried() {
    let data = ImpairConfig { loss: 0.05, seed: 9, ..Default::default() };
    let ctrl = ImpairConfig { loss: 0.5, seed: 10, ..Default::default() };
    let mut sim = unicast(10_000, data, ctrl);
    sim.run(60_000_000_000);
    assert_complete(&sim);
    assert!(sim.receivers[0].stats().nak_retries > 0);
}

#[test]
fn tail_loss_is_found_by_heartbeat() {
    // The last datagrams of the stream are dropped once; nothing follows them.
    let mut probe = unicast(1_000, ImpairConfig::default(), ImpairConfig::default());
    probe.run(10_000_000_000);
    let end = probe.sender.position();
    let data = ImpairConfig { drop_range: Some((end - 4096, end)), ..Default::default() };
    let mut sim = unicast(1_000, data, ImpairConfig::default());
    sim.run(10_000_000_000);
    assert_complete(&sim);
    assert!(sim.send_data.stats().range_dropped > 0);
    assert!(sim.sender.stats().heartbeats > 0 && sim.sender.stats().retransmits > 0);
}

#[test]
fn multicast_nak_suppression_keeps_retransmissions_near_one_per_loss() {
    let rcfg = |i: u32| ReceiverConfig {
        receiver_id: i,
        seed: u64::from(i),
        nak_delay: NakDelay::Optimal { max: 400_000, group_size: 4 },
        nak_retry: 2_000_000,
        ..Default::default()
    };
    let scfg = SenderConfig { linger: 1_000_000, ..Default::default() };
    let data = ImpairConfig { loss: 0.02, seed: 5, ..Default::default() };
    let mut sim = Sim::new(scfg, (1..=4).map(rcfg).collect(), data, ImpairConfig::default(), 20_000);
    sim.run(60_000_000_000);
    assert_complete(&sim);
    let lost = sim.send_data.stats().dropped as f64;
    let retx = sim.sender.stats().retransmits as f64;
    let suppressed: u64 = sim.receivers.iter().map(|r| r.stats().naks_suppressed).sum();
    assert!(retx / lost <= 1.5, "{retx} retransmissions for {lost} losses");
    assert!(suppressed > 0);
}

#[test]
fn a_gap_beyond_retention_is_reported_lost_exactly_and_the_stream_goes_on() {
    let scfg = SenderConfig { retention: 64 << 10, max_message: 8 << 10, ..Default::default() };
    let rcfg = ReceiverConfig { window: 1 << 20, nak_delay: NakDelay::Static(50_000_000), ..Default::default() };
    let data = ImpairConfig { drop_range: Some((200_000, 200_001)), ..Default::default() };
    let mut sim = Sim::new(scfg, vec![rcfg], data, ImpairConfig::default(), 20_000);
    sim.run(10_000_000_000);
    let g = &sim.got[0];
    assert!(g.bad.is_empty(), "{:?}", g.bad.first());
    assert_eq!(g.next, sim.total);
    assert_eq!(g.lost.len(), 1, "{:?}", g.lost);
    let (from, to) = g.lost[0];
    assert!(from <= 200_000 && to > 200_000 && to - from <= 1408, "{from}..{to}");
    assert_eq!(sim.receivers[0].stats().lost_bytes, to - from);
    // The sender said so in a heartbeat before the (50 ms) NAK was due.
    assert!(sim.receivers[0].stats().heartbeats > 0);
    assert_eq!(g.ended.len(), 1);
}

#[test]
fn a_late_joiner_starts_at_a_message_boundary_and_stays_exact() {
    let scfg = SenderConfig { flow_control: FlowControl::Min, ..Default::default() };
    let mut sim =
        Sim::new(scfg, vec![ReceiverConfig::default()], ImpairConfig::default(), ImpairConfig::default(), 20_000);
    sim.run_until(10_000_000_000, |s| s.got[0].next >= 5_000);
    sim.add_receiver(ReceiverConfig { receiver_id: 2, ..Default::default() });
    sim.run(10_000_000_000);
    let late = &sim.got[1];
    assert!(late.bad.is_empty(), "{:?}", late.bad.first());
    assert_eq!(late.joined.len(), 1);
    assert!(late.joined[0].1 > 0);
    let first = late.first_index.unwrap();
    assert!((5_000..20_000).contains(&first), "{first}");
    assert_eq!(late.next, 20_000);
    assert!(late.lost.is_empty());
}

#[test]
fn a_restarted_receiver_rejoins_and_the_old_one_times_out() {
    let scfg = SenderConfig { flow_control: FlowControl::Max, receiver_timeout: 50_000_000, ..Default::default() };
    let mut sim =
        Sim::new(scfg, vec![ReceiverConfig::default()], ImpairConfig::default(), ImpairConfig::default(), 20_000);
    sim.run_until(10_000_000_000, |s| s.got[0].next >= 5_000);
    sim.receivers[0] = Receiver::new(ReceiverConfig { receiver_id: 7, ..Default::default() }).unwrap();
    sim.got[0] = Got::default();
    sim.run(10_000_000_000);
    let g = &sim.got[0];
    assert!(g.bad.is_empty() && g.lost.is_empty());
    assert_eq!(g.joined.len(), 1);
    assert!(g.first_index.unwrap() >= 5_000);
    assert_eq!(g.next, 20_000);
}

#[test]
fn a_sender_restarting_with_a_new_session_is_followed() {
    let mut sim = unicast(2_000, ImpairConfig::default(), ImpairConfig::default());
    sim.run(10_000_000_000);
    let first_session = sim.got[0].joined[0].0;
    sim.sender = Sender::new(SenderConfig { session_id: 99, ..Default::default() }, sim.now).unwrap();
    sim.offered = 0;
    sim.got[0].next = 0;
    sim.run_until(10_000_000_000, |s| s.offered == s.total && s.got[0].ended.len() == 2);
    let g = &sim.got[0];
    assert_eq!(g.joined.iter().map(|j| j.0).collect::<Vec<_>>(), vec![first_session, 99]);
    assert_eq!(g.ended.len(), 2);
    assert_eq!(g.next, 2_000);
    assert!(g.bad.is_empty() && g.lost.is_empty());
}

#[test]
fn a_sender_killed_mid_gap_is_reported_lost_when_a_new_session_replaces_it() {
    let data = ImpairConfig { drop_range: Some((50_000, 50_001)), ..Default::default() };
    let rcfg = ReceiverConfig {
        nak_delay: NakDelay::Static(1_000_000_000),
        session_timeout: 100_000_000,
        ..Default::default()
    };
    let mut sim = Sim::new(SenderConfig::default(), vec![rcfg], data, ImpairConfig::default(), 2_000);
    sim.run_until(10_000_000_000, |s| s.offered == s.total && s.sender.is_sent());
    // The sender vanishes without END_OF_STREAM; a new one appears.
    sim.sender = Sender::new(SenderConfig { session_id: 42, ..Default::default() }, sim.now).unwrap();
    sim.send_data = Impairment::new(ImpairConfig::default());
    sim.total = 10;
    sim.offered = 0;
    sim.run_until(10_000_000_000, |s| {
        s.got[0].joined.len() == 2 && s.got[0].ended.len() == 2 && s.receivers[0].is_ended()
    });
    let g = &sim.got[0];
    assert_eq!(g.lost.len(), 1, "{:?}", g.lost);
    assert!(g.lost[0].0 <= 50_000 && g.lost[0].1 > 50_000);
}

fn key() -> AuthKey {
    AuthKey::from_hex("5f1e0c2a9b7d4e3f8a6c1b0d2e4f6a8b9c7d5e3f1a2b4c6d8e0f1a3b5c7d9e2f").unwrap()
}

/// With a shared key every datagram carries a MAC and a sequence: loss,
/// reorder and duplication on every path are still repaired exactly, and
/// the network's duplicates are dropped as replays before they are read.
#[test]
fn keyed_streams_survive_loss_reorder_and_duplication() {
    let data = ImpairConfig { loss: 0.05, reorder: 0.02, duplicate: 0.02, seed: 21, ..Default::default() };
    let ctrl = ImpairConfig { loss: 0.05, reorder: 0.02, duplicate: 0.02, seed: 22, ..Default::default() };
    let scfg = SenderConfig { auth: Some(key()), ..Default::default() };
    let rcfg = ReceiverConfig { auth: Some(key()), ..Default::default() };
    let mut sim = Sim::new(scfg.clone(), vec![rcfg.clone()], data, ctrl, 20_000);
    sim.run(60_000_000_000);
    assert_complete(&sim);
    let st = sim.receivers[0].stats();
    assert!(st.naks_sent > 0 && st.invalid_by.get(Invalid::Replayed) > 0, "{st:?}");
    assert_eq!(st.invalid, st.invalid_by.get(Invalid::Replayed), "{}", st.invalid_by);
    assert_eq!(sim.sender.stats().invalid, sim.sender.stats().invalid_by.get(Invalid::Replayed));

    let mc = |i: u32| ReceiverConfig { receiver_id: i, seed: u64::from(i), ..rcfg.clone() };
    let mut sim = Sim::new(scfg, (1..=3).map(mc).collect(), data, ctrl, 10_000);
    sim.run(60_000_000_000);
    assert_complete(&sim);
}

/// A receiver with another key (or none) never joins; a sender with
/// another key accepts no receiver.
#[test]
fn a_wrong_key_joins_nothing() {
    let other = AuthKey::new([7; 32]);
    let scfg = SenderConfig { auth: Some(key()), ..Default::default() };
    for rauth in [Some(other), None] {
        let rcfg = ReceiverConfig { auth: rauth, ..Default::default() };
        let mut sim = Sim::new(scfg.clone(), vec![rcfg], ImpairConfig::default(), ImpairConfig::default(), 10);
        sim.run_for(200_000_000);
        assert!(sim.got[0].joined.is_empty());
        assert!(!sim.sender.is_connected());
        let r = sim.receivers[0].stats();
        assert!(r.invalid_by.get(Invalid::Unauthenticated) > 0, "{r:?}");
    }
}
