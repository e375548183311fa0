#!/usr/bin/env bash
# The commands behind docs/PERFORMANCE.md. Each latency/throughput figure is
# printed with the floor measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
TW=./target/release/tickwire
"$TW" lab floor --count 1000000 --duration 5s --json
"$TW" lab pingpong --transport ipc --size 64 --count 1000000 --cpus 0,1 --json
"$TW" lab throughput --transport ipc --size 32 --duration 5s --json
