//! The C examples (`examples/c`), compiled against `include/tickwire.h`
//! and this crate's `libtickwire.a` with the system's C compiler, and run:
//! a C ping-pong over shared memory between two C processes, and a C
//! router client publishing to, and answering a request from, this Rust
//! process through a router it runs (under valgrind's memcheck, as is
//! docs/c.md's quick start).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::{lib, root, run, shared_lib, Router, SYSTEM_LIBS};
use tickwire_client::{Client, ClientEvent, ClientOptions};

/// `examples/c/NAME.c`, compiled into `out`; its path.
fn compile(name: &str, out: &Path) -> PathBuf {
    compile_file(&root().join(format!("examples/c/{name}.c")), &out.join(name))
}

/// The C file `src`, compiled into the program `bin`.
fn compile_file(src: &Path, bin: &Path) -> PathBuf {
    let lib = lib();
    let r = Command::new("cc")
        .args(["-std=c11", "-D_POSIX_C_SOURCE=200809L", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root().join("include"))
        .arg(src)
        .arg(&lib)
        .args(SYSTEM_LIBS)
        .arg("-o")
        .arg(bin)
        .output()
        .unwrap();
    assert!(r.status.success(), "cc {}: {}", src.display(), String::from_utf8_lossy(&r.stderr));
    bin.to_owned()
}

/// `bin` run under valgrind's memcheck: an invalid read or write, or
/// memory lost (not kept reachable: closed handles are), fails it
/// (exit 99).
fn memcheck(bin: &Path) -> Command {
    let mut c = Command::new("valgrind");
    c.args(["--quiet", "--error-exitcode=99", "--leak-check=full", "--errors-for-leak-kinds=definite"]);
    c.arg(bin);
    c
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tw-ffi-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_c_ping_pong_over_shared_memory_runs_between_two_c_processes() {
    let d = scratch("pingpong");
    let bin = compile("pingpong", &d);
    let shm = d.join("shm");
    let n = "20000";
    // Both bounded (support::LIMIT): a side that dies does not leave the
    // other spinning.
    let mut pong_cmd = Command::new(&bin);
    pong_cmd.arg("pong").arg(&shm).arg(n);
    let pong = std::thread::spawn(move || run(&mut pong_cmd));
    let ping = run(Command::new(&bin).arg("ping").arg(&shm).arg(n));
    let pong = pong.join().unwrap();
    assert!(ping.status.success(), "ping: {}", String::from_utf8_lossy(&ping.stderr));
    assert!(pong.status.success(), "pong: {}", String::from_utf8_lossy(&pong.stderr));
    let out = String::from_utf8_lossy(&ping.stdout);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["messages"], 20000, "{out}");
    assert!(v["p50_ns"].as_u64().unwrap() > 0 && v["p99_ns"].as_u64() >= v["p50_ns"].as_u64(), "{out}");
    println!("C ping-pong over shared memory: {out}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_c_router_client_publishes_to_and_answers_a_rust_client() {
    let d = scratch("router");
    let bin = compile("router", &d);
    let router = Router::start(&d);
    let uri = router.uri.clone();

    let opts = ClientOptions { name: "rust".into(), dir: d.join("shm"), ..ClientOptions::default() };
    let mut rust = Client::connect(&uri, opts).unwrap();
    rust.wait_connected(Duration::from_secs(10)).unwrap();
    rust.subscribe("md/c").unwrap();
    rust.flush().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let mut c_cmd = memcheck(&bin);
    c_cmd.args([&uri, "md/c", "1000"]);
    let c = std::thread::spawn(move || run(&mut c_cmd));

    let (mut got, mut reply, mut asked) = (Vec::new(), None, false);
    let until = Instant::now() + Duration::from_secs(20);
    while (got.len() < 1000 || reply.is_none()) && Instant::now() < until {
        rust.poll(
            |e| match e {
                ClientEvent::Message(m) => got.push(String::from_utf8_lossy(m.payload).into_owned()),
                ClientEvent::Reply { payload, .. } => reply = Some(String::from_utf8_lossy(payload).into_owned()),
                _ => {}
            },
            256,
        );
        if got.len() == 1000 && !asked {
            rust.send_request("rfq/c", b"buy 100", Duration::from_secs(5)).unwrap();
            asked = true;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let want: Vec<String> = (0..1000).map(|i| format!("c{i}")).collect();
    assert_eq!(got, want, "every message, in order, the same bytes");
    let out = c.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(reply.as_deref(), Some("quote buy 100"), "{stdout}");
    assert!(stdout.contains("answered 1, busy refused 1"), "{stdout}");
    assert!(stdout.contains("misuse refused: the client was closed"), "{stdout}");
    drop(router);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn the_quick_start_in_docs_c_md_compiles_and_runs() {
    let doc = std::fs::read_to_string(root().join("docs/c.md")).unwrap();
    let start = doc.find("```c\n").expect("a C block") + 5;
    let end = start + doc[start..].find("```").unwrap();
    let d = scratch("quickstart");
    std::fs::create_dir_all(root().join("target/tmp")).unwrap();
    let src = root().join(format!("target/tmp/quickstart-{}.c", std::process::id()));
    std::fs::write(&src, &doc[start..end]).unwrap();
    // Installed as `make install-c` would, and built with pkg-config's
    // flags: linked with the shared library.
    let prefix = d.join("prefix");
    let r = Command::new(root().join("scripts/install-c.sh"))
        .arg("--prefix")
        .arg(&prefix)
        .arg("--lib")
        .arg(lib())
        .arg("--shared")
        .arg(shared_lib())
        .output();
    let r = r.unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "tickwire"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
        .output()
        .unwrap();
    assert!(flags.status.success(), "{}", String::from_utf8_lossy(&flags.stderr));
    let flags = String::from_utf8(flags.stdout).unwrap();
    let bin = d.join("quickstart");
    let mut cc = Command::new("cc");
    cc.args(["-std=c11", "-Wall", "-Wextra", "-Werror"]).arg(&src).arg("-o").arg(&bin);
    let r = cc.args(flags.split_whitespace()).output().unwrap();
    assert!(r.status.success(), "cc {flags}: {}", String::from_utf8_lossy(&r.stderr));
    // Linked with the shared library: without the loader's path to it, the
    // program does not start.
    let alone = run(Command::new(&bin).arg(d.join("shm")).env_remove("LD_LIBRARY_PATH"));
    assert!(!alone.status.success(), "ran without libtickwire.so: not linked with the shared library");
    assert!(String::from_utf8_lossy(&alone.stderr).contains("libtickwire.so"), "{alone:?}");
    let out = run(memcheck(&bin).arg(d.join("shm")).env("LD_LIBRARY_PATH", prefix.join("lib")));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "bid 101.25\n");
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_dir_all(&d);
}
