#!/usr/bin/env bash
# Installs the NATS command line (natscli, `nats bench`) and the NATS
# server (the reference `make nats-bench` compares with) into
# target/go-bin from the Go module proxy, if they are not there yet;
# prints the directory. `make nats-bench` loads the router's NATS listener
# with the NATS project's own load generator.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="$root/target/go-bin"
if [ ! -x "$bin/nats" ]; then
  command -v go >/dev/null 2>&1 || { echo "natscli: needs Go (https://go.dev/dl)" >&2; exit 1; }
  echo "natscli: installing github.com/nats-io/natscli/nats@v0.5.0 into target/go-bin" >&2
  GOBIN="$bin" go install github.com/nats-io/natscli/nats@v0.5.0
fi
if [ ! -x "$bin/nats-server" ]; then
  echo "natscli: installing github.com/nats-io/nats-server/v2@v2.15.2 into target/go-bin" >&2
  GOBIN="$bin" go install github.com/nats-io/nats-server/v2@v2.15.2
fi
echo "$bin"
