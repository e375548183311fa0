//! Compiles the XDP program (bpf/tickwire_xdp.c) with clang for the BPF
//! target; the object is embedded in the library (`include_bytes!`).

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "bpf/tickwire_xdp.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("tickwire_xdp.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    // Debian and Ubuntu keep <asm/types.h> under the multiarch directory.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror", "-I", &multiarch, "-c", src, "-o"])
        .arg(&out)
        .status()
        .unwrap_or_else(|e| {
            panic!("tickwire-xdp needs clang to build its XDP program ({clang}: {e}); `make setup` installs it")
        });
    assert!(status.success(), "clang failed to build {src} (exit {status})");
}
