//! A shared key against a host that can send anything from anywhere,
//! including the sender's own address, and replay what it captured. Every
//! forgery is dropped unread and counted; the stream arrives exact.

use std::net::{Ipv4Addr, SocketAddrV4};
use tickwire_proto::*;
use tickwire_wire::{flags, DataRepr, HeartbeatRepr, SetupRepr, StatusRepr};

const S: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000);
const R: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2000);

fn key() -> AuthKey {
    AuthKey::from_hex("00112233445566778899aabbccddeeff0123456789abcdef0123456789abcdef").unwrap()
}

/// A keyed sender and receiver, and what each has sent.
struct Pair {
    s: Sender,
    r: Receiver,
    now: Nanos,
    buf: Vec<u8>,
    got: Vec<u32>,
    lost: u64,
    sent_data: Vec<Vec<u8>>,
    sent_ctrl: Vec<Vec<u8>>,
}

impl Pair {
    fn new(session_id: u32) -> Self {
        let s = Sender::new(SenderConfig { session_id, auth: Some(key()), ..Default::default() }, 1).unwrap();
        let rcfg = ReceiverConfig {
            auth: Some(key()),
            receiver_id: 77,
            challenge_seed: u64::from(session_id),
            ..Default::default()
        };
        let r = Receiver::new(rcfg).unwrap();
        Self { s, r, now: 1, buf: vec![0; 2048], got: Vec::new(), lost: 0, sent_data: vec![], sent_ctrl: vec![] }
    }

    /// One round: offer up to `n` more of `total`, move every datagram.
    fn round(&mut self, n: u32, total: u32) {
        self.now += 10_000;
        let mut offered = self.s.position() as u32 / 64;
        let stop = (offered + n).min(total);
        while offered < stop && self.s.offer("", &offered.to_le_bytes()).is_ok() {
            offered += 1;
        }
        if offered == total {
            self.s.close();
        }
        self.s.handle_timeout(self.now);
        while let Some(k) = self.s.poll_transmit(self.now, &mut self.buf) {
            self.sent_data.push(self.buf[..k].to_vec());
            self.r.handle_datagram(self.now, S, &self.buf[..k]);
        }
        let (got, lost) = (&mut self.got, &mut self.lost);
        self.r.poll_messages(
            |ev| match ev {
                Event::Message(m) => got.push(u32::from_le_bytes(m.payload[..4].try_into().unwrap())),
                Event::Lost { .. } => *lost += 1,
                _ => {}
            },
            usize::MAX,
        );
        self.r.handle_timeout(self.now);
        while let Some((k, to)) = self.r.poll_transmit(self.now, &mut self.buf) {
            assert_eq!(to, S);
            self.sent_ctrl.push(self.buf[..k].to_vec());
            self.s.handle_datagram(self.now, R, &self.buf[..k]);
        }
    }

    fn finish(&mut self, total: u32) {
        for _ in 0..10_000 {
            if self.r.is_ended() && self.s.is_drained() {
                return;
            }
            self.round(50, total);
        }
        panic!("not finished: got {} of {total}", self.got.len());
    }
}

/// Frames with the session's own ids, sent from the sender's own address
/// (spoofed) but without the key: forged data, an early end, a voided
/// retention, a misaligned frame, a rival SETUP, and a STATUS granting a
/// huge window from the receiver's address. All of them, with no MAC or
/// with a MAC under another key, are dropped as unauthenticated.
#[test]
fn without_the_key_nothing_forged_lands() {
    let mut p = Pair::new(0x5e55);
    let (sid, stream) = (0x5e55, 1);
    let total = 2_000;
    let mut forged = 0u64;
    let mut sender_forged = 0u64;
    let wrong = AuthKey::new([9; 32]);
    while p.got.len() < 1_000 {
        p.round(50, total);
    }
    let pos = p.r.session().unwrap().1;
    let mut frames: Vec<Vec<u8>> = Vec::new();
    let mut emit = |f: &dyn Fn(&mut [u8]) -> usize| {
        let mut b = vec![0u8; 256];
        let n = f(&mut b);
        b.truncate(n.next_multiple_of(32));
        frames.push(b);
    };
    let payload = 4_242u32.to_le_bytes();
    let data_at = |b: &mut [u8], position: u64| {
        let r = DataRepr {
            session_id: sid,
            stream_id: stream,
            position,
            flags: flags::UNFRAGMENTED,
            topic: "",
            payload: &payload,
        };
        r.emit(b).unwrap()
    };
    emit(&|b| data_at(b, pos));
    emit(&|b| {
        HeartbeatRepr {
            session_id: sid,
            stream_id: stream,
            flags: flags::END_OF_STREAM,
            position: pos,
            retained_from: 0,
        }
        .emit(b)
        .unwrap()
    });
    emit(&|b| {
        HeartbeatRepr { session_id: sid, stream_id: stream, flags: 0, position: pos + 640, retained_from: pos + 640 }
            .emit(b)
            .unwrap()
    });
    emit(&|b| data_at(b, pos + 8)); // misaligned
    emit(&|b| {
        SetupRepr { session_id: 0xbad, stream_id: stream, initial_position: 0, mtu: 1408, max_message: 4096 }
            .emit(b)
            .unwrap()
    });
    for f in &frames {
        // No MAC at all, and a MAC under another key.
        p.r.handle_datagram(p.now, S, f);
        let mut d = f.clone();
        d.resize(f.len() + 64, 0);
        // A sequence ahead of anything seen: only the MAC can refuse it.
        let sealed = auth::Sealed {
            session_id: f[8..12].try_into().map(u32::from_le_bytes).unwrap(),
            from_receiver: false,
            stream_id: stream,
            sequence: 1 << 40,
            challenge: 0,
            origin: sid,
        };
        let n = auth::seal(&wrong, &mut d, f.len(), sealed).unwrap();
        p.r.handle_datagram(p.now, S, &d[..n]);
        forged += 2;
    }
    let status = |b: &mut [u8]| {
        StatusRepr {
            session_id: sid,
            stream_id: stream,
            flags: 0,
            consumption_position: pos,
            receiver_window: 1 << 30,
            receiver_id: 77,
        }
        .emit(b)
        .unwrap()
    };
    let mut b = vec![0u8; 32];
    status(&mut b);
    p.s.handle_datagram(p.now, R, &b);
    sender_forged += 1;
    p.finish(total);
    assert_eq!(p.got, (0..total).collect::<Vec<_>>());
    assert_eq!(p.lost, 0);
    let st = p.r.stats();
    assert_eq!(st.invalid_by.get(Invalid::Unauthenticated), forged, "{}", st.invalid_by);
    assert_eq!(p.s.stats().invalid_by.get(Invalid::Unauthenticated), sender_forged);
}

/// Every datagram either side sent, replayed later from the right address,
/// is dropped as a replay: nothing is delivered twice or acted on again.
#[test]
fn replayed_datagrams_change_nothing() {
    let mut p = Pair::new(0x1234);
    let total = 3_000;
    while p.got.len() < 1_500 {
        p.round(50, total);
    }
    let (data, ctrl) = (p.sent_data.clone(), p.sent_ctrl.clone());
    for d in &data {
        p.r.handle_datagram(p.now, S, d);
    }
    for d in &ctrl {
        p.s.handle_datagram(p.now, R, d);
    }
    p.finish(total);
    assert_eq!(p.got, (0..total).collect::<Vec<_>>());
    let (r, s) = (p.r.stats(), p.s.stats());
    assert_eq!(r.invalid_by.get(Invalid::Replayed), data.len() as u64, "{}", r.invalid_by);
    assert_eq!(s.invalid_by.get(Invalid::Replayed), ctrl.len() as u64, "{}", s.invalid_by);
    assert_eq!(r.duplicates, 0, "replays are dropped before they are read");
}

/// A whole captured session replayed to a new receiver starts nothing: its
/// SETUPs echo challenges this receiver never issued. The real sender then
/// joins as usual.
#[test]
fn a_captured_session_cannot_be_replayed_as_new() {
    let mut old = Pair::new(0xaaaa);
    old.finish(200);
    let mut p = Pair::new(0xbbbb);
    for d in &old.sent_data {
        p.r.handle_datagram(p.now, S, d);
        p.r.poll_messages(|_| panic!("a replayed session delivered something"), usize::MAX);
    }
    assert_eq!(p.r.session(), None);
    p.finish(300);
    assert_eq!(p.r.session().unwrap().0, 0xbbbb);
    assert_eq!(p.got, (0..300).collect::<Vec<_>>());
}
