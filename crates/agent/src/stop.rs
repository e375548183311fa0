//! Asked to stop: the process's one Ctrl-C (SIGINT) and SIGTERM handling.
//!
//! Agents run until asked to stop. The first signal asks for a graceful
//! stop ([`requested`] turns true: the caller finishes its round, drains,
//! reports what it did); the second exits at once, status 130 (128 +
//! SIGINT, as a shell reports an interrupted command).
//!
//! Both happen in the signal handler itself (`signal-hook`'s flag and
//! conditional shutdown, async-signal-safe): the flag is set before a wait
//! the signal interrupted returns, and the second signal exits even while
//! every thread is stuck (a full pipe, a lock); no thread is started for
//! them. Only an optional message ([`StopSignals::saying`]) is printed
//! from a thread of its own, since printing is not safe in a handler.
//!
//! ```no_run
//! use tickwire_agent::stop::{self, StopSignals};
//! StopSignals::command().saying("stopping after this round (Ctrl-C again to quit now)").install()?;
//! while !stop::requested() {
//!     // a round of work
//! }
//! # Ok::<(), std::io::Error>(())
//! ```

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// The exit status of the second signal.
pub const EXIT_STATUS: i32 = 130;

/// The process's stop flag, set by the first signal.
static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Whether a handler is in place (the first [`StopSignals::install`] wins).
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Set once the message of the first signal was printed (for tests).
static ANNOUNCED: AtomicBool = AtomicBool::new(false);

fn flag() -> &'static Arc<AtomicBool> {
    FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Whether a signal asked this process to stop (false until one came, and
/// always false without [`StopSignals::install`]). Two atomic loads:
/// cheap enough for a duty cycle.
pub fn requested() -> bool {
    FLAG.get().is_some_and(|f| f.load(Ordering::Relaxed))
}

/// Which signals ask to stop, and what the first one says: the handler
/// [`install`](StopSignals::install) puts in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "nothing happens until install()"]
pub struct StopSignals {
    hangup: bool,
    message: Option<&'static str>,
}

impl StopSignals {
    /// A service's: SIGINT and SIGTERM (`systemctl stop`). SIGHUP is left
    /// to the caller (a reload: `systemctl reload`).
    pub const fn service() -> Self {
        Self { hangup: false, message: None }
    }

    /// A command's, run from a terminal: SIGINT, SIGTERM and SIGHUP (the
    /// terminal closed).
    pub const fn command() -> Self {
        Self { hangup: true, message: None }
    }

    /// Prints `message` (a line on stderr) on the first signal, e.g. what
    /// the stop waits for and that a second signal quits at once.
    pub const fn saying(self, message: &'static str) -> Self {
        Self { message: Some(message), ..self }
    }

    /// The signals that ask to stop.
    fn signals(&self) -> &'static [i32] {
        if self.hangup {
            &[SIGINT, SIGTERM, SIGHUP]
        } else {
            &[SIGINT, SIGTERM]
        }
    }

    /// Puts the handler in place for the whole process. The first call
    /// installs; a later one changes nothing (so a command may call it
    /// from each of its paths), whatever it asks for.
    ///
    /// # Errors
    /// The operating system refused a signal handler, or the thread that
    /// prints the message could not start. The handler may then be in
    /// place in part; it is not tried again (twice in place, the first
    /// signal would exit).
    pub fn install(self) -> io::Result<()> {
        if INSTALLED.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let stop = flag();
        for &sig in self.signals() {
            // Registered first, so it runs first: it exits when the flag
            // is already set, i.e. at the second signal.
            signal_hook::flag::register_conditional_shutdown(sig, EXIT_STATUS, Arc::clone(stop))?;
            signal_hook::flag::register(sig, Arc::clone(stop))?;
        }
        if let Some(message) = self.message {
            let mut signals = signal_hook::iterator::Signals::new(self.signals())?;
            std::thread::Builder::new().name("stop-signals".into()).spawn(move || {
                // Signals of one kind may arrive here as one; the second
                // never does (it exits in the handler).
                if signals.forever().next().is_some() {
                    eprintln!("{message}");
                    ANNOUNCED.store(true, Ordering::Relaxed);
                }
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The handler changes the whole process, so each case runs in a child
    //! (this test binary again, running [`child`] alone): a second signal
    //! exits, which the test process must not.

    use super::*;
    use signal_hook::low_level::raise;
    use std::process::{Command, Output};
    use std::time::{Duration, Instant};

    const CASE: &str = "TICKWIRE_STOP_TEST_CASE";
    const MESSAGE: &str = "stopping (signal again to quit now)";

    /// This test binary again, running [`child`] with `case`.
    fn run_child(case: &str) -> Output {
        Command::new(std::env::current_exe().unwrap())
            .args(["stop::tests::child", "--exact", "--nocapture", "--test-threads=1"])
            .env(CASE, case)
            .output()
            .unwrap()
    }

    /// Waits (5 s at most) for `done`.
    fn eventually(done: impl Fn() -> bool) -> bool {
        let start = Instant::now();
        while !done() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        done()
    }

    /// Says `what` on stderr (unbuffered: the second signal's exit
    /// flushes nothing).
    fn say(what: &str) {
        eprintln!("child: {what}");
    }

    /// The cases, in a child process; without [`CASE`] it does nothing.
    #[test]
    fn child() {
        let Ok(case) = std::env::var(CASE) else { return };
        match case.as_str() {
            // The first signal sets the flag, says the message, and the
            // process goes on; the second exits at once with 130.
            "twice" => {
                StopSignals::command().saying(MESSAGE).install().unwrap();
                assert!(!requested());
                raise(SIGTERM).unwrap();
                assert!(requested(), "the handler ran before raise returned");
                assert!(eventually(|| ANNOUNCED.load(Ordering::Relaxed)), "the message was not printed");
                say("stopping, still running");
                raise(SIGINT).unwrap();
                say("still running after the second signal");
            }
            // A later install changes nothing: one signal still only asks.
            "installed twice" => {
                StopSignals::command().install().unwrap();
                StopSignals::service().saying(MESSAGE).install().unwrap();
                raise(SIGINT).unwrap();
                assert!(requested());
                say("stopping, still running");
            }
            // A command stops on SIGHUP (its terminal closed).
            "command hangup" => {
                StopSignals::command().install().unwrap();
                raise(SIGHUP).unwrap();
                assert!(requested());
                say("stopping, still running");
            }
            // A service leaves SIGHUP to its own handler (a reload).
            "service hangup" => {
                StopSignals::service().install().unwrap();
                let hup = Arc::new(AtomicBool::new(false));
                signal_hook::flag::register(SIGHUP, Arc::clone(&hup)).unwrap();
                raise(SIGHUP).unwrap();
                assert!(hup.load(Ordering::Relaxed) && !requested(), "SIGHUP is not a stop");
                raise(SIGTERM).unwrap();
                assert!(requested());
                say("stopping, still running");
            }
            other => panic!("no case {other:?}"),
        }
    }

    fn text(o: &Output) -> String {
        format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
    }

    #[test]
    fn not_requested_before_a_signal() {
        assert!(!requested());
    }

    #[test]
    fn the_first_signal_asks_to_stop_and_the_second_exits_130() {
        let o = run_child("twice");
        let (out, err) = (text(&o), String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.status.code(), Some(EXIT_STATUS), "{out}");
        assert!(err.contains(MESSAGE), "{out}");
        assert!(err.contains("child: stopping, still running"), "{out}");
        assert!(!err.contains("after the second signal"), "{out}");
    }

    #[test]
    fn installing_again_changes_nothing() {
        let o = run_child("installed twice");
        assert!(o.status.success(), "{}", text(&o));
        assert!(!text(&o).contains(MESSAGE), "the second install's message: {}", text(&o));
    }

    #[test]
    fn a_command_stops_on_hangup_a_service_does_not() {
        for case in ["command hangup", "service hangup"] {
            let o = run_child(case);
            assert!(o.status.success(), "{case}: {}", text(&o));
            assert!(text(&o).contains("child: stopping, still running"), "{case}: {}", text(&o));
        }
    }
}
