//! The real router binary for an end-to-end test: started with the
//! arguments given, waited for until it listens, its stderr kept (and
//! error lines echoed), stopped with SIGINT and reaped when dropped.
#![allow(dead_code)] // each test file uses some of it

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

pub struct RouterProcess {
    pub child: Child,
    /// Every line it wrote to stderr so far.
    pub stderr: Arc<Mutex<Vec<String>>>,
}

impl RouterProcess {
    /// `tickwire ARGS` (`router` among them), once it says it listens
    /// (within 20 s).
    pub fn start(args: &[&str]) -> Self {
        let mut child = Command::new(BIN).args(args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let (tx, rx) = mpsc::channel();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::clone(&stderr);
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for l in BufReader::new(pipe).lines().map_while(Result::ok) {
                if l.contains("router listening") {
                    let _ = tx.send(());
                }
                if l.contains("ERROR") || l.contains("WARN") {
                    eprintln!("router: {l}");
                }
                lines.lock().unwrap().push(l);
            }
        });
        if rx.recv_timeout(Duration::from_secs(20)).is_err() {
            let _ = child.kill();
            panic!("the router did not start within 20 s: {:?}", stderr.lock().unwrap());
        }
        Self { child, stderr }
    }

    /// Whether it still runs (not exited, not killed by a signal).
    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Waits up to `limit` for a stderr line holding `needle`; returns it.
    pub fn wait_for_line(&self, needle: &str, limit: Duration) -> Option<String> {
        let until = Instant::now() + limit;
        loop {
            if let Some(l) = self.stderr.lock().unwrap().iter().find(|l| l.contains(needle)) {
                return Some(l.clone());
            }
            if Instant::now() >= until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RouterProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
