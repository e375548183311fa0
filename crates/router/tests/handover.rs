//! Shared-memory sessions whose logs cross the login socket as sealed
//! memfds: nothing of a session is named in the router's directory, neither
//! side can shrink the other's log, and a login whose file could shrink, is
//! sparse, is no log, or is another stream's is refused while the router
//! goes on.

mod common;

use common::{client, receive, start, tempdir};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::time::Duration;
use tickwire_router::RouterConfig;
use tickwire_shm::LogConfig;
use tickwire_wire::client::{IPC_IN_CHANNEL, IPC_LOGIN_TAKEN};

/// What the router answered a raw login: its refusal text, or the taken
/// byte and the number of files beside it.
fn answer(mut s: std::os::unix::net::UnixStream) -> (Vec<u8>, usize) {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (mut buf, mut fds) = ([0u8; 512], Vec::new());
    let n = tickwire_shm::handover::recv(&s, &mut buf, &mut fds).unwrap();
    let mut bytes = buf[..n].to_vec();
    let _ = s.read_to_end(&mut bytes);
    (bytes, fds.len())
}

fn refusal(s: std::os::unix::net::UnixStream) -> String {
    let (bytes, files) = answer(s);
    assert_eq!(files, 0, "a refusal hands over nothing");
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The memfd mappings of `channel` in this process (`/proc/self/maps`).
fn mapped(channel: &str) -> Vec<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().filter(|l| l.contains(&format!("/memfd:{channel}-"))).map(str::to_owned).collect()
}

#[test]
fn a_login_whose_file_could_shrink_is_no_log_or_is_another_streams_is_refused_and_the_router_goes_on() {
    let dir = tempdir("handover-refused");
    let r = start(&dir, RouterConfig::default());
    let ctx = tickwire_shm::Context::new(&dir).unwrap();
    let cfg = LogConfig::with_capacity(64 << 10);

    // A valid log, copied byte for byte into a memfd that is not sealed.
    let (_real, sealed) = ctx.appender_sealed(IPC_IN_CHANNEL, 0x51, &cfg).unwrap();
    let mut bytes = vec![0u8; sealed.metadata().unwrap().len() as usize];
    sealed.read_exact_at(&mut bytes, 0).unwrap();
    let open = File::from(rustix::fs::memfd_create("unsealed", rustix::fs::MemfdFlags::CLOEXEC).unwrap());
    open.write_all_at(&bytes, 0).unwrap();
    let why = refusal(common::ipc_login(&dir, 0x51, &[&open], "unsealed"));
    println!("unsealed: {why}");
    assert!(why.contains("not sealed against shrinking"), "{why:?}");

    // The same log's header in a sealed memfd that is sparse (nothing
    // reserved behind it): mapping it would allocate in the router.
    let sparse = File::from(
        rustix::fs::memfd_create("sparse", rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING)
            .unwrap(),
    );
    sparse.set_len(bytes.len() as u64).unwrap();
    sparse.write_all_at(&bytes[..4096], 0).unwrap();
    rustix::fs::fcntl_add_seals(&sparse, rustix::fs::SealFlags::SHRINK | rustix::fs::SealFlags::GROW).unwrap();
    let why = refusal(common::ipc_login(&dir, 0x51, &[&sparse], "sparse"));
    println!("sparse: {why}");
    assert!(why.contains("sparse"), "{why:?}");

    // A sealed file that holds no log.
    let junk = tickwire_shm::handover::sealed("junk", 1 << 16).unwrap();
    junk.write_all_at(b"not a log at all", 0).unwrap();
    let why = refusal(common::ipc_login(&dir, 0x52, &[&junk], "junk"));
    println!("junk: {why}");
    assert!(why.contains("not a tickwire file"), "{why:?}");

    // A real log, announced as another stream.
    let (_other, other) = ctx.appender_sealed(IPC_IN_CHANNEL, 0x53, &cfg).unwrap();
    let why = refusal(common::ipc_login(&dir, 0x54, &[&other], "mislabelled"));
    println!("mislabelled: {why}");
    assert!(why.contains("not tw-router-in-84"), "{why:?}");

    // Two files with one login.
    let (_a, a) = ctx.appender_sealed(IPC_IN_CHANNEL, 0x55, &cfg).unwrap();
    let why = refusal(common::ipc_login(&dir, 0x55, &[&a, &junk], "two"));
    println!("two files: {why}");
    assert!(why.contains("more than one file"), "{why:?}");

    // The router went on: a real pair still flows over shared memory.
    let mut sub = client("ipc", &dir, "sub");
    sub.subscribe("t").unwrap();
    let mut publ = client("ipc", &dir, "pub");
    for c in [&mut sub, &mut publ] {
        c.wait_connected(Duration::from_secs(5)).unwrap();
    }
    publ.publish("t", b"still here").unwrap();
    assert_eq!(receive(&mut sub, 1)[0].1, b"still here");
    drop((sub, publ));
    let _ = r.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_taken_login_hands_over_the_routers_log_and_neither_log_is_named_in_the_directory_or_can_shrink() {
    let dir = tempdir("handover-taken");
    let r = start(&dir, RouterConfig::default());

    // A raw login: the taken byte comes with exactly one file, a sealed log.
    let ctx = tickwire_shm::Context::new(&dir).unwrap();
    let (_raw, log) = ctx.appender_sealed(IPC_IN_CHANNEL, 0x61, &LogConfig::with_capacity(64 << 10)).unwrap();
    let s = common::ipc_login(&dir, 0x61, &[&log], "raw");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (mut buf, mut fds) = ([0u8; 16], Vec::new());
    let n = tickwire_shm::handover::recv(&s, &mut buf, &mut fds).unwrap();
    assert_eq!((&buf[..n], fds.len()), (&[IPC_LOGIN_TAKEN][..], 1));
    let theirs = File::from(fds.pop().unwrap());
    tickwire_shm::handover::check_sealed(&theirs).unwrap();
    for (whose, f) in [("the router's log", &theirs), ("our log", &log)] {
        let len = f.metadata().unwrap().len();
        let e = f.set_len(len - 4096).unwrap_err();
        println!("{whose}: {len} bytes; shrinking it: {e}");
        assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{whose}");
        assert_eq!(f.metadata().unwrap().len(), len, "{whose}");
    }

    // A client's session: no file of it in the directory; both of its
    // logs are mapped memfds.
    let mut c = client("ipc", &dir, "c");
    c.wait_connected(Duration::from_secs(5)).unwrap();
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    println!("in the directory: {names:?}");
    assert!(!names.iter().any(|n| n.starts_with("tw-router-")), "{names:?}");
    for channel in [IPC_IN_CHANNEL, tickwire_wire::client::IPC_OUT_CHANNEL] {
        let maps = mapped(channel);
        println!("{channel}: {maps:?}");
        // Besides the raw login's (ID 0x61 = 97): the client's.
        assert!(maps.iter().any(|l| !l.contains(&format!("{channel}-97 "))), "{channel}: {maps:?}");
    }
    c.subscribe("t").unwrap();
    let mut publ = client("ipc", &dir, "p");
    publ.wait_connected(Duration::from_secs(5)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    publ.publish("t", b"over sealed logs").unwrap();
    assert_eq!(receive(&mut c, 1)[0].1, b"over sealed logs");
    drop((c, publ, s, theirs));
    let _ = r.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
