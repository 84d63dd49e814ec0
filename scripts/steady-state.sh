#!/usr/bin/env bash
# A virtual-world figure as a steady state: one benchkv configuration run over several
# seeds, each for a warmup that no run counts and then a measured stretch, printing the
# median and the min–max over the seeds (docs/PERFORMANCE.md's virtual tables).
#
#   scripts/steady-state.sh LABEL BENCHKV-ARGS...
#   SEEDS=5 DURATION=20ms WARMUP=1ms JOBS=1 scripts/steady-state.sh ...   (the defaults)
#
# One line: LABEL, then per rank M req/s, daemon#0 of rank 0's CQE-batch mean and idle
# loops, and the p50 latency, each `median (min–max)`, and whether every seed drained.
# Each run is deterministic (same flags, same seed, same bytes); the seeds vary the
# clients' patterns and the turns' jitter streams.
set -euo pipefail
cd "$(dirname "$0")/.."
label=$1
shift
B=target/release/benchkv
[ -x "$B" ] || cargo build --quiet --release -p benchkv
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
seeds=$(seq 1 "${SEEDS:-5}")
for s in $seeds; do
    echo "$s"
done | xargs -P "${JOBS:-1}" -I{} sh -c \
    '"$0" "$@" --seed {} --duration "${DURATION:-20ms}" --warmup "${WARMUP:-1ms}" --output json >"'"$out"'/{}.json" 2>/dev/null || echo "seed {} failed" >&2' \
    "$B" "$@"
python3 - "$label" "$out" $seeds <<'PY'
import json, os, statistics, sys
label, out, seeds = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = []
for s in seeds:
    path = os.path.join(out, s + ".json")
    ls = [json.loads(l) for l in open(path) if l.strip()]
    run = [l for l in ls if l["type"] == "run"][0]
    m = [l for l in ls if l["type"] == "metrics"][0]
    summ = [l for l in ls if l["type"] == "summary"][0]
    np_ = len(run["per_rank"])
    rows.append((run["total_rps"] / 1e6 / np_, m["cqe_batch_mean"],
                 100 * m["idle_loops"] / max(1, m["loops"]), run["p50_ns"] / 1e3, summ["drained"]))
def stat(i, fmt):
    xs = [r[i] for r in rows]
    return ("%s (%s–%s)" % (fmt, fmt, fmt)) % (statistics.median(xs), min(xs), max(xs))
print("%s: %s M req/s per rank; CQE mean %s; idle %s %%; p50 %s us; drained %s; seeds %s"
      % (label, stat(0, "%.2f"), stat(1, "%.2f"), stat(2, "%.0f"), stat(3, "%.1f"),
         all(r[4] for r in rows), ",".join(seeds)))
PY
