#!/usr/bin/env bash
# The main job: a publisher and a subscriber over shared memory for a few
# seconds, live counters, then the latency table against the same-run floor.
set -euo pipefail
cd "$(dirname "$0")/.."
TW=./target/release/tickwire
DIR=${TICKWIRE_DIR:-/dev/shm/tickwire-demo}
"$TW" --dir "$DIR" clean >/dev/null

echo "== 1. publish 1M msg/s of 64-byte messages for 3 s; subscriber checks every sequence number"
"$TW" --dir "$DIR" sub --channel ipc:demo --stream 10 --verify --idle park --duration 5s &
SUB=$!
sleep 0.3
"$TW" --dir "$DIR" pub --channel ipc:demo --stream 10 --size 64 --rate 1M --duration 3s &
PUB=$!
sleep 1.5
echo "== 2. tickwire stat (read live from shared memory by another process)"
"$TW" --dir "$DIR" stat
wait $PUB
wait $SUB

echo
echo "== 3. tickwire lab pingpong --transport ipc --size 64 (half round trip, CPUs 0 and 1)"
"$TW" --dir "$DIR" lab pingpong --transport ipc --size 64 --count 300000 --cpus 0,1
echo
echo "== 4. tickwire lab throughput --transport ipc --size 32 --duration 3s"
"$TW" --dir "$DIR" lab throughput --transport ipc --size 32 --duration 3s
