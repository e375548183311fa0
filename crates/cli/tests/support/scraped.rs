//! The real router, scraped: what the monitoring tests (the rules and the
//! dashboard, and the configuration's metrics table) run against.
#![allow(dead_code)] // each test file uses some of it

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The `tickwire` binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

/// Children killed, and their directory removed, when the test ends,
/// however it ends.
pub struct Procs(pub Vec<Child>, pub PathBuf);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// One `GET /metrics`: the body.
pub fn scrape(addr: SocketAddr) -> std::io::Result<String> {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(c, "GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")?;
    let mut text = String::new();
    c.read_to_string(&mut text)?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    Ok(body.to_owned())
}

/// A router (its directory named for `test`) with a journal (sync group:
/// the fsync histogram; `retain_bytes` its default 1 GiB: the limit's
/// gauge) and Prometheus metrics, two subscribers (one durable) and two
/// publishers (one guaranteed) connected for a minute: a series of every
/// family once the journal's status is in (about a second). Returns the
/// processes (killed, and the directory removed, when dropped) and the
/// metrics address.
pub fn start_router(test: &str) -> (Procs, SocketAddr) {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    let dir = base.join(format!("tw-monitoring-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.display().to_string();
    let journal = dir.join("journal").display().to_string();
    let metrics_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut procs = Procs(Vec::new(), dir.clone());
    let mut router = Command::new(BIN)
        .args(["--dir", &d, "router", "--listen", "tcp://127.0.0.1:0", "--journal", &journal, "--sync", "group"])
        .args(["--metrics", &metrics_addr.to_string()])
        // A group of one: the high-availability series too.
        .args(["--ha-group", "monitoring", "--ha-node", "1", "--ha-peer", &format!("1=127.0.0.1:{}", free_port())])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stderr = router.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    procs.0.push(router);
    let mut seen = Vec::new();
    while !seen.iter().any(|l: &String| l.contains("router listening")) {
        seen.push(
            rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("router did not start: {seen:?}")),
        );
    }
    let spawn = |args: &[&str]| {
        Command::new(BIN).args(["--dir", &d]).args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
    };
    // Per-client and per-topic series; a durable subscription and a
    // guaranteed publisher connected while scraped: the journal's.
    procs.0.push(spawn(&["sub", "--router", "ipc", "--topic", "md/>"]));
    procs.0.push(spawn(&["sub", "--router", "ipc", "--topic", "orders/>", "--durable", "desk"]));
    std::thread::sleep(Duration::from_millis(300));
    procs.0.push(spawn(&["pub", "--router", "ipc", "--topic", "md/eu/VOD", "--rate", "1k", "--duration", "60s"]));
    let guaranteed = ["pub", "--router", "ipc", "--topic", "orders/a", "--guaranteed", "--rate", "1k"];
    procs.0.push(spawn(&[&guaranteed[..], &["--duration", "60s"]].concat()));
    (procs, metrics_addr)
}

/// Two routers on loopback in a cluster, the first with Prometheus
/// metrics: the processes (killed and their directories removed when
/// dropped) and its metrics address.
pub fn start_cluster_pair() -> (Vec<Procs>, SocketAddr) {
    use std::os::unix::fs::PermissionsExt;
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let ports = [free_port(), free_port()];
    let mut out = Vec::new();
    for k in 0..2 {
        let dir = std::env::temp_dir().join(format!("tw-metrics-cluster-{k}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("secret");
        std::fs::write(&secret, "a-secret-for-the-metrics-table-0123").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["--dir", &dir.display().to_string(), "router", "--no-ipc", "--listen", "tcp://127.0.0.1:0"])
            .args(["--name", &format!("m{k}"), "--cluster-name", "metrics"])
            .args(["--cluster-listen", &format!("tcp://127.0.0.1:{}", ports[k])])
            .args(["--cluster-peer", &format!("tcp://127.0.0.1:{}", ports[0])])
            .args(["--cluster-secret-file", &secret.display().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if k == 0 {
            cmd.args(["--metrics", &metrics.to_string()]);
        }
        out.push(Procs(vec![cmd.spawn().unwrap()], dir));
    }
    (out, metrics)
}
