#!/usr/bin/env bash
# The commands behind docs/PERFORMANCE.md. Each latency/throughput figure is
# printed with the floor measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
TW=./target/release/tickwire
"$TW" lab floor --count 1000000 --duration 5s --json
"$TW" lab pingpong --transport ipc --size 64 --count 1000000 --cpus 0,1 --json --strict
"$TW" lab throughput --transport ipc --size 32 --duration 5s --json --strict
# The router (paper 001's scenario) beside its forwarding floor; the ten-minute
# run of docs/PERFORMANCE.md is `lab router --rate 1M --duration 10m --rounds 20`.
"$TW" lab topic-match
"$TW" lab router --rate 100k,1M,2M,5M --duration 10s --rounds 5 --strict
"$TW" lab router --fanout --rate 100k,200k,500k --duration 6s --rounds 3 --strict
"$TW" lab router --transport tcp --rate 10k,50k,100k --duration 6s --rounds 3 --strict
# AF_XDP across a veth pair against kernel UDP in the same run (root). Kernel
# UDP is the baseline here, which AF_XDP is built to beat: no --strict.
"$TW" lab pingpong --transport xdp --netns --size 64 --spin
"$TW" lab pingpong --transport rudp --netns --param xdp=required --size 64 --spin
"$TW" lab throughput --transport xdp --size 64 --duration 10s --rounds 5
