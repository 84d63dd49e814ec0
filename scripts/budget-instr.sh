#!/usr/bin/env bash
# Instructions per adaptive-poll-budget update (core-nostd budget::steady::Controller::update
# for `adaptive`, budget::Controller::update with Params::SEED for `adaptive-seed`),
# counted by callgrind over 1 000 000 steady-state updates (docs/PERFORMANCE.md).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000000}
cargo build --quiet --release -p copyrpc-core --example budget_instr
for params in adaptive seed; do
    f=$(mktemp)
    valgrind --tool=callgrind --callgrind-out-file="$f" target/release/examples/budget_instr "$n" "$params" >/dev/null 2>&1
    ir=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null | grep -E 'budget_instr::steady_(rate|seed)' | head -1 | awk '{gsub(",", "", $1); print $1}')
    rm -f "$f"
    echo "budget update ($params): $ir instructions for $n updates = $(echo "scale=1; $ir / $n" | bc) per update (loop and plant included)"
done
