#!/usr/bin/env bash
# What one side of the stepped echo spends its instructions on, per round (issue 24):
# callgrind with per-instruction counts over only that side's core functions, then
# scripts/instr_breakdown.py groups them (WQE build, doorbell, CQ, SRQ, metadata,
# credit, poll loop, ...). A round is one batch of calls and its responses.
#
#   scripts/instr-breakdown.sh SIDE BATCH ROUNDS PAYLOAD MODE PATTERN [--by-function]
#   scripts/instr-breakdown.sh a 1 4000 32 recv rounds     # the caller at batch 1
#   scripts/instr-breakdown.sh b 1 4000 32 inpoll rounds   # the answering side
#
# Divide by 2 x BATCH for instructions per message. The total equals what
# scripts/instr.sh counts for that side (same binary, same run).
set -euo pipefail
cd "$(dirname "$0")/.."
side=$1 batch=$2 rounds=$3 payload=$4 mode=$5 pattern=$6
shift 6
cargo build --quiet --release -p copyrpc-tests --bin copyrpc-instr
case $side in
  a) toggle=(--toggle-collect='copyrpc_tests::echo_rig::core_call*' --toggle-collect='copyrpc_tests::echo_rig::core_poll_caller*') ;;
  b) toggle=(--toggle-collect='copyrpc_tests::echo_rig::core_serve*') ;;
  *) echo "side: a or b" >&2; exit 2 ;;
esac
out=$(mktemp)
trap 'rm -f "$out"' EXIT
valgrind --tool=callgrind --dump-instr=yes --collect-atstart=no "${toggle[@]}" \
  --callgrind-out-file="$out" target/release/copyrpc-instr "$batch" "$rounds" "$payload" "$mode" "$pattern" >/dev/null 2>&1 \
  || { echo "copyrpc-instr $batch $rounds $payload $mode $pattern failed" >&2; exit 1; }
python3 scripts/instr_breakdown.py "$out" target/release/copyrpc-instr "$rounds" "$@"
