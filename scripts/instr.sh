#!/usr/bin/env bash
# Instructions per message of copyrpc's core + mlx5 driver, the device model excluded
# (issue 4). Runs the stepped two-context echo (tests/src/echo_rig.rs) under callgrind at
# batch 1, 16 and 64 and divides the inclusive cost of each side's core functions by the
# messages that side handled (its requests or replies sent plus those it received).
#
#   scripts/instr.sh [MESSAGES_PER_SIDE]      (default 64000)
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
printf '%-6s %-8s %-7s %12s %12s %12s %12s %12s %12s\n' batch payload "B serves" "A: call" "A: poll" "B: serve" "device" "A instr/msg" "B instr/msg"
for batch in 1 16 64; do
  for payload in 32 128; do
    # B answers through recv + reply_with, or inside poll with poll_serve.
    for mode in recv inpoll; do
      f="$out/cg.$batch.$payload.$mode"
      valgrind --tool=callgrind --callgrind-out-file="$f" \
        target/release/copyrpc-instr "$batch" $(( calls / batch )) "$payload" "$mode" >/dev/null 2>&1
      ann=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null)
      cost() { grep -E "echo_rig::$1 \[" <<<"$ann" | head -1 | awk '{gsub(",", "", $1); print $1}'; }
      a_call=$(cost core_call); a_poll=$(cost core_poll_caller); d=$(cost device_step)
      if [ "$mode" = recv ]; then b=$(cost core_serve); else b=$(cost core_serve_in_poll); fi
      n=$(( (calls / batch) * batch ))   # calls made; each side handles 2n messages
      printf '%-6s %-8s %-7s %12s %12s %12s %12s %12s %12s\n' "$batch" "${payload}B" "$mode" "$a_call" "$a_poll" "$b" "$d" \
        "$(( (a_call + a_poll) / (2 * n) ))" "$(( b / (2 * n) ))"
    done
  done
done
