# Two entry points, each installs what it needs (scripts/setup.sh):
#   make demo   build release, run a publisher and a subscriber over IPC, print the latency table
#   make test   fmt check, clippy -D warnings, every unit/property/integration/multi-process test
SHELL := /bin/bash
CARGO_ENV := if [ -f $$HOME/.cargo/env ]; then . $$HOME/.cargo/env; fi;

.PHONY: setup build demo test bench crash ha fuzz clean fresh-check loom hostile nats-bench nats-lab install-c python python-test

setup:
	@./scripts/setup.sh

build: setup
	@$(CARGO_ENV) cargo build --release --workspace

demo: build
	@$(CARGO_ENV) ./scripts/demo.sh

test: setup
	@$(CARGO_ENV) cargo fmt --all -- --check
	@$(CARGO_ENV) cargo clippy --release --all-targets -- -D warnings
	@$(CARGO_ENV) cargo build --profile release-checked -p tickwire-preload
	@$(CARGO_ENV) cargo test --profile release-checked --workspace
	@$(CARGO_ENV) $(MAKE) --no-print-directory python-test PY_PROFILE=release-checked
	@$(CARGO_ENV) $(MAKE) --no-print-directory loom

# The shared-memory log's protocol under loom (every interleaving of the
# model in crates/shm/tests/loom_log.rs, with the product's orderings), in
# its own target directory.
loom:
	@$(CARGO_ENV) RUSTFLAGS="--cfg loom" cargo test --release -p tickwire-shm --test loom_log --target-dir target/loom

# Guaranteed delivery's long crash run (make test runs 20 cycles with os):
# the router kill -9'd 100 times under the os policy, then 30 under fsync;
# then a durable queue's consumers kill -9'd 20 times and its router 5
# (make test: 6 and 2).
crash: setup
	@$(CARGO_ENV) TICKWIRE_CRASH_CYCLES=100 cargo test --release -p tickwire-cli --test crash -- --nocapture
	@$(CARGO_ENV) TICKWIRE_CRASH_CYCLES=30 TICKWIRE_CRASH_SYNC=fsync cargo test --release -p tickwire-cli --test crash -- --nocapture
	@$(CARGO_ENV) TICKWIRE_QUEUE_KILLS=20 TICKWIRE_QUEUE_ROUTER_KILLS=5 cargo test --release -p tickwire-cli --test durable_queue -- --nocapture

# A high-availability group of three routers: its leader kill -9'd 20
# times under load (make test: 5), printing fail-over times; and its
# leader cut off by nft inside a namespace (no split brain).
ha: setup
	@$(CARGO_ENV) TICKWIRE_HA_CYCLES=20 cargo test --release -p tickwire-cli --test ha --test ha_partition -- --nocapture

# The router against hostile and broken clients, with the figures each
# test prints (make test runs the same tests, quietly): deadlines before
# login, heartbeats after it, oversize and dribbled frames, subscribers
# that never read, connection limits, and (the real binary under
# RLIMIT_NOFILE 256) descriptors running out; the router's memory
# (tests/memory.rs: idle clients, subscriptions coming and going, stalled
# subscribers, here for the issue's full 200,001 messages, 10 s, where
# make test publishes 100,000). One at a time, so the timings are the
# router's.
hostile: setup
	@$(CARGO_ENV) TICKWIRE_FLOOD_THREADS=20 TICKWIRE_FLOOD_SECONDS=10 cargo test --release -p tickwire-router --test deadlines --test heartbeats --test hostile_link --test logins --test limits --test queued_bytes --test metrics_hostile -- --nocapture --test-threads=1
	@$(CARGO_ENV) cargo test --release -p tickwire-cli --test limits -- --nocapture --test-threads=1
	@$(CARGO_ENV) TICKWIRE_MEMORY_MESSAGES=200001 cargo test --release -p tickwire-cli --test memory -- --nocapture --test-threads=1

# Every fuzz target under libFuzzer (nightly, installed if missing), each for
# FUZZ_SECONDS (default 60) or FUZZ_RUNS inputs; make test replays the corpus.
# The 10-million-input run recorded in docs/PERFORMANCE.md:
#   make fuzz FUZZ_RUNS=10000000 FUZZ_SECONDS=3600
fuzz: setup
	@$(CARGO_ENV) ./scripts/fuzz.sh

# The benchmark figures recorded in docs/PERFORMANCE.md.
bench: build
	@$(CARGO_ENV) ./scripts/bench.sh

# Does this machine build only because of a package installed by hand?
# (see CONTRIBUTING.md for a truly fresh clone)
fresh-check: setup
	@./scripts/fresh-check.sh

clean:
	@$(CARGO_ENV) cargo clean

# tickwire's C library: PREFIX/lib/libtickwire.a, PREFIX/include/tickwire.h,
# PREFIX/lib/pkgconfig/tickwire.pc (docs/c.md).
PREFIX ?= /usr/local
install-c: setup
	@$(CARGO_ENV) cargo build --release -p tickwire-ffi
	@./scripts/install-c.sh --prefix "$(PREFIX)"

# The router's NATS listener under the NATS project's own load generator
# (nats bench, from natscli), beside nats-server on the same CPUs,
# interleaved in rounds (installs natscli and nats-server into
# target/go-bin with the Go toolchain; docs/PERFORMANCE.md).
nats-bench: build
	@$(CARGO_ENV) ./scripts/nats-bench.sh

# Issue 36's latency figure: the NATS Go client (tools/nats-lab, on
# nats.go v1.55.0, built into target/go-bin with the Go toolchain) against
# tickwire's native TCP clients through the same router, 10 publishers x
# 10 subscribers, 100 bytes, at 50k, 100k and 500k msg/s, interleaved in
# rounds (floor, native, NATS); router on CPU 1, clients on CPU 0
# (docs/PERFORMANCE.md). RATES, DURATION (per rate), ROUNDS override.
nats-lab: build
	@$(CARGO_ENV) ./scripts/nats-lab.sh --run

# The Python binding: `pip install ./bindings/python` (maturin builds the
# wheel, cargo profile PY_PROFILE) into target/py-venv, which setup.sh
# made with maturin and pytest; then its pytest suite, which runs the
# examples in examples/python too (docs/python.md).
PY_PROFILE ?= release
PY_VENV := $(CURDIR)/target/py-venv
python: setup
	@$(CARGO_ENV) PATH="$(PY_VENV)/bin:$$PATH" MATURIN_PEP517_ARGS="--profile $(PY_PROFILE)" \
	  pip install -q --disable-pip-version-check --no-build-isolation --force-reinstall ./bindings/python

python-test: python
	@$(CARGO_ENV) cargo build --profile $(PY_PROFILE) -p tickwire-cli -p tickwire-ffi
	@PATH="$(PY_VENV)/bin:$$PATH" TICKWIRE_PROFILE=$(PY_PROFILE) timeout 600 pytest -q bindings/python/tests
