//! The real router binary for an end-to-end test: started with the
//! command given, waited for until it listens (its TCP address read from
//! that line), its stderr kept with when each line came (and error lines
//! echoed), its CPU and memory read from /proc, killed and reaped when
//! dropped.
#![allow(dead_code)] // each test file uses some of it

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

pub struct RouterProcess {
    pub child: Child,
    /// Every line it wrote to stderr so far, with when it came.
    pub lines: Arc<Mutex<Vec<(Instant, String)>>>,
    /// Its TCP listener, if its "router listening" line names one.
    pub tcp: Option<SocketAddr>,
}

impl RouterProcess {
    /// `tickwire ARGS` (`router` among them).
    pub fn start(args: &[&str]) -> Self {
        Self::spawn(Command::new(BIN).args(args))
    }

    /// Runs `cmd` (the router, or a wrapper that ends by running it), and
    /// waits until it says it listens (20 s at most).
    pub fn spawn(cmd: &mut Command) -> Self {
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (pipe, into) = (child.stderr.take().unwrap(), Arc::clone(&lines));
        // Read to the end: thousands of "connected" lines must not fill
        // the pipe and stall the router.
        std::thread::spawn(move || {
            for l in BufReader::new(pipe).lines().map_while(Result::ok) {
                if l.contains("ERROR") {
                    eprintln!("router: {l}");
                }
                into.lock().unwrap().push((Instant::now(), l));
            }
        });
        let until = Instant::now() + Duration::from_secs(20);
        let listening = loop {
            let found = lines.lock().unwrap().iter().find(|(_, l)| l.contains("router listening")).cloned();
            if let Some((_, l)) = found {
                break l;
            }
            let exited = child.try_wait().unwrap();
            if exited.is_some() || Instant::now() >= until {
                let _ = child.kill();
                panic!("the router did not start ({exited:?}): {:?}", lines.lock().unwrap());
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let tcp = listening.split([' ', ',']).find_map(|w| w.strip_prefix("tcp://")).and_then(|a| a.parse().ok());
        Self { child, lines, tcp }
    }

    /// Whether it still runs (not exited, not killed by a signal).
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits up to `limit` for a stderr line holding `needle`; returns it.
    pub fn wait_for_line(&self, needle: &str, limit: Duration) -> Option<String> {
        let until = Instant::now() + limit;
        loop {
            if let Some((_, l)) = self.lines.lock().unwrap().iter().find(|(_, l)| l.contains(needle)) {
                return Some(l.clone());
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// CPU seconds it has used (user and system), from `/proc/PID/stat`.
    pub fn cpu_seconds(&self) -> f64 {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // Fields after the command's closing parenthesis: utime is the
        // 12th, stime the 13th (in clock ticks of 1/100 s).
        let f: Vec<&str> = s[s.rfind(')').unwrap() + 2..].split_whitespace().collect();
        (f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()) as f64 / 100.0
    }

    /// A field of its `/proc/PID/status` given in kB, in bytes.
    pub fn proc_status(&self, field: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib: u64 = s
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in the router's status"));
        kib << 10
    }

    /// Kills it and reaps it (again: nothing).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RouterProcess {
    fn drop(&mut self) {
        self.stop();
    }
}
