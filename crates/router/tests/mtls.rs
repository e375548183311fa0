//! Mutual TLS (`[router.tls] client_ca`, issue 44 item 6): a client showing
//! a certificate the configured CA signed logs in as the user it names,
//! without a password, and is held to that user's ACLs; a client showing
//! none, or one another CA signed, or naming a user not configured, is
//! refused with the reason; the certificate files are read again on a
//! reload, for the connections that follow.

mod common;

use common::{receive, start, tempdir};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientError, ClientEvent, ClientOptions};
use tickwire_router::access::{hash_password, UserConfig};
use tickwire_router::config::TlsFiles;
use tickwire_router::RouterConfig;
use tickwire_testkit::ca::{TestCa, Usage};
use tickwire_wire::client::RejectCode;

fn user(name: &str, hash: &str, publish: &[&str], subscribe: &[&str]) -> UserConfig {
    UserConfig {
        name: name.into(),
        password_hash: hash.into(),
        unix_user: None,
        publish: publish.iter().map(|s| (*s).to_owned()).collect(),
        subscribe: subscribe.iter().map(|s| (*s).to_owned()).collect(),
        slow_consumer: None,
    }
}

/// A tls:// client trusting `ca` (the router's), showing `identity`
/// (certificate, key) if given, and naming `creds` in HELLO if given.
fn connect(
    uri: &str,
    dir: &Path,
    ca: &Path,
    identity: Option<&(PathBuf, PathBuf)>,
    creds: Option<(&str, &str)>,
) -> Result<Client, ClientError> {
    let opts = ClientOptions {
        name: "mtls".into(),
        dir: dir.into(),
        tls_ca: Some(ca.into()),
        tls_cert: identity.map(|i| i.0.clone()),
        tls_key: identity.map(|i| i.1.clone()),
        user: creds.map(|c| c.0.to_owned()),
        password: creds.map(|c| c.1.to_owned()),
        ..ClientOptions::default()
    };
    let mut c = Client::connect(uri, opts)?;
    c.wait_connected(Duration::from_secs(10))?;
    Ok(c)
}

/// The REJECTs `c` receives within `wait`.
fn rejects(c: &mut Client, wait: Duration) -> Vec<RejectCode> {
    let mut got = Vec::new();
    let until = Instant::now() + wait;
    while Instant::now() < until {
        c.poll(
            |e| {
                if let ClientEvent::Rejected { code, .. } = e {
                    got.push(code);
                }
            },
            64,
        );
    }
    got
}

fn refusal(r: Result<Client, ClientError>) -> String {
    match r {
        Err(e @ ClientError::Refused { .. }) => e.to_string(),
        Err(e) => panic!("not refused for good: {e}"),
        Ok(_) => panic!("logged in"),
    }
}

#[test]
fn a_certificate_from_the_ca_logs_in_as_its_user_and_others_are_refused_with_a_reason() {
    let dir = tempdir("mtls");
    let (ca, other) = (TestCa::new(&dir, "ca"), TestCa::new(&dir, "other-ca"));
    let (cert, key) = ca.server("router");
    let hash = hash_password(b"feed-pw").unwrap();
    let users = vec![
        user("feed", &hash, &["md/>"], &[]),
        user("desk", &hash, &["orders/desk/>"], &["md/eu/>"]),
        // Named by its certificate's e-mail SAN (the certificate has no CN).
        user("ops@example.com", &hash, &[], &["md/>"]),
    ];
    let tls = Some(TlsFiles { client_ca: Some(ca.pem.clone()), ..TlsFiles::new(cert, key) });
    let r = start(&dir, RouterConfig { tls, users, ..RouterConfig::default() });
    let uri = format!("tls://localhost:{}", r.tcp.port());

    // Logged in by certificate alone: no user, no password in HELLO.
    let feed_id = ca.client("feed", "feed");
    let desk_id = ca.client("desk", "desk");
    let ops_id = ca.issue("ops", Usage::Client, None, &[], &["ops@example.com"]);
    let t = Instant::now();
    let mut feed = connect(&uri, &dir, &ca.pem, Some(&feed_id), None).unwrap();
    let mut desk = connect(&uri, &dir, &ca.pem, Some(&desk_id), None).unwrap();
    println!("two mutual-TLS logins in {:?} (no argon2 check)", t.elapsed());
    // The same user named in HELLO too: its password is not checked.
    let mut ops = connect(&uri, &dir, &ca.pem, Some(&ops_id), Some(("ops@example.com", "not-checked"))).unwrap();
    desk.subscribe("md/>").unwrap();
    ops.subscribe("md/>").unwrap();
    // Each is held to the ACLs of the user its certificate names.
    let until = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < until {
        feed.publish("md/eu/VOD", b"bid 101").unwrap();
        got = receive(&mut desk, 1);
    }
    assert_eq!(got.first().map(|g| g.0.as_str()), Some("md/eu/VOD"), "desk reads md/eu as user desk");
    assert!(!receive(&mut ops, 1).is_empty(), "ops@example.com reads md/>");
    feed.publish("md/us/IBM", b"bid 150").unwrap();
    let until = Instant::now() + Duration::from_millis(300);
    while Instant::now() < until {
        let seen = receive(&mut desk, 1);
        assert!(seen.iter().all(|(t, _, _)| t == "md/eu/VOD"), "md/us is not desk's to read: {seen:?}");
    }
    desk.publish("md/eu/VOD", b"not desk's").unwrap();
    assert_eq!(rejects(&mut desk, Duration::from_millis(300)), [RejectCode::Forbidden], "desk may not publish md/");

    // Refused, each with its reason.
    let ghost = ca.client("ghost", "ghost");
    let rogue = other.client("rogue", "desk");
    for (who, identity, creds, why) in [
        ("a user not configured", Some(&ghost), None, "client certificate names user \"ghost\", not one of [[users]]"),
        ("HELLO naming another user", Some(&desk_id), Some(("feed", "feed-pw")), "HELLO names user \"feed\""),
        ("no certificate, a good password", None, Some(("feed", "feed-pw")), "CertificateRequired"),
        ("another CA's certificate", Some(&rogue), None, "UnknownCA"),
    ] {
        let e = refusal(connect(&uri, &dir, &ca.pem, identity, creds));
        println!("{who}: {e}");
        assert!(e.contains(why), "{who}: {e}");
    }
    // The router serves the others meanwhile.
    feed.publish("md/eu/VOD", b"still here").unwrap();
    let got = receive(&mut desk, 2);
    assert!(got.iter().any(|g| g.1 == b"still here"), "{got:?}");
    let report = r.stop();
    assert!(report.totals.forbidden >= 3, "two refused logins and a publish: {:?}", report.totals);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reload (SIGHUP) reads the certificate, key and client CA again: the
/// connections that follow use them (a client of the new CA gets in, one
/// of the old is refused); a session already open keeps its handshake.
/// A reload that would turn TLS off, or names a missing file, is refused
/// and changes nothing.
#[test]
fn a_reload_reads_the_certificates_again_for_new_connections() {
    let dir = tempdir("mtls-reload");
    let (old_ca, new_ca) = (TestCa::new(&dir, "old-ca"), TestCa::new(&dir, "new-ca"));
    let (cert, key) = old_ca.server("router");
    let files = TlsFiles { client_ca: Some(old_ca.pem.clone()), ..TlsFiles::new(cert.clone(), key.clone()) };
    let r = start(&dir, RouterConfig { tls: Some(files.clone()), ..RouterConfig::default() });
    let uri = format!("tls://localhost:{}", r.tcp.port());
    let (old_id, new_id) = (old_ca.client("old", "anyone"), new_ca.client("new", "anyone"));
    let mut kept = connect(&uri, &dir, &old_ca.pem, Some(&old_id), None).unwrap();
    assert!(refusal(connect(&uri, &dir, &old_ca.pem, Some(&new_id), None)).contains("UnknownCA"));

    let missing = TlsFiles { client_ca: Some(dir.join("absent.pem")), ..files.clone() };
    let e = r.reload_tls(Some(missing)).unwrap_err();
    assert!(e.contains("absent.pem"), "{e}");
    assert!(r.reload_tls(None).unwrap_err().contains("cannot be turned off"));
    assert!(refusal(connect(&uri, &dir, &old_ca.pem, Some(&new_id), None)).contains("UnknownCA"), "unchanged");

    r.reload_tls(Some(TlsFiles { client_ca: Some(new_ca.pem.clone()), ..files })).unwrap();
    let mut fresh = connect(&uri, &dir, &old_ca.pem, Some(&new_id), None).unwrap();
    assert!(refusal(connect(&uri, &dir, &old_ca.pem, Some(&old_id), None)).contains("UnknownCA"));
    // The session made before the reload goes on.
    kept.subscribe("md/>").unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.is_empty() && Instant::now() < until {
        fresh.publish("md/x", b"after the reload").unwrap();
        got = receive(&mut kept, 1);
    }
    assert_eq!(got.first().map(|g| g.1.as_slice()), Some(&b"after the reload"[..]));
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
