#!/usr/bin/env bash
# Installs every system package that building and testing tickwire needs on
# a fresh Debian/Ubuntu machine, and Rust (stable, with clippy and rustfmt).
# Idempotent: does nothing that is already done.
#
#   scripts/setup.sh          install what is missing
#   scripts/setup.sh --list   print the Debian packages, one a line (the
#                             fresh-check test compares them with dpkg)
#   scripts/setup.sh --check  exit 1 naming every package not installed
#
# Never install a package by hand while developing: add it to PACKAGES below
# and run this script, so a fresh machine gets it too.
set -euo pipefail

# One line a package: name, then why.
PACKAGES=$(
  cat <<'EOF'
build-essential  C compiler and linker (Rust links with cc; libxdp's C build)
git              the source; `tickwire --version` names its commit
procps           kill, ps in the tests and scripts
curl             rustup download
ca-certificates  rustup download over TLS
iproute2         ip netns / veth pairs in the multi-host system tests
nftables         nft: the high-availability partition test cuts a leader off inside its namespace
util-linux       taskset (CPU pinning in the lab), setpriv (capability tests; acting as a second user), losetup and mount (journal durability test), prlimit (descriptors test)
e2fsprogs        mkfs.ext4: the journal durability test's loop-device filesystem
openssl          docs/operations.md's certificates (tests/operations.rs runs the page)
iputils-ping     the AF_XDP coexistence test pings through the XDP interface
sockperf         the lab's kernel-UDP ping-pong is checked against it; tickwire accel's tests run it
socat            tickwire accel's tests: an unmodified file transfer over UDP
netcat-openbsd   tickwire accel's tests: nc -u, an unmodified file transfer over UDP
clang            builds the XDP program (crates/xdp/bpf) and libxdp's BPF objects
llvm             llc/llvm-strip for libxdp's BPF objects
libelf-dev       libbpf (vendored by libbpf-sys/libxdp-sys)
zlib1g-dev       libbpf
libpcap-dev      libxdp's configure (vendored xdp-tools) requires pcap/dlt.h
m4               libxdp's configure
pkg-config       libxdp's configure
make             libxdp's build
linux-libc-dev   <linux/if_xdp.h> and <asm/types.h> for the XDP program
systemd          systemd-analyze verify checks deploy/systemd
prometheus       promtool checks deploy/prometheus rules
linux-perf       perf: the profiles in docs/PERFORMANCE.md
strace           strace -c: system calls per message
python3          the NATS protocol tests run the real Python NATS client (nats-py)
python3-venv     target/nats-venv, where nats-py is installed
libgtest-dev     GoogleTest (headers, libgtest.a, its CMake config) for the C++ wrapper's suite (tests/cpp)
cmake            builds the C++ GoogleTest suite (tests/cpp, crates/ffi/tests/cpp.rs)
valgrind         the C examples run under memcheck (crates/ffi/tests/c_examples.rs)
EOF
)
names() { awk '{print $1}' <<<"$PACKAGES"; }

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }

missing() {
  local p
  for p in $(names); do installed "$p" || echo "$p"; done
}

case "${1:-}" in
  --list)
    names
    exit 0
    ;;
  --check)
    m=$(missing)
    if [ -n "$m" ]; then
      echo "setup: not installed (run scripts/setup.sh): $(echo $m)" >&2
      exit 1
    fi
    echo "setup: all $(names | wc -l) packages installed"
    exit 0
    ;;
  "") ;;
  *)
    echo "usage: $0 [--list|--check]" >&2
    exit 2
    ;;
esac

need_apt=($(missing))
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing ${need_apt[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  # No service started by a package (prometheus) during the install.
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
  # The prometheus package starts a server where systemd runs; tickwire only
  # wants its promtool.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active -q prometheus 2>/dev/null; then
    $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
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

# The NATS front end's tests drive the router with the real, unmodified
# Python NATS client, installed here into a virtual environment of the
# build's own (nothing installed for the system's Python).
NATS_VENV="$(cd "$(dirname "$0")/.." && pwd)/target/nats-venv"
if ! "$NATS_VENV/bin/python" -c 'import nats' >/dev/null 2>&1; then
  echo "setup: installing nats-py into target/nats-venv"
  python3 -m venv "$NATS_VENV"
  "$NATS_VENV/bin/pip" install -q --disable-pip-version-check 'nats-py==2.16.0'
fi

# The Python binding (bindings/python) is built with maturin and tested with
# pytest, both installed here into a virtual environment of the build's own;
# `make python` installs the tickwire wheel into it.
PY_VENV="$(cd "$(dirname "$0")/.." && pwd)/target/py-venv"
if ! [ -x "$PY_VENV/bin/maturin" ] || ! "$PY_VENV/bin/python" -c 'import pytest' >/dev/null 2>&1; then
  echo "setup: installing maturin and pytest into target/py-venv"
  python3 -m venv "$PY_VENV"
  "$PY_VENV/bin/pip" install -q --disable-pip-version-check 'maturin==1.16.0' 'pytest==9.2.0'
fi
