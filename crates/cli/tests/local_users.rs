//! Issue 44 item 1, "a directory that is the router's own", through the
//! binary and a second Unix user: the test creates the user (`useradd`),
//! acts as it (`setpriv`) and removes it after (`userdel`). It needs root,
//! as the project's tests run; without it each test says so and fails.
//!
//! * As the other user, nothing in the router's directory (made 0700 under
//!   umask 000, its files 0600) or its journal can be read, the password
//!   included.
//! * A directory the other user made first, with `router.lock` linked to a
//!   file of root's, is refused naming its owner and mode, and the file is
//!   untouched; in a shared sticky directory the planted link is not
//!   followed either.
//! * In a shared sticky directory, a stream's log and a counters file the
//!   other user planted are removed unread (logged), the real publisher
//!   and subscriber go on and lose nothing; a subscriber never reads the
//!   other user's log, it says whose it is.
//! * A member of the router's group, another Unix user, logs in over
//!   shared memory through the group's socket, as the user its `unix_user`
//!   names, and receives: its logs cross the socket, so it needs no right
//!   to create anything in the router's directory, and it leaves nothing
//!   there.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

/// A Unix user made for one test, removed when dropped.
struct OtherUser {
    name: String,
    uid: u32,
}

impl OtherUser {
    fn new(tag: &str) -> Self {
        assert_eq!(euid(), 0, "these tests need root (useradd, setpriv)");
        let name = format!("twlu{tag}{}", std::process::id() % 100_000);
        let _ = Command::new("userdel").arg(&name).output();
        let made = Command::new("useradd").args(["-M", "-N", "-s", "/usr/sbin/nologin", &name]).output().unwrap();
        assert!(made.status.success(), "useradd {name}: {}", String::from_utf8_lossy(&made.stderr));
        let id = Command::new("id").args(["-u", &name]).output().unwrap();
        let uid = String::from_utf8_lossy(&id.stdout).trim().parse().unwrap();
        Self { name, uid }
    }

    /// Runs `sh -c script` as this user (no supplementary groups).
    fn sh(&self, script: &str) -> Output {
        Command::new("setpriv")
            .args([&format!("--reuid={}", self.uid), "--regid=65534", "--clear-groups", "sh", "-c", script])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

impl Drop for OtherUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(&self.name).output();
    }
}

fn euid() -> u32 {
    std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let d = PathBuf::from(format!("/dev/shm/tw-lu-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Starts `tickwire ARGS` under umask 000 and waits (20 s at most) for a
/// stderr line holding `ready`; later lines go to the returned channel.
fn start(args: &[&str], env: &[(&str, &str)], ready: &str) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("umask 000; exec \"$0\" \"$@\"")
        .arg(BIN)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("  | {l}");
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(ready) => break,
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                panic!("{args:?}: no line with {ready:?} within 20 s");
            }
        }
    }
    (child, rx)
}

/// Waits up to `limit` for the child; kills it past that.
fn finish(mut child: Child, limit: Duration) -> std::process::ExitStatus {
    let until = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("pid {} still running after {limit:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn argon2id(password: &str) -> String {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let a = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, argon2::Params::default());
    a.hash_password(password.as_bytes(), &SaltString::encode_b64(b"tickwire-local-u").unwrap()).unwrap().to_string()
}

/// Every file below `dir` (and `dir` itself).
fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    out.push(dir.to_owned());
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[test]
fn another_user_reads_nothing_in_the_directory_or_the_journal() {
    let other = OtherUser::new("r");
    let d = scratch("read");
    let etc = scratch("read-etc");
    std::fs::create_dir_all(&etc).unwrap();
    let journal = etc.join("journal");
    let cfg = etc.join("router.toml");
    let password = "desk-secret-4417";
    std::fs::write(
        &cfg,
        format!(
            "[[users]]\nname = \"desk\"\npassword_hash = \"{}\"\npublish = [\"md/>\"]\nsubscribe = [\"md/>\"]\n",
            argon2id(password)
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cfg, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (mut router, _log) = start(
        &["--dir", s(&d), "--config", s(&cfg), "router", "--no-tcp", "--journal", s(&journal)],
        &[],
        "router listening",
    );
    let login = [("TICKWIRE_PASSWORD", password)];
    let route = ["--dir", s(&d)];
    let (sub, _) = start(
        &[&route[..], &["sub", "--router", "ipc", "--topic", "md/>", "--user", "desk", "--duration", "8s"]].concat(),
        &login,
        "subscribed to md/>",
    );
    let publ = Command::new(BIN)
        .args(route)
        .args(["pub", "--router", "ipc", "--topic", "md/x", "--user", "desk", "--count", "20", "--guaranteed"])
        .envs(login)
        .output()
        .unwrap();
    assert!(publ.status.success(), "{}", String::from_utf8_lossy(&publ.stderr));

    // While the sessions are open: every file, its mode, and the other user.
    let mut files = Vec::new();
    walk(&d, &mut files);
    walk(&journal, &mut files);
    let mut readable = Vec::new();
    for f in &files {
        // A client's files go when it does.
        let Ok(m) = std::fs::symlink_metadata(f) else { continue };
        let mode = m.mode() & 0o7777;
        if m.is_dir() {
            assert_eq!(mode, 0o700, "{}: directory mode {mode:04o} under umask 000", f.display());
        } else {
            assert_eq!(mode & 0o077, 0, "{}: mode {mode:04o} under umask 000", f.display());
        }
        let cmd = if m.is_dir() { "ls" } else { "cat" };
        let out = other.sh(&format!("{cmd} '{}'", f.display()));
        if out.status.success() || String::from_utf8_lossy(&out.stdout).contains(password) {
            readable.push(f.clone());
        }
    }
    let names: Vec<_> = files.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect();
    println!("{} files and directories checked as {}: {names:?}", files.len(), other.name);
    // A session's logs are sealed memfds handed over the login socket.
    assert!(!names.iter().any(|n| n.starts_with("tw-router-")), "a client's log has a name: {names:?}");
    assert!(names.iter().any(|n| n.ends_with(".twj")), "a journal segment was there: {names:?}");
    assert!(readable.is_empty(), "readable by another user: {readable:?}");
    let grep = other.sh(&format!("grep -r '{password}' '{}' '{}'", d.display(), journal.display()));
    assert!(!String::from_utf8_lossy(&grep.stdout).contains(password), "the password, as another user");

    let _ = finish(sub, Duration::from_secs(20));
    let _ = router.kill();
    let _ = router.wait();
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&etc);
}

#[test]
fn a_squatted_directory_or_a_planted_lock_link_is_refused_and_its_target_untouched() {
    let other = OtherUser::new("s");
    let target = scratch("target");
    std::fs::write(&target, "precious\n").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();

    // The other user made the directory first and linked the lock.
    let d = scratch("squat");
    let made = other.sh(&format!(
        "mkdir '{0}' && chmod 0777 '{0}' && ln -s '{1}' '{0}/router.lock'",
        d.display(),
        target.display()
    ));
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let run = |dir: &Path| Command::new(BIN).args(["--dir", s(dir), "router", "--no-tcp"]).output().unwrap();
    let out = run(&d);
    let err = String::from_utf8_lossy(&out.stderr);
    println!("squatted directory: {}", err.trim());
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("owned by uid {} ({})", other.uid, other.name)) && err.contains("mode 0777"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious\n", "the lock's target was written");

    // A shared sticky directory of root's, the link planted in it.
    let shared = scratch("sticky");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let made = other.sh(&format!("ln -s '{}' '{}/router.lock'", target.display(), shared.display()));
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let out = run(&shared);
    let err = String::from_utf8_lossy(&out.stderr);
    println!("planted link: {}", err.trim());
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("router.lock") && err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious\n", "the lock's target was written");
    assert_eq!(std::fs::metadata(&target).unwrap().len(), 9);

    for p in [&d, &shared] {
        let _ = std::fs::remove_dir_all(p);
    }
    let _ = std::fs::remove_file(&target);
}

#[test]
fn a_log_or_counters_file_planted_by_another_user_is_removed_unread_and_the_publisher_goes_on() {
    let other = OtherUser::new("p");
    let shared = scratch("plant");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let forged = |name: &str| {
        let out = other.sh(&format!("head -c 1048576 /dev/zero | tr '\\0' X > '{}/{name}'", shared.display()));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };

    // A subscriber refuses the other user's log, naming its owner.
    forged("fx-10.log");
    let out =
        Command::new(BIN).args(["--dir", s(&shared), "sub", "--channel", "ipc:fx", "--wait", "1s"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    println!("subscriber on a planted log: {}", err.trim());
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(&format!("owned by uid {} ({})", other.uid, other.name)), "{err}");

    // A planted log of the stream, and a counters file for the pid the
    // publisher will have (the shell's: it execs the publisher).
    forged("md-10.log");
    let n = 20_000;
    let publ = Command::new("sh")
        .arg("-c")
        .arg("sleep 1; exec \"$0\" \"$@\"")
        .arg(BIN)
        .args(["--dir", s(&shared), "pub", "--channel", "ipc:md", "--count", &n.to_string(), "--rate", "20k"])
        .args(["--wait", "15s"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let publ_pid = publ.id();
    forged(&format!("counters-{publ_pid}.twc"));
    let log = shared.join("md-10.log");
    let until = Instant::now() + Duration::from_secs(15);
    while std::fs::symlink_metadata(&log).map(|m| m.uid() != 0).unwrap_or(true) {
        assert!(Instant::now() < until, "the publisher never made its log");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sub = Command::new(BIN)
        .args(["--dir", s(&shared), "sub", "--channel", "ipc:md", "--count", &n.to_string(), "--verify"])
        .args(["--duration", "20s"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sub = sub.wait_with_output().unwrap();
    let publ = publ.wait_with_output().unwrap();
    let (se, pe) = (String::from_utf8_lossy(&sub.stderr), String::from_utf8_lossy(&publ.stderr));
    println!("publisher: {}\nsubscriber: {}", pe.trim(), se.trim());
    assert!(publ.status.success(), "{pe}");
    assert!(sub.status.success(), "{se}");
    for planted in ["md-10.log".to_owned(), format!("counters-{}.twc", publ_pid)] {
        assert!(pe.contains(&format!("{planted}: owned by uid {} ({})", other.uid, other.name)), "{planted}: {pe}");
    }
    assert!(pe.contains("removed unread"), "{pe}");
    assert!(se.contains(&format!("received {n} messages")) && se.contains("sequence gaps 0"), "{se}");
    assert!(!se.contains("LOST"), "{se}");
    let _ = std::fs::remove_dir_all(&shared);
}

#[test]
fn a_member_of_the_routers_group_logs_in_over_shared_memory_and_leaves_nothing_in_the_directory() {
    let other = OtherUser::new("g");
    let group = other.name.replacen("twlu", "twlg", 1);
    let _ = Command::new("groupdel").arg(&group).output();
    let made = Command::new("groupadd").arg(&group).output().unwrap();
    assert!(made.status.success(), "groupadd {group}: {}", String::from_utf8_lossy(&made.stderr));
    let groups = std::fs::read_to_string("/etc/group").unwrap();
    let gid: u32 = groups
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{group}:")))
        .and_then(|rest| rest.split(':').nth(1))
        .and_then(|g| g.parse().ok())
        .unwrap_or_else(|| panic!("{group} not in /etc/group"));
    let d = scratch("group");
    let etc = scratch("group-etc");
    std::fs::create_dir_all(&etc).unwrap();
    let cfg = etc.join("router.toml");
    std::fs::write(
        &cfg,
        format!(
            "[router]\ngroup = \"{group}\"\n\n[[users]]\nname = \"desk\"\nunix_user = \"{}\"\nsubscribe = [\"md/>\"]\n\n\
             [[users]]\nname = \"feed\"\nunix_user = \"root\"\npublish = [\"md/>\"]\n",
            other.name
        ),
    )
    .unwrap();
    let (mut router, _log) =
        start(&["--dir", s(&d), "--config", s(&cfg), "router", "--no-tcp"], &[], "router listening");
    let mode = std::fs::metadata(&d).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o2750, "the group's directory");

    // The other user, in the router's group and no other, subscribes as
    // "desk" (its unix_user) with no password; root publishes as "feed".
    let sub = Command::new("setpriv")
        .args([&format!("--reuid={}", other.uid), "--regid=65534", &format!("--groups={gid}")])
        .args([BIN, "--dir", s(&d), "sub", "--router", "ipc", "--topic", "md/>", "--count", "50"])
        .args(["--user", "desk", "--duration", "20s"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let publ = Command::new(BIN)
        .args(["--dir", s(&d), "pub", "--router", "ipc", "--topic", "md/x", "--user", "feed", "--count", "50"])
        .args(["--rate", "20"])
        .output()
        .unwrap();
    assert!(publ.status.success(), "{}", String::from_utf8_lossy(&publ.stderr));
    let sub = sub.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&sub.stderr);
    println!("the group member's subscriber: {}", err.trim());
    assert!(sub.status.success(), "{err}");
    assert!(err.contains("received 50 messages"), "{err}");

    // Nothing of the other user's in the router's directory; its counters
    // went to its own.
    let mut files = Vec::new();
    walk(&d, &mut files);
    let theirs: Vec<_> =
        files.iter().filter(|f| std::fs::symlink_metadata(f).is_ok_and(|m| m.uid() == other.uid)).collect();
    assert!(theirs.is_empty(), "the other user's files in the router's directory: {theirs:?}");
    let _ = router.kill();
    let _ = router.wait();
    let own = PathBuf::from(format!("/dev/shm/tickwire-{}", other.name));
    let _ = std::fs::remove_dir_all(&own);
    let _ = std::fs::remove_dir_all(&d);
    let _ = std::fs::remove_dir_all(&etc);
    let _ = Command::new("groupdel").arg(&group).output();
}
