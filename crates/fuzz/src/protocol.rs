//! The reliable-UDP state machines fed arbitrary sequences of events.
//!
//! A real [`Sender`] streams numbered messages to a real [`Receiver`] (with
//! or without a shared key, unicast or multicast, as the input's first byte
//! says). The rest of the input is a program: offer, move a datagram, drop,
//! duplicate or reorder one, mutate one, send garbage from the session's
//! own address or another, let time pass. `receiver` aims the mutations and
//! garbage at the data path, `sender` at the control path.
//!
//! Checked after every step and at the end:
//! * nothing panics;
//! * every message delivered is one the sender offered, byte for byte, in
//!   order, each once; without a `Lost` event they are exactly a prefix of
//!   what was offered (mutations from the session's own address are only
//!   held to this with a key: without one the protocol cannot tell them from
//!   the truth);
//! * the counters add up (`invalid` is the sum of its reasons; messages
//!   delivered are the messages counted);
//! * when the program ends, a clean network delivers everything offered:
//!   no stream stalls on what came before. (Unkeyed, a stranger that sets
//!   the session up first is its source until it falls silent, and the
//!   receiver then joins the real sender where it stands: it must, within
//!   the drain, and catch up.)

use std::net::{Ipv4Addr, SocketAddrV4};
use tickwire_impair::Rng;
use tickwire_proto::{AuthKey, Event, Nanos, Receiver, ReceiverConfig, Sender, SenderConfig};

const SENDER_AT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000);
const RECEIVER_AT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2000);
const STRANGER_AT: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 66), 6666);
const MAX_STEPS: usize = 512;
const MAX_MESSAGES: u64 = 400;

/// Reads the program; zeros once it runs out.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map_or((0, &[][..]), |(b, r)| (*b, r));
        self.0 = rest;
        b
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.0.len());
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        b.to_vec()
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Message `i`: its number, then 0 to 2,999 bytes derived from it (some
/// span several frames).
fn message(i: u64) -> Vec<u8> {
    let mut r = Rng::new(i);
    let len = if i % 7 == 0 { 1500 + (r.next_u64() % 1500) as usize } else { (r.next_u64() % 100) as usize };
    i.to_le_bytes().into_iter().chain((0..len).map(|_| r.next_u64() as u8)).collect()
}

/// Which path the mutations aim at.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Aim {
    Data,
    Control,
}

struct Run {
    s: Sender,
    r: Receiver,
    now: Nanos,
    keyed: bool,
    /// Datagrams on their way: to the receiver, to the sender.
    data: Vec<Vec<u8>>,
    control: Vec<Vec<u8>>,
    offered: u64,
    /// Next message index expected, and whether a gap may come before it
    /// (a loss was reported, or the receiver joined again later).
    next: u64,
    lost: bool,
    /// Unkeyed: a stranger's SETUP was taken first.
    hijacked: bool,
    delivered: u64,
    /// Unkeyed: a mutated datagram reached an end from the right address.
    tainted: bool,
    buf: Vec<u8>,
}

impl Run {
    fn new(mode: u8) -> Self {
        let keyed = mode & 1 != 0;
        let key = keyed.then(|| AuthKey::new(*b"fuzzing key: never in production"));
        let multicast = mode & 2 != 0;
        let small = mode & 4 != 0;
        let scfg = SenderConfig {
            session_id: 0x5e55,
            retention: if small { 64 << 10 } else { 256 << 10 },
            max_message: 8 << 10,
            multicast,
            auth: key.clone(),
            ..Default::default()
        };
        let rcfg = ReceiverConfig {
            window: 64 << 10,
            max_message: 8 << 10,
            multicast,
            auth: key,
            receiver_id: 0x77,
            challenge_seed: 3,
            ..Default::default()
        };
        Self {
            s: Sender::new(scfg, 1).expect("sender settings"),
            r: Receiver::new(rcfg).expect("receiver settings"),
            now: 1,
            keyed,
            data: Vec::new(),
            control: Vec::new(),
            offered: 0,
            next: 0,
            lost: false,
            hijacked: false,
            delivered: 0,
            tainted: false,
            buf: vec![0; 2048],
        }
    }

    fn offer(&mut self, n: u8) {
        for _ in 0..n % 16 {
            if self.offered >= MAX_MESSAGES || self.s.offer("t", &message(self.offered)).is_err() {
                break;
            }
            self.offered += 1;
        }
    }

    fn transmit(&mut self) {
        self.s.handle_timeout(self.now);
        for _ in 0..64 {
            let Some(n) = self.s.poll_transmit(self.now, &mut self.buf) else { break };
            self.data.push(self.buf[..n].to_vec());
        }
        self.r.handle_timeout(self.now);
        for _ in 0..16 {
            let Some((n, _)) = self.r.poll_transmit(self.now, &mut self.buf) else { break };
            self.control.push(self.buf[..n].to_vec());
        }
    }

    fn deliver_data(&mut self, from: SocketAddrV4, d: &[u8]) {
        self.r.handle_datagram(self.now, from, d);
        if self.r.source() == Some(STRANGER_AT) && !self.keyed {
            // Without a key whoever sets a session up first is its source
            // until it falls silent (documented). With a key a stranger
            // can only race a copy of an authentic datagram: control then
            // goes to it until the next datagram from the sender.
            self.hijacked = true;
        }
        self.poll();
    }

    fn deliver_control(&mut self, from: SocketAddrV4, d: &[u8]) {
        self.s.handle_datagram(self.now, from, d);
    }

    fn poll(&mut self) {
        let (next, lost, delivered, offered) = (&mut self.next, &mut self.lost, &mut self.delivered, self.offered);
        let hijacked = self.hijacked;
        // Unkeyed, and forged from the right address or hijacked by a
        // stranger: nothing can be held against what arrives but that it
        // does not panic (and, hijacked, that the real sender is joined in
        // the end).
        let trusted = !self.tainted && !self.hijacked;
        self.r.poll_messages(
            |ev| match ev {
                Event::Message(_) if !trusted => *delivered += 1,
                Event::Message(m) => {
                    let i = m.payload.get(..8).map_or(u64::MAX, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
                    assert!(i < offered, "message {i} was never offered");
                    assert!(i >= *next, "message {i} after {next}: out of order or twice");
                    assert!(*lost || i == *next, "message {i} where {next} was due, with no Lost");
                    assert!(m.payload == message(i).as_slice(), "message {i} differs from what was offered");
                    *next = i + 1;
                    *delivered += 1;
                }
                Event::Lost { .. } => *lost = true,
                Event::Joined { position, .. } if position > 0 && trusted => {
                    panic!("joined at {position}: only a hijack makes a late join here")
                }
                Event::Joined { .. } if hijacked => *lost = true,
                _ => {}
            },
            usize::MAX,
        );
    }

    fn check_counters(&self) {
        let (r, s) = (self.r.stats(), self.s.stats());
        assert_eq!(r.invalid, r.invalid_by.total(), "receiver invalid by reason: {}", r.invalid_by);
        assert_eq!(s.invalid, s.invalid_by.total(), "sender invalid by reason: {}", s.invalid_by);
        assert_eq!(r.messages, self.delivered, "messages counted and delivered");
    }

    /// One step of the program.
    fn step(&mut self, inp: &mut Input<'_>, aim: Aim) {
        let op = inp.u8();
        let pick = usize::from(inp.u8());
        let (queue_len, target) = match aim {
            Aim::Data => (self.data.len(), 0),
            Aim::Control => (self.control.len(), 1),
        };
        match op % 10 {
            0 => self.offer(inp.u8()),
            1 | 2 => self.transmit(),
            // Move the front datagram of each path.
            3 | 4 => {
                if !self.data.is_empty() {
                    let d = self.data.remove(0);
                    self.deliver_data(SENDER_AT, &d);
                }
                if !self.control.is_empty() {
                    let d = self.control.remove(0);
                    self.deliver_control(RECEIVER_AT, &d);
                }
            }
            // Lose, duplicate or reorder one on the aimed path.
            5 if queue_len > 0 => {
                let q = if target == 0 { &mut self.data } else { &mut self.control };
                let i = pick % q.len();
                match inp.u8() % 3 {
                    0 => drop(q.remove(i)),
                    1 => {
                        let d = q[i].clone();
                        q.push(d);
                    }
                    _ => q.swap(0, i),
                }
            }
            // A mutated copy, from the right address or a stranger's.
            6 if queue_len > 0 => {
                let q = if target == 0 { &self.data } else { &self.control };
                let mut d = q[pick % q.len()].clone();
                for _ in 0..1 + inp.u8() % 4 {
                    let at = usize::from(inp.u8()) * 7 % d.len().max(1);
                    if let Some(b) = d.get_mut(at) {
                        *b ^= inp.u8() | 1;
                    }
                }
                if inp.u8() % 4 == 0 {
                    d.truncate(usize::from(inp.u8()) * 8);
                }
                let stranger = inp.u8() % 3 == 0;
                self.deliver_forged(target, stranger, &d);
            }
            // Garbage.
            7 => {
                let len = usize::from(inp.u8());
                let d = inp.bytes(len);
                let stranger = inp.u8() % 2 == 0;
                self.deliver_forged(target, stranger, &d);
            }
            // Time passes: up to 25.5 ms.
            _ => {
                self.now += u64::from(inp.u8()) * 100_000 + 1;
                self.transmit();
            }
        }
        self.poll();
        self.check_counters();
    }

    fn deliver_forged(&mut self, target: usize, stranger: bool, d: &[u8]) {
        // Forged control cannot change what is delivered, only when (or
        // whether: a loss is then reported); forged data can, without a key.
        if target == 0 && !stranger && !self.keyed {
            self.tainted = true;
        }
        if target == 0 {
            self.deliver_data(if stranger { STRANGER_AT } else { SENDER_AT }, d);
        } else {
            self.deliver_control(if stranger { STRANGER_AT } else { RECEIVER_AT }, d);
        }
    }

    /// A clean network until everything offered is delivered (or lost, as
    /// reported): 5,000 timer steps, 5 to 50 s of virtual time.
    fn drain(&mut self) {
        self.data.clear();
        self.control.clear();
        for _ in 0..5_000 {
            let caught_up = self.s.is_sent()
                && self.r.source() == Some(SENDER_AT)
                && self.r.session().map(|(_, p)| p) == Some(self.s.position());
            if caught_up && (self.lost || self.next == self.offered) {
                return;
            }
            // To the next timer, 1 to 10 ms ahead (5 to 50 s in all).
            let next = [self.s.poll_timeout(), self.r.poll_timeout()].into_iter().flatten().min();
            self.now = next.unwrap_or(u64::MAX).clamp(self.now + 1_000_000, self.now + 10_000_000);
            self.transmit();
            for d in std::mem::take(&mut self.data) {
                self.deliver_data(SENDER_AT, &d);
            }
            for d in std::mem::take(&mut self.control) {
                self.deliver_control(RECEIVER_AT, &d);
            }
            self.check_counters();
        }
        panic!(
            "stalled: {} of {} messages delivered after 5,000 steps of a clean network (lost: {}, receiver {:?}, sender {:?})",
            self.next,
            self.offered,
            self.lost,
            self.r.stats(),
            self.s.stats()
        );
    }
}

fn run(data: &[u8], aim: Aim) {
    let mut inp = Input(data);
    let mut run = Run::new(inp.u8());
    let mut steps = 0;
    while !inp.is_empty() && steps < MAX_STEPS {
        run.step(&mut inp, aim);
        steps += 1;
    }
    if !run.tainted {
        run.drain();
    }
}

/// Mutations and garbage on the data path, into the receiver.
pub fn receiver(data: &[u8]) {
    run(data, Aim::Data);
}

/// Mutations and garbage on the control path, into the sender.
pub fn sender(data: &[u8]) {
    run(data, Aim::Control);
}
