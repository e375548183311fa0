//! Waking a parked agent when work arrives, instead of when its sleep ends.
//!
//! An idle agent that sleeps adds what is left of its sleep to every
//! message that arrives meanwhile: a back-off capped at 1 ms adds up to
//! 1 ms per hop. An agent that *parks* instead waits in the kernel on
//! everything that can bring it work: its sockets (an epoll set, checked
//! as one file descriptor) and its [`Doorbell`], which the threads that
//! feed it through memory (rings, channels) ring after they do. It still
//! wakes at the timeout its [`Idle`](crate::Idle) strategy gives, for its
//! timers and for any input that rings no bell.
//!
//! ```text
//!  producer: push to ring ─► fence ─► parked? ─yes─► write(eventfd)
//!  agent:    parked = true ─► fence ─► ring empty? ─yes─► ppoll(eventfd, epoll fd, timeout)
//! ```
//!
//! The two fences make the race safe (as Dekker's): either the producer
//! sees the agent parked and writes the eventfd, or the agent sees the
//! message before it sleeps. A ring is one atomic load and a fence while
//! the agent is awake; the system call is paid once per park, by the
//! first producer that finds it parked.

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags, Timespec};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// What wakes one parked agent (see the [module](self)); shared by the
/// agent and everything that feeds it.
#[derive(Debug)]
pub struct Doorbell {
    /// The agent is parked, or about to be: a producer that clears it
    /// writes the eventfd.
    parked: AtomicBool,
    /// Work was posted where the agent looks only now and then (a control
    /// channel): it does not park until it has looked.
    posted: AtomicBool,
    /// Non-blocking, close-on-exec.
    fd: OwnedFd,
    /// Times a producer woke it, and times it parked.
    wakes: AtomicU64,
    parks: AtomicU64,
}

impl Doorbell {
    /// A doorbell (an eventfd).
    ///
    /// # Errors
    /// The eventfd could not be made (out of file descriptors).
    pub fn new() -> std::io::Result<Self> {
        let fd = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
        Ok(Self {
            parked: AtomicBool::new(false),
            posted: AtomicBool::new(false),
            fd,
            wakes: AtomicU64::new(0),
            parks: AtomicU64::new(0),
        })
    }

    /// Wakes the agent if it is parked. Call after the work is visible
    /// where the agent's `has_work` looks (a ring's write published).
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::AcqRel) {
            self.wakes.fetch_add(1, Ordering::Relaxed);
            // Full only after 2^64 - 2 unread wakes; nothing to do if so.
            let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
        }
    }

    /// Marks work posted where the agent looks only now and then (a
    /// channel), then rings: the agent does not park again until it calls
    /// [`Doorbell::take_posted`].
    pub fn post(&self) {
        self.posted.store(true, Ordering::Release);
        self.ring();
    }

    /// Whether work was posted since the last call; call it just before
    /// looking at what [`Doorbell::post`] marks.
    pub fn take_posted(&self) -> bool {
        self.posted.load(Ordering::Relaxed) && self.posted.swap(false, Ordering::AcqRel)
    }

    /// Times a producer woke the agent, and times it parked.
    pub fn counts(&self) -> (u64, u64) {
        (self.wakes.load(Ordering::Relaxed), self.parks.load(Ordering::Relaxed))
    }

    /// Parks the calling agent for up to `timeout`, unless `has_work`
    /// finds work once the doorbell is set (its rings are not empty):
    /// wakes when the doorbell rings, when one of `watch` (epoll sets)
    /// becomes readable, or at the timeout. Only the agent (or the agents
    /// sharing one thread) that owns the doorbell may park on it.
    pub fn park(&self, watch: &[BorrowedFd<'_>], timeout: Duration, has_work: impl FnOnce() -> bool) {
        self.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.posted.load(Ordering::Relaxed) || has_work() {
            self.parked.store(false, Ordering::Relaxed);
            return;
        }
        self.parks.fetch_add(1, Ordering::Relaxed);
        let ts = Timespec {
            tv_sec: timeout.as_secs().try_into().unwrap_or(i64::MAX),
            tv_nsec: timeout.subsec_nanos().into(),
        };
        let bell = PollFd::new(&self.fd, PollFlags::IN);
        let on = |k: usize| PollFd::from_borrowed_fd(watch[k], PollFlags::IN);
        // An error (EINTR: a signal) is a short park. No allocation for
        // up to two watched sets (two agents on one thread).
        let rang = match watch.len() {
            0 => poll_rang(&mut [bell], &ts),
            1 => poll_rang(&mut [bell, on(0)], &ts),
            2 => poll_rang(&mut [bell, on(0), on(1)], &ts),
            n => poll_rang(&mut std::iter::once(bell).chain((0..n).map(on)).collect::<Vec<_>>(), &ts),
        };
        self.parked.store(false, Ordering::Relaxed);
        if rang {
            let mut buf = [0u8; 8];
            // Non-blocking: empty already is fine.
            let _ = rustix::io::read(&self.fd, &mut buf);
        }
    }
}

/// Polls `fds` (the doorbell first) until one is readable or `ts`
/// passes; whether the doorbell rang.
fn poll_rang(fds: &mut [PollFd<'_>], ts: &Timespec) -> bool {
    let _ = poll(fds, Some(ts));
    fds[0].revents().contains(PollFlags::IN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_ring_wakes_a_parked_agent_long_before_its_timeout() {
        let bell = Arc::new(Doorbell::new().unwrap());
        let work = Arc::new(AtomicUsize::new(0));
        let (b, w) = (Arc::clone(&bell), Arc::clone(&work));
        let producer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w.store(1, Ordering::Release);
            b.ring();
        });
        let t = Instant::now();
        while work.load(Ordering::Acquire) == 0 && t.elapsed() < Duration::from_secs(20) {
            bell.park(&[], Duration::from_secs(10), || work.load(Ordering::Acquire) > 0);
        }
        producer.join().unwrap();
        let took = t.elapsed();
        assert_eq!(work.load(Ordering::Acquire), 1);
        assert!(took < Duration::from_secs(5), "woken by the ring, not the 10 s timeout: {took:?}");
        assert_eq!(bell.counts().0, 1, "one wake");
    }

    #[test]
    fn work_found_after_setting_the_flag_is_not_slept_on() {
        let bell = Doorbell::new().unwrap();
        let t = Instant::now();
        bell.park(&[], Duration::from_secs(10), || true);
        assert!(t.elapsed() < Duration::from_secs(1));
        assert_eq!(bell.counts(), (0, 0), "never parked");
        bell.post();
        bell.park(&[], Duration::from_secs(10), || false);
        assert!(t.elapsed() < Duration::from_secs(1), "posted work keeps it awake until taken");
        assert!(bell.take_posted());
        assert!(!bell.take_posted());
        bell.park(&[], Duration::from_millis(5), || false);
        assert_eq!(bell.counts(), (0, 1), "parked once, to its timeout");
    }

    #[test]
    fn a_readable_watched_descriptor_wakes_it() {
        let bell = Doorbell::new().unwrap();
        let other = Doorbell::new().unwrap();
        rustix::io::write(&other.fd, &1u64.to_ne_bytes()).unwrap();
        let t = Instant::now();
        bell.park(&[other.fd.as_fd()], Duration::from_secs(10), || false);
        assert!(t.elapsed() < Duration::from_secs(5), "woken by the watched descriptor");
        // Any of several (two agents on one thread: each one's epoll set).
        let quiet = Doorbell::new().unwrap();
        let t = Instant::now();
        bell.park(&[quiet.fd.as_fd(), other.fd.as_fd()], Duration::from_secs(10), || false);
        assert!(t.elapsed() < Duration::from_secs(5), "woken by the second watched descriptor");
        let t = Instant::now();
        bell.park(&[quiet.fd.as_fd()], Duration::from_millis(20), || false);
        assert!(t.elapsed() >= Duration::from_millis(19), "a quiet one does not wake it");
    }

    #[test]
    fn a_ring_while_awake_is_one_load_and_costs_no_wake() {
        let bell = Doorbell::new().unwrap();
        for _ in 0..1000 {
            bell.ring();
        }
        assert_eq!(bell.counts(), (0, 0));
        // Nothing was written: a park sleeps to its timeout.
        let t = Instant::now();
        bell.park(&[], Duration::from_millis(20), || false);
        assert!(t.elapsed() >= Duration::from_millis(19));
    }
}
