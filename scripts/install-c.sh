#!/usr/bin/env bash
# Installs tickwire's C library in the usual layout:
#   PREFIX/lib/libtickwire.so and libtickwire.a, PREFIX/include/tickwire.h
#   (and tickwire.hpp), PREFIX/lib/pkgconfig/tickwire.pc
# `make install-c PREFIX=/usr/local` builds the library and runs this.
#   scripts/install-c.sh --prefix DIR [--lib PATH/libtickwire.a] [--shared PATH/libtickwire.so]
# pkg-config --libs tickwire links the shared library (the program then
# finds it through ld.so's path: ldconfig, or LD_LIBRARY_PATH);
# the archive's system libraries are pkg-config --static --libs's (link
# PREFIX/lib/libtickwire.a by its path).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
prefix="" lib="$root/target/release/libtickwire.a" shared="$root/target/release/libtickwire.so"
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="$2"; shift 2 ;;
    --lib) lib="$2"; shift 2 ;;
    --shared) shared="$2"; shift 2 ;;
    *) echo "install-c: unknown argument $1 (--prefix DIR [--lib FILE] [--shared FILE])" >&2; exit 2 ;;
  esac
done
[ -n "$prefix" ] || { echo "install-c: --prefix DIR is required" >&2; exit 2; }
for f in "$lib" "$shared"; do
  [ -f "$f" ] || { echo "install-c: $f missing: cargo build --release -p tickwire-ffi" >&2; exit 1; }
done
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)
install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0644 "$lib" "$prefix/lib/libtickwire.a"
install -m 0755 "$shared" "$prefix/lib/libtickwire.so"
for h in tickwire.h tickwire.hpp; do
  if [ -f "$root/include/$h" ]; then install -m 0644 "$root/include/$h" "$prefix/include/$h"; fi
done
cat >"$prefix/lib/pkgconfig/tickwire.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: tickwire
Description: low-latency messaging: shared-memory and reliable UDP channels, router clients
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -ltickwire
Libs.private: -lelf -lz -lutil -lrt -lpthread -lm -ldl
PC
echo "installed tickwire $version in $prefix (pkg-config: PKG_CONFIG_PATH=$prefix/lib/pkgconfig)"
