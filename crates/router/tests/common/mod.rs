//! The router on a thread and clients in the same process, for the
//! integration tests.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientEvent, ClientOptions};
use tickwire_router::access::UserConfig;
use tickwire_router::config::TlsFiles;
use tickwire_router::{RouterConfig, Server, ShutdownReport};
use tickwire_wire::client::{ClientKind, ClientRepr};
use tickwire_wire::ClientFrame;

/// TLS files to read again, and where to say whether the router took them.
type TlsReload = (Option<TlsFiles>, Sender<Result<(), String>>);

pub struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<ShutdownReport>>,
    pub tcp: SocketAddr,
    /// The first NATS listener, if configured.
    pub nats: Option<SocketAddr>,
    /// The metrics endpoint, if configured.
    pub metrics: Option<SocketAddr>,
    reload: Sender<Vec<UserConfig>>,
    reload_tls: Sender<TlsReload>,
}

impl Running {
    /// Has the router take these users (as on SIGHUP); panics if refused.
    pub fn reload(&self, users: Vec<UserConfig>) {
        self.reload.send(users).unwrap();
    }

    /// Has the router read these TLS files (as on SIGHUP); returns its
    /// answer once it has.
    pub fn reload_tls(&self, files: Option<TlsFiles>) -> Result<(), String> {
        let (tx, rx) = channel();
        self.reload_tls.send((files, tx)).unwrap();
        rx.recv_timeout(Duration::from_secs(10)).unwrap()
    }

    pub fn stop(mut self) -> ShutdownReport {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub fn start(dir: &Path, cfg: RouterConfig) -> Running {
    let cfg = RouterConfig { dir: dir.into(), listen: vec!["tcp://127.0.0.1:0".into()], idle: "yield".into(), ..cfg };
    let mut server = Server::start(cfg).unwrap();
    let tcp = server.tcp_addrs()[0];
    let nats = server.nats_addrs().first().copied();
    let metrics = server.metrics_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let (reload, users) = channel::<Vec<UserConfig>>();
    let (reload_tls, tls) = channel::<TlsReload>();
    let thread = std::thread::spawn(move || {
        while !flag.load(Ordering::Relaxed) {
            if let Ok(u) = users.try_recv() {
                server.set_users(&u).unwrap();
            }
            if let Ok((files, answer)) = tls.try_recv() {
                let _ = answer.send(server.set_tls(files.as_ref()).map_err(|e| e.to_string()));
            }
            if server.do_work() == 0 {
                std::thread::yield_now();
            }
        }
        server.shutdown(Duration::from_millis(200))
    });
    Running { stop, thread: Some(thread), tcp, nats, metrics, reload, reload_tls }
}

pub fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tw-router-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

pub fn client(uri: &str, dir: &Path, name: &str) -> Client {
    let opts = ClientOptions { name: name.into(), dir: dir.into(), ..ClientOptions::default() };
    Client::connect(uri, opts).unwrap()
}

/// Polls until `n` messages came (or 5 s); returns (topic, payload, discarded).
pub fn receive(c: &mut Client, n: usize) -> Vec<(String, Vec<u8>, u32)> {
    let mut got = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    while got.len() < n && Instant::now() < until {
        c.poll(
            |e| {
                if let ClientEvent::Message(m) = e {
                    got.push((m.topic.to_owned(), m.payload.to_vec(), m.discarded));
                }
            },
            64,
        );
    }
    got
}

/// Nothing more arrives within `wait`.
pub fn quiet(c: &mut Client, wait: Duration) -> bool {
    let until = Instant::now() + wait;
    let mut n = 0;
    while Instant::now() < until {
        c.poll(|e| n += usize::from(matches!(e, ClientEvent::Message(_))), 64);
    }
    n == 0
}

/// Logs a raw shared-memory client in: sends `[length][STREAM][HELLO named
/// name]` on the router's login socket with the files `logs` beside it
/// (one sealed log, made by this process, for a login the router takes)
/// and returns the connection (the router answers a zero byte and its log
/// once attached, or writes why it refused, then closes it).
pub fn ipc_login(dir: &Path, stream: u32, logs: &[&std::fs::File], name: &str) -> std::os::unix::net::UnixStream {
    use std::io::Write;
    use std::os::fd::AsFd;
    let hello = ClientRepr {
        value: tickwire_wire::client::CLIENT_PROTOCOL_VERSION,
        topic: name,
        ..ClientRepr::new(ClientKind::Hello)
    };
    let mut frame = vec![0u8; hello.buffer_len()];
    hello.emit(&mut frame).unwrap();
    let mut s = std::os::unix::net::UnixStream::connect(dir.join(tickwire_wire::client::IPC_LOGIN_SOCKET)).unwrap();
    let message = tickwire_wire::client::ipc_login_message(stream, &frame);
    let mut sent = 0;
    for (i, log) in logs.iter().enumerate() {
        // One file a byte: the kernel keeps them apart.
        sent += tickwire_shm::handover::send(&s, &message[i..i + 1], Some(log.as_fd())).unwrap();
    }
    s.write_all(&message[sent..]).unwrap();
    s
}

/// A client frame as it goes on a TCP link: its 4-byte length, then it.
pub fn framed(r: &ClientRepr<'_>) -> Vec<u8> {
    let mut b = vec![0u8; 4 + r.buffer_len()];
    b[..4].copy_from_slice(&(r.buffer_len() as u32).to_le_bytes());
    r.emit(&mut b[4..]).unwrap();
    b
}

/// The whole frames in `bytes` (length-prefixed, as read from a TCP link)
/// as (kind, value, body).
pub fn frames(bytes: &[u8]) -> Vec<(ClientKind, u32, String)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let Some(b) = bytes.get(at + 4..at + 4 + len) else { break };
        let f = ClientFrame::new_checked(b).unwrap();
        out.push((f.kind(), f.value(), String::from_utf8_lossy(f.body()).into_owned()));
        at += 4 + len;
    }
    out
}
