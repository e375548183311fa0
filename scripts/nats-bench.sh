#!/usr/bin/env bash
# `make nats-bench`: the NATS project's own load generator (`nats bench`,
# natscli) against the router's NATS listener and, interleaved in the same
# rounds, against the NATS server itself on the same CPUs: one publisher,
# one subscriber, 100-byte messages. The server (router or nats-server)
# runs on CPU 1, both clients on CPU 0. The figure is the subscriber's
# rate (what arrived); the router runs with --slow-consumer back-pressure
# (its publisher is held rather than its subscriber's messages dropped;
# nats-server, which has no such policy, would cut a slow subscriber off).
#
#   ROUNDS=3 MSGS=1000000 SIZE=100 scripts/nats-bench.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$("$root/scripts/natscli.sh")"
tw="$root/target/release/tickwire"
[ -x "$tw" ] || (cd "$root" && cargo build --release -p tickwire-cli)
rounds=${ROUNDS:-3} msgs=${MSGS:-1000000} size=${SIZE:-100}
work=$(mktemp -d /tmp/tw-nats-bench.XXXXXX)
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

one() { # $1: tickwire | nats-server; prints the subscriber's msgs/sec
  local p; p=$(port)
  if [ "$1" = tickwire ]; then
    taskset -c 1 "$tw" --dir "$work/dir" router --no-ipc --no-tcp --nats-listen "127.0.0.1:$p" \
      --slow-consumer back-pressure >"$work/server.log" 2>&1 &
  else
    taskset -c 1 "$bin/nats-server" -a 127.0.0.1 -p "$p" >"$work/server.log" 2>&1 &
  fi
  server=$!
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && break; sleep 0.05; done
  local url="nats://127.0.0.1:$p"
  taskset -c 0 timeout 120 "$bin/nats" -s "$url" bench sub bench.x --msgs "$msgs" --size "$size" --no-progress \
    >"$work/sub.out" 2>&1 &
  local sub=$!
  sleep 0.5
  taskset -c 0 timeout 120 "$bin/nats" -s "$url" bench pub bench.x --msgs "$msgs" --size "$size" --no-progress \
    >"$work/pub.out" 2>&1
  wait "$sub" || true
  kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; server=""
  grep -o 'subscriber stats: [0-9,]* msgs/sec' "$work/sub.out" | grep -o '[0-9,]*' | head -1 | tr -d , || echo 0
}

echo "nats bench, 1 publisher -> 1 subscriber, $msgs x $size B, server on CPU 1, clients on CPU 0"
printf "%-6s %16s %16s %8s\n" round "tickwire msg/s" "nats-server msg/s" ratio
for r in $(seq "$rounds"); do
  a=$(one tickwire); b=$(one nats-server)
  ratio=$(python3 -c "print(f'{$a/$b:.2f}' if $b else '-')")
  printf "%-6s %16s %16s %8s\n" "$r" "$a" "$b" "$ratio"
done
