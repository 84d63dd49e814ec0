#!/usr/bin/env bash
# Instructions per message of copyrpc's core + mlx5 driver, the device model excluded
# (issue 4). Runs the stepped two-context echo (tests/src/echo_rig.rs) under callgrind at
# batch 1, 16 and 64 and divides the inclusive cost of each side's core functions by the
# messages that side handled (its requests or replies sent plus those it received).
#
#   scripts/instr.sh [MESSAGES_PER_SIDE]      (default 64000)
#
# Then two lines give the cost of one spin of a caller waiting on `Context::idle` (on
# fresh CQs, and on CQs that have gone round), one the cache lines an idle test touches
# when the loop around it ran other work, two the lines a batch-1 round touches on each
# side in that case, and the last two the driver-only floor.
#
# Payloads are 32 and 128 B: 64 calls of 512 B would need more response allowance than
# the 64 KiB ring's reservation cap (ring/4) grants, so the caller would be refused.
#
# Callgrind counts instructions, not time: the figures repeat exactly for the same
# binary whatever else the machine does.
set -euo pipefail
cd "$(dirname "$0")/.."
calls=$(( ${1:-64000} / 2 ))
cargo build --quiet --release -p copyrpc-tests --bin copyrpc-instr
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%-6s %-8s %-7s %-7s %12s %12s %12s %12s %12s %12s\n' batch payload "A calls" "B serves" "A: call" "A: poll" "B: serve" "device" "A instr/msg" "B instr/msg"
# Instructions per message, to one decimal: each side handles 2n messages.
per_msg() { awk -v c="$1" -v n="$2" 'BEGIN { printf "%.1f", c / (2 * n) }'; }
row() { # batch payload pattern mode
  local batch=$1 payload=$2 pattern=$3 mode=$4
  local f="$out/cg.$batch.$payload.$pattern.$mode"
  if ! valgrind --tool=callgrind --callgrind-out-file="$f" \
    target/release/copyrpc-instr "$batch" $(( calls / batch )) "$payload" "$mode" "$pattern" >/dev/null 2>&1; then
    echo "copyrpc-instr $batch $(( calls / batch )) $payload $mode $pattern failed" >&2
    exit 1
  fi
  local ann
  ann=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null)
  cost() { grep -E "echo_rig::$1 \[" <<<"$ann" | head -1 | awk '{gsub(",", "", $1); print $1}'; }
  local a_call a_poll b d n
  a_call=$(cost core_call); a_poll=$(cost core_poll_caller); d=$(cost device_step)
  if [ "$mode" = inpoll ]; then b=$(cost core_serve_in_poll); else b=$(cost core_serve); fi
  n=$(( (calls / batch) * batch ))   # calls made; each side handles 2n messages
  printf '%-6s %-8s %-7s %-7s %12s %12s %12s %12s %12s %12s\n' "$batch" "${payload}B" "$pattern" "$mode" \
    "$a_call" "$a_poll" "$b" "$d" "$(per_msg $(( a_call + a_poll )) "$n")" "$(per_msg "$b" "$n")"
}
for batch in 1 16 64; do
  for payload in 32 128; do
    # A in rounds (one batch in flight, wait for all) or a window of two batches;
    # B answering through recv + reply_with (the replies leave with its next poll, or
    # with `flush` at once), or inside poll with poll_serve.
    for pattern in rounds window; do
      for mode in recv flush inpoll; do
        # A window at batch 1 is the rounds pattern; two batches of 64 calls of 128 B
        # reserve more response allowance than the 64 KiB ring's cap (ring/4) grants.
        if [ "$pattern" = window ] && { [ "$batch" = 1 ] || { [ "$batch" = 64 ] && [ "$payload" = 128 ]; }; }; then
          continue
        fi
        row "$batch" "$payload" "$pattern" "$mode"
      done
    done
  done
done
# Inclusive cost of every call of function $2 in callgrind file $1, summed over its call
# sites: unlike the rows' `cost`, a small function's own line names whichever inlined
# source file callgrind saw first (or is missing), so its "[binary]" line holds only
# part of it.
calls_cost() { callgrind_annotate --inclusive=yes "$1" 2>/dev/null | grep -E "=> .*$2 \\(" | awk '{gsub(",", "", $1); s += $1} END { print s + 0 }'; }
# A client waiting: one call held unanswered, A spins on `Context::idle` and polls only
# when it says there is work (the default probe interval, so the probe clock runs and a
# READ goes out every 4096 polls). The figure is both functions' cost per spin. Twice:
# on fresh CQs, and after 2 048 answered calls (made outside the counted functions), when
# the slots the spin reads have held CQEs of an earlier lap, as in a context that has
# run a while.
polls=20000
for warm in 0 2048; do
  f="$out/cg.idle.$warm"
  spins=$(valgrind --tool=callgrind --callgrind-out-file="$f" target/release/copyrpc-instr idle "$polls" "$warm" 2>/dev/null \
    | sed -n 's/^spins=\([0-9]*\) .*/\1/p') \
    || { echo "copyrpc-instr idle $polls $warm failed" >&2; exit 1; }
  [ -n "$spins" ] || { echo "copyrpc-instr idle $polls $warm printed no spin count" >&2; exit 1; }
  idle=$(( $(calls_cost "$f" echo_rig::core_idle_spin) + $(calls_cost "$f" echo_rig::core_poll_caller) ))
  if [ "$warm" = 0 ]; then what="fresh CQs"; else what="after $warm calls, the CQs gone round"; fi
  echo "idle wait with a call pending, $what (A, $spins spins on Context::idle and the polls it asks for, the wait for the call included): $(awk -v c="$idle" -v n="$spins" 'BEGIN { printf "%.1f", c / n }') instr/spin"
done
# L1D misses (reads and writes) per unit in callgrind file $1 of a cache-simulated run,
# over $2 units.
l1d_misses() {
  awk '/^events:/ { for (i = 2; i <= NF; i++) col[$i] = i - 1 }
    /^summary:/ { printf "%.1f", ($(col["D1mr"] + 1) + $(col["D1mw"] + 1)) / n }' n="$2" "$1"
}
# The same wait in a poll loop that runs other work between its checks: each check of
# `Context::idle` follows a walk over 256 KiB, so nothing of the context is left in a
# 32 KiB L1D. Callgrind's cache simulation counts the check's L1D misses, reads and
# writes: the cache lines one idle test touches (the context's, and the two CQs' next
# CQEs), what such a loop reloads from farther out per check.
checks=2000
f="$out/cg.idle.cold"
valgrind --tool=callgrind --cache-sim=yes --D1=32768,8,64 --LL=8388608,16,64 \
  --collect-atstart=no --toggle-collect='copyrpc_tests::echo_rig::core_idle_check' \
  --callgrind-out-file="$f" target/release/copyrpc-instr idle-cold "$checks" 2048 >/dev/null 2>&1 \
  || { echo "copyrpc-instr idle-cold $checks 2048 failed" >&2; exit 1; }
lines=$(l1d_misses "$f" "$checks")
[ -n "$lines" ] || { echo "no cache-simulation summary in $f" >&2; exit 1; }
echo "cold idle test, after 2048 calls (A, $checks checks of Context::idle, each after a walk over 256 KiB; 32 KiB L1D): $lines cache lines per check (2 are the CQs' next CQEs)"
# A call's round trip when the loop ran other work before it: each round of one call
# follows a walk over 256 KiB, and the cache simulation counts each side's L1D misses
# in its core functions (rig stack frames included): the lines one round touches.
cold_side() { # side mode: lines per round
  local side=$1 mode=$2 toggle
  case $side in
    a) toggle=(--toggle-collect='copyrpc_tests::echo_rig::core_call*' --toggle-collect='copyrpc_tests::echo_rig::core_poll_caller*') ;;
    b) toggle=(--toggle-collect='copyrpc_tests::echo_rig::core_serve*') ;;
  esac
  local f="$out/cg.cold.$mode.$side"
  valgrind --tool=callgrind --cache-sim=yes --D1=32768,8,64 --LL=8388608,16,64 \
    --collect-atstart=no "${toggle[@]}" --callgrind-out-file="$f" \
    target/release/copyrpc-instr cold 1000 32 "$mode" >/dev/null 2>&1 \
    || { echo "copyrpc-instr cold 1000 32 $mode failed" >&2; return 1; }
  l1d_misses "$f" 1000
}
for mode in recv inpoll; do
  cold_a=$(cold_side a "$mode") && cold_b=$(cold_side b "$mode") || exit 1
  echo "cold round, batch 1, 32B $mode (1000 calls, each after a walk over 256 KiB; 32 KiB L1D): A $cold_a, B $cold_b cache lines per round"
done
# The floor under the batch-1 rows: the same echo at batch 1 written on the mlx5 driver
# alone, no RPC layer (tests/src/driver_echo.rs: the batch's bytes written and sent
# inline, the CQs and SRQ handled as copyrpc does, the rig's four turns a call). What
# any RPC layer on this driver pays here before its own logic.
for payload in 32 128; do
  f="$out/cg.driver.$payload"
  valgrind --tool=callgrind --callgrind-out-file="$f" target/release/copyrpc-instr driver "$calls" "$payload" >/dev/null 2>&1 \
    || { echo "copyrpc-instr driver $calls $payload failed" >&2; exit 1; }
  d_a=$(( $(calls_cost "$f" driver_echo::driver_call) + $(calls_cost "$f" driver_echo::driver_poll_caller) ))
  d_b=$(calls_cost "$f" driver_echo::driver_serve)
  echo "driver-only floor, batch 1, ${payload}B (no RPC layer): A $(per_msg "$d_a" "$calls") instr/msg, B $(per_msg "$d_b" "$calls") instr/msg"
done
