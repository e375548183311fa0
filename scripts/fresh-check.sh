#!/usr/bin/env bash
# Does this machine build tickwire only because of something installed by
# hand? Checks that every package scripts/setup.sh names is installed, that
# every program and header the build and the tests use comes from one of
# them (crates/cli/tests/service.rs), and, given the package list of a new
# machine of this kind (IMAGE_LIST, one "apt<TAB>name<TAB>version" or one
# name a line), lists the packages installed by hand since: each is a
# dependency a new machine would lack unless setup.sh installs it.
#
#   make fresh-check [IMAGE_LIST=.../installed-go.txt]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --check
if [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi
cargo test --release -p tickwire-cli --test service setup_installs -- --nocapture 2>&1 | grep -E "setup.sh:|test result|panicked|not installed"

if [ -n "${IMAGE_LIST:-}" ]; then
  image=$(mktemp)
  wanted=$(mktemp)
  trap 'rm -f "$image" "$wanted"' EXIT
  awk -F'\t' '/^#/ {next} NF >= 2 && $1 == "apt" {print $2; next} NF == 1 {print $1}' "$IMAGE_LIST" | sort -u >"$image"
  # What setup.sh installs, with everything those packages depend on.
  apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances $(./scripts/setup.sh --list) 2>/dev/null |
    sed -E 's/^ *\|?(Pre)?Depends: //; s/^ +//; s/:.*//; s/[<>]//g' | sort -u >"$wanted"
  extra=$(apt-mark showmanual | sort -u | comm -23 - "$image" | comm -23 - "$wanted")
  if [ -n "$extra" ]; then
    echo "fresh-check: installed by hand, neither on a new machine nor installed by setup.sh:"
    echo "$extra" | sed 's/^/  /'
    echo "(if the build or a test uses one, add it to scripts/setup.sh; else ignore or remove it)"
  else
    echo "fresh-check: nothing installed by hand beyond the new machine's packages and setup.sh's"
  fi
fi
