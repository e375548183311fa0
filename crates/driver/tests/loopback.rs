//! UdpSender and subscription over real UDP sockets on loopback, in one
//! thread (embedded mode, both ends driven by the test loop).

use std::time::{Duration, Instant};
use tickwire_driver::udp::{CloseError, UdpReceiver, UdpSender};
use tickwire_driver::*;

mod common;
use common::{check_numbered, close_driven, messages, numbered, offer_all, pump, settle};

fn port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
}

/// Sends `n` numbered messages of varied sizes; returns what arrived.
fn transfer(params: &str, n: u64) -> (Vec<u64>, Vec<(u64, u64)>, UdpSender, UdpReceiver) {
    let uri: ChannelUri = format!("udp://127.0.0.1:{}?{params}", port()).parse().unwrap();
    let mut sub = UdpReceiver::open(&uri, 7, None).unwrap();
    let mut publication = UdpSender::open(&uri, 7, None).unwrap();
    let mut got = Vec::new();
    let mut lost = Vec::new();
    let mut next = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut closed = false;
    while Instant::now() < deadline {
        while next < n {
            match publication.offer(&numbered(next)) {
                Ok(_) => next += 1,
                Err(_) => break,
            }
        }
        publication.do_work();
        sub.poll(
            |ev| match ev {
                Event::Message(m) => got.push(check_numbered(m.payload)),
                Event::Lost { from, to, .. } => lost.push((from, to)),
                _ => {}
            },
            256,
        )
        .unwrap();
        if next == n && !closed {
            publication.do_work();
            closed = true;
        }
        if closed && got.len() as u64 + lost.len() as u64 >= n {
            break;
        }
    }
    (got, lost, publication, sub)
}

#[test]
fn clean_loopback_transfer_is_exact_and_in_order() {
    let (got, lost, p, _s) = transfer("", 20_000);
    assert!(lost.is_empty());
    assert_eq!(got, (0..20_000).collect::<Vec<_>>());
    assert_eq!(p.stats().retransmits, 0);
}

#[test]
fn loss_reorder_and_duplicates_on_both_paths_are_repaired() {
    let (got, lost, p, s) = transfer(
        "send-data-loss=0.05&send-data-reorder=0.02&send-data-duplicate=0.02&recv-control-loss=0.05&seed=11",
        20_000,
    );
    assert!(lost.is_empty(), "{lost:?}");
    assert_eq!(got, (0..20_000).collect::<Vec<_>>());
    assert!(p.stats().retransmits > 0 && s.stats().naks_sent > 0 && s.stats().duplicates > 0);
}

#[test]
fn a_restarted_receiver_joins_at_the_current_position_and_continues_in_order() {
    let uri: ChannelUri = format!("udp://127.0.0.1:{}", port()).parse().unwrap();
    let mut p = UdpSender::open(&uri, 3, None).unwrap();
    let (mut log1, mut log2) = (Vec::new(), Vec::new());
    {
        let mut s1 = UdpReceiver::open(&uri, 3, None).unwrap();
        offer_all(&mut p, 0..1000, &mut [(&mut s1, &mut log1)]);
        settle(&mut [&mut p], &mut [(&mut s1, &mut log1)], 50);
    }
    assert_eq!(messages(&log1), (0..1000).collect::<Vec<_>>());
    let mut s2 = UdpReceiver::open(&uri, 3, None).unwrap();
    offer_all(&mut p, 1000..3000, &mut [(&mut s2, &mut log2)]);
    settle(&mut [&mut p], &mut [(&mut s2, &mut log2)], 100);
    assert!(log2.first().is_some_and(|l| l.starts_with("joined")), "{log2:?} {:?} {:?}", s2.stats(), p.stats());
    let got = messages(&log2);
    let first = got[0];
    assert!((1000..3000).contains(&first), "{first}");
    assert_eq!(got, (first..3000).collect::<Vec<_>>());
    assert!(!log2.iter().any(|l| l.starts_with("lost")));
}

#[test]
fn a_sender_restarting_with_a_new_session_is_followed_after_the_old_one_falls_silent() {
    let uri: ChannelUri = format!("udp://127.0.0.1:{}?session-timeout=50ms", port()).parse().unwrap();
    let mut s = UdpReceiver::open(&uri, 4, None).unwrap();
    let mut log = Vec::new();
    let first_session;
    {
        let mut p1 = UdpSender::open(&uri, 4, None).unwrap();
        first_session = p1.session_id();
        offer_all(&mut p1, 0..500, &mut [(&mut s, &mut log)]);
        settle(&mut [&mut p1], &mut [(&mut s, &mut log)], 20);
        // Dropped without close: like a crash, no END_OF_STREAM.
    }
    let mut p2 = UdpSender::open(&uri, 4, None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p2.is_connected() {
        assert!(Instant::now() < deadline, "new session never connected");
        pump(&mut [&mut p2], &mut [(&mut s, &mut log)]);
    }
    offer_all(&mut p2, 0..500, &mut [(&mut s, &mut log)]);
    assert_eq!(close_driven(&mut p2, &mut [(&mut s, &mut log)]), Ok(1));
    settle(&mut [&mut p2], &mut [(&mut s, &mut log)], 20);
    let expected: Vec<String> = std::iter::once(format!("joined {first_session}"))
        .chain((0..500).map(|i| format!("m{i}")))
        .chain([format!("ended {first_session}"), format!("joined {}", p2.session_id())])
        .chain((0..500).map(|i| format!("m{i}")))
        .chain([format!("ended {}", p2.session_id())])
        .collect();
    assert_eq!(log, expected);
}

#[test]
fn a_late_joiner_on_a_multicast_group_starts_at_a_message_boundary() {
    let group = format!("udp://239.255.91.{}:{}?interface=127.0.0.1", 1 + port() % 200, port());
    let uri: ChannelUri = group.parse().unwrap();
    let mut p = UdpSender::open(&uri, 5, None).unwrap();
    let mut a = UdpReceiver::open(&uri, 5, None).unwrap();
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    offer_all(&mut p, 0..1000, &mut [(&mut a, &mut la)]);
    settle(&mut [&mut p], &mut [(&mut a, &mut la)], 20);
    let mut b = UdpReceiver::open(&uri, 5, None).unwrap();
    offer_all(&mut p, 1000..3000, &mut [(&mut a, &mut la), (&mut b, &mut lb)]);
    assert_eq!(close_driven(&mut p, &mut [(&mut a, &mut la), (&mut b, &mut lb)]), Ok(2));
    settle(&mut [&mut p], &mut [(&mut a, &mut la), (&mut b, &mut lb)], 20);
    assert_eq!(messages(&la), (0..3000).collect::<Vec<_>>());
    let got = messages(&lb);
    assert!(!got.is_empty() && got[0] >= 1000, "{:?}", &lb[..lb.len().min(3)]);
    assert_eq!(got, (got[0]..3000).collect::<Vec<_>>());
    assert!(lb[0].starts_with("joined") && lb.last().unwrap().starts_with("ended"));
}

#[test]
fn a_receiver_joins_an_idle_sender_from_its_heartbeats() {
    let uri: ChannelUri = format!("udp://127.0.0.1:{}", port()).parse().unwrap();
    let mut p = UdpSender::open(&uri, 6, None).unwrap();
    let mut log1 = Vec::new();
    {
        let mut s1 = UdpReceiver::open(&uri, 6, None).unwrap();
        offer_all(&mut p, 0..100, &mut [(&mut s1, &mut log1)]);
        settle(&mut [&mut p], &mut [(&mut s1, &mut log1)], 20);
    }
    let mut s2 = UdpReceiver::open(&uri, 6, None).unwrap();
    let mut log2 = Vec::new();
    settle(&mut [&mut p], &mut [(&mut s2, &mut log2)], 50);
    assert_eq!(log2.len(), 1, "{log2:?} {:?} {:?}", s2.stats(), p.stats());
    offer_all(&mut p, 100..200, &mut [(&mut s2, &mut log2)]);
    settle(&mut [&mut p], &mut [(&mut s2, &mut log2)], 20);
    assert_eq!(messages(&log2), (100..200).collect::<Vec<_>>());
}

#[test]
fn counters_are_published_for_tickwire_stat() {
    use tickwire_shm::counters::Kind;
    let dir = std::env::temp_dir().join(format!("tw-rudp-counters-{}", std::process::id()));
    let file = tickwire_shm::CountersFile::create(&dir).unwrap();
    let uri: ChannelUri = format!("udp://127.0.0.1:{}?send-data-loss=0.1&seed=3", port()).parse().unwrap();
    let mut s = UdpReceiver::open(&uri, 8, Some(&file)).unwrap();
    let mut p = UdpSender::open(&uri, 8, Some(&file)).unwrap();
    let mut log = Vec::new();
    offer_all(&mut p, 0..2000, &mut [(&mut s, &mut log)]);
    assert_eq!(close_driven(&mut p, &mut [(&mut s, &mut log)]), Ok(1));
    // Counters are published every millisecond while the ends are driven.
    settle(&mut [&mut p], &mut [(&mut s, &mut log)], 5);
    let sets = tickwire_shm::CountersReader::open(file.path().unwrap()).unwrap().sets();
    let get = |kind: Kind, name: &str| {
        let set = sets.iter().find(|x| x.kind == kind).unwrap();
        set.values[kind.names().iter().position(|n| *n == name).unwrap()]
    };
    assert_eq!(get(Kind::UdpSender, "messages"), 2000);
    assert!(get(Kind::UdpSender, "retransmits") > 0);
    assert!(get(Kind::UdpReceiver, "naks_sent") > 0);
    assert_eq!(get(Kind::UdpReceiver, "messages"), 2000);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 16: a close is honest. With no receiver it is an error, not
/// "drained"; a receiver that went silent before the end is not counted as
/// having everything.
#[test]
fn close_says_how_many_receivers_have_everything_and_none_is_an_error() {
    let uri = |port: u16, q: &str| -> ChannelUri { format!("udp://127.0.0.1:{port}?{q}").parse().unwrap() };
    let mut p = UdpSender::open(&uri(port(), ""), 7, None).unwrap();
    assert_eq!(p.offer(b"nobody hears this").map(|_| ()), Err(tickwire_driver::OfferError::NotConnected));
    assert_eq!(p.close(Duration::from_millis(200)), Err(CloseError::NoReceiver));

    let mut s = UdpReceiver::open(&uri(0, ""), 8, None).unwrap();
    let mut log = Vec::new();
    let mut p = UdpSender::open(&uri(s.local_addr().port(), "receiver-timeout=200ms"), 8, None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.is_connected() {
        assert!(Instant::now() < deadline, "never connected");
        pump(&mut [&mut p], &mut [(&mut s, &mut log)]);
    }
    offer_all(&mut p, 0..10, &mut [(&mut s, &mut log)]);
    // The receiver stops answering before the end: it is not counted.
    let r = p.close(Duration::from_millis(600));
    assert!(matches!(r, Err(CloseError::Incomplete { acknowledged: 0, .. })), "{r:?}");
}

/// Issue 16: a host on another port that knows the session id (sniffed)
/// cannot inject data, end the stream early, or start a session of its own,
/// and draws no NAK or STATUS: a unicast receiver is locked on to the source
/// its session was set up from. Nor can it pose as a receiver: a unicast
/// sender takes control only from the address it sends to. The stream
/// arrives whole and the dropped datagrams are counted on both ends.
#[test]
fn a_forger_on_another_port_cannot_inject_end_or_redirect_a_unicast_stream() {
    use tickwire_wire::{data::DataRepr, flags, heartbeat::HeartbeatRepr, setup::SetupRepr};
    let uri = |port: u16| -> ChannelUri { format!("udp://127.0.0.1:{port}").parse().unwrap() };
    let mut s = UdpReceiver::open(&uri(0), 9, None).unwrap();
    let target = s.local_addr();
    let mut p = UdpSender::open(&uri(target.port()), 9, None).unwrap();
    let mut log = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !p.is_connected() {
        assert!(Instant::now() < deadline, "never connected");
        pump(&mut [&mut p], &mut [(&mut s, &mut log)]);
    }
    offer_all(&mut p, 0..100, &mut [(&mut s, &mut log)]);
    settle(&mut [&mut p], &mut [(&mut s, &mut log)], 20);

    let evil = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    evil.set_nonblocking(true).unwrap();
    let (sid, pos) = (p.session_id(), p.position());
    let mut buf = [0u8; 256];
    let forged = [0xEE; 8];
    let frames: Vec<Vec<u8>> = vec![
        // The next message, before the real one.
        {
            let n = DataRepr {
                session_id: sid,
                stream_id: 9,
                position: pos,
                flags: flags::UNFRAGMENTED,
                topic: "",
                payload: &forged,
            }
            .emit(&mut buf)
            .unwrap();
            buf[..tickwire_wire::align_frame(n)].to_vec()
        },
        // The end, here.
        {
            let n = HeartbeatRepr {
                session_id: sid,
                stream_id: 9,
                flags: flags::END_OF_STREAM,
                position: pos,
                retained_from: 0,
            }
            .emit(&mut buf)
            .unwrap();
            buf[..n].to_vec()
        },
        // A session of its own.
        {
            let n =
                SetupRepr { session_id: sid ^ 1, stream_id: 9, initial_position: 0, mtu: 1408, max_message: 1 << 20 }
                    .emit(&mut buf)
                    .unwrap();
            buf[..n].to_vec()
        },
    ];
    for f in &frames {
        evil.send_to(f, std::net::SocketAddr::V4(target)).unwrap();
    }
    // And a fake receiver granting the sender a huge window.
    let n = tickwire_wire::status::StatusRepr {
        session_id: sid,
        stream_id: 9,
        flags: 0,
        consumption_position: pos,
        receiver_window: u32::MAX,
        receiver_id: 0xBAD,
    }
    .emit(&mut buf)
    .unwrap();
    let sender_at = std::net::SocketAddr::V4(p.local_addr());
    let sender_at = if sender_at.ip().is_unspecified() {
        std::net::SocketAddr::from(([127, 0, 0, 1], sender_at.port()))
    } else {
        sender_at
    };
    evil.send_to(&buf[..n], sender_at).unwrap();
    settle(&mut [&mut p], &mut [(&mut s, &mut log)], 20);
    offer_all(&mut p, 100..200, &mut [(&mut s, &mut log)]);
    assert_eq!(close_driven(&mut p, &mut [(&mut s, &mut log)]), Ok(1));
    settle(&mut [&mut p], &mut [(&mut s, &mut log)], 20);
    assert_eq!(messages(&log), (0..200).collect::<Vec<u64>>(), "{log:?}");
    assert_eq!(log.iter().filter(|l| l.starts_with("joined") || l.starts_with("ended")).count(), 2, "{log:?}");
    assert_eq!(s.stats().frames_foreign, 3, "{:?}", s.stats());
    assert_eq!((p.stats().frames_foreign, p.receivers()), (1, 1), "{:?}", p.stats());
    let mut back = [0u8; 64];
    assert!(evil.recv_from(&mut back).is_err(), "the forger was sent a NAK or STATUS");
}
