//! Mutual TLS through the binary (issue 44 item 6): `[router.tls]
//! client_ca` in the config file; `tickwire sub --tls-cert --tls-key`
//! (or `--cert --key`) logs in as the user its certificate names, with no
//! password; no certificate, or another CA's, is refused with the reason;
//! SIGHUP reads the client CA file again for the connections that follow.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};
use tickwire_testkit::ca::TestCa;

const BIN: &str = env!("CARGO_BIN_EXE_tickwire");

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tw-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The child's standard error, line by line, drained to its end.
fn lines(child: &mut Child) -> Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let err = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for l in err.lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    rx
}

/// The first line holding `what` within 10 s.
fn wait_for(rx: &Receiver<String>, what: &str) -> String {
    let end = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok(l) if l.contains(what) => return l,
            Ok(l) => seen.push(l),
            Err(_) => panic!("no {what:?} within 10 s: {seen:?}"),
        }
    }
}

#[test]
fn a_client_certificate_logs_in_from_the_command_line_and_sighup_reads_the_ca_again() {
    let d = dir("mtls");
    let (ca, other) = (TestCa::new(&d, "ca"), TestCa::new(&d, "other-ca"));
    ca.server("router");
    // The config names clients.pem: the CA a reload will replace.
    std::fs::copy(&ca.pem, d.join("clients.pem")).unwrap();
    let hash = tickwire_router::access::hash_password(b"unused").unwrap();
    let cfg = d.join("router.toml");
    std::fs::write(
        &cfg,
        format!(
            "[router]\nipc = false\nlisten = [\"tcp://127.0.0.1:0\"]\n\n[router.tls]\ncert = \"router.pem\"\n\
             key = \"router.key\"\nclient_ca = \"clients.pem\"\n\n[[users]]\nname = \"desk\"\n\
             password_hash = \"{hash}\"\nsubscribe = [\"md/>\"]\n"
        ),
    )
    .unwrap();
    let check = Command::new(BIN).args(["--config", s(&cfg), "router", "--check-config"]).output().unwrap();
    assert!(check.status.success(), "{}", stderr(&check));
    let mut router = Command::new(BIN)
        .args(["--dir", s(&d.join("shm")), "--config", s(&cfg), "router"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines(&mut router);
    let line = wait_for(&rx, "router listening: ");
    assert!(line.contains("(client certificates)"), "{line}");
    let port = line.split("tls://127.0.0.1:").nth(1).unwrap().split(|c: char| !c.is_ascii_digit()).next().unwrap();
    let uri = format!("tls://localhost:{port}");
    let sub = |identity: &[&str]| {
        let mut args = vec!["sub", "--router", &uri, "--tls-ca", s(&ca.pem), "--topic", "md/>"];
        args.extend_from_slice(identity);
        args.extend_from_slice(&["--wait", "5s", "--duration", "100ms"]);
        Command::new(BIN).args(&args).env_remove("TICKWIRE_PASSWORD").stdin(Stdio::null()).output().unwrap()
    };
    let (desk, desk_key) = ca.client("desk", "desk");
    let (rogue, rogue_key) = other.client("rogue", "desk");
    let (new_desk, new_desk_key) = other.client("new-desk", "desk");

    let ok = sub(&["--tls-cert", s(&desk), "--tls-key", s(&desk_key)]);
    assert!(ok.status.success() && stderr(&ok).contains("subscribed to md/>"), "{}", stderr(&ok));
    let none = sub(&[]);
    assert!(!none.status.success() && stderr(&none).contains("CertificateRequired"), "{}", stderr(&none));
    let alias = sub(&["--cert", s(&rogue), "--key", s(&rogue_key)]);
    assert!(!alias.status.success() && stderr(&alias).contains("UnknownCA"), "{}", stderr(&alias));
    let half = sub(&["--tls-cert", s(&desk)]);
    assert!(!half.status.success() && stderr(&half).contains("--tls-key"), "{}", stderr(&half));
    let plain = Command::new(BIN)
        .args(["sub", "--router", &format!("tcp://127.0.0.1:{port}"), "--topic", "md/>"])
        .args(["--tls-cert", s(&desk), "--tls-key", s(&desk_key), "--wait", "1s"])
        .output()
        .unwrap();
    assert!(stderr(&plain).contains("--tls-cert is for a tls:// router"), "{}", stderr(&plain));

    // SIGHUP after the client CA file changed: the other CA's clients now.
    std::fs::copy(&other.pem, d.join("clients.pem")).unwrap();
    Command::new("kill").args(["-HUP", &router.id().to_string()]).status().unwrap();
    let reloaded = wait_for(&rx, "SIGHUP: TLS certificate");
    println!("{reloaded}");
    let now_ok = sub(&["--tls-cert", s(&new_desk), "--tls-key", s(&new_desk_key)]);
    let now_refused = sub(&["--tls-cert", s(&desk), "--tls-key", s(&desk_key)]);
    let _ = router.kill();
    let _ = router.wait();
    assert!(now_ok.status.success(), "{}", stderr(&now_ok));
    assert!(!now_refused.status.success() && stderr(&now_refused).contains("UnknownCA"), "{}", stderr(&now_refused));
    let _ = std::fs::remove_dir_all(d);
}
