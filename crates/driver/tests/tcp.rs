//! `tcp://` channels: the reliable protocol over TCP connections, point to
//! point, through the same Publication and Subscription; a connection cut
//! mid-stream is made again and what it held is repaired.

use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tickwire_driver::*;

mod common;
use common::{check_numbered, numbered};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn ctx(name: &str) -> (tickwire_shm::Context, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tw-tcp-{name}-{}", std::process::id()));
    (tickwire_shm::Context::new(&dir).unwrap(), dir)
}

/// Streams `n` numbered messages of varied sizes through `channel`;
/// `during` runs on every turn with the count delivered so far. Returns the
/// messages delivered and the loss events, in order.
fn stream(channel: &str, n: u64, during: impl FnMut(u64)) -> (Vec<u64>, Vec<(u64, u64)>, Publication) {
    stream_between(channel, channel, n, during)
}

/// [`stream`] with the subscription on `sub_channel` and the publication on
/// `pub_channel` (a relay between them).
fn stream_between(
    sub_channel: &str,
    pub_channel: &str,
    n: u64,
    mut during: impl FnMut(u64),
) -> (Vec<u64>, Vec<(u64, u64)>, Publication) {
    let (ctx, dir) = ctx(&pub_channel.replace([':', '/', '?', '=', '&', '.'], "_"));
    let mut sub = Subscription::open(&ctx, &sub_channel.parse().unwrap(), 3).unwrap();
    let mut publication = Publication::open(&ctx, &pub_channel.parse().unwrap(), 3).unwrap();
    let (mut got, mut lost, mut next) = (Vec::new(), Vec::new(), 0u64);
    let deadline = Instant::now() + Duration::from_secs(60);
    while (got.len() as u64) < n && lost.is_empty() && Instant::now() < deadline {
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
        during(got.len() as u64);
    }
    drop(sub);
    let _ = std::fs::remove_dir_all(dir);
    (got, lost, publication)
}

#[test]
fn a_tcp_channel_delivers_every_message_once_and_in_order() {
    let (got, lost, p) = stream(&format!("tcp://127.0.0.1:{}", free_port()), 20_000, |_| {});
    assert!(lost.is_empty(), "{lost:?}");
    assert_eq!(got, (0..20_000).collect::<Vec<_>>());
    drop(p);
}

#[test]
fn impairment_keys_work_over_tcp_and_the_protocol_repairs_them() {
    let uri = format!("tcp://127.0.0.1:{}?send-data-loss=0.05&seed=5", free_port());
    let (got, lost, mut p) = stream(&uri, 10_000, |_| {});
    assert!(lost.is_empty(), "{lost:?}");
    assert_eq!(got, (0..10_000).collect::<Vec<_>>());
    // The impairment dropped data frames on the TCP connection, and the
    // protocol asked for them (NAK) and sent them again.
    let s = p.udp_sender().expect("a tcp:// publication is a network endpoint");
    let [send_data, ..] = s.impairment().expect("the URI asked for an impairment");
    let st = s.stats();
    assert!(send_data.dropped > 50, "5 % of the data frames dropped: {send_data:?}");
    assert!(st.naks_received > 0 && st.retransmits >= send_data.dropped / 2, "{send_data:?} repaired by: {st:?}");
}

/// A TCP relay from `listen` to `upstream` whose connections the test can
/// cut (both ways, at once).
struct Relay {
    port: u16,
    live: Arc<Mutex<Vec<TcpStream>>>,
    cuts: u32,
}

impl Relay {
    fn start(upstream: u16) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let live: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let keep = Arc::clone(&live);
        std::thread::spawn(move || {
            for down in l.incoming().flatten() {
                let Ok(up) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                let _ = (down.set_nodelay(true), up.set_nodelay(true));
                for (mut from, mut to) in [
                    (down.try_clone().unwrap(), up.try_clone().unwrap()),
                    (up.try_clone().unwrap(), down.try_clone().unwrap()),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
                keep.lock().unwrap().extend([down, up]);
            }
        });
        Self { port, live, cuts: 0 }
    }

    fn cut(&mut self) {
        for s in self.live.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.cuts += 1;
    }
}

#[test]
fn a_connection_cut_mid_stream_is_made_again_and_nothing_is_lost() {
    // The subscription listens on `port`; the publication reaches it
    // through a relay that cuts every connection twice during the stream.
    let port = free_port();
    let mut relay = Relay::start(port);
    let n = 30_000u64;
    let (got, lost, publication) =
        stream_between(&format!("tcp://127.0.0.1:{port}"), &format!("tcp://127.0.0.1:{}", relay.port), n, |got| {
            if (got > n / 3 && relay.cuts == 0) || (got > 2 * n / 3 && relay.cuts == 1) {
                relay.cut();
            }
        });
    assert_eq!(relay.cuts, 2);
    assert!(lost.is_empty(), "{lost:?}");
    assert_eq!(got, (0..n).collect::<Vec<_>>());
    drop(publication);
}
