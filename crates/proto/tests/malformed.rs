//! Bad datagrams against a live sender and receiver: arbitrary bytes and
//! mutated valid datagrams never panic (1,000,000 cases each by default,
//! `TICKWIRE_FUZZ_CASES` to change), and truncated, foreign-session,
//! wrong-version and huge-length datagrams interleaved with a real stream are
//! counted and dropped without touching the stream.

use proptest::prelude::*;
use std::cell::RefCell;
use std::net::{Ipv4Addr, SocketAddrV4};
use tickwire_proto::*;

fn fuzz_cases() -> u32 {
    std::env::var("TICKWIRE_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000)
}

const NOW: Nanos = 1_000;
/// The sender's and the receiver's addresses.
const S: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 1000);
const R: SocketAddrV4 = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 2000);

/// A connected sender and a receiver that has joined its session, plus a
/// few valid datagrams of each kind to mutate. The stream stays live (not
/// closed), so that what is fed to them hits a stream in progress.
fn pair() -> (Sender, Receiver, Vec<Vec<u8>>) {
    let mut s =
        Sender::new(SenderConfig { retention: 64 << 10, max_message: 4096, ..Default::default() }, NOW).unwrap();
    let mut r = Receiver::new(ReceiverConfig { window: 64 << 10, max_message: 4096, ..Default::default() }).unwrap();
    let mut buf = vec![0u8; 2048];
    let mut samples = Vec::new();
    let mut pump = |s: &mut Sender, r: &mut Receiver, samples: &mut Vec<Vec<u8>>| {
        while let Some(n) = s.poll_transmit(NOW, &mut buf) {
            samples.push(buf[..n].to_vec());
            r.handle_datagram(NOW, S, &buf[..n]);
        }
        r.poll_messages(|_| {}, usize::MAX);
        r.handle_timeout(NOW);
        while let Some((n, _)) = r.poll_transmit(NOW, &mut buf) {
            samples.push(buf[..n].to_vec());
            s.handle_datagram(NOW, R, &buf[..n]);
        }
    };
    pump(&mut s, &mut r, &mut samples);
    for i in 0..20u32 {
        s.offer("t/x", &vec![i as u8; (i as usize * 97) % 3000]).unwrap();
    }
    pump(&mut s, &mut r, &mut samples);
    (s, r, samples)
}

struct Live {
    s: Sender,
    r: Receiver,
    samples: Vec<Vec<u8>>,
    buf: Vec<u8>,
}

impl Live {
    fn new() -> Self {
        let (s, r, samples) = pair();
        Self { s, r, samples, buf: vec![0; 2048] }
    }

    /// Whether the stream is in progress: the receiver has joined the
    /// sender's session and not seen it end, and the sender is connected.
    fn is_live(&self) -> bool {
        self.r.session().is_some_and(|(sid, _)| sid == self.s.config().session_id)
            && !self.r.is_ended()
            && self.s.is_connected()
    }

    /// Feeds `d` to a live stream. A datagram that could have ended or cut
    /// it (a mutated heartbeat can be a true-looking end: only a key tells)
    /// leaves it for a fresh pair, so that every case hits a live stream.
    fn feed_live(&mut self, d: &[u8]) {
        assert!(self.is_live(), "the stream under test is not live: {}", self.r.debug_state());
        self.feed(d);
        if !self.is_live() {
            *self = Self::new();
        }
    }

    fn feed(&mut self, d: &[u8]) {
        self.r.handle_datagram(NOW, S, d);
        self.s.handle_datagram(NOW, R, d);
        self.r.poll_messages(|_| {}, 64);
        self.r.handle_timeout(NOW);
        let _ = self.r.poll_transmit(NOW, &mut self.buf);
        let _ = self.s.poll_transmit(NOW, &mut self.buf);
    }
}

thread_local! {
    static LIVE: RefCell<Live> = RefCell::new(Live::new());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: fuzz_cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_datagrams_never_panic(d in proptest::collection::vec(any::<u8>(), 0..256)) {
        LIVE.with(|l| l.borrow_mut().feed_live(&d));
    }

    #[test]
    fn mutated_datagrams_never_panic(pick in any::<usize>(), edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>()) {
        LIVE.with(|l| {
            let mut l = l.borrow_mut();
            let mut d = l.samples[pick % l.samples.len()].clone();
            for (at, v) in edits {
                let n = d.len();
                d[at % n] = v;
            }
            if cut % 4 == 0 {
                d.truncate(cut % (d.len() + 1));
            }
            l.feed_live(&d);
        });
    }
}

#[test]
fn bad_datagrams_are_counted_and_the_stream_is_untouched() {
    let mut s = Sender::new(SenderConfig::default(), NOW).unwrap();
    let mut r = Receiver::new(ReceiverConfig::default()).unwrap();
    let mut buf = vec![0u8; 2048];
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut invalid_sent = 0;
    let mut foreign_sent = 0;
    let total = 2_000u32;
    let mut offered = 0;
    for round in 0..100_000u64 {
        while offered < total && s.offer("", &offered.to_le_bytes().repeat(1 + offered as usize % 40)).is_ok() {
            offered += 1;
        }
        if offered == total {
            s.close();
        }
        while let Some(n) = s.poll_transmit(NOW + round, &mut buf) {
            let good = buf[..n].to_vec();
            // Each real datagram is preceded by a bad one of four kinds.
            let mut bad = good.clone();
            match round % 4 {
                0 => bad.truncate(good.len() / 2 + 1),
                1 => bad[8] ^= 0x55, // another session
                2 => bad[4] = 9,     // unknown version
                _ => bad[..4].copy_from_slice(&u32::MAX.to_le_bytes()),
            }
            if round % 4 == 1 && bad.len() >= 16 {
                foreign_sent += 1;
            } else {
                invalid_sent += 1;
            }
            r.handle_datagram(NOW + round, S, &bad);
            r.handle_datagram(NOW + round, S, &good);
        }
        r.poll_messages(
            |ev| {
                if let Event::Message(m) = ev {
                    got.push(m.payload.to_vec())
                }
            },
            usize::MAX,
        );
        r.handle_timeout(NOW + round);
        while let Some((n, _)) = r.poll_transmit(NOW + round, &mut buf) {
            s.handle_datagram(NOW + round, R, &buf[..n]);
        }
        if r.is_ended() {
            break;
        }
    }
    assert!(r.is_ended());
    assert_eq!(got.len(), total as usize);
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m, &(i as u32).to_le_bytes().repeat(1 + i % 40));
    }
    let st = r.stats();
    assert_eq!(st.lost_events, 0);
    assert!(st.invalid >= invalid_sent - 1, "{st:?} vs {invalid_sent}");
    assert!(st.other_session > 0 && foreign_sent > 0, "{st:?}");
}

/// Issue 16, item 2: heartbeats that carry the session's own ids (a spoofed
/// source, without a key) are checked against the stream before they change
/// it. An end before data already received, and a retained-from beyond the
/// sender's position, are counted and dropped while a gap is open. The stream
/// arrives whole, with no Lost notice, and ends where the sender ends it. (An
/// end or a retained-from ahead of everything received cannot be told from
/// the truth without a key: that is the MAC's job.)
#[test]
fn forged_heartbeats_cannot_end_cut_or_void_the_stream() {
    use tickwire_wire::{flags, heartbeat, HeartbeatRepr};
    let mut s = Sender::new(SenderConfig::default(), NOW).unwrap();
    let mut r = Receiver::new(ReceiverConfig::default()).unwrap();
    let (sid, stream) = (s.config().session_id, s.config().stream_id);
    let forge = |flags: u8, position: u64, retained_from: u64| {
        let mut b = vec![0u8; heartbeat::LEN];
        HeartbeatRepr { session_id: sid, stream_id: stream, flags, position, retained_from: 0 }.emit(&mut b).unwrap();
        b[heartbeat::RETAINED_FROM..heartbeat::RETAINED_FROM + 8].copy_from_slice(&retained_from.to_le_bytes());
        b
    };
    let mut buf = vec![0u8; 2048];
    let mut got: Vec<u32> = Vec::new();
    let (total, mut offered, mut forged) = (2_000u32, 0u32, 0);
    let mut ends = 0;
    for round in 0..100_000u64 {
        let now = NOW + round;
        // 50 messages a round, so that the forgeries land mid-stream.
        while offered < total.min((round as u32 + 1) * 50) && s.offer("", &offered.to_le_bytes()).is_ok() {
            offered += 1;
        }
        if offered == total {
            s.close();
        }
        // The round of the forgeries also loses its data (repaired by NAK),
        // so that a gap stands where a forged retained-from would void it.
        let forging = got.len() > 500 && forged == 0;
        while let Some(n) = s.poll_transmit(now, &mut buf) {
            if !forging
                || tickwire_wire::FrameHeader::new_checked(&buf[..n]).map(|h| h.frame_type())
                    != Ok(tickwire_wire::FrameType::Data)
            {
                r.handle_datagram(now, S, &buf[..n]);
            }
        }
        if forging {
            r.handle_datagram(now, S, &forge(0, offered as u64 * 64, 0)); // the truth: data up to here
            let pos = r.session().unwrap().1;
            // The end, inside the gap: behind data the sender has sent.
            r.handle_datagram(now, S, &forge(flags::END_OF_STREAM, pos + 64, 0));
            // Everything before the sender's position void, and beyond it.
            r.handle_datagram(now, S, &forge(0, pos, pos + 4096));
            forged = 2;
        }
        r.poll_messages(
            |ev| match ev {
                Event::Message(m) => got.push(u32::from_le_bytes(m.payload[..4].try_into().unwrap())),
                Event::Ended { .. } => ends += 1,
                Event::Lost { .. } => panic!("a forged heartbeat made the receiver report a loss"),
                _ => {}
            },
            usize::MAX,
        );
        r.handle_timeout(now);
        while let Some((n, _)) = r.poll_transmit(now, &mut buf) {
            s.handle_datagram(now, R, &buf[..n]);
        }
        if r.is_ended() {
            break;
        }
    }
    assert_eq!(forged, 2);
    assert_eq!(got, (0..total).collect::<Vec<_>>());
    assert_eq!(ends, 1);
    assert!(r.stats().invalid >= 2, "{:?}", r.stats());
}
