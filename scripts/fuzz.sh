#!/usr/bin/env bash
# make fuzz: every fuzz target under libFuzzer (cargo-fuzz, nightly), each
# bounded in time (FUZZ_SECONDS, default 60) and optionally in inputs
# (FUZZ_RUNS, default -1: no bound). Installs the nightly toolchain and
# cargo-fuzz if missing. A crash stops the run with the input's path; copy
# it to fuzz/regressions/TARGET/ (make test replays it) and fix the cause.
# After each target the corpus is minimised (cargo fuzz cmin), so what is
# committed under fuzz/corpus stays small; make test replays it too.
# No sanitizer: the targets' crates forbid unsafe code, so AddressSanitizer
# finds nothing the Rust checks would not, at a third of the speed. Debug
# assertions are on, overflow checks with them: an overflow is a finding.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
# FUZZ_ASSERTIONS=0: without debug assertions (twice the inputs per second).
assertions=--debug-assertions
[ "${FUZZ_ASSERTIONS:-1}" = 0 ] && assertions=
runs=${FUZZ_RUNS:--1}
targets=${FUZZ_TARGETS:-"wire client cluster journal_record receiver sender xdp_frame accel_frame accel_demux nats nats_session"}
if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi
mkdir -p fuzz/logs
summary=${FUZZ_SUMMARY:-fuzz/logs/summary.txt}
: > "$summary"
for t in $targets; do
    mkdir -p "fuzz/corpus/$t"
    log="fuzz/logs/$t.log"
    echo "fuzz $t: up to ${seconds}s, runs ${runs} (-1: unbounded)"
    if ! cargo +nightly fuzz run --release $assertions --sanitizer none "$t" -- -max_total_time="$seconds" -runs="$runs" \
        -print_final_stats=1 -max_len=4096 > "$log" 2>&1; then
        tail -40 "$log"
        echo "fuzz $t FAILED: the crashing input is under fuzz/artifacts/$t/ (log: $log)"
        exit 1
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' || echo "$seconds")
    cargo +nightly fuzz cmin --release $assertions --sanitizer none "$t" >> "$log" 2>&1
    files=$(ls "fuzz/corpus/$t" | wc -l)
    echo "$t: $execs inputs in ${secs}s, no crash; corpus $files files after cmin" | tee -a "$summary"
done
echo "summary in $summary"
