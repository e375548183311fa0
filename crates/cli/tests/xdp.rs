//! System tests of the AF_XDP transport (`xdp=` on `udp://` channels):
//! across network namespaces joined by veth, native and generic mode, with
//! reliable UDP's loss injection; coexistence with the kernel's own traffic
//! on the same interface; fallback without the capabilities; clean-up after
//! SIGKILL; two processes on one interface. Needs root (namespaces, BPF).

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

#[path = "support/ratios.rs"]
mod ratios;
use ratios::{carried_floor, ratios_to};

#[path = "support/transfer.rs"]
mod support;
use support::transfer;

/// Two namespaces joined by a veth pair with `queues` queues each way,
/// removed on drop. `a` is 10.88.N.1, `b` 10.88.N.2.
struct Pair {
    a: String,
    b: String,
    dev_b: String,
    n: u32,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

impl Pair {
    fn new(tag: u32, queues: u32) -> Self {
        let pid = std::process::id();
        let n = (pid.wrapping_mul(7).wrapping_add(tag)) % 250 + 1;
        let p =
            Pair { a: format!("twx{pid}a{tag}"), b: format!("twx{pid}b{tag}"), dev_b: format!("twx{pid}v{tag}b"), n };
        let dev_a = format!("twx{pid}v{tag}a");
        ip(&["netns", "add", &p.a]);
        ip(&["netns", "add", &p.b]);
        let q = queues.to_string();
        ip(&[
            "link",
            "add",
            &dev_a,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
            "type",
            "veth",
            "peer",
            "name",
            &p.dev_b,
            "numtxqueues",
            &q,
            "numrxqueues",
            &q,
        ]);
        ip(&["link", "set", &dev_a, "netns", &p.a]);
        ip(&["link", "set", &p.dev_b, "netns", &p.b]);
        ip(&["-n", &p.a, "addr", "add", &format!("{}/24", p.addr_a()), "dev", &dev_a]);
        ip(&["-n", &p.b, "addr", "add", &format!("{}/24", p.addr_b()), "dev", &p.dev_b]);
        for (ns, dev) in [(&p.a, &dev_a), (&p.b, &p.dev_b)] {
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        p
    }
    fn addr_a(&self) -> String {
        format!("10.88.{}.1", self.n)
    }
    fn addr_b(&self) -> String {
        format!("10.88.{}.2", self.n)
    }
    /// The `--dir` of the processes [`Pair::spawn`] starts in `ns`.
    fn dir(&self, ns: &str) -> String {
        format!("/dev/shm/twx-{}-{ns}", std::process::id())
    }
    /// `tickwire ARGS` in namespace `ns`, stdout and stderr piped.
    fn spawn(&self, ns: &str, args: &[&str]) -> Child {
        let dir = self.dir(ns);
        Command::new("ip")
            .args(["netns", "exec", ns, BIN])
            .args(args)
            .args(["--dir", &dir])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
    /// Whether an XDP program is attached to b's end (`ip link`).
    fn xdp_on_b(&self) -> bool {
        let out = Command::new("ip").args(["-n", &self.b, "link", "show", "dev", &self.dev_b]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in [&self.a, &self.b] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
            let _ = std::fs::remove_dir_all(format!("/dev/shm/twx-{}-{ns}", std::process::id()));
        }
    }
}

/// Waits for `child` (bounded), returning its output; kills it on timeout.
fn finish(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Reads `child`'s stderr until a line containing `what` (bounded).
fn wait_line(child: &mut Child, what: &str) -> String {
    let err = child.stderr.as_mut().unwrap();
    let mut seen = Vec::new();
    let start = Instant::now();
    let mut byte = [0u8; 1];
    while start.elapsed() < Duration::from_secs(20) {
        if err.read(&mut byte).unwrap_or(0) == 0 {
            break;
        }
        seen.push(byte[0]);
        if byte[0] == b'\n' && String::from_utf8_lossy(&seen).contains(what) {
            return String::from_utf8_lossy(&seen).into_owned();
        }
    }
    panic!("no line with {what:?}; saw {}", String::from_utf8_lossy(&seen));
}

fn exact_over_xdp(r: &serde_json::Value, mode: &str) {
    assert_eq!(r["identical"], true, "{r}");
    assert_eq!(r["in_order"], true, "{r}");
    assert_eq!(r["lost_events"], 0, "{r}");
    let ends = std::iter::once(&r["sender"]).chain(r["receivers"].as_array().unwrap());
    for end in ends {
        let path = end["xdp_path"].as_str().unwrap_or_default();
        assert!(path.starts_with("AF_XDP on ") && path.contains(mode), "{path}: {r}");
        assert!(end["xdp_packets"].as_u64().unwrap() > 1000, "datagrams through AF_XDP: {r}");
    }
}

/// The loss-injection runs of reliable UDP, unchanged, with both ends over
/// AF_XDP: native mode, then generic mode.
#[test]
fn reliable_unicast_over_xdp_native_and_generic_under_loss() {
    for mode in ["native", "generic"] {
        let r = transfer(&format!(
            "--bytes 4MiB --netns --loss 0.05 --reorder 0.01 --duplicate 0.01 --seed 9 \
             --param xdp=required --param xdp-mode={mode}"
        ));
        exact_over_xdp(&r, &format!("{mode} mode"));
        assert!(r["retransmits"].as_u64().unwrap() > 0, "5 % loss was repaired: {r}");
    }
}

/// Multicast to three receivers through XDP (the program matches the
/// group); the sender's end is a bridge, which has generic XDP only, so
/// `auto` picks per interface.
#[test]
fn reliable_multicast_over_xdp_to_three_receivers() {
    let r = transfer(
        "--bytes 2MiB --netns --receivers 3 --param send-data-loss=0.02 --seed 5 --param xdp=required --param xdp-mode=auto",
    );
    exact_over_xdp(&r, "mode");
    assert_eq!(r["receivers"].as_array().unwrap().len(), 3);
}

/// One end over AF_XDP, the other a kernel socket: the kernel sender's UDP
/// checksums arrive partial on veth (CHECKSUM_PARTIAL) and are accepted and
/// counted under the default `xdp-checksum=verify`; `strict` drops them,
/// and the stream then does not get through.
#[test]
fn a_kernel_sender_to_an_xdp_receiver_and_partial_checksums() {
    let p = Pair::new(1, 1);
    let ch = format!("udp://{}:41001?xdp=required", p.addr_b());
    let mut sub = p.spawn(&p.b, &["sub", "--channel", &ch, "--count", "2000", "--verify"]);
    wait_line(&mut sub, "waiting for a publisher");
    let publ = p.spawn(&p.a, &["pub", "--channel", &format!("udp://{}:41001", p.addr_b()), "--count", "2000"]);
    let po = finish(publ, Duration::from_secs(30));
    let so = finish(sub, Duration::from_secs(30));
    assert!(po.status.success() && so.status.success(), "{}\n{}", text(&po), text(&so));
    let s = text(&so);
    assert!(s.contains("received 2000 messages") && s.contains("sequence gaps 0"), "{s}");
    let [xdp_in, _, _, _, failed, partial, _] = xdp_summary(&s);
    assert!(xdp_in > 0 && failed == 0 && partial > 0, "a veth kernel sender's checksums are partial: {s}");

    let strict = format!("udp://{}:41002?xdp=required&xdp-checksum=strict", p.addr_b());
    let mut sub = p.spawn(&p.b, &["sub", "--channel", &strict, "--count", "10", "--duration", "3s"]);
    wait_line(&mut sub, "waiting for a publisher");
    let publ =
        p.spawn(&p.a, &["pub", "--channel", &format!("udp://{}:41002", p.addr_b()), "--count", "10", "--wait", "2s"]);
    let _ = finish(publ, Duration::from_secs(10));
    let s = text(&finish(sub, Duration::from_secs(10)));
    let [_, _, _, _, failed, partial, _] = xdp_summary(&s);
    assert!(s.contains("received 0 messages") && failed > 0 && partial == 0, "strict drops them: {s}");
}

/// While a stream runs over AF_XDP on an interface, the kernel keeps
/// everything else there: ping (ICMP, ARP), a kernel UDP socket and a TCP
/// connection on other ports of the same addresses.
#[test]
fn the_kernel_keeps_icmp_udp_and_tcp_while_xdp_runs() {
    let p = Pair::new(2, 1);
    let ch = format!("udp://{}:41101?xdp=required", p.addr_b());
    let mut sub = p.spawn(&p.b, &["sub", "--channel", &ch, "--count", "60000", "--verify"]);
    wait_line(&mut sub, "AF_XDP on");
    let publ = p.spawn(&p.a, &["pub", "--channel", &ch, "--count", "60000", "--rate", "20000"]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(p.xdp_on_b(), "the program is attached while the stream runs");

    let ping = Command::new("ip")
        .args(["netns", "exec", &p.a, "ping", "-c", "3", "-i", "0.2", "-W", "2"])
        .arg(p.addr_b())
        .output()
        .unwrap();
    assert!(ping.status.success(), "ping: {}", text(&ping));

    for (scheme, port) in [("udp", 41102), ("tcp", 41103)] {
        let other = format!("{scheme}://{}:{port}", p.addr_b());
        let mut s2 = p.spawn(&p.b, &["sub", "--channel", &other, "--count", "500", "--verify"]);
        wait_line(&mut s2, "waiting for a publisher");
        let p2 = p.spawn(&p.a, &["pub", "--channel", &other, "--count", "500"]);
        let o2 = finish(p2, Duration::from_secs(20));
        let r2 = text(&finish(s2, Duration::from_secs(20)));
        assert!(o2.status.success() && r2.contains("received 500 messages"), "{scheme}: {}\n{r2}", text(&o2));
    }
    let po = finish(publ, Duration::from_secs(30));
    let so = text(&finish(sub, Duration::from_secs(30)));
    assert!(po.status.success(), "{}", text(&po));
    assert!(so.contains("received 60000 messages") && so.contains("sequence gaps 0"), "{so}");
    assert!(!p.xdp_on_b(), "the program went with the last process");
}

/// Without CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF: `xdp=auto` says why and
/// falls back to kernel UDP (and still receives); `xdp=required` stops
/// with the same reason.
#[test]
fn without_capabilities_auto_falls_back_and_required_stops() {
    let p = Pair::new(3, 1);
    let dir = format!("/tmp/twx-nobody-{}", std::process::id());
    std::fs::create_dir_all(&dir).unwrap();
    // The directory is its user's own: nobody's (one others may write to
    // would be refused).
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    let unprivileged = |ch: &str, count: &str| {
        Command::new("ip")
            .args(["netns", "exec", &p.b, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(["--inh-caps=-all", "--bounding-set=-all", BIN, "sub", "--dir", &dir, "--channel", ch])
            .args(["--count", count, "--duration", "10s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let why = "not permitted: AF_XDP needs CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF (or root)";
    let mut sub = unprivileged(&format!("udp://{}:41201?xdp=auto", p.addr_b()), "100");
    let line = wait_line(&mut sub, "AF_XDP not used");
    assert!(line.contains(why) && line.contains("falling back to kernel UDP sockets"), "{line}");
    let publ = p.spawn(&p.a, &["pub", "--channel", &format!("udp://{}:41201", p.addr_b()), "--count", "100"]);
    let _ = finish(publ, Duration::from_secs(20));
    let s = text(&finish(sub, Duration::from_secs(20)));
    assert!(s.contains("received 100 messages"), "{s}");

    let o = finish(unprivileged(&format!("udp://{}:41202?xdp=required", p.addr_b()), "1"), Duration::from_secs(10));
    assert!(!o.status.success() && text(&o).contains(why), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

/// SIGKILL: a process killed while another holds the program leaves a
/// stale flow, which the next start removes (and then takes the flow); the
/// last process killed takes the program with it (bpf_link), and the next
/// start loads a fresh one.
#[test]
fn stale_state_after_sigkill_is_cleaned_up() {
    // Two queues: each process binds its own (one AF_XDP socket per queue).
    let p = Pair::new(4, 2);
    let ch = |port: u16| format!("udp://{}:{port}?xdp=required", p.addr_b());
    let mut holder = p.spawn(&p.b, &["sub", "--channel", &ch(41301), "--duration", "60s"]);
    wait_line(&mut holder, "program loaded");
    let mut victim = p.spawn(&p.b, &["sub", "--channel", &ch(41302), "--duration", "60s"]);
    wait_line(&mut victim, "program shared with other tickwire processes");
    // `ip netns exec` execs the binary, so its pid is tickwire's.
    nix_kill(&victim);
    let _ = victim.wait();
    let mut next = p.spawn(&p.b, &["sub", "--channel", &ch(41302), "--count", "50"]);
    let line = wait_line(&mut next, "AF_XDP on");
    assert!(line.contains("removed 1 stale flow(s) of dead processes"), "{line}");
    let publ = p.spawn(&p.a, &["pub", "--channel", &ch(41302), "--count", "50"]);
    let _ = finish(publ, Duration::from_secs(20));
    let s = text(&finish(next, Duration::from_secs(20)));
    assert!(s.contains("received 50 messages"), "{s}");

    nix_kill(&holder);
    let _ = holder.wait();
    let start = Instant::now();
    while p.xdp_on_b() && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!p.xdp_on_b(), "the last holder's SIGKILL detached the program");
    let mut fresh = p.spawn(&p.b, &["sub", "--channel", &ch(41301), "--duration", "1s"]);
    let line = wait_line(&mut fresh, "AF_XDP on");
    assert!(line.contains("program loaded"), "{line}");
    let _ = finish(fresh, Duration::from_secs(10));
}

fn nix_kill(c: &Child) {
    let _ = Command::new("kill").args(["-9", &c.id().to_string()]).status();
}

/// Two tickwire processes on one interface at once (a veth with two
/// queues): each binds its own queue, both streams arrive exactly, and
/// both share the one program.
#[test]
fn two_processes_on_one_interface() {
    let p = Pair::new(5, 2);
    let chans: Vec<String> = (0..2).map(|i| format!("udp://{}:{}?xdp=required", p.addr_b(), 41401 + i)).collect();
    let mut subs = Vec::new();
    for (i, ch) in chans.iter().enumerate() {
        let mut s = p.spawn(&p.b, &["sub", "--channel", ch, "--count", "20000", "--verify"]);
        let line = wait_line(&mut s, "AF_XDP on");
        assert!(line.contains(&format!("queue {i}")), "{line}");
        subs.push(s);
    }
    // One at a time, so publisher i binds queue i on its side too: what it
    // sends leaves on queue i and, on veth, arrives on queue i.
    let mut pubs = Vec::new();
    for (i, ch) in chans.iter().enumerate() {
        let mut publ = p.spawn(&p.a, &["pub", "--channel", ch, "--count", "20000", "--rate", "20000"]);
        let line = wait_line(&mut publ, "AF_XDP on");
        assert!(line.contains(&format!("queue {i}")), "{line}");
        pubs.push(publ);
    }
    for publ in pubs {
        let o = finish(publ, Duration::from_secs(30));
        assert!(o.status.success(), "{}", text(&o));
    }
    for s in subs {
        let t = text(&finish(s, Duration::from_secs(30)));
        assert!(t.contains("received 20000 messages") && t.contains("sequence gaps 0"), "{t}");
        let [xdp_in, _, kernel_in, ..] = xdp_summary(&t);
        // Each publisher's socket sends on the queue of the same number, so
        // on veth its datagrams arrive on that queue, through AF_XDP; only
        // the first, sent by the kernel while the neighbour was being
        // resolved, may land on the other queue and come through the kernel.
        assert!(xdp_in > 1000 && kernel_in * 50 < xdp_in, "datagrams came through AF_XDP: {t}");
    }
}

/// The control plane follows the kernel: the sender's neighbour entry is
/// flushed mid-stream; the next datagrams go through the kernel socket
/// (which resolves it again, ARP) and the rest through AF_XDP once the
/// kernel has the MAC address. Nothing is lost. The publisher's live
/// counters (`stat`) show each step: the kernel path's count grows after
/// the flush (it is already 1 or more from start-up), and AF_XDP's grows
/// again after that.
#[test]
fn a_flushed_neighbour_is_resolved_again_through_the_kernel() {
    let p = Pair::new(6, 1);
    let ch = format!("udp://{}:41501?xdp=required", p.addr_b());
    let mut sub = p.spawn(&p.b, &["sub", "--channel", &ch, "--count", "60000", "--verify"]);
    wait_line(&mut sub, "AF_XDP on");
    let mut publ = p.spawn(&p.a, &["pub", "--channel", &ch, "--count", "60000", "--rate", "20000"]);
    wait_line(&mut publ, "joined");
    std::thread::sleep(Duration::from_millis(500));
    // `ip netns exec` execs the binary, so the child's pid is tickwire's.
    let counters = |until: &dyn Fn(u64, u64) -> bool, what: &str| -> (u64, u64) {
        let start = Instant::now();
        loop {
            let now = xdp_sent(&p.dir(&p.a), publ.id());
            if now.is_some_and(|(x, k)| until(x, k)) {
                return now.unwrap();
            }
            assert!(start.elapsed() < Duration::from_secs(10), "{what}: the publisher's counters stayed at {now:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let (xdp0, kernel0) = counters(&|x, _| x > 1000, "AF_XDP sends before the flush");
    ip(&["-n", &p.a, "neigh", "flush", "all"]);
    let (xdp1, kernel1) = counters(&|_, k| k > kernel0, "datagrams through the kernel after the flush");
    let (xdp2, _) = counters(&|x, _| x > xdp1 + 1000, "AF_XDP again after the kernel resolved the neighbour");
    let po = text(&finish(publ, Duration::from_secs(30)));
    let so = text(&finish(sub, Duration::from_secs(30)));
    assert!(so.contains("received 60000 messages") && so.contains("sequence gaps 0"), "{so}");
    assert!(xdp0 <= xdp1 && kernel1 > kernel0 && xdp2 > xdp1, "{xdp0} {kernel0} {xdp1} {kernel1} {xdp2}");
    let [_, xdp_out, _, kernel_out, ..] = xdp_summary(&po);
    assert!(kernel_out >= kernel1 && xdp_out >= xdp2 && xdp_out > 50_000, "{po}");
}

/// The publisher `pid`'s AF_XDP counters in `dir`, as `tickwire stat`
/// reads them while it runs: (datagrams sent through AF_XDP, through the
/// kernel socket).
fn xdp_sent(dir: &str, pid: u32) -> Option<(u64, u64)> {
    let out = Command::new(BIN).args(["stat", "--json", "--dir", dir]).output().unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    rows.as_array()?.iter().find_map(|r| {
        let c = &r["counters"];
        (r["pid"] == pid).then(|| Some((c["xdp_tx_packets"].as_u64()?, c["kernel_tx"].as_u64()?))).flatten()
    })
}

/// The numbers of the `AF_XDP: ...` line pub and sub print on exit: in,
/// out, kernel in, kernel out, checksum failures, partial, malformed.
fn xdp_summary(t: &str) -> [u64; 7] {
    let line = t.lines().find(|l| l.starts_with("AF_XDP: ")).unwrap_or_else(|| panic!("no AF_XDP line: {t}"));
    let nums: Vec<u64> =
        line.split(|c: char| !c.is_ascii_digit()).filter(|w| !w.is_empty()).map(|w| w.parse().unwrap()).collect();
    nums.try_into().unwrap_or_else(|n| panic!("{n:?} in {line}"))
}

/// The README's AF_XDP section as a person runs it: a subscriber in one
/// namespace prints the path it took and each line; a publisher in the
/// other sends stdin. Both over `xdp=auto`.
#[test]
fn readme_af_xdp_two_terminals() {
    let p = Pair::new(7, 1);
    let ch = format!("udp://{}:40123?xdp=auto", p.addr_b());
    let mut sub = p.spawn(&p.b, &["sub", "--channel", &ch, "--print", "--count", "1"]);
    let line = wait_line(&mut sub, "AF_XDP on");
    assert!(line.contains("native mode, copy mode") && line.contains("program loaded"), "{line}");
    let mut publ = Command::new("ip")
        .args(["netns", "exec", &p.a, BIN, "pub", "--channel", &ch, "--stdin"])
        .args(["--dir", &format!("/dev/shm/twx-{}-{}", std::process::id(), p.a)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    publ.stdin.take().unwrap().write_all(b"bid 101.25\n").unwrap();
    let po = finish(publ, Duration::from_secs(20));
    let so = finish(sub, Duration::from_secs(20));
    assert!(String::from_utf8_lossy(&so.stdout).contains("bid 101.25"), "{}\n{}", text(&so), text(&po));
    let [xdp_in, ..] = xdp_summary(&text(&so));
    assert!(xdp_in >= 1, "{}", text(&so));
    assert!(text(&po).contains("AF_XDP on"), "{}", text(&po));
}

/// A tickwire program attached without a link (by hand here, as an old
/// version or a crashed tool would leave it) outlives every process: the
/// next start finds it holding no live flow and replaces it.
#[test]
fn a_stale_program_attached_without_a_link_is_replaced() {
    let p = Pair::new(8, 1);
    let obj = std::env::temp_dir().join(format!("twx-stale-{}.o", std::process::id()));
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../xdp/bpf/tickwire_xdp.c");
    let arch = format!("/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    let built = Command::new("clang")
        .args(["-O2", "-g", "-target", "bpf", "-I", &arch, "-c", src, "-o"])
        .arg(&obj)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", text(&built));
    let obj_s = obj.display().to_string();
    ip(&["-n", &p.b, "link", "set", "dev", &p.dev_b, "xdpgeneric", "obj", &obj_s, "sec", "xdp"]);
    assert!(p.xdp_on_b());
    let ch = format!("udp://{}:41601?xdp=required", p.addr_b());
    let mut sub = p.spawn(&p.b, &["sub", "--channel", &ch, "--count", "100"]);
    let line = wait_line(&mut sub, "AF_XDP on");
    assert!(line.contains("replaced a stale tickwire program (id "), "{line}");
    let publ = p.spawn(&p.a, &["pub", "--channel", &ch, "--count", "100"]);
    let _ = finish(publ, Duration::from_secs(20));
    let s = text(&finish(sub, Duration::from_secs(20)));
    assert!(s.contains("received 100 messages"), "{s}");
    assert!(!p.xdp_on_b(), "the replacement went with its process");
    let _ = std::fs::remove_file(&obj);
}

/// Another XDP program on the interface is left alone: `xdp=auto` says
/// which one is there and falls back to kernel UDP (and still receives);
/// the other program is still attached afterwards.
#[test]
fn another_xdp_program_is_left_alone() {
    let p = Pair::new(9, 1);
    let dir = std::env::temp_dir().join(format!("twx-other-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("other.c");
    std::fs::write(
        &src,
        "#include <linux/bpf.h>\n__attribute__((section(\"xdp\"), used)) int someone_elses(struct xdp_md *c) \
         { return XDP_PASS; }\nchar _license[] __attribute__((section(\"license\"), used)) = \"GPL\";\n",
    )
    .unwrap();
    let obj = dir.join("other.o");
    let arch = format!("/usr/include/{}-linux-gnu", std::env::consts::ARCH);
    let built = Command::new("clang")
        .args(["-O2", "-target", "bpf", "-I", &arch, "-c"])
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", text(&built));
    ip(&["-n", &p.b, "link", "set", "dev", &p.dev_b, "xdp", "obj", &obj.display().to_string(), "sec", "xdp"]);
    let ch = format!("udp://{}:41701?xdp=auto", p.addr_b());
    let mut sub = p.spawn(&p.b, &["sub", "--channel", &ch, "--count", "100"]);
    let line = wait_line(&mut sub, "AF_XDP not used");
    assert!(line.contains("another XDP program") && line.contains("someone_elses"), "{line}");
    let publ = p.spawn(&p.a, &["pub", "--channel", &ch, "--count", "100"]);
    let _ = finish(publ, Duration::from_secs(20));
    let s = text(&finish(sub, Duration::from_secs(20)));
    assert!(s.contains("received 100 messages"), "{s}");
    assert!(p.xdp_on_b(), "the other program is still there");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `lab pingpong --transport xdp` and reliable UDP over AF_XDP, briefly:
/// each row beside the kernel-UDP floor across the same kind of veth pair,
/// with the ratio; `lab throughput --transport xdp` beside `sendmmsg`.
#[test]
fn the_lab_measures_xdp_against_kernel_udp() {
    let rows = |args: &str| -> Vec<serde_json::Value> {
        let out = Command::new(BIN).args(args.split_whitespace()).output().unwrap();
        assert!(out.status.success(), "{args}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
    };
    for (args, path) in
        [("--transport xdp --netns", "xdp-netns"), ("--transport rudp --netns --param xdp=required", "rudp-netns")]
    {
        let r = rows(&format!("lab pingpong {args} --size 64 --spin --count 2000 --warmup 100 --rounds 2 --json"));
        let mine = r.iter().find(|r| r["mode"] == "pingpong").unwrap_or_else(|| panic!("{r:?}"));
        assert_eq!(mine["transport"], path, "{mine}");
        assert_eq!(mine["count"], 2000, "{mine}");
        assert_eq!(mine["floor_probe"], "kernel_udp_spin", "{mine}");
        assert_eq!(mine["floor_size"], 64, "{mine}");
        match r.iter().find(|r| r["mode"] == "floor") {
            Some(floor) => ratios_to(mine, floor),
            None => carried_floor(mine),
        }
    }
    let out = Command::new(BIN)
        .args(["lab", "throughput", "--transport", "xdp", "--size", "64", "--duration", "1s", "--rounds", "1"])
        .output()
        .unwrap();
    let t = text(&out);
    assert!(out.status.success() && t.contains("throughput xdp") && t.contains("x the floor"), "{t}");
    // The printed ratio is this line's rate over the floor line's, and the
    // floor rate it quotes is the floor line's.
    let rate = |line: &str| -> f64 {
        let (head, _) = line.split_once(" msg/s").unwrap_or_else(|| panic!("no rate in {line}"));
        head.rsplit(':').next().unwrap().trim().parse().unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let line = |start: &str| t.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("no {start} line: {t}"));
    let (mine, floor) = (line("throughput xdp"), line("floor"));
    let (before, after) = mine.split_once("x the floor (").unwrap();
    let ratio: f64 = before.rsplit(' ').next().unwrap().parse().unwrap_or_else(|e| panic!("{e}: {mine}"));
    let quoted: f64 = after.split_once(" msg/s").unwrap().0.parse().unwrap_or_else(|e| panic!("{e}: {mine}"));
    assert_eq!(quoted, rate(floor), "{t}");
    let exact = rate(mine) / rate(floor);
    assert!((ratio - exact).abs() <= 0.0056 + exact * 1e-5, "printed {ratio}x, the rates say {exact}: {t}");
}
