//! Publication and subscription over real UDP sockets on loopback, in one
//! thread (embedded mode, both ends driven by the test loop).

use std::time::{Duration, Instant};
use tickwire_driver::*;

fn port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
}

/// Sends `n` numbered messages of varied sizes; returns what arrived.
fn transfer(params: &str, n: u64) -> (Vec<u64>, Vec<(u64, u64)>, Publication, Subscription) {
    let uri: ChannelUri = format!("udp://127.0.0.1:{}?{params}", port()).parse().unwrap();
    let mut sub = Subscription::open(&uri, 7, None).unwrap();
    let mut publication = Publication::open(&uri, 7, None).unwrap();
    let mut got = Vec::new();
    let mut lost = Vec::new();
    let mut next = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut closed = false;
    while Instant::now() < deadline {
        while next < n {
            let size = 8 + (next as usize * 37) % 3000;
            let mut msg = vec![(next % 251) as u8; size];
            msg[..8].copy_from_slice(&next.to_le_bytes());
            match publication.offer(&msg) {
                Ok(_) => next += 1,
                Err(_) => break,
            }
        }
        publication.do_work();
        sub.poll(
            |ev| match ev {
                Event::Message(m) => {
                    let i = u64::from_le_bytes(m.payload[..8].try_into().unwrap());
                    let size = 8 + (i as usize * 37) % 3000;
                    assert_eq!(m.payload.len(), size);
                    assert!(m.payload[8..].iter().all(|&b| b == (i % 251) as u8));
                    got.push(i);
                }
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
