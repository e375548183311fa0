#!/usr/bin/env bash
# Installs what building and testing tickwire needs on a fresh Debian/Ubuntu
# machine: a C toolchain (linker), iproute2 (network-namespace system tests),
# sockperf (the lab's kernel-UDP ping-pong is checked against it), clang and
# the libraries the AF_XDP crate builds against, and Rust
# (stable, with clippy and rustfmt).
# Idempotent: does nothing that is already done.
set -euo pipefail

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(build-essential)
command -v curl >/dev/null 2>&1 || need_apt+=(curl ca-certificates)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)   # network-namespace system tests
command -v sockperf >/dev/null 2>&1 || need_apt+=(sockperf)   # the lab is validated against it
command -v taskset >/dev/null 2>&1 || need_apt+=(util-linux)   # taskset, setpriv
command -v ping >/dev/null 2>&1 || need_apt+=(iputils-ping)   # the AF_XDP coexistence test
# AF_XDP (crates/xdp): clang builds the XDP program and, with libelf, zlib,
# m4 and pkg-config, the libxdp/libbpf that libxdp-sys vendors.
command -v clang >/dev/null 2>&1 || need_apt+=(clang llvm)
[ -f /usr/include/libelf.h ] || need_apt+=(libelf-dev)
[ -f /usr/include/zlib.h ] || need_apt+=(zlib1g-dev)
command -v m4 >/dev/null 2>&1 || need_apt+=(m4)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v make >/dev/null 2>&1 || need_apt+=(make)
[ -f /usr/include/linux/if_xdp.h ] || need_apt+=(linux-libc-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

if [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: installing Rust with rustup"
  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c clippy,rustfmt
  . "$HOME/.cargo/env"
fi
if command -v rustup >/dev/null 2>&1; then
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
fi
cargo --version
