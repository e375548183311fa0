#!/usr/bin/env bash
# Builds the NATS load generator of `tickwire lab router --nats`
# (tools/nats-lab, on github.com/nats-io/nats.go v1.55.0) into
# target/go-bin/nats-lab with the Go toolchain, and prints its path
# (`go build` redoes only what changed). The lab builds it the same way
# when given no --nats-lab / TICKWIRE_NATS_LAB.
#
#   scripts/nats-lab.sh            build, print the path
#   scripts/nats-lab.sh --run      `make nats-lab`: the issue 36 comparison,
#                                  NATS clients against native ones, 10 x 10
#                                  over TCP loopback at 50k, 100k and 500k msg/s
#
# --run's knobs: RATES=50k,100k,500k DURATION=6s ROUNDS=3 (DURATION is per
# rate over all rounds; floor, native and NATS rounds each take as long).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
go=$(command -v go || true)
[ -n "$go" ] || { [ -x /usr/local/go/bin/go ] && go=/usr/local/go/bin/go; }
[ -n "$go" ] || { echo "nats-lab: needs Go to build tools/nats-lab (https://go.dev/dl)" >&2; exit 1; }
bin="$root/target/go-bin/nats-lab"
(cd "$root/tools/nats-lab" && "$go" build -o "$bin" .)
if [ "${1:-}" != "--run" ]; then
  echo "$bin"
  exit 0
fi
tw="$root/target/release/tickwire"
[ -x "$tw" ] || (cd "$root" && cargo build --release -p tickwire-cli)
dir=$(mktemp -d /dev/shm/tw-nats-lab.XXXXXX)
trap 'rm -rf "$dir"' EXIT
set -x
"$tw" --dir "$dir" lab router --transport tcp --nats --nats-lab "$bin" \
  --publishers 10 --subscribers 10 --size 100 \
  --rate "${RATES:-50k,100k,500k}" --duration "${DURATION:-6s}" --rounds "${ROUNDS:-3}" \
  --cpus 0,1
