#!/usr/bin/env bash
# The words of each context one batch-1 round touches, and the cache lines they fill
# (docs/PERFORMANCE.md, "A cold round's cache lines"): valgrind's lackey traces every
# memory access of `copyrpc-instr words`, and scripts/hot_words.py keeps the words of
# each context touched at least once a round.
#
#   scripts/hot-words.sh [ROUNDS [PAYLOAD [recv|flush|inpoll]]]    (300 32 recv, ~30 s)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-300} payload=${2:-32} mode=${3:-recv}
cargo build --quiet --release -p copyrpc-tests --bin copyrpc-instr
trace=$(mktemp)
trap 'rm -f "$trace"' EXIT
out=$(valgrind --tool=lackey --trace-mem=yes --log-file="$trace" \
  target/release/copyrpc-instr words "$rounds" "$payload" "$mode") \
  || { echo "copyrpc-instr words $rounds $payload $mode failed" >&2; exit 1; }
read -r _ a b bytes <<<"$(head -1 <<<"$out")"
a=${a#a=0x} b=${b#b=0x} bytes=${bytes#bytes=}
echo "copyrpc-instr words $rounds $payload $mode: words of each context touched every round"
python3 scripts/hot_words.py "$trace" "$rounds" "$a" "$b" "$bytes"
