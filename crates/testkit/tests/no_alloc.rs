//! The publish path allocates nothing: counted with a global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use tickwire_shm::{Context, Event, LogConfig, ReaderOptions};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates every call to the system allocator unchanged; it only
// counts allocations.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn offer_claim_and_poll_allocate_nothing() {
    let d = std::env::temp_dir().join(format!("tw-noalloc-{}", std::process::id()));
    let ctx = Context::new(&d).unwrap();
    let mut p = ctx.appender("a", 1, &LogConfig::with_capacity(1 << 16)).unwrap();
    let mut s = ctx.reader("a", 1, ReaderOptions::default()).unwrap();
    let msg = [5u8; 100];
    let mut got = 0u64;
    // Warm up (first-touch page faults are not allocations, but be fair).
    p.offer(&msg).unwrap();
    s.poll(|_| {}, 10).unwrap();
    let before = ALLOCS.load(Ordering::Relaxed);
    for i in 0..200_000u32 {
        if i % 2 == 0 {
            p.offer_topic("md/x", &msg).unwrap();
        } else {
            let mut c = p.try_claim(100).unwrap();
            c.buffer().copy_from_slice(&msg);
            c.commit();
        }
        s.poll(
            |e| {
                if let Event::Message(_) = e {
                    got += 1
                }
            },
            10,
        )
        .unwrap();
    }
    let after = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(got, 200_000);
    assert_eq!(after - before, 0, "the publish/poll path allocated");
}
