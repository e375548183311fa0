//! What the C and C++ tests share: where the repository and this test's
//! `libtickwire.a` are, and a router on a thread of the test process.

#![allow(dead_code)] // each test file uses its share

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tickwire_router::config::RouterConfig;
use tickwire_router::Server;

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The library this test was built with: target/PROFILE/deps/libtickwire.a
/// (with a cdylib among the crate's types, cargo names the archive without
/// a hash, beside the test binary).
pub fn lib() -> PathBuf {
    let lib = std::env::current_exe().unwrap().parent().unwrap().join("libtickwire.a");
    assert!(lib.is_file(), "{} missing", lib.display());
    lib
}

/// The shared library this test was built with (a cdylib has no hash:
/// target/PROFILE/deps/libtickwire.so).
pub fn shared_lib() -> PathBuf {
    let lib = std::env::current_exe().unwrap().parent().unwrap().join("libtickwire.so");
    assert!(lib.is_file(), "{} missing", lib.display());
    lib
}

/// How long any one child process (cc, cmake, g++, a test program) may
/// run.
pub const LIMIT: Duration = Duration::from_secs(60);

/// Runs `cmd` to its end, killing it after `LIMIT`; its output.
pub fn run(cmd: &mut Command) -> Output {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let until = Instant::now() + LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            let (o, e) = (out.join().unwrap(), err.join().unwrap());
            panic!("{what}: killed after {LIMIT:?}\n{}{}", String::from_utf8_lossy(&o), String::from_utf8_lossy(&e));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() }
}

/// The system libraries libtickwire.a needs.
pub const SYSTEM_LIBS: [&str; 7] = ["-lelf", "-lz", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl"];

/// A router on tcp://127.0.0.1:0 on a thread of this process, its
/// shared-memory directory in `dir`; stopped when dropped.
pub struct Router {
    /// Its `tcp://` URI.
    pub uri: String,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Router {
    pub fn start(dir: &std::path::Path) -> Self {
        let cfg = RouterConfig {
            dir: dir.join("router-shm"),
            listen: vec!["tcp://127.0.0.1:0".into()],
            idle: "yield".into(),
            ..RouterConfig::default()
        };
        let mut server = Server::start(cfg).unwrap();
        let uri = format!("tcp://{}", server.tcp_addrs()[0]);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                if server.do_work() == 0 {
                    std::thread::yield_now();
                }
            }
            server.shutdown(Duration::from_millis(100));
        });
        Self { uri, stop, thread: Some(thread) }
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
