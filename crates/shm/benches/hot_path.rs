//! Micro-benchmark of the per-message instruction cost, in one thread (no
//! cache-line transfers): raw-ring push+pop versus tickwire offer+poll and
//! claim+commit+poll. `cargo bench -p tickwire-shm`. End-to-end figures come
//! from `tickwire lab`, not from here.

use std::hint::black_box;
use std::time::Instant;
use tickwire_shm::floor::RawRing;
use tickwire_shm::{Context, Event, LogConfig, ReaderOptions};

const N: u64 = 20_000_000;

fn report(name: &str, t: Instant) {
    println!("{name:<32} {:>6.2} ns/msg", t.elapsed().as_nanos() as f64 / N as f64);
}

fn main() {
    let dir = std::env::temp_dir().join(format!("tw-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let msg = [7u8; 64];

    let path = dir.join("ring");
    let mut tx = RawRing::create(&path, 1024, 64).unwrap();
    let mut rx = RawRing::open(&path).unwrap();
    let t = Instant::now();
    let mut sum = 0u64;
    for _ in 0..N {
        tx.try_push(black_box(&msg));
        rx.try_pop(|b| sum += u64::from(b[0]));
    }
    report("raw ring push+pop 64B", t);

    let ctx = Context::new(&dir).unwrap();
    let mut p = ctx.appender("bench", 1, &LogConfig::with_capacity(1 << 20)).unwrap();
    let mut s = ctx.reader("bench", 1, ReaderOptions::default()).unwrap();
    let t = Instant::now();
    for _ in 0..N {
        p.offer(black_box(&msg)).unwrap();
        s.poll(
            |e| {
                if let Event::Message(m) = e {
                    sum += u64::from(m.payload[0])
                }
            },
            1,
        )
        .unwrap();
    }
    report("tickwire offer+poll 64B", t);

    let t = Instant::now();
    for _ in 0..N {
        let mut c = p.try_claim(64).unwrap();
        c.buffer().copy_from_slice(black_box(&msg));
        c.commit();
        s.poll(
            |e| {
                if let Event::Message(m) = e {
                    sum += u64::from(m.payload[0])
                }
            },
            1,
        )
        .unwrap();
    }
    report("tickwire claim+commit+poll 64B", t);
    black_box(sum);
    drop((p, s, ctx));
    let _ = std::fs::remove_dir_all(&dir);
}
