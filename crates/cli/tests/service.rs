//! The router as a service and a fresh machine's set-up: the systemd unit
//! passes systemd's checker, the router talks to systemd (readiness,
//! stopping, watchdog) and drains on SIGTERM, `--check-config` names file,
//! line and key, `--version` names the commit, and `scripts/setup.sh`
//! installs every package the build and the tests use.

use std::io::Read;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TW: &str = env!("CARGO_BIN_EXE_tickwire");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// A scratch directory of this test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("tw-service-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A tool this test needs is missing: a visible skip, a failure in CI
/// (where `make test` ran scripts/setup.sh, which installs it).
fn missing(tool: &str) -> bool {
    let found =
        Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success());
    if !found {
        assert!(std::env::var_os("CI").is_none(), "{tool} is missing: scripts/setup.sh installs it");
        println!("SKIPPED: {tool} is not installed (run scripts/setup.sh)");
    }
    !found
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    if missing("systemd-analyze") {
        return;
    }
    let s = Scratch::new("unit");
    let unit = std::fs::read_to_string(root().join("deploy/systemd/tickwire-router.service")).unwrap();
    // The checker wants ExecStart's program to exist: the one just built.
    assert!(unit.contains("/usr/local/bin/tickwire"), "the unit runs /usr/local/bin/tickwire");
    let path = s.0.join("tickwire-router.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/tickwire", TW)).unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&path).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // It exits 0 for an unknown key or a bad value, with a warning.
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("tickwire-router.service")).collect();
    assert!(out.status.success() && warnings.is_empty(), "systemd-analyze verify: {}\n{err}", out.status);
    for key in ["Type=notify", "ProtectSystem=strict", "LimitMEMLOCK=", "Restart=on-failure", "ReadWritePaths="] {
        assert!(unit.contains(key), "the unit has {key}");
    }
    // The checker is a real one: a misspelt key is reported.
    std::fs::write(&path, unit.replace("/usr/local/bin/tickwire", TW).replace("KillMode=", "KilMode=")).unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&path).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("KilMode"), "a bad key is not reported");
    println!("systemd-analyze verify: tickwire-router.service clean");
}

#[test]
fn the_service_config_passes_check_config() {
    let cfg = root().join("deploy/systemd/router.toml");
    let out = Command::new(TW).args(["router", "--check-config"]).arg(&cfg).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains(": ok: router \"tickwire-router\"") && text.contains("/var/lib/tickwire/journal"), "{text}");
    let unit = std::fs::read_to_string(root().join("deploy/systemd/tickwire-router.service")).unwrap();
    assert!(unit.contains("--check-config /etc/tickwire/router.toml"), "the unit checks its config before starting");
}

/// `tickwire router --check-config FILE`: its stderr and exit status.
fn check(file: &Path) -> (bool, String) {
    let out = Command::new(TW).args(["router", "--check-config"]).arg(file).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn check_config_names_the_file_line_and_key_and_starts_nothing() {
    let s = Scratch::new("check");
    let f = s.0.join("router.toml");
    let shm = s.0.join("shm");
    let head = format!("dir = \"{}\"\n[router]\nlisten = [\"tcp://127.0.0.1:1\"]\n", shm.display());
    let cases = [
        // An unknown key, three tables deep.
        (format!("{head}\n[router.limits]\nqueue_bytez = 5\n"), ":6: [router] unknown field `queue_bytez`"),
        // A value out of range.
        (
            format!("{head}[router.journal]\ndir = \"j\"\nsync = \"sometimes\"\n"),
            ":6: [router] journal.sync = sometimes",
        ),
        (format!("{head}idle = \"nap\"\n"), ":4: [router] idle = nap: one of spin, yield, backoff, park, wait"),
        // Not TOML.
        (format!("{head}name = \n"), "line 4"),
        // A TLS key that is not there.
        (format!("{head}[router.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n"), "[router.tls]"),
    ];
    for (text, says) in cases {
        std::fs::write(&f, &text).unwrap();
        let (ok, err) = check(&f);
        assert!(!ok, "accepted:\n{text}");
        assert!(err.contains(&f.display().to_string()) && err.contains(says), "{err:?} should say {says:?}");
    }
    std::fs::write(&f, &head).unwrap();
    assert!(check(&f).0);
    assert!(!shm.exists(), "--check-config created the router's directory");
    // Without FILE: TICKWIRE_CONFIG, then /etc/tickwire/router.toml.
    let out = Command::new(TW).args(["router", "--check-config"]).env("TICKWIRE_CONFIG", &f).output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains(&f.display().to_string()));
}

#[test]
fn version_names_the_release_the_commit_and_the_features() {
    let out = Command::new(TW).arg("--version").output().unwrap();
    let v = String::from_utf8_lossy(&out.stdout);
    let want = format!("tickwire {} (git ", env!("CARGO_PKG_VERSION"));
    assert!(v.starts_with(&want) && v.trim_end().ends_with(", features: xdp)"), "{v}");
    let head = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).current_dir(root()).output();
    if let Some(h) = head.ok().filter(|h| h.status.success()) {
        let hash = String::from_utf8_lossy(&h.stdout).trim().to_owned();
        assert!(v.contains(&format!("(git {hash},")), "{v} is not built from HEAD {hash}");
    }
}

/// Datagrams on the notify socket until `want` is among them.
fn await_state(sock: &UnixDatagram, seen: &mut Vec<String>, want: &str, within: Duration) {
    let end = Instant::now() + within;
    let mut buf = [0u8; 4096];
    while !seen.iter().any(|m| m.lines().any(|l| l == want)) {
        let left = end.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no {want} within {within:?}; got {seen:?}");
        sock.set_read_timeout(Some(left)).unwrap();
        if let Ok(n) = sock.recv(&mut buf) {
            seen.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
}

#[test]
fn the_router_tells_systemd_ready_watchdog_reloading_stopping_and_drains_on_sigterm() {
    let s = Scratch::new("notify");
    let sock_path = s.0.join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    let cfg = s.0.join("router.toml");
    std::fs::write(&cfg, "[router]\nname = \"svc\"\n").unwrap();
    // systemd names the pid the watchdog is for: the shell's, which
    // becomes the router's by exec.
    let mut router = Command::new("sh")
        .args(["-c", "WATCHDOG_PID=$$ exec \"$0\" \"$@\"", TW, "--dir"])
        .arg(s.0.join("shm"))
        .arg("--config")
        .arg(&cfg)
        .args(["router", "--no-tcp"])
        .env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "200000")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = Vec::new();
    await_state(&sock, &mut seen, "READY=1", Duration::from_secs(10));
    assert!(seen.iter().any(|m| m.contains("STATUS=listening:")), "{seen:?}");
    // WatchdogSec=200ms: a keep-alive at least every 100 ms.
    let t = Instant::now();
    seen.clear();
    await_state(&sock, &mut seen, "WATCHDOG=1", Duration::from_secs(2));
    seen.clear();
    await_state(&sock, &mut seen, "WATCHDOG=1", Duration::from_secs(2));
    assert!(t.elapsed() < Duration::from_secs(2), "two keep-alives took {:?}", t.elapsed());
    // systemctl reload: SIGHUP.
    Command::new("kill").args(["-HUP", &router.id().to_string()]).status().unwrap();
    await_state(&sock, &mut seen, "RELOADING=1", Duration::from_secs(5));
    seen.clear();
    await_state(&sock, &mut seen, "READY=1", Duration::from_secs(5));
    // systemctl stop: SIGTERM drains and exits 0.
    Command::new("kill").args(["-TERM", &router.id().to_string()]).status().unwrap();
    await_state(&sock, &mut seen, "STOPPING=1", Duration::from_secs(5));
    let end = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = router.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > end {
            let _ = router.kill();
            panic!("the router did not stop within 10 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    router.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "{status}: {err}");
    assert!(err.contains("router stopped:") && err.contains(&format!("config: {}", cfg.display())), "{err}");
}

/// Every program the build and the tests run, and the headers the build
/// compiles against, with the Debian package that provides it: each must
/// be in `scripts/setup.sh --list` (or be Essential, on every Debian).
const NEEDED: &[&str] = &[
    // the build: a linker, the XDP program, libxdp/libbpf (vendored)
    "cc",
    "clang",
    "llc",
    "m4",
    "pkg-config",
    "make",
    "/usr/include/pcap/dlt.h",
    "/usr/include/libelf.h",
    "/usr/include/zlib.h",
    "/usr/include/linux/if_xdp.h",
    // the tests
    "ip",
    "taskset",
    "setpriv",
    // descriptor limits (tests/limits.rs; util-linux)
    "prlimit",
    // a second Unix user and a group (tests/local_users.rs; passwd and
    // coreutils are Essential)
    "useradd",
    "userdel",
    "groupadd",
    "groupdel",
    "id",
    "ping",
    "sockperf",
    "lscpu",
    "mount",
    "mkfifo",
    "git",
    "kill",
    "env",
    "systemd-analyze",
    "promtool",
    "losetup",
    "mkfs.ext4",
    // docs/operations.md, run by tests/operations.rs
    "openssl",
    "curl",
    // the profiles of docs/PERFORMANCE.md
    "perf",
    "strace",
    // the C and C++ bindings' tests (crates/ffi/tests)
    "g++",
    "cmake",
    "valgrind",
    "/usr/include/gtest/gtest.h",
];

/// The programs tests and build scripts start by name (a string literal
/// given to `Command::new`).
fn programs_started(dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && !p.ends_with("target") {
            programs_started(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            for piece in text.split("Command::new(\"").skip(1) {
                if let Some(name) = piece.split('"').next() {
                    out.push((name.to_owned(), p.clone()));
                }
            }
        }
    }
}

fn package_of(file: &str) -> Option<String> {
    let path = if file.starts_with('/') {
        file.to_owned()
    } else {
        // The program, not a shell's builtin of the same name (kill).
        let path = std::env::var_os("PATH")?;
        let p = std::env::split_paths(&path).map(|d| d.join(file)).find(|p| p.is_file())?;
        std::fs::canonicalize(&p).ok()?.display().to_string()
    };
    // dpkg knows /usr/bin/x or /bin/x (merged /usr), and alternatives'
    // targets by their real path.
    for candidate in [path.clone(), path.replacen("/usr/bin/", "/bin/", 1), path.replacen("/usr/sbin/", "/sbin/", 1)] {
        let o = Command::new("dpkg").args(["-S", &candidate]).output().ok()?;
        if o.status.success() {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            let line = text.lines().find(|l| !l.starts_with("diversion by"))?;
            return Some(line.split(':').next()?.split(',').next()?.trim().to_owned());
        }
    }
    None
}

#[test]
fn setup_installs_every_package_the_build_and_the_tests_use() {
    if missing("dpkg") {
        return;
    }
    let setup = root().join("scripts/setup.sh");
    let list = Command::new("bash").arg(&setup).arg("--list").output().unwrap();
    assert!(list.status.success());
    let listed: Vec<String> = String::from_utf8_lossy(&list.stdout).lines().map(str::to_owned).collect();
    assert!(listed.contains(&"libpcap-dev".to_owned()), "{listed:?}");
    // Every program a test starts by name is one this test knows about.
    let mut started = Vec::new();
    programs_started(&root().join("crates"), &mut started);
    for (name, file) in &started {
        let known = NEEDED.contains(&name.as_str())
            || ["bash", "sh", "true", "chmod", "umount", "dpkg", "dpkg-query", "apt-cache"].contains(&name.as_str());
        assert!(known, "{} starts {name}: add it to NEEDED here and its package to scripts/setup.sh", file.display());
    }
    let check = Command::new("bash").arg(&setup).arg("--check").output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    // A package that setup.sh installs brings its dependencies (clang-14
    // with clang, libpcap0.8-dev with libpcap-dev).
    let deps = Command::new("apt-cache")
        .args(["depends", "--recurse", "--installed", "--no-recommends", "--no-suggests", "--no-conflicts"])
        .args(["--no-breaks", "--no-replaces", "--no-enhances"])
        .args(&listed)
        .output()
        .unwrap();
    let pulled_in: std::collections::HashSet<String> = String::from_utf8_lossy(&deps.stdout)
        .lines()
        .map(|l| l.trim().trim_start_matches("|").trim_start_matches("Depends: ").trim_start_matches("PreDepends: "))
        .map(|l| l.split(':').next().unwrap_or(l).to_owned())
        .collect();
    let mut unlisted = Vec::new();
    for need in NEEDED {
        let Some(pkg) = package_of(need) else {
            unlisted.push(format!("{need}: not installed"));
            continue;
        };
        let base = pkg.split(':').next().unwrap_or(&pkg).to_owned();
        let essential = Command::new("dpkg-query")
            .args(["-W", "-f=${Essential}", &base])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "yes");
        if !(listed.contains(&base) || essential || pulled_in.contains(&base)) {
            unlisted.push(format!("{need}: from {base}"));
        }
    }
    assert!(unlisted.is_empty(), "not installed by scripts/setup.sh: {unlisted:?}");
    println!("setup.sh: {} packages; {} programs and headers traced to them", listed.len(), NEEDED.len());
}
