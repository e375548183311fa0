//! Logins an attacker cannot starve (issue 42, item 2): during a flood of
//! wrong passwords against one user (threads on raw TCP, half of them
//! leaving before the answer), another user's fresh login, and the
//! attacked user's with the right password, are each welcomed within 1 s;
//! and after it too.
//!
//! Prints every login's time (`-- --nocapture`). `make test` floods from
//! 8 threads for about 2 s; `make hostile` at the size, 20 threads
//! for 10 s (`TICKWIRE_FLOOD_THREADS`, `TICKWIRE_FLOOD_SECONDS`).

mod common;

use common::{framed, start, tempdir};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_client::{Client, ClientOptions};
use tickwire_router::access::{hash_password, UserConfig};
use tickwire_router::RouterConfig;
use tickwire_wire::client::{credentials, ClientKind, ClientRepr, CLIENT_PROTOCOL_VERSION};

fn user(name: &str, password: &str) -> UserConfig {
    UserConfig {
        name: name.into(),
        password_hash: hash_password(password.as_bytes()).unwrap(),
        unix_user: None,
        publish: vec!["md/>".into()],
        subscribe: vec!["md/>".into()],
        slow_consumer: None,
    }
}

/// How long a client as `user` takes to be welcomed.
fn login(uri: &str, dir: &Path, user: &str, password: &str) -> Duration {
    let opts = ClientOptions {
        name: format!("{user}-login"),
        dir: dir.into(),
        user: Some(user.into()),
        password: Some(password.into()),
        ..ClientOptions::default()
    };
    let started = Instant::now();
    let mut c = Client::connect(uri, opts).unwrap();
    c.wait_connected(Duration::from_secs(10)).unwrap_or_else(|e| panic!("{user} never logged in: {e}"));
    let took = started.elapsed();
    c.close();
    took
}

/// One wrong-password HELLO as `user`; waits for the answer if `wait`.
fn guess(addr: SocketAddr, user: &str, wait: bool) {
    let Ok(mut s) = TcpStream::connect(addr) else { return };
    let body = credentials::password(user, b"not-the-password");
    let hello = ClientRepr {
        value: CLIENT_PROTOCOL_VERSION,
        topic: "guesser",
        body: &body,
        ..ClientRepr::new(ClientKind::Hello)
    };
    if s.write_all(&framed(&hello)).is_err() || !wait {
        return;
    }
    let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
    let mut buf = [0u8; 256];
    let _ = s.read(&mut buf);
}

#[test]
fn a_wrong_password_flood_against_one_user_delays_no_one_s_right_login_past_a_second() {
    let dir = tempdir("logins-flood");
    let users = vec![user("victim", "victim-pw"), user("other", "other-pw")];
    let r = start(&dir, RouterConfig { users, ..RouterConfig::default() });
    let uri = format!("tcp://{}", r.tcp);
    // The victim logged in once before (as an application that restarts).
    println!("victim before the flood: {:?}", login(&uri, &dir, "victim", "victim-pw"));

    let stop = Arc::new(AtomicBool::new(false));
    let guesses = Arc::new(AtomicU64::new(0));
    let env = |k: &str, d: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let (threads, seconds) = (env("TICKWIRE_FLOOD_THREADS", 8), env("TICKWIRE_FLOOD_SECONDS", 2));
    let flood_until = Instant::now() + Duration::from_secs(seconds);
    let flood: Vec<_> = (0..threads)
        .map(|i| {
            let (stop, guesses, addr) = (Arc::clone(&stop), Arc::clone(&guesses), r.tcp);
            std::thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(seconds + 20);
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    guess(addr, "victim", i % 2 == 0);
                    guesses.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let mut during = Vec::new();
    // Three rounds at least, then more until the flood's time is up.
    let mut round = 0;
    while round < 3 || Instant::now() < flood_until {
        round += 1;
        let other = login(&uri, &dir, "other", "other-pw");
        let victim = login(&uri, &dir, "victim", "victim-pw");
        println!("during the flood, round {round}: other {other:?}, victim {victim:?}");
        during.push((other, victim));
        std::thread::sleep(Duration::from_millis(300));
    }
    stop.store(true, Ordering::Relaxed);
    for t in flood {
        t.join().unwrap();
    }
    let sent = guesses.load(Ordering::Relaxed);
    let after = (login(&uri, &dir, "other", "other-pw"), login(&uri, &dir, "victim", "victim-pw"));
    println!(
        "{sent} wrong guesses sent from {threads} threads in {round} rounds; after the flood: other {:?}, victim {:?}",
        after.0, after.1
    );
    assert!(sent >= 50, "the flood was too small to prove anything: {sent} guesses");
    for (other, victim) in during.into_iter().chain([after]) {
        assert!(other < Duration::from_secs(1), "another user's login took {other:?}");
        assert!(victim < Duration::from_secs(1), "the attacked user's right login took {victim:?}");
    }
    drop(r);
    let _ = std::fs::remove_dir_all(&dir);
}
