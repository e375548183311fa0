//! Issue 16's attacks on reliable UDP, each from a socket of its own on
//! loopback: another port, or the sender's own address forged through a raw
//! socket. Each test checks that the stream arrives complete and
//! byte-identical (every message is checked on arrival) and that the
//! counter for the dropped frames moved. (A close with no receiver is in
//! loopback.rs.)

use std::net::{SocketAddr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tickwire_driver::udp::{UdpReceiver, UdpSender};
use tickwire_driver::*;
use tickwire_wire::{flags, DataRepr, HeartbeatRepr, SetupRepr, StatusRepr};

mod common;
use common::{close_driven, messages, offer_all, pump, settle};

const STREAM: u32 = 16;

/// A key file (mode 0600) in a directory of its own, removed on drop.
struct KeyFile(PathBuf);

impl KeyFile {
    fn new(tag: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("tickwire-attacks-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key");
        std::fs::write(&path, "8c1f2a3b4c5d6e7f8091a2b3c4d5e6f70819a2b3c4d5e6f708192a3b4c5d6e7f\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        Self(path)
    }
    fn param(&self) -> String {
        format!("auth={}", self.0.display())
    }
}

impl Drop for KeyFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
    }
}

/// A connected unicast publication and subscription on loopback.
struct Stream {
    p: UdpSender,
    s: UdpReceiver,
    log: Vec<String>,
}

/// What an attacker has sniffed: the session, where the next message goes,
/// and both ends' addresses.
struct Sniffed {
    session: u32,
    position: u64,
    receiver: SocketAddrV4,
    sender: SocketAddrV4,
}

fn loopback(a: SocketAddrV4) -> SocketAddrV4 {
    if a.ip().is_unspecified() {
        SocketAddrV4::new([127, 0, 0, 1].into(), a.port())
    } else {
        a
    }
}

impl Stream {
    fn connect(params: &str) -> Self {
        let uri = |port: u16| -> ChannelUri { format!("udp://127.0.0.1:{port}?{params}").parse().unwrap() };
        let mut s = UdpReceiver::open(&uri(0), STREAM, None).unwrap();
        let mut p = UdpSender::open(&uri(s.local_addr().port()), STREAM, None).unwrap();
        let mut log = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !p.is_connected() {
            assert!(Instant::now() < deadline, "never connected");
            pump(&mut [&mut p], &mut [(&mut s, &mut log)]);
        }
        Self { p, s, log }
    }

    fn send(&mut self, range: std::ops::Range<u64>) {
        offer_all(&mut self.p, range, &mut [(&mut self.s, &mut self.log)]);
        self.settle(20);
    }

    fn settle(&mut self, ms: u64) {
        settle(&mut [&mut self.p], &mut [(&mut self.s, &mut self.log)], ms);
    }

    fn sniff(&self) -> Sniffed {
        Sniffed {
            session: self.p.session_id(),
            position: self.p.position(),
            receiver: loopback(self.s.local_addr()),
            sender: loopback(self.p.local_addr()),
        }
    }

    /// Sends 100..200, closes, and checks that 0..200 arrived, each once and
    /// byte-identical (checked on arrival), in one session.
    fn finish(mut self) -> Self {
        self.send(100..200);
        assert_eq!(close_driven(&mut self.p, &mut [(&mut self.s, &mut self.log)]), Ok(1));
        self.settle(20);
        assert_eq!(messages(&self.log), (0..200).collect::<Vec<u64>>(), "{:?}", self.log);
        let starts = self.log.iter().filter(|l| l.starts_with("joined") || l.starts_with("ended")).count();
        assert_eq!(starts, 2, "one session, joined and ended once: {:?}", self.log);
        assert!(!self.log.iter().any(|l| l.starts_with("lost")), "{:?}", self.log);
        self
    }
}

fn data(session: u32, position: u64, payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    let r =
        DataRepr { session_id: session, stream_id: STREAM, position, flags: flags::UNFRAGMENTED, topic: "", payload };
    let n = r.emit(&mut b).unwrap();
    b.truncate(tickwire_wire::align_frame(n));
    b
}

fn heartbeat(session: u32, fl: u8, position: u64, retained_from: u64) -> Vec<u8> {
    let mut b = vec![0u8; 32];
    HeartbeatRepr { session_id: session, stream_id: STREAM, flags: fl, position, retained_from: 0 }
        .emit(&mut b)
        .unwrap();
    // Written by hand: emit refuses a retained-from beyond the position.
    b[24..32].copy_from_slice(&retained_from.to_le_bytes());
    b
}

fn setup(session: u32) -> Vec<u8> {
    let mut b = vec![0u8; 32];
    SetupRepr { session_id: session, stream_id: STREAM, initial_position: 0, mtu: 1408, max_message: 1 << 20 }
        .emit(&mut b)
        .unwrap();
    b
}

fn status(session: u32, consumption: u64, window: u32, receiver_id: u32) -> Vec<u8> {
    let mut b = vec![0u8; 32];
    let s = StatusRepr {
        session_id: session,
        stream_id: STREAM,
        flags: 0,
        consumption_position: consumption,
        receiver_window: window,
        receiver_id,
    };
    s.emit(&mut b).unwrap();
    b
}

fn stray() -> UdpSocket {
    let evil = UdpSocket::bind("127.0.0.1:0").unwrap();
    evil.set_nonblocking(true).unwrap();
    evil
}

fn spoof(from: SocketAddrV4, to: SocketAddrV4, d: &[u8]) {
    tickwire_testkit::send_spoofed(from, to, d).expect("raw socket (the tests run as root)");
}

/// Redirect: a stray sender on another port, mid-stream, sends data of
/// sessions of its own and of the sniffed one. Nothing it sends is read,
/// and it is sent no NAK or STATUS (before the lock, any datagram's
/// source drew them and slowed a transfer eightfold).
#[test]
fn redirect_a_stray_sender_draws_no_control() {
    let mut st = Stream::connect("");
    st.send(0..100);
    let (evil, at) = (stray(), st.sniff());
    for i in 0..200u32 {
        let session = if i % 2 == 0 { at.session } else { 0x5000 + i };
        evil.send_to(&data(session, at.position + 1024 * 64, b"stray"), SocketAddr::V4(at.receiver)).unwrap();
    }
    let st = st.finish();
    assert!(st.s.stats().frames_foreign >= 200, "{:?}", st.s.stats());
    let mut back = [0u8; 64];
    assert!(evil.recv_from(&mut back).is_err(), "the stray was sent a NAK or STATUS");
}

/// Inject: data at the next position with the sniffed session, forged
/// from the sender's own address. With a key it is unauthenticated.
#[test]
fn inject_forged_from_the_senders_address_fails_with_a_key() {
    let key = KeyFile::new("inject");
    let mut st = Stream::connect(&key.param());
    st.send(0..100);
    let at = st.sniff();
    spoof(at.sender, at.receiver, &data(at.session, at.position, &[0xEE; 64]));
    st.settle(20);
    let st = st.finish();
    assert_eq!(st.s.stats().invalid_by.get(Invalid::Unauthenticated), 1, "{}", st.s.stats().invalid_by);
}

/// Truncate: an END_OF_STREAM behind data already received, forged from the
/// sender's address without a key, is refused by the stream's state
/// (bad_end); one at the current position with a key is unauthenticated.
#[test]
fn truncate_a_forged_end_of_stream_fails() {
    let mut st = Stream::connect("");
    st.send(0..100);
    let at = st.sniff();
    spoof(at.sender, at.receiver, &heartbeat(at.session, flags::END_OF_STREAM, (at.position / 2) & !31, 0));
    st.settle(20);
    let st = st.finish();
    assert_eq!(st.s.stats().invalid_by.get(Invalid::BadEnd), 1, "{}", st.s.stats().invalid_by);

    let key = KeyFile::new("truncate");
    let mut st = Stream::connect(&key.param());
    st.send(0..100);
    let at = st.sniff();
    spoof(at.sender, at.receiver, &heartbeat(at.session, flags::END_OF_STREAM, at.position, 0));
    st.settle(20);
    let st = st.finish();
    assert_eq!(st.s.stats().invalid_by.get(Invalid::Unauthenticated), 1, "{}", st.s.stats().invalid_by);
}

/// Stall: data at a misaligned offset (it used to leave a hole that no
/// repair could fill) is refused before it is placed.
#[test]
fn stall_a_misaligned_offset_is_refused() {
    let mut st = Stream::connect("");
    st.send(0..100);
    let at = st.sniff();
    spoof(at.sender, at.receiver, &data(at.session, at.position + 8, b"misaligned"));
    st.settle(20);
    let st = st.finish();
    assert_eq!(st.s.stats().invalid_by.get(Invalid::Misaligned), 1, "{}", st.s.stats().invalid_by);
}

/// Forged retained-from: a heartbeat claiming the sender keeps nothing
/// before a position beyond its own is refused without a key; with a key no
/// forged heartbeat is read at all.
#[test]
fn a_forged_retained_from_fails() {
    let mut st = Stream::connect("");
    st.send(0..100);
    let at = st.sniff();
    spoof(at.sender, at.receiver, &heartbeat(at.session, 0, at.position, at.position + (1 << 20)));
    st.settle(20);
    let st = st.finish();
    assert_eq!(st.s.stats().invalid, 1, "{}", st.s.stats().invalid_by);

    let key = KeyFile::new("retained");
    let mut st = Stream::connect(&key.param());
    st.send(0..100);
    let at = st.sniff();
    spoof(at.sender, at.receiver, &heartbeat(at.session, 0, at.position, at.position));
    st.settle(20);
    let st = st.finish();
    assert_eq!(st.s.stats().invalid_by.get(Invalid::Unauthenticated), 1, "{}", st.s.stats().invalid_by);
}

/// Hijack: a forger answers first, announcing a session of its own (SETUP
/// and data) to a receiver that has none yet. With a key it is never joined
/// and the real sender connects.
#[test]
fn hijack_a_forged_session_is_never_joined_with_a_key() {
    let key = KeyFile::new("hijack");
    let uri = |port: u16| -> ChannelUri { format!("udp://127.0.0.1:{port}?{}", key.param()).parse().unwrap() };
    let mut s = UdpReceiver::open(&uri(0), STREAM, None).unwrap();
    let evil = stray();
    let target = SocketAddr::V4(loopback(s.local_addr()));
    let mut log = Vec::new();
    for _ in 0..20 {
        evil.send_to(&setup(0xE71), target).unwrap();
        evil.send_to(&data(0xE71, 0, &[0xEE; 32]), target).unwrap();
        pump(&mut [], &mut [(&mut s, &mut log)]);
    }
    assert_eq!(s.session(), None);
    let mut p = UdpSender::open(&uri(s.local_addr().port()), STREAM, None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.is_connected() {
        assert!(Instant::now() < deadline, "the real sender never connected");
        evil.send_to(&setup(0xE71), target).unwrap();
        pump(&mut [&mut p], &mut [(&mut s, &mut log)]);
    }
    let mut st = Stream { p, s, log };
    st.send(0..100);
    let st = st.finish();
    assert!(st.s.stats().invalid_by.get(Invalid::Unauthenticated) >= 40, "{}", st.s.stats().invalid_by);
    let mut back = [0u8; 64];
    assert!(evil.recv_from(&mut back).is_err(), "the forger was asked for a SETUP");
}

/// Fake receiver: a STATUS granting a huge window, from another port
/// (unicast: dropped unread) and forged from the real receiver's address
/// with a key (unauthenticated). The sender still counts one receiver.
#[test]
fn a_fake_receiver_is_not_counted() {
    let mut st = Stream::connect("");
    st.send(0..100);
    let (evil, at) = (stray(), st.sniff());
    evil.send_to(&status(at.session, at.position, u32::MAX, 0xBAD), SocketAddr::V4(at.sender)).unwrap();
    st.settle(20);
    assert_eq!(st.p.receivers(), 1);
    let st = st.finish();
    assert_eq!(st.p.stats().frames_foreign, 1, "{:?}", st.p.stats());

    let key = KeyFile::new("fake");
    let mut st = Stream::connect(&key.param());
    st.send(0..100);
    let at = st.sniff();
    spoof(at.receiver, at.sender, &status(at.session, at.position, 1 << 30, 0xBAD));
    st.settle(20);
    assert_eq!(st.p.receivers(), 1);
    let st = st.finish();
    assert_eq!(st.p.stats().invalid_by.get(Invalid::Unauthenticated), 1, "{}", st.p.stats().invalid_by);
}

/// Multicast: a receiver that stops sending STATUS is dropped from flow
/// control after receiver-timeout, with an event, and no longer holds the
/// live one back; a fake STATUS using the live receiver's id from another
/// address is not taken for it.
#[test]
fn a_dead_multicast_receiver_is_dropped_with_an_event_and_a_fake_is_not_counted() {
    // Every receiver of the group binds its port, and the sender sends to
    // it: a port free now (a socket bound to port 0 finds it), not one
    // derived from the pid (two runs could pick the same).
    let port = std::net::UdpSocket::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port();
    let group = format!("udp://239.255.16.{}:{port}", 1 + std::process::id() % 200);
    let uri: ChannelUri = format!("{group}?interface=127.0.0.1&receiver-timeout=300ms").parse().unwrap();
    let mut live = UdpReceiver::open(&uri, STREAM, None).unwrap();
    let mut dead = UdpReceiver::open(&uri, STREAM, None).unwrap();
    let mut p = UdpSender::open(&uri, STREAM, None).unwrap();
    let (mut log, mut dead_log) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.receivers() < 2 {
        assert!(Instant::now() < deadline, "receivers never joined");
        pump(&mut [&mut p], &mut [(&mut live, &mut log), (&mut dead, &mut dead_log)]);
    }
    offer_all(&mut p, 0..50, &mut [(&mut live, &mut log), (&mut dead, &mut dead_log)]);
    // `dead` stops; a fake STATUS claims to be `live` with a huge window.
    let evil = stray();
    let fake = status(p.session_id(), p.position(), 1 << 30, live.receiver_id());
    evil.send_to(&fake, SocketAddr::V4(loopback(p.local_addr()))).unwrap();
    let started = Instant::now();
    let mut changes = Vec::new();
    while started.elapsed() < Duration::from_secs(5) && changes.len() < 3 {
        pump(&mut [&mut p], &mut [(&mut live, &mut log)]);
        while let Some(c) = p.poll_receiver_change() {
            changes.push(c);
        }
        if changes.iter().any(|c| matches!(c, ReceiverChange::TimedOut { .. })) {
            break;
        }
    }
    let timed_out: Vec<u32> = changes
        .iter()
        .filter_map(|c| match c {
            ReceiverChange::TimedOut { receiver_id, .. } => Some(*receiver_id),
            _ => None,
        })
        .collect();
    assert_eq!(timed_out, [dead.receiver_id()], "{changes:?}");
    assert!(started.elapsed() >= Duration::from_millis(250), "dropped before the timeout");
    assert_eq!(p.receivers(), 1);
    assert!(p.stats().frames_foreign >= 1, "{:?}", p.stats());
    offer_all(&mut p, 50..200, &mut [(&mut live, &mut log)]);
    assert_eq!(close_driven(&mut p, &mut [(&mut live, &mut log)]), Ok(1));
    assert_eq!(messages(&log), (0..200).collect::<Vec<u64>>());
    assert_eq!(p.stats().receivers_timed_out, 1);
}
