//! The C++ wrapper (`include/tickwire.hpp`) against this crate's
//! `libtickwire.a`: its GoogleTest suite (`tests/cpp`, built with CMake)
//! and `examples/cpp/pubsub.cpp` run against a router this process runs,
//! and the quick start in `docs/cpp.md` compiled and run. Every child
//! process is killed if it outlives its time limit.

use std::path::{Path, PathBuf};
use std::process::Command;
mod support;

use support::{lib, root, run, Router, SYSTEM_LIBS};

/// A fresh directory under target/tmp, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let d = root().join(format!("target/tmp/tw-cpp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Self(d.canonicalize().unwrap())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `cmd`, asserting that it succeeds; its stdout.
fn ok(cmd: &mut Command) -> String {
    let what = format!("{cmd:?}");
    let out = run(cmd);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what}: {}\n{stdout}{stderr}", out.status);
    stdout.into_owned()
}

/// The C++ file `src`, compiled as C++20 with -Werror into `bin`.
fn compile(src: &Path, bin: &Path) {
    ok(Command::new("g++")
        .args(["-std=c++20", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root().join("include"))
        .arg(src)
        .arg(lib())
        .args(SYSTEM_LIBS)
        .arg("-o")
        .arg(bin));
}

/// `[  PASSED  ] N tests.` of a GoogleTest run, and asserts none failed
/// or was skipped.
fn passed(out: &str) -> usize {
    assert!(!out.contains("[  FAILED  ]") && !out.contains("[  SKIPPED ]"), "{out}");
    let line = out.lines().find(|l| l.starts_with("[  PASSED  ] ")).unwrap_or_else(|| panic!("{out}"));
    line["[  PASSED  ] ".len()..].split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn the_googletest_suite_passes_against_a_router() {
    let d = Scratch::new("gtest");
    let build = d.0.join("build");
    ok(Command::new("cmake")
        .arg("-S")
        .arg(root().join("tests/cpp"))
        .arg("-B")
        .arg(&build)
        .arg(format!("-DTICKWIRE_LIB={}", lib().display()))
        .arg("-DCMAKE_BUILD_TYPE=Release"));
    ok(Command::new("cmake").arg("--build").arg(&build).args(["-j", "2"]));

    let router = Router::start(&d.0);
    let shm = d.0.join("shm");
    let mut total = 0;
    for (bin, at_least) in [("tickwire_cpp_tests", 10), ("tickwire_cpp17_tests", 1)] {
        let out = ok(Command::new(build.join(bin))
            .env("TICKWIRE_TEST_ROUTER", &router.uri)
            .env("TICKWIRE_TEST_DIR", &shm)
            .env("GTEST_COLOR", "no"));
        let n = passed(&out);
        assert!(n >= at_least, "{bin}: {n} passed\n{out}");
        total += n;
    }
    println!("GoogleTest: {total} passed against {}", router.uri);
}

#[test]
fn the_cpp_pubsub_example_round_trips_through_a_router() {
    let d = Scratch::new("pubsub");
    let bin = d.0.join("pubsub");
    compile(&root().join("examples/cpp/pubsub.cpp"), &bin);
    let router = Router::start(&d.0);
    let out = ok(Command::new(&bin).args([router.uri.as_str(), "md/cpp", "2000"]));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["published"], 2000, "{out}");
    assert_eq!(v["received"], 2000, "{out}");
    assert_eq!(v["in_order"], true, "{out}");
    assert!(v["connected_events"].as_u64().is_some(), "{out}");
    println!("C++ pubsub through the router: {out}");
}

#[test]
fn the_quick_start_in_docs_cpp_md_compiles_and_runs() {
    let doc = std::fs::read_to_string(root().join("docs/cpp.md")).unwrap();
    let start = doc.find("```cpp\n").expect("a C++ block") + "```cpp\n".len();
    let end = start + doc[start..].find("```").unwrap();
    let d = Scratch::new("quickstart");
    let src = d.0.join("quickstart.cpp");
    std::fs::write(&src, &doc[start..end]).unwrap();
    let bin = d.0.join("quickstart");
    compile(&src, &bin);
    let out = ok(Command::new(&bin).arg(d.0.join("shm")));
    assert_eq!(out, "md/eu/VOD bid 101.25\n");
}

#[test]
fn the_header_compiles_as_cpp17_and_cpp20_with_pedantic_warnings() {
    let d = Scratch::new("std");
    let src = d.0.join("header.cpp");
    std::fs::write(&src, "#include \"tickwire.hpp\"\n#include \"tickwire.hpp\"\nint main() { return 0; }\n").unwrap();
    for std in ["c++17", "c++20"] {
        ok(Command::new("g++")
            .args([&format!("-std={std}"), "-fsyntax-only", "-Wall", "-Wextra", "-Wpedantic", "-Werror", "-I"])
            .arg(root().join("include"))
            .arg(&src));
    }
}
