//! A router with a real journal, driven without I/O: sessions on memory
//! transports, guaranteed publishes, durable subscriptions and queues.
#![allow(dead_code)] // each test file uses some of it

use std::path::{Path, PathBuf};
use tickwire_journal::{JournalConfig, SyncPolicy};
use tickwire_router::guaranteed::{Guaranteed, GuaranteedConfig};
use tickwire_router::{Limits, MemoryOut, Outbound, Router};
use tickwire_wire::client::{flags, split_guaranteed_value, ClientKind, ClientRepr, CLIENT_PROTOCOL_VERSION};
use tickwire_wire::ClientFrame;

pub fn frame(r: ClientRepr<'_>) -> Vec<u8> {
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b).unwrap();
    b
}

pub fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tw-guaranteed-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

pub fn router(dir: &Path, cfg: GuaranteedConfig, segment_bytes: u64) -> Router {
    let j = JournalConfig { sync: SyncPolicy::Os, segment_bytes, ..JournalConfig::new(dir) };
    let (g, _) = Guaranteed::open(j, cfg).unwrap();
    let mut r = Router::new("test", Limits::default(), None);
    r.set_guaranteed(g);
    r
}

/// A session that said HELLO with `publisher` as its id.
pub fn client(r: &mut Router, name: &str, publisher: u64) -> u32 {
    let id = r.attach(Outbound::Memory(MemoryOut { frames: Vec::new(), room: usize::MAX }), name.into());
    let hello = ClientRepr {
        value: CLIENT_PROTOCOL_VERSION,
        sequence: publisher,
        topic: name,
        ..ClientRepr::new(ClientKind::Hello)
    };
    r.handle_frame(id, &frame(hello)).unwrap();
    frames(r, id);
    id
}

pub fn publish(r: &mut Router, id: u32, seq: u64, topic: &str) {
    let f = ClientRepr {
        flags: flags::GUARANTEED,
        sequence: seq,
        topic,
        body: &seq.to_le_bytes(),
        ..ClientRepr::new(ClientKind::Publish)
    };
    r.handle_frame(id, &frame(f)).unwrap();
}

pub fn durable(r: &mut Router, id: u32, sid: u32, pattern: &str, name: &str) {
    let f = ClientRepr {
        value: sid,
        flags: flags::DURABLE,
        topic: pattern,
        body: name.as_bytes(),
        ..ClientRepr::new(ClientKind::Subscribe)
    };
    r.handle_frame(id, &frame(f)).unwrap();
}

pub fn ack(r: &mut Router, id: u32, sid: u32, seq: u64) {
    r.handle_frame(id, &frame(ClientRepr { value: sid, sequence: seq, ..ClientRepr::new(ClientKind::Ack) })).unwrap();
}

/// (kind, flags, value, sequence, topic, body) of what session `id` was sent.
pub type Sent = (ClientKind, u8, u32, u64, String, Vec<u8>);
pub fn frames(r: &mut Router, id: u32) -> Vec<Sent> {
    let Outbound::Memory(m) = r.session_mut(id).unwrap().outbound_mut() else { panic!() };
    std::mem::take(&mut m.frames)
        .iter()
        .map(|b| {
            let f = ClientFrame::new_checked(b).unwrap();
            (f.kind(), f.flags(), f.value(), f.sequence(), f.topic().to_owned(), f.body().to_vec())
        })
        .collect()
}

/// Guaranteed deliveries: (journal sequence, publisher sequence, redelivered, count).
pub fn delivered(sent: &[Sent]) -> Vec<(u64, u64, bool, u32)> {
    sent.iter()
        .filter(|f| f.0 == ClientKind::Deliver && f.1 & flags::GUARANTEED != 0)
        .map(|f| {
            let seq = u64::from_le_bytes(f.5[..8].try_into().unwrap());
            (f.3, seq, f.1 & flags::REDELIVERED != 0, split_guaranteed_value(f.2).1)
        })
        .collect()
}

/// Session `id` joins durable queue `name` (fed by `pattern`) as a
/// consumer, with subscription id `sid`.
pub fn durable_queue(r: &mut Router, id: u32, sid: u32, pattern: &str, name: &str) {
    let f = ClientRepr {
        value: sid,
        flags: flags::DURABLE | flags::QUEUE,
        topic: pattern,
        body: name.as_bytes(),
        ..ClientRepr::new(ClientKind::Subscribe)
    };
    r.handle_frame(id, &frame(f)).unwrap();
}

/// A router whose journal keeps about 200 KiB (64 KiB segments): retention
/// removes the oldest of what [`overflow`] publishes.
pub fn small_router(dir: &Path) -> Router {
    let j = JournalConfig {
        sync: SyncPolicy::Os,
        segment_bytes: 64 << 10,
        retain_bytes: Some(200 << 10),
        ..JournalConfig::new(dir)
    };
    let (g, _) = Guaranteed::open(j, GuaranteedConfig::default()).unwrap();
    let mut r = Router::new("test", Limits::default(), None);
    r.set_guaranteed(g);
    r
}

/// Session `p` publishes 1000 guaranteed messages of 1000 bytes on
/// `topic`, then retention runs: returns the journal's first sequence
/// (above 1: retention removed the oldest).
pub fn overflow(r: &mut Router, p: u32, topic: &str) -> u64 {
    let big = vec![0u8; 1000];
    for seq in 1..=1000u64 {
        let mut body = big.clone();
        body[..8].copy_from_slice(&seq.to_le_bytes());
        let f = ClientRepr {
            flags: flags::GUARANTEED,
            sequence: seq,
            topic,
            body: &body,
            ..ClientRepr::new(ClientKind::Publish)
        };
        r.handle_frame(p, &frame(f)).unwrap();
        if seq % 50 == 0 {
            r.poll_guaranteed(0);
        }
    }
    r.poll_guaranteed(0);
    r.guaranteed_housekeeping(0);
    let first = r.guaranteed().unwrap().journal().first();
    assert!(first > 1, "retention removed the oldest segments");
    first
}
