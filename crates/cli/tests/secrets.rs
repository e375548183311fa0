//! Issue 44 item 5, "secrets handled like secrets", through the binary: a
//! password file or TLS private key others may read is refused by name
//! (mode and `chmod 600 FILE`), a certificate is not; an expired
//! certificate is warned about by `router --check-config` and at start; a
//! `[[users]]` hash weaker than argon2id's defaults is refused; a password
//! from TICKWIRE_PASSWORD still logs in (it is then removed from the
//! environment: see `routed.rs`, whose unit test checks that).
//!
//! Not tested here: `/proc/PID/environ` of a running client. It shows the
//! environment the process was started with (proc(5)) and does not change
//! when the variable is removed, so it cannot tell whether it was.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

/// A fresh directory of this test's own.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tw-secrets-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(BIN).args(args).envs(env.iter().copied()).stdin(Stdio::null()).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A PHC argon2id hash of `password` with these costs (m KiB, t passes,
/// p lanes).
fn argon2id(password: &str, m: u32, t: u32, p: u32) -> String {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let a = argon2::Argon2::new(
        argon2::Algorithm::Argon2id,
        argon2::Version::V0x13,
        argon2::Params::new(m, t, p, None).unwrap(),
    );
    a.hash_password(password.as_bytes(), &SaltString::encode_b64(b"tickwire-secrets").unwrap()).unwrap().to_string()
}

#[test]
fn a_password_file_readable_by_others_is_refused_by_name() {
    let d = dir("pw");
    let pw = d.join("desk.pw");
    std::fs::write(&pw, "desk-secret\n").unwrap();
    let sub = |f: &Path| {
        let args = ["sub", "--router", "tcp://127.0.0.1:9", "--topic", "md/>", "--user", "desk", "--wait", "200ms"];
        run(&[&args[..], &["--password-file", s(f)]].concat(), &[])
    };
    for (mode, shown) in [(0o644, "readable by others (mode 644)"), (0o640, "(mode 640)"), (0o604, "(mode 604)")] {
        set_mode(&pw, mode);
        let out = sub(&pw);
        let err = stderr(&out);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(&format!("--password-file {}: ", pw.display()))
                && err.contains(shown)
                && err.contains(&format!("chmod 600 {}", pw.display())),
            "{err}"
        );
    }
    // The owner's alone: read, and the client goes on to look for its
    // router (there is none).
    for mode in [0o600, 0o400] {
        set_mode(&pw, mode);
        let err = stderr(&sub(&pw));
        assert!(err.contains("no router at") && !err.contains("chmod"), "{err}");
    }
    let _ = std::fs::remove_dir_all(d);
}

/// `[router.tls]` files: the key must be its owner's alone, the
/// certificate (public) may be anyone's.
fn tls_config(d: &Path, cert: &Path, key: &Path, extra: &str) -> PathBuf {
    let cfg = d.join("router.toml");
    std::fs::write(
        &cfg,
        format!(
            "[router]\nlisten = [\"tcp://127.0.0.1:0\"]\n\n[router.tls]\ncert = \"{}\"\nkey = \"{}\"\n{extra}",
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    cfg
}

#[test]
fn a_tls_key_readable_by_others_is_refused_and_a_readable_certificate_is_not() {
    let d = dir("key");
    let (cert, key) = tickwire_testkit::self_signed(&d, "router");
    let cfg = tls_config(&d, &cert, &key, "");
    let check = || run(&["--dir", s(&d.join("shm")), "router", "--check-config", s(&cfg)], &[]);
    set_mode(&cert, 0o644);
    set_mode(&key, 0o600);
    let ok = check();
    assert!(ok.status.success(), "{}", stderr(&ok));
    set_mode(&key, 0o644);
    let out = check();
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "[router.tls] {}: readable by others (mode 644): chmod 600 {}",
            key.display(),
            key.display()
        )),
        "{err}"
    );
    // The same from the flags, when a router starts.
    let out = run(
        &[
            "--dir",
            s(&d.join("shm")),
            "router",
            "--no-ipc",
            "--listen",
            "tcp://127.0.0.1:0",
            "--tls-cert",
            s(&cert),
            "--tls-key",
            s(&key),
        ],
        &[],
    );
    let err = stderr(&out);
    assert!(!out.status.success() && err.contains(&format!("chmod 600 {}", key.display())), "{err}");
    let _ = std::fs::remove_dir_all(d);
}

/// A self-signed certificate for localhost that expired on 2021-01-01,
/// and its key (0600).
fn expired_certificate(d: &Path) -> (PathBuf, PathBuf) {
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let (c, k) = (d.join("old.pem"), d.join("old.key"));
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    set_mode(&k, 0o600);
    (c, k)
}

/// Reads `child`'s stderr until a line contains `what` (10 s at most).
fn wait_for(child: &mut Child, what: &str) -> (String, Vec<String>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let err = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        // Drained to the end, so that the child never writes to a closed
        // pipe (SIGPIPE) once nobody looks.
        for l in err.lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let end = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(what) => return (l, seen),
            Ok(l) => seen.push(l),
            Err(_) => panic!("no {what:?} within 10 s: {seen:?}"),
        }
    }
}

#[test]
fn an_expired_certificate_is_warned_about_by_check_config_and_at_start() {
    let d = dir("expired");
    let (cert, key) = expired_certificate(&d);
    let cfg = tls_config(&d, &cert, &key, "");
    let want = format!("certificate {} expired on 2021-01-01 00:00:00 UTC", cert.display());
    let out = run(&["--dir", s(&d.join("shm")), "router", "--check-config", s(&cfg)], &[]);
    let err = stderr(&out);
    assert!(out.status.success(), "a warning, not a refusal: {err}");
    assert!(err.lines().any(|l| l.starts_with("warning: ") && l.contains(&want)), "{err}");
    let mut router = Command::new(BIN)
        .args(["--dir", s(&d.join("shm")), "--config", s(&cfg), "router", "--no-ipc"])
        .env("TICKWIRE_LOG", "warn")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (_, before) = wait_for(&mut router, "router listening");
    let _ = router.kill();
    let _ = router.wait();
    assert!(before.iter().any(|l| l.contains("WARN") && l.contains(&want)), "{before:?}");
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn a_password_hash_weaker_than_the_argon2id_defaults_is_refused_at_load() {
    let d = dir("weak");
    let cfg = d.join("router.toml");
    let users = |hash: &str| {
        std::fs::write(
            &cfg,
            format!("[router]\nlisten = [\"tcp://127.0.0.1:0\"]\n\n[[users]]\nname = \"desk\"\npassword_hash = \"{hash}\"\n"),
        )
        .unwrap();
        run(&["--dir", s(&d.join("shm")), "router", "--check-config", s(&cfg)], &[])
    };
    let out = users(&argon2id("pw", 4096, 1, 1));
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("\"desk\"")
            && err.contains("m=4096")
            && err.contains("t=1")
            && err.contains("tickwire router hash-password"),
        "{err}"
    );
    let out = users(&argon2id("pw", 19456, 2, 1));
    assert!(out.status.success(), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(d);
}

/// A password from TICKWIRE_PASSWORD logs in (it is taken out of the
/// environment once read; the file alternative is checked above).
#[test]
fn a_password_from_the_environment_still_logs_in() {
    let d = dir("env");
    let cfg = d.join("router.toml");
    let hash = argon2id("desk-secret", 19456, 2, 1);
    std::fs::write(
        &cfg,
        format!(
            "[[users]]\nname = \"desk\"\npassword_hash = \"{hash}\"\npublish = [\"md/>\"]\nsubscribe = [\"md/>\"]\n"
        ),
    )
    .unwrap();
    let mut router = Command::new(BIN)
        .args(["--dir", s(&d.join("shm")), "--config", s(&cfg), "router", "--no-ipc", "--listen", "tcp://127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (line, _) = wait_for(&mut router, "router listening: ");
    let uri = line.trim_start_matches("router listening: ").split_whitespace().next().unwrap().to_owned();
    let sub = |password: &str| {
        run(
            &["sub", "--router", &uri, "--topic", "md/>", "--user", "desk", "--wait", "5s", "--duration", "100ms"],
            &[("TICKWIRE_PASSWORD", password)],
        )
    };
    let ok = sub("desk-secret");
    let wrong = sub("wrong");
    let _ = router.kill();
    let _ = router.wait();
    assert!(ok.status.success() && stderr(&ok).contains("subscribed to md/>"), "{}", stderr(&ok));
    assert!(!wrong.status.success() && stderr(&wrong).contains("wrong password"), "{}", stderr(&wrong));
    let _ = std::fs::remove_dir_all(d);
}
