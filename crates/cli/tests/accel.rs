//! `tickwire accel`: unmodified programs (Debian's `sockperf`, plain
//! Python sockets) with their UDP sockets over AF_XDP, across two network
//! namespaces joined by a veth pair (made and removed by the test).
//!
//! - sockperf ping-pong, server and client under `tickwire accel`, 64 B
//!   and 1400 B: every reply checked by sockperf, and the kernel's UDP
//!   counters of both namespaces say the datagrams did not pass through
//!   the kernel; 4000 B (fragmented) goes by the kernel, still answered;
//!   `tickwire stat` shows the program's counters; the same without
//!   acceleration, through the kernel.
//! - One epoll set over an accelerated and a kernel socket: readiness from
//!   both; then a receive with a timeout (poll) on the accelerated one,
//!   then `select` and `recvmsg`.
//! - Without the capabilities, or on an interface without native XDP (a
//!   bridge): the program still works, says once that its socket stays
//!   the kernel's and why, and the fallback is counted.
//! - Multicast: sockperf's multicast ping-pong over AF_XDP; two receivers
//!   of one group in one namespace each get every datagram (the group
//!   is handed back to the kernel, and that is said); a plain receiver
//!   not under accel gets every datagram of a group an accelerated one
//!   steers, whether it joins before or after it.
//! - `socat` and `nc -u` send a file, which arrives byte for byte, not
//!   through the kernel.
//!
//! Needs root (namespaces, BPF) and the preload library beside the binary
//! (`make test` builds it).

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");
const ECHO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/accel/udp_echo.py");

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

/// Namespaces `a` (10.89.N.1 on `dev_a`) and `b` (10.89.N.2 on `dev_b`)
/// joined by veth; removed on drop, with the counters directory.
struct Pair {
    a: String,
    b: String,
    dev_a: String,
    dev_b: String,
    n: u32,
}

impl Pair {
    fn new(tag: u32) -> Self {
        let lib = std::path::Path::new(BIN).with_file_name("libtickwire_preload.so");
        assert!(lib.is_file(), "{} is missing: cargo build -p tickwire-preload (make test does)", lib.display());
        let pid = std::process::id();
        let n = (pid.wrapping_mul(11).wrapping_add(tag)) % 250 + 1;
        let p = Pair {
            a: format!("twp{pid}a{tag}"),
            b: format!("twp{pid}b{tag}"),
            dev_a: format!("twp{pid}v{tag}a"),
            dev_b: format!("twp{pid}v{tag}b"),
            n,
        };
        ip(&["netns", "add", &p.a]);
        ip(&["netns", "add", &p.b]);
        ip(&["link", "add", &p.dev_a, "type", "veth", "peer", "name", &p.dev_b]);
        ip(&["link", "set", &p.dev_a, "netns", &p.a]);
        ip(&["link", "set", &p.dev_b, "netns", &p.b]);
        ip(&["-n", &p.a, "addr", "add", &format!("{}/24", p.addr_a()), "dev", &p.dev_a]);
        ip(&["-n", &p.b, "addr", "add", &format!("{}/24", p.addr_b()), "dev", &p.dev_b]);
        for (ns, dev) in [(&p.a, &p.dev_a), (&p.b, &p.dev_b)] {
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
            // Multicast goes by the pair (there is no other route).
            ip(&["-n", ns, "route", "add", "224.0.0.0/4", "dev", dev]);
        }
        p
    }
    fn addr_a(&self) -> String {
        format!("10.89.{}.1", self.n)
    }
    fn addr_b(&self) -> String {
        format!("10.89.{}.2", self.n)
    }
    fn dir(&self) -> String {
        format!("/dev/shm/twp-{}-{}", std::process::id(), self.n)
    }
    /// `PROGRAM ARGS` in namespace `ns`.
    fn plain(&self, ns: &str, program: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(program);
        c
    }
    /// `tickwire accel --interface DEV -- PROGRAM ARGS` in namespace `ns`.
    fn accel(&self, ns: &str, program: &[&str]) -> Command {
        let dev = if ns == self.a { &self.dev_a } else { &self.dev_b };
        let dir = self.dir();
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, BIN, "--dir", &dir, "accel", "--interface", dev, "--"]).args(program);
        c
    }
    /// Waits (up to 10 s) until a UDP socket in `ns` is bound to `port`.
    fn wait_bound(&self, ns: &str, port: u16) {
        let want = format!(":{port:04X}");
        let start = Instant::now();
        loop {
            let out = self.plain(ns, &["cat", "/proc/net/udp"]).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            if text.lines().skip(1).any(|l| l.split_whitespace().nth(1).is_some_and(|a| a.ends_with(&want))) {
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "nothing bound to UDP port {port} in {ns} after 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    /// Waits (up to 10 s) until the program `pid`, run under accel, has
    /// decided a socket (accelerated it, its flow steered, or left it to
    /// the kernel): its counters say so.
    fn wait_decided(&self, pid: u32) {
        let start = Instant::now();
        loop {
            let out = Command::new(BIN).args(["--dir", &self.dir(), "stat", "--json"]).output().unwrap();
            let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let decided = rows.as_array().is_some_and(|r| {
                r.iter().any(|r| {
                    let c = &r["counters"];
                    r["side"] == "accel"
                        && r["pid"] == pid
                        && c["sockets_accelerated"].as_u64().unwrap_or(0) + c["fallbacks"].as_u64().unwrap_or(0) > 0
                })
            });
            if decided {
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(10), "pid {pid} decided no socket in 10 s: {rows}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    /// The kernel's count of UDP datagrams received in `ns`.
    fn udp_in(&self, ns: &str) -> u64 {
        let out = self.plain(ns, &["cat", "/proc/net/snmp"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
        let (names, values) = (udp.next().unwrap(), udp.next().unwrap());
        let at = names.split_whitespace().position(|n| n == "InDatagrams").unwrap();
        values.split_whitespace().nth(at).unwrap().parse().unwrap()
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(self.dir());
    }
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Waits for `child` (bounded), killing it then.
fn finish(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() && start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait_with_output().unwrap()
}

/// sockperf's count of messages sent and replies received.
fn sockperf_counts(out: &str) -> (u64, u64) {
    let line = out.lines().find(|l| l.contains("SentMessages=")).unwrap_or_else(|| panic!("sockperf: {out}"));
    let num = |key: &str| -> u64 {
        let at = line.find(key).unwrap() + key.len();
        line[at..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    };
    (num("SentMessages="), num("ReceivedMessages="))
}

/// Starts `sockperf server` (its stderr kept) and waits until it has
/// bound `port` in `ns` and, under accel, its socket is decided.
fn sockperf_server(p: &Pair, ns: &str, port: u16, mut cmd: Command) -> Child {
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    p.wait_bound(ns, port);
    if format!("{cmd:?}").contains("\"accel\"") {
        p.wait_decided(child.id());
    }
    child
}

#[test]
fn sockperf_ping_pong_under_accel_goes_over_af_xdp_and_fragments_by_the_kernel() {
    let p = Pair::new(1);
    let (a, b) = (p.a.clone(), p.b.clone());
    let server = sockperf_server(&p, &a, 11111, p.accel(&a, &["sockperf", "server", "-i", &p.addr_a(), "-p", "11111"]));
    for (size, bypass) in [(64, true), (1400, true), (4000, false)] {
        let (in_a, in_b) = (p.udp_in(&a), p.udp_in(&b));
        let m = size.to_string();
        let args = ["sockperf", "ping-pong", "-i", &p.addr_a(), "-p", "11111", "-t", "1", "-m", &m];
        let out = p.accel(&b, &args).output().unwrap();
        let all = text(&out);
        assert!(out.status.success(), "{size} B: {all}");
        let (sent, received) = sockperf_counts(&all);
        // The last may be in flight when sockperf's timer ends the run.
        assert!(sent > 100 && sent - received <= 1, "{size} B: {sent} sent, {received} replies: {all}");
        let (da, db) = (p.udp_in(&a) - in_a, p.udp_in(&b) - in_b);
        if bypass {
            // The warm-up's first datagram may go by the kernel (the
            // neighbour not known yet); the rest over AF_XDP.
            assert!(da < 10 && db < 10, "{size} B: the kernel received {da} in a and {db} in b of {sent}");
        } else {
            assert!(da >= received && db >= received, "{size} B by the kernel: {da} and {db} of {received}");
        }
    }
    // The server's counters while it runs.
    let out = Command::new(BIN).args(["--dir", &p.dir(), "stat", "--json"]).output().unwrap();
    let stat = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows: serde_json::Value = serde_json::from_str(&stat).unwrap_or_else(|e| panic!("{e}: {stat}"));
    let row = rows
        .as_array()
        .and_then(|r| r.iter().find(|r| r["side"] == "accel"))
        .unwrap_or_else(|| panic!("no accel counters: {stat}"))
        .clone();
    let c = &row["counters"];
    assert_eq!((c["sockets_accelerated"].as_u64(), c["sockets_open"].as_u64()), (Some(1), Some(1)), "{row}");
    assert!(c["rx_packets"].as_u64() > Some(1000) && c["kernel_path"].as_u64() > Some(100), "{row}");
    let server = finish(server, Duration::ZERO);
    assert!(!text(&server).contains("stays a kernel socket"), "{}", text(&server));

    // Without acceleration: the same exchange, through the kernel.
    let server = sockperf_server(&p, &a, 11112, p.plain(&a, &["sockperf", "server", "-i", &p.addr_a(), "-p", "11112"]));
    let in_a = p.udp_in(&a);
    let out = p
        .plain(&b, &["sockperf", "ping-pong", "-i", &p.addr_a(), "-p", "11112", "-t", "1", "-m", "64"])
        .output()
        .unwrap();
    let (sent, received) = sockperf_counts(&text(&out));
    assert!(sent > 100 && sent - received <= 1, "{}", text(&out));
    assert!(p.udp_in(&a) - in_a >= received, "the kernel's path counts its datagrams");
    finish(server, Duration::ZERO);
}

#[test]
fn sockperf_multicast_ping_pong_under_accel_goes_over_af_xdp() {
    let p = Pair::new(4);
    let (a, b) = (p.a.clone(), p.b.clone());
    const GROUP: &str = "239.18.3.4";
    // The server joins before it binds 0.0.0.0 (sockperf's order); the
    // client joins too, and sends by IP_MULTICAST_IF without binding.
    let server = sockperf_server(
        &p,
        &a,
        11113,
        p.accel(&a, &["sockperf", "server", "--mc-rx-if", &p.addr_a(), "-i", GROUP, "-p", "11113"]),
    );
    let (in_a, in_b) = (p.udp_in(&a), p.udp_in(&b));
    let args = ["sockperf", "ping-pong", "--mc-tx-if", &p.addr_b(), "-i", GROUP, "-p", "11113", "-t", "1", "-m", "64"];
    let out = p.accel(&b, &args).output().unwrap();
    let all = text(&out);
    let (sent, received) = sockperf_counts(&all);
    assert!(sent > 100 && sent - received <= 1, "{sent} sent, {received} replies: {all}");
    let (da, db) = (p.udp_in(&a) - in_a, p.udp_in(&b) - in_b);
    assert!(da < 10 && db < 10, "the kernel received {da} in a and {db} in b of {sent}");
    let server = finish(server, Duration::ZERO);
    assert!(!text(&server).contains("kernel"), "{}", text(&server));
}

/// Starts `udp_echo.py mcrecv` and waits for its "ready".
fn mc_receiver(mut cmd: Command) -> (Child, impl Iterator<Item = String>) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap())).map(Result::unwrap);
    assert_eq!(lines.next().as_deref(), Some("ready"));
    (child, lines)
}

/// Two receivers of one group and port in one namespace, both under
/// accel: the first steers the group; the second, left to the kernel (the
/// interface's one queue is the first's), hands the group back to the
/// kernel for both, and each gets every datagram.
#[test]
fn two_receivers_of_one_group_under_accel_each_get_every_datagram_through_the_kernel() {
    let p = Pair::new(5);
    const GROUP: &str = "239.18.3.5";
    const N: &str = "300";
    let recv = ["python3", ECHO, "mcrecv", GROUP, "12010", &p.addr_a(), N];
    let (first, mut first_lines) = mc_receiver(p.accel(&p.a, &recv));
    let (second, mut second_lines) = mc_receiver(p.accel(&p.a, &recv));
    let sender = p.accel(&p.b, &["python3", ECHO, "mcsend", GROUP, "12010", &p.addr_b(), N]).output().unwrap();
    assert!(sender.status.success(), "{}", text(&sender));
    let want = format!("got={N}");
    assert_eq!(first_lines.next(), Some(want.clone()));
    assert_eq!(second_lines.next(), Some(want));
    let notes =
        format!("{}{}", text(&finish(first, Duration::from_secs(5))), text(&finish(second, Duration::from_secs(5))));
    assert!(notes.contains(&format!("group {GROUP} port 12010 stays the kernel's")), "{notes}");
}

/// A plain receiver (a kernel socket, not under accel) and one under
/// accel, of one group and port in one namespace, each get every
/// datagram whichever joins first: the accelerated one finds the plain
/// one bound to the port at its join and leaves the group to the kernel;
/// or, joined first, it steers the group until its watcher sees the plain
/// one bound (within 50 ms) and hands the group back to the kernel; the
/// same when the accelerated one is bound to the group itself.
#[test]
fn a_plain_receiver_of_a_group_gets_every_datagram_whether_it_joins_before_or_after_an_accelerated_one() {
    let p = Pair::new(9);
    const N: &str = "300";
    let want = format!("got={N}");
    // The third: the accelerated one bound to the group itself.
    let cases = [
        (true, "239.18.3.9", "12011", ""),
        (false, "239.18.3.10", "12012", ""),
        (false, "239.18.3.11", "12013", "group"),
    ];
    for (plain_first, group, port, bind) in cases {
        let recv = ["python3", ECHO, "mcrecv", group, port, &p.addr_a(), N];
        let fast_recv = [&recv[..], &[bind]].concat();
        let (plain, fast) = if plain_first {
            let plain = mc_receiver(p.plain(&p.a, &recv));
            (plain, mc_receiver(p.accel(&p.a, &fast_recv)))
        } else {
            let fast = mc_receiver(p.accel(&p.a, &fast_recv));
            (mc_receiver(p.plain(&p.a, &recv)), fast)
        };
        // The watcher looks every 50 ms: a receiver that joins later is
        // given the group's datagrams from then on.
        std::thread::sleep(Duration::from_millis(300));
        let sender = p.accel(&p.b, &["python3", ECHO, "mcsend", group, port, &p.addr_b(), N]).output().unwrap();
        assert!(sender.status.success(), "{}", text(&sender));
        let ((plain, mut plain_lines), (fast, mut fast_lines)) = (plain, fast);
        assert_eq!(plain_lines.next(), Some(want.clone()), "plain receiver, plain first: {plain_first}");
        assert_eq!(fast_lines.next(), Some(want.clone()), "accelerated receiver, plain first: {plain_first}");
        finish(plain, Duration::from_secs(5));
        let notes = text(&finish(fast, Duration::from_secs(5)));
        let said = if plain_first {
            format!("group {group} port {port} stays the kernel's")
        } else {
            format!("group {group} port {port} goes back to the kernel: another socket here receives it")
        };
        assert!(notes.contains(&said), "plain first: {plain_first}: {notes}");
    }
}

/// `socat` and `nc -u`, unmodified, send a file across the pair, both
/// sides under `tickwire accel`: what arrives is the file, byte for byte;
/// socat's 1000-byte datagrams did not pass through the kernel's UDP.
#[test]
fn socat_and_nc_transfer_a_file_over_udp_byte_for_byte_under_accel() {
    let p = Pair::new(6);
    let (a, b) = (p.a.clone(), p.b.clone());
    let dir = std::env::temp_dir().join(format!("twp-files-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("in");
    // 300 datagrams of 1000 bytes, no two alike.
    let data: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(&file, &data).unwrap();
    let (f, got_socat, got_nc) = (file.display().to_string(), dir.join("socat"), dir.join("nc"));

    let in_a = p.udp_in(&a);
    let sink = format!("OPEN:{},creat,trunc", got_socat.display());
    let recv = p.accel(&a, &["socat", "-u", "-T", "2", "UDP-RECV:12020", &sink]).spawn().unwrap();
    p.wait_bound(&a, 12020);
    p.wait_decided(recv.id());
    let to = format!("UDP-SENDTO:{}:12020", p.addr_a());
    let send = p.accel(&b, &["socat", "-u", "-b", "1000", &format!("OPEN:{f}"), &to]).output().unwrap();
    assert!(send.status.success(), "{}", text(&send));
    let recv = finish(recv, Duration::from_secs(10));
    assert!(recv.status.success(), "{}", text(&recv));
    assert!(std::fs::read(&got_socat).unwrap() == data, "socat: the file differs");
    assert!(p.udp_in(&a) - in_a < 10, "socat: through the kernel");

    // nc sends what each read of its input gives (up to 16 KiB,
    // fragmented, so through the kernel underneath); fed 16 KiB every 20 ms,
    // as a burst overflows the receiver's buffer (the kernel's alone too).
    let out = std::fs::File::create(&got_nc).unwrap();
    let recv = p.accel(&a, &["nc", "-u", "-l", "12021"]).stdout(out).spawn().unwrap();
    p.wait_bound(&a, 12021);
    p.wait_decided(recv.id());
    let mut send = p
        .accel(&b, &["nc", "-u", "-q", "1", &p.addr_a(), "12021"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut feed = send.stdin.take().unwrap();
    for chunk in data.chunks(16_384) {
        std::io::Write::write_all(&mut feed, chunk).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(feed);
    let send = finish(send, Duration::from_secs(10));
    assert!(send.status.success(), "{}", text(&send));
    let recv = finish(recv, Duration::from_millis(500));
    let got = std::fs::read(&got_nc).unwrap();
    assert!(got == data, "nc: {} bytes of {}, not the file: {}", got.len(), data.len(), text(&recv));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs the test's program (`udp_echo.py epoll`, `n` a phase) through its
/// phases: `n` datagrams from b to its accelerated socket and `n` from a
/// to its loopback one, then `n` more from b for each of its timed and
/// select phases; its last line and its output.
fn drive(p: &Pair, mut program: Command, n: &str) -> (String, Output) {
    let mut child = program.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    assert_eq!(lines.next().map(Result::unwrap).as_deref(), Some("ready"));
    let over_veth = p.plain(&p.b, &["python3", ECHO, "send", &p.addr_a(), "12000", n]).spawn().unwrap();
    let local = p.plain(&p.a, &["python3", ECHO, "send", "127.0.0.1", "12001", n]).spawn().unwrap();
    for c in [over_veth, local] {
        assert!(finish(c, Duration::from_secs(20)).status.success());
    }
    for phase in ["timed", "selected"] {
        assert_eq!(lines.next().map(Result::unwrap).as_deref(), Some(phase));
        let more = p.plain(&p.b, &["python3", ECHO, "send", &p.addr_a(), "12000", n]).spawn().unwrap();
        assert!(finish(more, Duration::from_secs(20)).status.success());
    }
    let last = lines.next().map(Result::unwrap).unwrap_or_default();
    (last, finish(child, Duration::from_secs(10)))
}

#[test]
fn one_epoll_set_over_an_accelerated_and_a_kernel_socket_reports_both() {
    let p = Pair::new(2);
    let a = p.a.clone();
    const N: &str = "200";
    let in_a = p.udp_in(&a);
    let (last, out) = drive(&p, p.accel(&a, &["python3", ECHO, "epoll", &p.addr_a(), "12000", "12001", N]), N);
    assert_eq!(last, format!("xdp={N} kernel={N} timed={N} selected={N}"), "{}", text(&out));
    // Only the loopback socket's datagrams went through the kernel.
    let n: u64 = N.parse().unwrap();
    let through_kernel = p.udp_in(&a) - in_a;
    assert!((n..n + 10).contains(&through_kernel), "{through_kernel} through the kernel in a");
}

#[test]
fn without_the_capabilities_the_program_still_works_and_says_why_once() {
    let p = Pair::new(3);
    let a = p.a.clone();
    let dev = p.dev_a.clone();
    // As nobody: no CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF.
    let mut program = Command::new("ip");
    program
        .args(["netns", "exec", &a, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
        .args([BIN, "--dir", "/tmp", "accel", "--interface", &dev, "--"])
        .args(["python3", ECHO, "epoll", &p.addr_a(), "12000", "12001", "50"]);
    let (last, out) = drive(&p, program, "50");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(last, "xdp=50 kernel=50 timed=50 selected=50", "{err}");
    let why: Vec<&str> = err.lines().filter(|l| l.contains("stays a kernel socket")).collect();
    assert!(why.len() == 1 && why[0].contains("not permitted"), "{err}");
}

#[test]
fn on_an_interface_without_native_xdp_sockperf_still_works_and_the_fallback_is_counted() {
    let p = Pair::new(7);
    let a = p.a.clone();
    // A bridge in a (its address moved onto it): no native XDP.
    let bridge = format!("twp{}br", std::process::id() % 100_000);
    let net = |args: &[&str]| ip(&[&["-n", &a][..], args].concat());
    net(&["link", "add", &bridge, "type", "bridge"]);
    net(&["link", "set", &p.dev_a, "master", &bridge]);
    net(&["addr", "del", &format!("{}/24", p.addr_a()), "dev", &p.dev_a]);
    net(&["addr", "add", &format!("{}/24", p.addr_a()), "dev", &bridge]);
    net(&["link", "set", &bridge, "up"]);
    let mut server = Command::new("ip");
    server
        .args(["netns", "exec", &a, BIN, "--dir", &p.dir(), "accel", "--interface", &bridge, "--xdp-mode", "native"])
        .args(["--", "sockperf", "server", "-i", &p.addr_a(), "-p", "11114"]);
    let server = sockperf_server(&p, &a, 11114, server);
    let args = ["sockperf", "ping-pong", "-i", &p.addr_a(), "-p", "11114", "-t", "1", "-m", "64"];
    let out = p.plain(&p.b, &args).output().unwrap();
    let (sent, received) = sockperf_counts(&text(&out));
    assert!(sent > 100 && sent - received <= 1, "{}", text(&out));
    let stat = Command::new(BIN).args(["--dir", &p.dir(), "stat", "--json"]).output().unwrap();
    let stat = String::from_utf8_lossy(&stat.stdout).into_owned();
    let rows: serde_json::Value = serde_json::from_str(&stat).unwrap_or_else(|e| panic!("{e}: {stat}"));
    let c = rows.as_array().and_then(|r| r.iter().find(|r| r["side"] == "accel")).map(|r| r["counters"].clone());
    let c = c.unwrap_or_else(|| panic!("no accel counters: {stat}"));
    assert_eq!((c["fallbacks"].as_u64(), c["sockets_accelerated"].as_u64()), (Some(1), Some(0)), "{c}");
    let err = text(&finish(server, Duration::ZERO));
    let why: Vec<&str> = err.lines().filter(|l| l.contains("stays a kernel socket")).collect();
    assert!(why.len() == 1 && why[0].contains(&bridge) && why[0].contains("no XDP support"), "{err}");
}

/// `tickwire lab accel` (docs/lab.md), one short round: sockperf four
/// ways and tickwire's AF_XDP ping-pong, the kernel spinning and the
/// latter the references (ratio 1), every way answered, nothing left in
/// the directory.
#[test]
fn lab_accel_measures_sockperf_four_ways_and_tickwire_xdp_against_the_kernel_spinning() {
    let dir = format!("/dev/shm/twp-lab-{}", std::process::id());
    let out = Command::new(BIN)
        .args(["--dir", &dir, "lab", "accel", "--size", "64", "--seconds", "1", "--rounds", "1", "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    // The accelerated programs' counters files (a killed server's too) went
    // with the run's directory.
    let left: Vec<_> =
        std::fs::read_dir(&dir).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(left.is_empty(), "left behind: {left:?}");
    let rows: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).expect(l)).collect();
    let paths: Vec<&str> = rows.iter().filter_map(|r| r["path"].as_str()).collect();
    assert_eq!(
        paths,
        ["kernel, spinning", "kernel, blocking", "accel, spinning", "accel, blocking", "tickwire xdp, spinning"],
        "{stdout}"
    );
    assert_eq!((&rows[0]["ratio_p50"], &rows[4]["vs_xdp_p99"]), (&1.0.into(), &1.0.into()), "{stdout}");
    for r in &rows {
        assert!(r["round_trips"][0].as_u64() > Some(100), "{r}");
        assert!(r["median_p50_ns"].as_u64() > Some(0) && r["ratio_p99"].as_f64() > Some(0.0), "{r}");
    }
}
