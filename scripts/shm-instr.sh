#!/usr/bin/env bash
# Instructions per call of the shared-memory protocols (issue 53): the stepped one-thread
# rig host/examples/shm_instr.rs under callgrind. Each protocol's client calls a window of
# W calls, its server takes and answers them all, its client polls the answers; the
# inclusive cost of each of the three rig functions over all rounds, divided by the calls,
# is that step's instructions per call.
#
#   scripts/shm-instr.sh [ROUNDS]      (default 1000)
#
# Every protocol runs windows of 32 and of 1: delegationrpc (d_*), Flux (f_*), ipc (i_*)
# and the rtrb echo (r_*: two rtrb rings, a request and a response per call, the bench's
# baseline for ipc). The last columns are the raw
# inclusive counts, the form docs/PERFORMANCE.md has quoted for d_* and f_*.
#
# Callgrind counts instructions, not time: the figures repeat for the same binary whatever
# else the machine does (but for d_serve, whose deleg server reads the clock for its hole
# timer and varies by a few hundred instructions in a million).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-1000}
if ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
  echo "shm-instr.sh: ROUNDS must be a positive integer, got '$rounds'" >&2
  exit 2
fi
cargo build --quiet --release -p copyrpc-host --example shm_instr
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for w in 32 1; do
  if ! valgrind --tool=callgrind --callgrind-out-file="$out/cg.$w" \
    target/release/examples/shm_instr "$rounds" "$w" >/dev/null 2>&1; then
    echo "shm_instr $rounds $w failed under callgrind" >&2
    exit 1
  fi
  callgrind_annotate --inclusive=yes "$out/cg.$w" >"$out/ann.$w" 2>/dev/null
done
# Inclusive cost of rig function $2 in annotation $1, summed over its call sites (the
# "=> caller" lines: a function's own line names whichever inlined source file callgrind
# saw first, so it may be split or missing).
cost() {
  grep -E "=> .*shm_instr::$2 \\(" "$1" | awk '{gsub(",", "", $1); s += $1} END { print s + 0 }'
}
per() { awk -v c="$1" -v n="$2" 'BEGIN { printf "%.1f", c / n }'; }
printf '%-14s %6s %12s %12s %12s %12s   %s\n' protocol window "call/call" "serve/call" \
  "poll/call" "total/call" "inclusive call / serve / poll"
row() { # name prefix window
  local ann="$out/ann.$3" calls=$(( rounds * $3 ))
  local c s p
  c=$(cost "$ann" "$2_call"); s=$(cost "$ann" "$2_serve"); p=$(cost "$ann" "$2_poll")
  if [ "$c" = 0 ] || [ "$s" = 0 ] || [ "$p" = 0 ]; then
    echo "no callgrind cost for $2_call/$2_serve/$2_poll at window $3" >&2
    exit 1
  fi
  printf '%-14s %6s %12s %12s %12s %12s   %s / %s / %s\n' "$1" "$3" "$(per "$c" "$calls")" \
    "$(per "$s" "$calls")" "$(per "$p" "$calls")" "$(per $(( c + s + p )) "$calls")" "$c" "$s" "$p"
}
for w in 32 1; do
  row delegationrpc d $w
  row flux f $w
  row ipc i $w
  row rtrb-echo r $w
done
