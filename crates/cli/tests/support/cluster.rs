//! What the cluster tests share: routers each in a network namespace of
//! their own, joined by veth pairs to a bridge in one more (all made and
//! removed by [`Hosts`]), the real binaries run in them, and readers of
//! what `tickwire sub --verify` and `tickwire router status` print.
#![allow(dead_code)] // each test file uses some of it

use super::router::{RouterProcess, BIN};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const SECRET: &str = "a-cluster-secret-of-the-test-0123";
/// A port every router's clients use, in its own namespace (a router
/// listens on every address: clients on other hosts may fail over to it).
pub const CLIENTS: &str = "tcp://127.0.0.1:7600";
pub const LISTEN: &str = "tcp://0.0.0.0:7600";

pub fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `n` namespaces on one bridge (10.77.K.1 to .n), and a directory for
/// each router; all removed when dropped.
pub struct Hosts {
    pub tag: String,
    pub n: usize,
    pub dir: PathBuf,
    /// Which /24 (so tests running at once do not share addresses).
    pub net: u8,
}

impl Hosts {
    pub fn create(n: usize, net: u8) -> Self {
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

    pub fn ns_hub(&self) -> String {
        format!("{}-hub", self.tag)
    }
    pub fn ns(&self, k: usize) -> String {
        format!("{}-{k}", self.tag)
    }
    pub fn addr(&self, k: usize) -> String {
        format!("10.77.{}.{}", self.net, k + 1)
    }
    pub fn dir(&self, k: usize) -> PathBuf {
        self.dir.join(format!("r{k}"))
    }

    /// `tickwire ARGS` in host `k`'s namespace.
    pub fn cmd(&self, k: usize, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(k), BIN]).args(args);
        c
    }

    /// Router `r{k}`, told of `peers` (host numbers), its secret `secret`.
    pub fn router_with(&self, k: usize, peers: &[usize], secret: &str) -> RouterProcess {
        self.router_tls(k, peers, secret, &[])
    }

    /// [`Hosts::router_with`], and `more` arguments.
    pub fn router_tls(&self, k: usize, peers: &[usize], secret: &str, more: &[String]) -> RouterProcess {
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

    pub fn router(&self, k: usize, peers: &[usize]) -> RouterProcess {
        self.router_with(k, peers, SECRET)
    }

    /// `tickwire sub --verify` on router `k`, `topic`, for `count`
    /// messages (or until `within`); waits until it is subscribed.
    pub fn sub(&self, k: usize, topic: &str, count: u64, within: &str) -> Child {
        self.sub_at(k, CLIENTS, topic, count, within)
    }

    /// [`Hosts::sub`] through the routers at `urls` (a list: the next
    /// after a lost connection).
    pub fn sub_at(&self, k: usize, urls: &str, topic: &str, count: u64, within: &str) -> Child {
        self.sub_at_line(k, urls, topic, count, within).0
    }

    /// [`Hosts::sub_at`], and its first line (which names the router).
    pub fn sub_at_line(&self, k: usize, urls: &str, topic: &str, count: u64, within: &str) -> (Child, String) {
        let count = count.to_string();
        let args = ["sub", "--router", urls, "--topic", topic, "--count", &count, "--verify", "--duration", within];
        self.subscribed(k, &args)
    }

    /// Starts `tickwire` with `args` (a `sub`) on router `k`'s host and
    /// waits for its first line (on stderr), which says it is subscribed.
    pub fn subscribed(&self, k: usize, args: &[&str]) -> (Child, String) {
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
    pub fn publish(&self, k: usize, topic: &str, count: u64, rate: &str) {
        let count = count.to_string();
        let args = ["pub", "--router", CLIENTS, "--topic", topic, "--count", &count, "--rate", rate];
        let out = self.cmd(k, &args).output().unwrap();
        assert!(out.status.success(), "pub: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// Router `k`'s status, as JSON.
    pub fn status(&self, k: usize) -> serde_json::Value {
        let dir = self.dir(k).display().to_string();
        let out = Command::new(BIN).args(["router", "status", "--dir", &dir, "--json"]).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
    }

    /// Router `k`'s link to router `to` in its status.
    pub fn link(&self, k: usize, to: usize) -> serde_json::Value {
        let st = self.status(k);
        let links = st["cluster"]["links"].as_array().cloned().unwrap_or_default();
        links.into_iter().find(|l| l["router"] == format!("r{to}")).unwrap_or(serde_json::Value::Null)
    }

    /// Waits (up to `limit`) until `ok` holds of router `k`'s link to `to`.
    pub fn wait_link(&self, k: usize, to: usize, limit: Duration, ok: impl Fn(&serde_json::Value) -> bool) {
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
pub fn finish(child: Child) -> (u64, u64, u64, u64) {
    let out = child.wait_with_output().unwrap();
    tally(&format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// [`finish`]'s figures, from what the subscriber printed.
pub fn tally(text: &str) -> (u64, u64, u64, u64) {
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

pub fn up(l: &serde_json::Value) -> bool {
    l["state"] == "up"
}

/// `tickwire sub` on router `k` as a member of queue group `group`: it
/// waits (up to `within`) for messages; returns the child.
pub fn member(h: &Hosts, k: usize, group: &str, within: &str) -> Child {
    let args = ["sub", "--router", CLIENTS, "--topic", "md/>", "--queue", group, "--verify", "--duration", within];
    h.subscribed(k, &args).0
}
