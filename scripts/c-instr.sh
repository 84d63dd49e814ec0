#!/usr/bin/env bash
# Instructions per call of the C busy-poll loop (examples/c/busy_poll.c, both sides in one
# process) against its Rust twin on the core's API (linker/capi/examples/busy_poll_rs.rs):
# the same loop, payloads and checks, so the difference is what the C ABI adds.
# Callgrind counts instructions and nothing here depends on timing (one thread, the
# device model's instant links), so the figures repeat exactly.
#
#   scripts/c-instr.sh [CALLS]      (default 20000 per side)
#
# Each program runs with CALLS and 3 x CALLS calls per side; a figure is the difference
# of the two runs divided by the calls added (both sides'), so set-up cancels out.
# Rows: the whole process; the device model's step (the simulated NIC, absent on
# hardware); the rest (loop, library or core, harness); of the rest, the harness's
# payload fill (both call sites) and response check (with its own fill), the same code
# in both programs.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20000}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo build --quiet --release -p copyrpc-c --lib --example busy_poll_rs
target=${CARGO_TARGET_DIR:-target}
scripts/package-c.sh "$target/release/libcopyrpc.a" "$out/lib"
cc -O3 -g -I linker/include examples/c/busy_poll.c -L "$out/lib" -Wl,-rpath,"$out/lib" \
  -lcopyrpc -o "$out/busy_poll"

# Inclusive cost of the function called exactly $2 (as callgrind_annotate names it,
# file prefix aside) in callgrind file $1; 0 if absent. (awk reads to the end: an early
# exit would stop callgrind_annotate with SIGPIPE, which pipefail turns into a failure.)
cost() {
  callgrind_annotate --inclusive=yes "$1" 2>/dev/null | awk -v f="$2" '
    { line = $0; sub(/ \[[^]]*\]$/, "", line); n = split(line, p, ":")
      name = p[n]; if (n >= 2 && p[n - 1] == "") name = p[n - 2] "::" p[n]
      sub(/^.*\//, "", name) }
    !found && (name == f || line ~ (":" f "$")) { gsub(",", "", $1); c = $1; found = 1 }
    END { print found ? c : 0 }'
}
total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }'; }

declare -A v
run() { # key k cmd...
  local key=$1 k=$2; shift 2
  local f="$out/cg.$key.$k"
  valgrind --tool=callgrind --callgrind-out-file="$f" "$@" >/dev/null 2>&1 ||
    { echo "error: $* failed under callgrind" >&2; exit 1; }
  v[$key.total.$k]=$(total "$f")
}
for k in 1 3; do
  run c $k "$out/busy_poll" $((k * n)) 1
  f="$out/cg.c.$k"
  v[c.step.$k]=$(cost "$f" copyrpc_fabric_step)
  v[c.fill.$k]=$(cost "$f" fill)
  v[c.check.$k]=$(cost "$f" on_response)
  run rs $k "$target/release/examples/busy_poll_rs" $((k * n))
  f="$out/cg.rs.$k"
  v[rs.step.$k]=$(cost "$f" busy_poll_rs::step)
  v[rs.fill.$k]=$(cost "$f" busy_poll_rs::fill)
  v[rs.check.$k]=$(cost "$f" busy_poll_rs::on_response)
done
per() { awk -v a="${v[$1.$2.1]}" -v b="${v[$1.$2.3]}" -v n="$n" 'BEGIN { printf "%.1f", (b - a) / (4 * n) }'; }
rest() { awk -v t1="${v[$1.total.1]}" -v t3="${v[$1.total.3]}" -v s1="${v[$1.step.1]}" -v s3="${v[$1.step.3]}" -v n="$n" \
  'BEGIN { printf "%.1f", ((t3 - s3) - (t1 - s1)) / (4 * n) }'; }
printf '%-52s %10s %10s %8s\n' "instructions per call ($n and $((3 * n)) calls per side)" C Rust C/Rust
row() { printf '%-52s %10s %10s %8s\n' "$1" "$2" "$3" "$(awk -v c="$2" -v r="$3" 'BEGIN { printf "%.3f", c / r }')"; }
row "whole process" "$(per c total)" "$(per rs total)"
row "device model step" "$(per c step)" "$(per rs step)"
row "the rest: loop, library (C) or core (Rust), harness" "$(rest c)" "$(rest rs)"
row "  of which payload fill (both sites)" "$(per c fill)" "$(per rs fill)"
row "  of which response check (with its fill)" "$(per c check)" "$(per rs check)"
