//! # tickwire-agent: agents, idle strategies and runners
//!
//! Work in tickwire is done by *agents*: a duty cycle [`Agent::do_work`]
//! returns how much it did, and an [`IdleStrategy`] decides what to do when
//! it did nothing — spin, yield, back off, or park. How agents map to threads
//! (and CPUs) is configuration, via [`AgentRunner`]. An idle agent that
//! sleeps or parks does it through [`Agent::park`]: one with a
//! [`Doorbell`] waits on its sockets and on the doorbell its producers ring,
//! so work wakes it, not the end of its sleep (module `doorbell`).
//!
//! # Examples
//!
//! ```
//! use tickwire_agent::{Agent, AgentRunner, Idle};
//! struct Count(u32);
//! impl Agent for Count {
//!     fn do_work(&mut self) -> usize { self.0 += 1; usize::from(self.0 < 100) }
//!     fn role(&self) -> &str { "counter" }
//! }
//! let runner = AgentRunner::start(Count(0), Idle::backoff(), None).unwrap();
//! std::thread::sleep(std::time::Duration::from_millis(5));
//! let agent = runner.stop();
//! assert!(agent.0 >= 100);
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod doorbell;
pub mod stop;

pub use doorbell::Doorbell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// A unit of work driven in a loop.
pub trait Agent: Send {
    /// Does a bounded amount of work; returns how much (0 = idle).
    fn do_work(&mut self) -> usize;
    /// A name for threads and logs.
    fn role(&self) -> &str;
    /// Called once on the agent's thread before the first duty cycle.
    fn on_start(&mut self) {}
    /// Called once on the agent's thread after the last duty cycle.
    fn on_close(&mut self) {}
    /// Waits for work for up to `timeout`, when its [`Idle`] strategy
    /// says to sleep or park. By default the thread sleeps; an agent with
    /// a [`Doorbell`] waits on it and its sockets instead, so it wakes
    /// when work arrives.
    fn park(&mut self, timeout: Duration) {
        std::thread::park_timeout(timeout);
    }
}

/// An agent as the [`Parker`] of its own idle strategy.
struct ParkOn<'a, A: Agent>(&'a mut A);

impl<A: Agent> Parker for ParkOn<'_, A> {
    fn park(&mut self, timeout: Duration) {
        self.0.park(timeout);
    }
}

/// Something a parking idle strategy can sleep on until there is work.
pub trait Parker {
    /// Sleeps until woken or `timeout` passes.
    fn park(&mut self, timeout: Duration);
}

/// Sleeps the thread (`std::thread::park_timeout`): wakes only on timeout
/// unless unparked. Used when there is nothing better to wait on.
#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadParker;

impl Parker for ThreadParker {
    fn park(&mut self, timeout: Duration) {
        std::thread::park_timeout(timeout);
    }
}

/// What to do after a duty cycle; `work > 0` resets any back-off.
pub trait IdleStrategy {
    /// Called after every duty cycle with its work count.
    fn idle(&mut self, work: usize);
    /// Forgets accumulated back-off.
    fn reset(&mut self);
}

/// The idle strategies. Sleeping and parking are done by
/// [`Idle::idle_with`], which takes the [`Parker`] to wait on (a
/// subscriber's futex, an agent's [`Doorbell`] and sockets, or the
/// thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// Never leave the CPU: lowest latency, one core per agent.
    BusySpin,
    /// `sched_yield` when idle.
    Yield,
    /// Spin, then yield, then sleep with exponential back-off up to
    /// `max_sleep` (on the [`Parker`]: an agent with a [`Doorbell`] wakes
    /// early when work arrives).
    Backoff {
        /// Spins before yielding.
        spins: u32,
        /// Yields before sleeping.
        yields: u32,
        /// Longest sleep.
        max_sleep: Duration,
        /// Internal: idle cycles so far.
        count: u32,
        /// Internal: current sleep.
        sleep: Duration,
    },
    /// Spin, then yield, then park on a [`Parker`] for up to `timeout`
    /// (a futex for subscribers): no CPU while idle.
    Park {
        /// Spins before yielding.
        spins: u32,
        /// Yields before parking.
        yields: u32,
        /// Longest park.
        timeout: Duration,
        /// Internal: idle cycles so far.
        count: u32,
    },
}

impl Idle {
    /// Spin 10, yield 5, sleep 1 µs doubling to 1 ms (Aeron's defaults in spirit).
    pub fn backoff() -> Self {
        Idle::Backoff {
            spins: 10,
            yields: 5,
            max_sleep: Duration::from_millis(1),
            count: 0,
            sleep: Duration::from_micros(1),
        }
    }
    /// No spin and no yield: sleep on the [`Parker`] at once, 1 µs
    /// doubling to 1 ms. For agents that share a CPU and have a
    /// [`Doorbell`] (a router's): they wake when work arrives, and a spin
    /// would take the CPU from the agent the work is for.
    pub fn wait() -> Self {
        Idle::Backoff {
            spins: 0,
            yields: 0,
            max_sleep: Duration::from_millis(1),
            count: 0,
            sleep: Duration::from_micros(1),
        }
    }
    /// Spin 100, yield 10, then park up to 100 ms at a time.
    pub fn park() -> Self {
        Idle::Park { spins: 100, yields: 10, timeout: Duration::from_millis(100), count: 0 }
    }

    /// Parses `spin`, `yield`, `backoff`, `park` or `wait`.
    ///
    /// # Errors
    /// A message naming the accepted values.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "spin" | "busy-spin" => Ok(Idle::BusySpin),
            "yield" => Ok(Idle::Yield),
            "backoff" => Ok(Idle::backoff()),
            "park" | "block" => Ok(Idle::park()),
            "wait" => Ok(Idle::wait()),
            other => Err(format!("unknown idle strategy {other:?} (spin, yield, backoff, park, wait)")),
        }
    }

    /// Idles after `work`, parking on `parker` when the strategy says so.
    pub fn idle_with(&mut self, work: usize, parker: &mut dyn Parker) {
        if work > 0 {
            self.reset();
            return;
        }
        match self {
            Idle::BusySpin => std::hint::spin_loop(),
            Idle::Yield => std::thread::yield_now(),
            Idle::Backoff { spins, yields, max_sleep, count, sleep } => {
                *count = count.saturating_add(1);
                if *count <= *spins {
                    std::hint::spin_loop();
                } else if *count <= *spins + *yields {
                    std::thread::yield_now();
                } else {
                    parker.park(*sleep);
                    *sleep = (*sleep * 2).min(*max_sleep);
                }
            }
            Idle::Park { spins, yields, timeout, count } => {
                *count = count.saturating_add(1);
                if *count <= *spins {
                    std::hint::spin_loop();
                } else if *count <= *spins + *yields {
                    std::thread::yield_now();
                } else {
                    parker.park(*timeout);
                }
            }
        }
    }
}

impl IdleStrategy for Idle {
    fn idle(&mut self, work: usize) {
        self.idle_with(work, &mut ThreadParker);
    }
    fn reset(&mut self) {
        match self {
            Idle::Backoff { count, sleep, .. } => {
                *count = 0;
                *sleep = Duration::from_micros(1);
            }
            Idle::Park { count, .. } => *count = 0,
            Idle::BusySpin | Idle::Yield => {}
        }
    }
}

/// Errors starting an agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The CPU does not exist or pinning failed.
    #[error("cannot pin to CPU {0}")]
    Pin(usize),
    /// The thread could not be spawned.
    #[error("cannot spawn agent thread: {0}")]
    Spawn(#[from] std::io::Error),
}

/// Pins the calling thread to `cpu`.
///
/// # Errors
/// [`AgentError::Pin`] if the CPU does not exist or the kernel refuses.
pub fn pin_current_thread(cpu: usize) -> Result<(), AgentError> {
    // cpu_set_t holds 1024 CPUs; beyond that the affinity crate indexes out
    // of bounds (a panic that cannot unwind), so refuse first.
    const CPU_SETSIZE: usize = 1024;
    if cpu >= CPU_SETSIZE {
        return Err(AgentError::Pin(cpu));
    }
    // Not `get_core_ids()`: it lists only the CPUs this thread may use now,
    // and a process spawned by a pinned parent inherits that narrow mask.
    if core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) {
        Ok(())
    } else {
        Err(AgentError::Pin(cpu))
    }
}

/// The CPUs this process may run on: its affinity mask, which holds only
/// CPUs that exist and that its cgroup's cpuset allows
/// (`Cpus_allowed_list` in `/proc/self/status`). Falls back to
/// `0..available_parallelism` where that file cannot be read. Read it
/// before pinning: a pinned thread's mask is one CPU.
pub fn allowed_cpus() -> Vec<usize> {
    let from_proc = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        let list = s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
        parse_cpu_list(list.trim())
    });
    from_proc.unwrap_or_else(|| (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect())
}

/// Parses the kernel's CPU list format (`0-3,8,10-11`).
pub fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<usize>().ok()?..=b.parse::<usize>().ok()?),
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// Formats CPUs in the kernel's list format (`0-3,8`).
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if j > i { format!("{}-{}", cpus[i], cpus[j]) } else { cpus[i].to_string() });
        i = j + 1;
    }
    parts.join(",")
}

/// Runs an agent on its own thread, optionally pinned, until stopped.
#[derive(Debug)]
pub struct AgentRunner<A: Agent + 'static> {
    running: Arc<AtomicBool>,
    handle: JoinHandle<A>,
}

impl<A: Agent + 'static> AgentRunner<A> {
    /// Starts `agent` on a new thread named after its role.
    ///
    /// # Errors
    /// [`AgentError::Spawn`], or [`AgentError::Pin`] if the thread cannot be
    /// pinned to `cpu` (the agent is then not started).
    pub fn start(mut agent: A, mut idle: Idle, cpu: Option<usize>) -> Result<Self, AgentError> {
        let running = Arc::new(AtomicBool::new(true));
        let flag = Arc::clone(&running);
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new().name(agent.role().to_owned()).spawn(move || {
            let pinned = cpu.map_or(Ok(()), pin_current_thread);
            let ok = pinned.is_ok();
            let _ = tx.send(pinned);
            if !ok {
                return agent;
            }
            agent.on_start();
            while flag.load(Ordering::Relaxed) {
                let w = agent.do_work();
                idle.idle_with(w, &mut ParkOn(&mut agent));
            }
            agent.on_close();
            agent
        })?;
        match rx.recv() {
            Ok(Ok(())) => Ok(Self { running, handle }),
            Ok(Err(e)) => {
                let _ = handle.join();
                Err(e)
            }
            Err(_) => Err(AgentError::Pin(cpu.unwrap_or(0))),
        }
    }

    /// Stops the agent after its current duty cycle and returns it.
    ///
    /// # Panics
    /// If the agent panicked (the panic is propagated).
    pub fn stop(self) -> A {
        self.running.store(false, Ordering::Relaxed);
        match self.handle.join() {
            Ok(a) => a,
            Err(p) => std::panic::resume_unwind(p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_and_print_in_the_kernel_format() {
        assert_eq!(parse_cpu_list("0-3,8,10-11"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert!(allowed_cpus().contains(&0) || !allowed_cpus().is_empty());
    }

    struct Counting(usize);
    impl Parker for Counting {
        fn park(&mut self, _t: Duration) {
            self.0 += 1;
        }
    }

    #[test]
    fn park_strategy_parks_only_after_spins_and_yields_and_resets_on_work() {
        let mut idle = Idle::Park { spins: 3, yields: 2, timeout: Duration::from_millis(1), count: 0 };
        let mut p = Counting(0);
        for _ in 0..5 {
            idle.idle_with(0, &mut p);
        }
        assert_eq!(p.0, 0);
        idle.idle_with(0, &mut p);
        assert_eq!(p.0, 1);
        idle.idle_with(1, &mut p);
        idle.idle_with(0, &mut p);
        assert_eq!(p.0, 1, "work resets the back-off");
    }

    #[test]
    fn backoff_sleeps_on_the_parker_doubling_to_its_cap() {
        struct Timeouts(Vec<Duration>);
        impl Parker for Timeouts {
            fn park(&mut self, t: Duration) {
                self.0.push(t);
            }
        }
        let mut idle = Idle::Backoff {
            spins: 2,
            yields: 1,
            max_sleep: Duration::from_micros(4),
            count: 0,
            sleep: Duration::from_micros(1),
        };
        let mut p = Timeouts(Vec::new());
        for _ in 0..7 {
            idle.idle_with(0, &mut p);
        }
        let us = |n| Duration::from_micros(n);
        assert_eq!(p.0, [us(1), us(2), us(4), us(4)], "after 2 spins and 1 yield");
        idle.idle_with(1, &mut p);
        for _ in 0..4 {
            idle.idle_with(0, &mut p);
        }
        assert_eq!(p.0.last(), Some(&us(1)), "work starts the back-off again");
    }

    #[test]
    fn parse_names_and_rejects_others() {
        assert_eq!(Idle::parse("spin"), Ok(Idle::BusySpin));
        assert!(Idle::parse("nap").is_err());
    }

    #[test]
    fn pinning_to_a_missing_cpu_fails() {
        assert!(pin_current_thread(10_000).is_err());
        assert!(pin_current_thread(1000).is_err(), "below CPU_SETSIZE but absent");
        assert!(pin_current_thread(0).is_ok());
    }
}
