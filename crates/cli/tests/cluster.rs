//! A router cluster across hosts: routers each in a network namespace of
//! their own, joined by veth pairs to a bridge in one more (all made and
//! removed by the test), each with its clients in its namespace: the real
//! binaries (`tickwire router`, `pub`, `sub --verify`).
//!
//! - Publishers on one router, wildcard subscribers on the others: every
//!   message once to each matching subscriber, none to one that does not
//!   match; a subscriber made later on the first router receives from a
//!   publisher on another; a router killed (-9) leaves the others serving
//!   their clients, and is linked again when it comes back.
//! - A partition between two routers (an `nft` drop rule): the link comes
//!   back after the rule is removed, interest is told again, and what was
//!   lost meanwhile reaches the subscriber as a discard count: received
//!   plus discarded is what was published, and `--verify` finds no gap
//!   that was not announced.
//! - Four routers each told only of the next (a ring): a link with each
//!   of the others, every message once to each subscriber, no loop.
//! - A request on one router is answered by a responder on another (the
//!   reply back over the link); with no responder anywhere, at once
//!   `NoResponders`.
//! - A router down past `forget_after` is forgotten: what it wanted is
//!   withdrawn, one only learned of is no longer dialed and leaves the
//!   status; back, it is linked with again.
//! - A router with another secret is refused, and says why.
//! - Links over TLS: messages cross them (and `tickwire stat` shows the
//!   link's counters, its round trip measured); a router whose certificate
//!   names another router, or another CA signed, is refused, and the
//!   router it tried says why.
//!
//! - A client given one router learns the others from its WELCOME and,
//!   when that router stops, moves to one of them and receives there.
//!
//! Runs as root (namespaces, nftables), in `make test`.

#[path = "support/router.rs"]
mod router;

use router::{RouterProcess, BIN};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tickwire_testkit::ca::{TestCa, Usage};

const SECRET: &str = "a-cluster-secret-of-the-test-0123";
/// A port every router's clients use, in its own namespace (a router
/// listens on every address: clients on other hosts may fail over to it).
const CLIENTS: &str = "tcp://127.0.0.1:7600";
const LISTEN: &str = "tcp://0.0.0.0:7600";

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `n` namespaces on one bridge (10.77.K.1 to .n), and a directory for
/// each router; all removed when dropped.
struct Hosts {
    tag: String,
    n: usize,
    dir: PathBuf,
    /// Which /24 (so tests running at once do not share addresses).
    net: u8,
}

impl Hosts {
    fn create(n: usize, net: u8) -> Self {
        let tag = format!("twc{}{net}", std::process::id() % 100_000);
        let dir = std::env::temp_dir().join(format!("tw-cluster-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let secret = dir.join("secret");
        std::fs::write(&secret, SECRET).unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let h = Self { tag, n, dir, net };
        let hub = h.ns_hub();
        let _ = Command::new("ip").args(["netns", "del", &hub]).stderr(Stdio::null()).status();
        run(Command::new("ip").args(["netns", "add", &hub]));
        run(Command::new("ip").args(["-n", &hub, "link", "add", "br0", "type", "bridge"]));
        run(Command::new("ip").args(["-n", &hub, "link", "set", "br0", "up"]));
        for k in 0..n {
            let ns = h.ns(k);
            let _ = Command::new("ip").args(["netns", "del", &ns]).stderr(Stdio::null()).status();
            run(Command::new("ip").args(["netns", "add", &ns]));
            run(Command::new("ip").args(["-n", &ns, "link", "set", "lo", "up"]));
            let port = format!("h{k}");
            run(Command::new("ip")
                .args(["-n", &ns, "link", "add", "eth0", "type", "veth", "peer", "name", &port, "netns", &hub]));
            run(Command::new("ip").args(["-n", &ns, "addr", "add", &format!("{}/24", h.addr(k)), "dev", "eth0"]));
            run(Command::new("ip").args(["-n", &ns, "link", "set", "eth0", "up"]));
            run(Command::new("ip").args(["-n", &hub, "link", "set", &port, "master", "br0"]));
            run(Command::new("ip").args(["-n", &hub, "link", "set", &port, "up"]));
            std::fs::create_dir_all(h.dir(k)).unwrap();
            std::fs::set_permissions(h.dir(k), std::fs::Permissions::from_mode(0o700)).unwrap();
        }
        h
    }

    fn ns_hub(&self) -> String {
        format!("{}-hub", self.tag)
    }
    fn ns(&self, k: usize) -> String {
        format!("{}-{k}", self.tag)
    }
    fn addr(&self, k: usize) -> String {
        format!("10.77.{}.{}", self.net, k + 1)
    }
    fn dir(&self, k: usize) -> PathBuf {
        self.dir.join(format!("r{k}"))
    }

    /// `tickwire ARGS` in host `k`'s namespace.
    fn cmd(&self, k: usize, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(k), BIN]).args(args);
        c
    }

    /// Router `r{k}`, told of `peers` (host numbers), its secret `secret`.
    fn router_with(&self, k: usize, peers: &[usize], secret: &str) -> RouterProcess {
        self.router_tls(k, peers, secret, &[])
    }

    /// [`Hosts::router_with`], and `more` arguments.
    fn router_tls(&self, k: usize, peers: &[usize], secret: &str, more: &[String]) -> RouterProcess {
        let file = self.dir.join(format!("secret-{k}"));
        std::fs::write(&file, secret).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let dir = self.dir(k).display().to_string();
        let (name, listen) = (format!("r{k}"), format!("tcp://{}:7700", self.addr(k)));
        let mut args = vec!["router", "--dir", &dir, "--name", &name, "--listen", LISTEN, "--cluster-name", "test"];
        args.extend(["--cluster-listen", &listen, "--cluster-secret-file"]);
        let file = file.display().to_string();
        args.push(&file);
        let uris: Vec<String> = peers.iter().map(|&p| format!("tcp://{}:7700", self.addr(p))).collect();
        for u in &uris {
            args.extend(["--cluster-peer", u]);
        }
        args.extend(more.iter().map(String::as_str));
        RouterProcess::spawn(&mut self.cmd(k, &args))
    }

    fn router(&self, k: usize, peers: &[usize]) -> RouterProcess {
        self.router_with(k, peers, SECRET)
    }

    /// `tickwire sub --verify` on router `k`, `topic`, for `count`
    /// messages (or until `within`); waits until it is subscribed.
    fn sub(&self, k: usize, topic: &str, count: u64, within: &str) -> Child {
        self.sub_at(k, CLIENTS, topic, count, within)
    }

    /// [`Hosts::sub`] through the routers at `urls` (a list: the next
    /// after a lost connection).
    fn sub_at(&self, k: usize, urls: &str, topic: &str, count: u64, within: &str) -> Child {
        self.sub_at_line(k, urls, topic, count, within).0
    }

    /// [`Hosts::sub_at`], and its first line (which names the router).
    fn sub_at_line(&self, k: usize, urls: &str, topic: &str, count: u64, within: &str) -> (Child, String) {
        let count = count.to_string();
        let args = ["sub", "--router", urls, "--topic", topic, "--count", &count, "--verify", "--duration", within];
        self.subscribed(k, &args)
    }

    /// Starts `tickwire` with `args` (a `sub`) on router `k`'s host and
    /// waits for its first line (on stderr), which says it is subscribed.
    fn subscribed(&self, k: usize, args: &[&str]) -> (Child, String) {
        let mut child = self.cmd(k, args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut first = Vec::new();
        let out = child.stderr.as_mut().unwrap();
        let mut b = [0u8; 1];
        while std::io::Read::read(out, &mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
            first.push(b[0]);
        }
        let first = String::from_utf8_lossy(&first).into_owned();
        assert!(first.contains("subscribed to"), "{first}");
        (child, first)
    }

    /// `tickwire pub` on router `k`: `count` messages on `topic` at `rate`.
    fn publish(&self, k: usize, topic: &str, count: u64, rate: &str) {
        let count = count.to_string();
        let args = ["pub", "--router", CLIENTS, "--topic", topic, "--count", &count, "--rate", rate];
        let out = self.cmd(k, &args).output().unwrap();
        assert!(out.status.success(), "pub: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Router `k`'s status, as JSON.
    fn status(&self, k: usize) -> serde_json::Value {
        let dir = self.dir(k).display().to_string();
        let out = Command::new(BIN).args(["router", "status", "--dir", &dir, "--json"]).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
    }

    /// Router `k`'s link to router `to` in its status.
    fn link(&self, k: usize, to: usize) -> serde_json::Value {
        let st = self.status(k);
        let links = st["cluster"]["links"].as_array().cloned().unwrap_or_default();
        links.into_iter().find(|l| l["router"] == format!("r{to}")).unwrap_or(serde_json::Value::Null)
    }

    /// Waits (up to `limit`) until `ok` holds of router `k`'s link to `to`.
    fn wait_link(&self, k: usize, to: usize, limit: Duration, ok: impl Fn(&serde_json::Value) -> bool) {
        let until = Instant::now() + limit;
        loop {
            let l = self.link(k, to);
            if ok(&l) {
                return;
            }
            assert!(Instant::now() < until, "r{k}'s link to r{to}: {l}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for k in 0..self.n {
            let _ = Command::new("ip").args(["netns", "del", &self.ns(k)]).status();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns_hub()]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What `tickwire sub --verify` printed at its end: (received, discarded
/// by the router, gaps not announced, duplicates).
fn finish(child: Child) -> (u64, u64, u64, u64) {
    let out = child.wait_with_output().unwrap();
    tally(&format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// [`finish`]'s figures, from what the subscriber printed.
fn tally(text: &str) -> (u64, u64, u64, u64) {
    let line = text.lines().find(|l| l.starts_with("received ")).unwrap_or_else(|| panic!("sub: {text}"));
    let number = |after: &str| -> u64 {
        let at = line.find(after).unwrap_or_else(|| panic!("no {after:?} in {line}")) + after.len();
        line[at..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    };
    // The number just before `word`.
    let before = |word: &str| -> Option<u64> {
        let at = line.find(word)?;
        line[..at].rsplit(' ').next()?.parse().ok()
    };
    let (gaps, dups) = (before(" gaps").unwrap_or_else(|| panic!("{line}")), before(" duplicates").unwrap_or(0));
    (number("received "), number("the router discarded "), gaps, dups)
}

fn up(l: &serde_json::Value) -> bool {
    l["state"] == "up"
}

#[test]
fn every_matching_subscriber_on_every_router_gets_each_message_once() {
    let h = Hosts::create(3, 1);
    let _r0 = h.router(0, &[0]);
    let mut r1 = h.router(1, &[0]);
    let mut r2 = h.router(2, &[0]);
    // r1 and r2 learn of each other from r0.
    h.wait_link(1, 2, Duration::from_secs(5), up);
    h.wait_link(2, 1, Duration::from_secs(5), up);
    const N: u64 = 50_000;
    let b = h.sub(1, "md/>", N, "30s");
    let c = h.sub(2, "md/eu/*", N, "30s");
    let none = h.sub(2, "fx/>", N, "4s");
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["interest"] == 1);
    h.wait_link(0, 2, Duration::from_secs(5), |l| l["interest"] == 2);
    h.publish(0, "md/eu/VOD", N, "50k");
    assert_eq!(finish(b), (N, 0, 0, 0), "md/> on r1");
    assert_eq!(finish(c), (N, 0, 0, 0), "md/eu/* on r2");
    assert_eq!(finish(none).0, 0, "fx/> matches nothing published");
    assert_eq!(h.link(0, 1)["messages_out"], N, "one copy per link, whatever the subscribers");

    // A subscriber made later on r0 receives from a publisher on r1.
    let late = h.sub(0, "md/us/*", 1000, "20s");
    h.wait_link(1, 0, Duration::from_secs(5), |l| l["interest"] == 1);
    h.publish(1, "md/us/IBM", 1000, "10k");
    assert_eq!(finish(late), (1000, 0, 0, 0));

    // r1 killed: r0 and r2 carry on, and r1's subscriber, given r1 then
    // r0, moves to r0 and hears r2 (its interest told by r0 within 3 s,
    // the status files' second of staleness included).
    let c = h.sub(2, "md/>", 2000, "20s");
    // (A client shuffles its list: the one that started on r0 is let go.)
    let urls = format!("{CLIENTS},tcp://{}:7600", h.addr(0));
    let moved = (0..20)
        .find_map(|_| {
            let (mut child, first) = h.sub_at_line(1, &urls, "md/eu/>", 2000, "20s");
            if first.contains("\"r1\"") {
                return Some(child);
            }
            let _ = child.kill();
            let _ = child.wait();
            None
        })
        .expect("a subscriber given r1 and r0 started on r1 once in 20 tries");
    h.wait_link(2, 1, Duration::from_secs(5), |l| l["interest"] == 1);
    r1.stop();
    h.wait_link(0, 1, Duration::from_secs(5), |l| !up(l));
    h.wait_link(2, 0, Duration::from_secs(3), |l| l["interest"] == 1);
    h.publish(2, "md/eu/SAP", 2000, "10k");
    assert_eq!(finish(c), (2000, 0, 0, 0), "r2's own subscriber");
    assert_eq!(finish(moved), (2000, 0, 0, 0), "r1's subscriber, moved to r0");
    assert!(r2.is_running());
    let _r1 = h.router(1, &[0]);
    h.wait_link(1, 2, Duration::from_secs(5), up);
    let b = h.sub(1, "md/>", 1000, "20s");
    h.wait_link(2, 1, Duration::from_secs(5), |l| up(l) && l["interest"] == 1);
    h.publish(2, "md/eu/BMW", 1000, "10k");
    assert_eq!(finish(b), (1000, 0, 0, 0), "r1 back hears r2");
}

#[test]
fn a_partition_heals_and_what_it_lost_reaches_the_subscriber_as_discards() {
    let h = Hosts::create(2, 2);
    let _r0 = h.router(0, &[0]);
    let _r1 = h.router(1, &[0]);
    h.wait_link(1, 0, Duration::from_secs(5), up);
    const N: u64 = 60_000;
    // It ends at its duration: what it receives is fewer than N.
    let sub = h.sub(1, "md/>", N, "20s");
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["interest"] == 1);
    // 12 s of messages; the partition from 2 s to 5 s.
    let (a, b) = (h.addr(0), h.addr(1));
    let publisher = std::thread::spawn({
        let (ns, bin) = (h.ns(0), BIN);
        move || {
            let args = ["pub", "--router", CLIENTS, "--topic", "md/x", "--count", "60000", "--rate", "5k"];
            let out = Command::new("ip").args(["netns", "exec", &ns, bin]).args(args).output().unwrap();
            assert!(out.status.success(), "pub: {}", String::from_utf8_lossy(&out.stderr));
        }
    });
    std::thread::sleep(Duration::from_secs(2));
    let rules = format!(
        "table inet tw_cut {{\n  chain in {{\n    type filter hook input priority 0;\n    ip saddr {a} ip daddr {b} drop;\n  }}\n  \
         chain out {{\n    type filter hook output priority 0;\n    ip saddr {b} ip daddr {a} drop;\n  }}\n}}\n"
    );
    let mut nft =
        Command::new("ip").args(["netns", "exec", &h.ns(1), "nft", "-f", "-"]).stdin(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(&mut nft.stdin.take().unwrap(), rules.as_bytes()).unwrap();
    assert!(nft.wait().unwrap().success(), "nft: {rules}");
    h.wait_link(1, 0, Duration::from_secs(5), |l| !up(l));
    std::thread::sleep(Duration::from_secs(1));
    run(Command::new("ip").args(["netns", "exec", &h.ns(1), "nft", "delete", "table", "inet", "tw_cut"]));
    h.wait_link(1, 0, Duration::from_secs(10), |l| up(l) && l["connects"].as_u64() >= Some(2));
    h.wait_link(0, 1, Duration::from_secs(5), |l| up(l) && l["interest"] == 1);
    publisher.join().unwrap();
    let (received, discarded, gaps, dups) = finish(sub);
    assert_eq!(dups, 0, "nothing twice");
    assert!(gaps > 0 && discarded > 0, "the partition lost messages: {received} received, {gaps} gaps");
    // Every message lost was announced: none silently, none twice.
    assert_eq!(received + discarded, N, "{received} received, {discarded} discarded");
    let l = h.link(1, 0);
    assert_eq!(l["lost_in"], discarded, "r1 counts what it lost from r0: {l}");
}

#[test]
fn four_routers_in_a_ring_of_peers_deliver_each_message_once() {
    let h = Hosts::create(4, 3);
    // The cluster's agent on the routing agent's thread (r0, the
    // default), on its own with one routing agent (r1), beside two (r2).
    let more = |k: usize| match k {
        1 => vec!["--cluster-thread".to_owned(), "own".to_owned()],
        2 => vec!["--agents".to_owned(), "2".to_owned()],
        _ => vec![],
    };
    let r: Vec<RouterProcess> = (0..4).map(|k| h.router_tls(k, &[(k + 1) % 4], SECRET, &more(k))).collect();
    // Its threads by name: the cluster's agent has one of its own ("cluster") or not.
    let threads = |k: usize| -> Vec<String> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", r[k].child.id())).unwrap();
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|c| c.trim().to_owned())
            .collect()
    };
    for (k, own) in [(0, false), (1, true), (2, true), (3, false)] {
        assert_eq!(threads(k).iter().any(|t| t == "cluster"), own, "r{k}'s threads: {:?}", threads(k));
    }
    for k in 0..4 {
        for j in (0..4).filter(|&j| j != k) {
            h.wait_link(k, j, Duration::from_secs(10), up);
        }
    }
    const N: u64 = 20_000;
    let subs: Vec<Child> = (0..4).map(|k| h.sub(k, "md/>", N, "30s")).collect();
    for j in 1..4 {
        h.wait_link(0, j, Duration::from_secs(5), |l| l["interest"] == 1);
    }
    h.publish(0, "md/eu/VOD", N, "20k");
    for (k, s) in subs.into_iter().enumerate() {
        assert_eq!(finish(s), (N, 0, 0, 0), "the subscriber on r{k}");
    }
    for k in 0..4 {
        let st = h.status(k);
        let links = st["cluster"]["links"].as_array().cloned().unwrap_or_default();
        assert_eq!(links.len(), 3, "r{k}: {st}");
        assert!(links.iter().all(up), "r{k}: {links:?}");
        // A second link between a pair, closed, is not a refusal.
        assert_eq!(st["cluster"]["refused"], 0, "r{k}: {st}");
    }
}

/// A request on one router, its responders on another: each request is
/// answered, the reply crossing back over the link to the requester; with
/// no responder on any router, `NoResponders` at once.
#[test]
fn a_request_on_one_router_is_answered_by_a_responder_on_another() {
    let h = Hosts::create(2, 7);
    let _r0 = h.router(0, &[1]);
    let _r1 = h.router(1, &[0]);
    h.wait_link(0, 1, Duration::from_secs(5), up);
    let ask = |count: &str| {
        let args = ["request", "--router", CLIENTS, "--topic", "rfq/eu/VOD", "--data", "buy 100", "--count", count];
        h.cmd(0, &args).args(["--timeout", "5s"]).output().unwrap()
    };
    let out = ask("1");
    assert_eq!(out.status.code(), Some(3), "no responder anywhere: {}", String::from_utf8_lossy(&out.stderr));
    let reply = ["reply", "--router", CLIENTS, "--topic", "rfq/>", "--exec", "printf 'quote for %s' \"$(cat)\""];
    let responder = h.cmd(1, &reply).args(["--duration", "15s"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn();
    let responder = responder.unwrap();
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["interest"] == 1);
    let out = ask("20");
    let replies = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(replies.lines().count(), 20, "{replies}");
    assert!(replies.lines().all(|l| l == "quote for buy 100"), "{replies}");
    // Each crossed r1's link once (20 requests in, 20 replies out; the
    // status is written every second).
    h.wait_link(1, 0, Duration::from_secs(3), |l| l["messages_in"] == 20 && l["messages_out"] == 20);
    let mut responder = responder;
    let _ = responder.kill();
    let _ = responder.wait();
}

#[test]
fn a_router_down_past_forget_after_is_forgotten_no_longer_dialed_and_linked_again_when_back() {
    let h = Hosts::create(3, 6);
    let forget = ["--cluster-forget-after".to_owned(), "2s".to_owned()];
    let _r0 = h.router_tls(0, &[0], SECRET, &forget);
    let r1 = h.router_tls(1, &[0], SECRET, &forget);
    let mut r2 = h.router_tls(2, &[0], SECRET, &forget);
    // r1 learns of r2 from r0, and dials it (the lower name dials).
    h.wait_link(1, 2, Duration::from_secs(5), up);
    let mut sub = h.sub(2, "md/>", 1, "30s");
    h.wait_link(1, 2, Duration::from_secs(5), |l| l["interest"] == 1);
    r2.stop();
    let _ = sub.kill();
    let _ = sub.wait();
    h.wait_link(1, 2, Duration::from_secs(5), |l| l["state"] == "down");
    // Down for 2 s: what it wanted withdrawn, its dial given up, and gone
    // from the status (no longer dialed every 5 s for ever).
    let line = r1.wait_for_line("router r2 down for", Duration::from_secs(6));
    assert!(line.as_ref().is_some_and(|l| l.contains("what it wanted withdrawn, no longer dialed")), "{line:?}");
    h.wait_link(1, 2, Duration::from_secs(3), serde_json::Value::is_null);
    h.wait_link(0, 2, Duration::from_secs(3), serde_json::Value::is_null);
    // Back: it dials r0, which tells r1 of it, and r1 dials it again.
    let _r2 = h.router_tls(2, &[0], SECRET, &forget);
    h.wait_link(1, 2, Duration::from_secs(10), up);
    h.wait_link(0, 2, Duration::from_secs(5), up);
}

#[test]
fn a_router_without_the_secret_is_refused_and_told_why() {
    let h = Hosts::create(2, 4);
    let r0 = h.router(0, &[0]);
    let r1 = h.router_with(1, &[0], "another-secret-entirely-0123456");
    let line = r0.wait_for_line("failed the cluster's secret", Duration::from_secs(5));
    assert!(line.is_some_and(|l| l.contains("\"r1\"")), "{:?}", r0.lines.lock().unwrap());
    assert!(r1.wait_for_line("failed the cluster's secret", Duration::from_secs(5)).is_some());
    std::thread::sleep(Duration::from_millis(1500));
    assert!(h.status(0)["cluster"]["refused"].as_u64() >= Some(1));
    let st = h.status(1);
    assert!(st["cluster"]["links"].is_array(), "r1's status: {st}");
    assert!(st["cluster"]["links"].as_array().unwrap().iter().all(|l| !up(l)), "r1 linked without the secret: {st}");
}

#[test]
fn links_speak_tls_and_a_certificate_naming_another_router_or_from_another_ca_is_refused() {
    let h = Hosts::create(3, 5);
    let pki = h.dir.join("pki");
    let (ca, foreign) = (TestCa::new(&pki, "cluster-ca"), TestCa::new(&pki, "another-ca"));
    let tls = |ca: &TestCa, file: &str, names: &str| -> Vec<String> {
        let (cert, key) = ca.issue(file, Usage::Peer, Some(names), &[], &[]);
        [("--cluster-tls-cert", &cert), ("--cluster-tls-key", &key), ("--cluster-tls-ca", &ca.pem)]
            .iter()
            .flat_map(|(flag, path)| [(*flag).to_owned(), path.display().to_string()])
            .collect()
    };
    let r0 = h.router_tls(0, &[], SECRET, &tls(&ca, "r0", "r0"));
    let _r1 = h.router_tls(1, &[0], SECRET, &tls(&ca, "r1", "r1"));
    h.wait_link(1, 0, Duration::from_secs(10), up);
    assert_eq!(h.status(0)["cluster"]["tls"], true);
    let sub = h.sub(1, "md/>", 2000, "20s");
    h.publish(0, "md/eu/x", 2000, "20k");
    let (received, discarded, gaps, dups) = finish(sub);
    assert_eq!((received, discarded, gaps, dups), (2000, 0, 0, 0), "over TLS");
    h.wait_link(0, 1, Duration::from_secs(3), |l| l["messages_out"] == 2000);
    // A round trip is measured once per heartbeat interval (1 s).
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["round_trip_us"].as_u64().is_some_and(|us| us > 0));
    // `tickwire stat` shows the link from the router's counters file.
    let dir = h.dir(0).display().to_string();
    let out = Command::new(BIN).args(["--dir", &dir, "stat", "--json"]).output().unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let link = rows.as_array().unwrap().iter().find(|r| r["side"] == "cluster-link" && r["channel"] == "r1").cloned();
    let link = link.unwrap_or_else(|| panic!("no cluster-link r1 in `stat`: {rows}"));
    assert_eq!((link["counters"]["up"].as_u64(), link["counters"]["messages_out"].as_u64()), (Some(1), Some(2000)));

    // A certificate the cluster's CA signed, naming r1: r2 cannot pass for it.
    let mut r2 = h.router_tls(2, &[0], SECRET, &tls(&ca, "r2-as-r1", "r1"));
    let line = r0.wait_for_line("certificate naming \"r1\"", Duration::from_secs(5));
    assert!(line.is_some_and(|l| l.contains("router \"r2\"")), "{:?}", r0.lines.lock().unwrap());
    r2.stop();
    // A certificate from another CA: refused by TLS, said by both ends.
    let r2 = h.router_tls(2, &[0], SECRET, &tls(&foreign, "r2-foreign", "r2"));
    assert!(r0.wait_for_line("tls: ", Duration::from_secs(5)).is_some(), "{:?}", r0.lines.lock().unwrap());
    assert!(r2.wait_for_line("tls: ", Duration::from_secs(5)).is_some(), "{:?}", r2.lines.lock().unwrap());
    std::thread::sleep(Duration::from_millis(500));
    let st = h.status(2);
    assert!(st["cluster"]["links"].as_array().is_none_or(|ls| ls.iter().all(|l| !up(l))), "r2 linked: {st}");
    assert!(h.status(0)["cluster"]["refused"].as_u64() >= Some(2));
}

/// `tickwire sub` on router `k` as a member of queue group `group`: it
/// waits (up to `within`) for messages; returns the child.
fn member(h: &Hosts, k: usize, group: &str, within: &str) -> Child {
    let args = ["sub", "--router", CLIENTS, "--topic", "md/>", "--queue", group, "--verify", "--duration", within];
    h.subscribed(k, &args).0
}

/// A queue group with members on two routers, published to from a third:
/// each message goes to one member cluster-wide (before, each router
/// served its own members: every message twice), shared by weight, while
/// a plain subscriber gets them all; a member where it is published takes
/// them all (local first); with a member's router down, the members on the
/// others take them all.
#[test]
fn a_queue_group_with_members_on_several_routers_gets_each_message_once() {
    let h = Hosts::create(3, 8);
    let _r0 = h.router(0, &[1, 2]);
    let mut r1 = h.router(1, &[0, 2]);
    let _r2 = h.router(2, &[0, 1]);
    h.wait_link(1, 2, Duration::from_secs(5), up);
    const N: u64 = 20_000;
    let a = member(&h, 1, "g", "12s");
    let b = member(&h, 2, "g", "12s");
    let plain = h.sub(2, "md/>", N, "12s");
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["groups"] == 1);
    h.wait_link(0, 2, Duration::from_secs(5), |l| l["groups"] == 1 && l["interest"] == 1);
    h.publish(0, "md/eu/VOD", N, "20k");
    assert_eq!(finish(plain).0, N, "the plain subscriber gets every message");
    let (a, b) = (finish(a).0, finish(b).0);
    assert_eq!(a + b, N, "each message to one member of the group: r1's got {a}, r2's {b}");
    assert!(a >= N / 4 && b >= N / 4, "shared by weight (one member each): {a} and {b}");
    // Their members gone, r1 and r2 hold no group (so the next phase's
    // counts are its own, not a stale status).
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["groups"] == 0);
    h.wait_link(0, 2, Duration::from_secs(5), |l| l["groups"] == 0);

    // A member on the publisher's router takes every message.
    let local = member(&h, 0, "h", "8s");
    let far = member(&h, 1, "h", "8s");
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["groups"] == 1);
    h.wait_link(2, 1, Duration::from_secs(5), |l| l["groups"] == 1);
    h.publish(0, "md/eu/SAP", 1000, "10k");
    assert_eq!((finish(local).0, finish(far).0), (1000, 0), "local first");
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["groups"] == 0);

    // r1 down (not yet forgotten: its members still counted): r2's member
    // takes every message.
    let mut gone = member(&h, 1, "k", "8s");
    let stays = member(&h, 2, "k", "8s");
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["groups"] == 1);
    h.wait_link(0, 2, Duration::from_secs(5), |l| l["groups"] == 1);
    r1.stop();
    h.wait_link(0, 1, Duration::from_secs(5), |l| !up(l) && l["groups"] == 1);
    h.publish(0, "md/eu/BMW", 1000, "10k");
    assert_eq!(finish(stays).0, 1000, "the member whose router is up");
    let _ = gone.kill();
    let _ = gone.wait();
}

/// Requests to a queue group of responders on two other routers: each is
/// answered once, by one of them.
#[test]
fn requests_to_a_queue_group_across_routers_are_answered_once() {
    let h = Hosts::create(3, 9);
    let _r0 = h.router(0, &[1, 2]);
    let _r1 = h.router(1, &[0, 2]);
    let _r2 = h.router(2, &[0, 1]);
    h.wait_link(1, 2, Duration::from_secs(5), up);
    let reply = ["reply", "--router", CLIENTS, "--topic", "rfq/>", "--queue", "pricers", "--echo"];
    let spawn = |k| h.cmd(k, &reply).args(["--duration", "15s"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
    let mut responders = [spawn(1).unwrap(), spawn(2).unwrap()];
    h.wait_link(0, 1, Duration::from_secs(5), |l| l["groups"] == 1);
    h.wait_link(0, 2, Duration::from_secs(5), |l| l["groups"] == 1);
    let args = ["request", "--router", CLIENTS, "--topic", "rfq/eu/VOD", "--data", "q", "--count", "40"];
    let out = h.cmd(0, &args).args(["--timeout", "5s"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 40);
    // Each request crossed to one responder's router, and one reply came
    // back for it: 40 each way in all (the status is written every second).
    let sum = |field: &str| h.link(1, 0)[field].as_u64().unwrap_or(0) + h.link(2, 0)[field].as_u64().unwrap_or(0);
    let until = Instant::now() + Duration::from_secs(3);
    while (sum("messages_in"), sum("messages_out")) != (40, 40) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!((sum("messages_in"), sum("messages_out")), (40, 40), "r1: {} r2: {}", h.link(1, 0), h.link(2, 0));
    for r in &mut responders {
        let _ = r.kill();
        let _ = r.wait();
    }
}

/// A client given one router of the cluster learns the others from its
/// WELCOME (each router told where the others take clients, as a NATS
/// server's `connect_urls`) and, when its router stops, moves to one of
/// them, subscribes again and receives.
#[test]
fn a_client_given_one_router_learns_the_others_and_moves_to_one_when_it_stops() {
    let h = Hosts::create(3, 10);
    let told = |k: usize| vec!["--cluster-client-advertise".to_owned(), format!("tcp://{}:7600", h.addr(k))];
    let _r0 = h.router_tls(0, &[0], SECRET, &told(0));
    let mut r1 = h.router_tls(1, &[0], SECRET, &told(1));
    let _r2 = h.router_tls(2, &[0], SECRET, &told(2));
    h.wait_link(1, 0, Duration::from_secs(5), up);
    h.wait_link(1, 2, Duration::from_secs(5), up);
    // Given r1 alone (its own host's loopback).
    let (mut sub, first) = h.sub_at_line(1, CLIENTS, "md/>", 2000, "30s");
    assert!(first.contains("\"r1\""), "{first}");
    let (tx, rx) = std::sync::mpsc::channel();
    let err = sub.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(err)).map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    r1.stop();
    let until = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    let moved_to = loop {
        let left = until.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).unwrap_or_else(|_| panic!("not moved to r0 or r2: {seen:?}"));
        if line.contains("subscribed to") {
            match ["r0", "r2"].into_iter().find(|r| line.contains(&format!("\"{r}\""))) {
                Some(r) => break r,
                None => panic!("moved where? {line}"),
            }
        }
        seen.push(line);
    };
    // Its interest reaches r2, where the publisher is.
    if moved_to == "r0" {
        h.wait_link(2, 0, Duration::from_secs(5), |l| l["interest"] == 1);
    }
    h.publish(2, "md/eu/VOD", 2000, "10k");
    let status = sub.wait().unwrap();
    reader.join().unwrap();
    let rest: Vec<String> = rx.try_iter().collect();
    assert!(status.success(), "{rest:?}");
    assert_eq!(tally(&rest.join("\n")), (2000, 0, 0, 0), "on {moved_to}");
}
