#!/usr/bin/env bash
# Which atomic orderings do the loom models need? (issue 25)
#
# Weakens each non-Relaxed ordering in the shared-memory protocols (core-nostd/src/
# deleg, ipc, flux, the shm helpers they share, and ops' slot word) to Relaxed, one site at a time,
# rebuilds the loom models, and runs them until one fails. Prints one row per site:
# caught (by which model) or NOT caught. An ordering no model catches is either needed
# and unmodelled (write the model) or not needed (relax it in the code and say why).
# The source is restored after each site, and on exit or interrupt.
#
#   scripts/orderings.sh                   every site
#   scripts/orderings.sh deleg/server.rs   sites in files whose path contains this
#
#   ORDERINGS_MODELS="loom_deleg loom_deleg_races"   only these model files
#   ORDERINGS_TIMEOUT=300   seconds per model run; a model still running is reported as
#                           caught (timeout): a weakened ordering made it spin
#
# Not run in CI: one rebuild per site (about 40 sites, 20-40 s each plus the models).
# docs/TESTING.md records the last table.
set -euo pipefail
cd "$(dirname "$0")/.."

TIMEOUT=${ORDERINGS_TIMEOUT:-300}
filter=${1:-}
# Own target dir and a quicker profile (no LTO, parallel codegen): a rebuild per site
# dominates the run, and the models' speed matters less.
export CARGO_TARGET_DIR=target/loom-orderings RUSTFLAGS="--cfg loom" CARGO_TERM_COLOR=never
export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
export LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2}
# Every loom model file (as scripts/test.sh runs them), or those named in ORDERINGS_MODELS,
# tried in this order: the quick models that need no help from the scheduler first.
names=(${ORDERINGS_MODELS:-loom_deleg_races loom_ipc loom_flux $(ls core-nostd/tests/loom_*.rs |
  xargs -n1 basename | sed 's/\.rs$//' | grep -vxE 'loom_deleg_races|loom_ipc|loom_flux')})
models=()
for t in "${names[@]}"; do
  models+=(--test "$t")
done
log=target/orderings.log
mkdir -p target
: >"$log"

# One site per `Ordering::X` (X not Relaxed) occurrence: file, line, column of the match.
mapfile -t sites < <(
  grep -rnobE 'Ordering::(Acquire|Release|AcqRel|SeqCst)' core-nostd/src/{deleg,ipc,flux,shm,ops} \
    --include='*.rs' | grep -v '/tests.rs:' | grep -F -- "$filter" || true
)
[ ${#sites[@]} -gt 0 ] || { echo "no ordering sites match '$filter'" >&2; exit 2; }

backup=""
restore() {
  if [ -n "$backup" ]; then
    cp "$backup" "$current" && rm -f "$backup"
    backup=""
  fi
}
trap restore EXIT
trap 'restore; exit 130' INT TERM

# Test binaries and their tests, from an unmodified build.
binaries() {
  local out
  out=$(cargo test --release -p copyrpc-core "${models[@]}" --no-run --message-format=json \
    2>>"$log" | grep -o '"executable":"[^"]*"' | cut -d'"' -f4) || return 1
  for t in "${names[@]}"; do
    grep "/${t}-[0-9a-f]*\$" <<<"$out"
  done
}

# The label of a site: the nearest `R<n>`/`A<n>` naming comment at or above the line.
label() {
  local file=$1 line=$2
  local l
  l=$(head -n "$line" "$file" | tac | grep -m1 -oE '\b[RA][0-9]+'"'"'?' || true)
  l=${l%%$'\n'*}
  echo "${l:-?}"
}

echo "building the unmodified models" >&2
mapfile -t bins < <(binaries)
for b in "${bins[@]}"; do
  if ! "$b" --test-threads=1 >>"$log" 2>&1; then
    echo "the loom models fail on the unmodified source: see $log" >&2
    exit 1
  fi
done

printf '%-34s %-5s %-24s %s\n' site label weakened result
for s in "${sites[@]}"; do
  IFS=: read -r current line byte match <<<"$s"
  ord=${match#Ordering::}
  lab=$(label "$current" "$line")
  backup=$(mktemp)
  cp "$current" "$backup"
  # Replace exactly this occurrence (by byte offset), not others on the line.
  python3 - "$current" "$byte" "$match" <<'EOF'
import sys
path, off, match = sys.argv[1], int(sys.argv[2]), sys.argv[3]
data = open(path, 'rb').read()
assert data[off:off + len(match)] == match.encode(), (path, off)
open(path, 'wb').write(data[:off] + b'Ordering::Relaxed' + data[off + len(match):])
EOF
  result="NOT caught"
  if ! mapfile -t bins < <(binaries) || [ ${#bins[@]} -eq 0 ]; then
    result="does not build"
  else
    for b in "${bins[@]}"; do
      for t in $("$b" --list 2>/dev/null | sed -n 's/: test$//p'); do
        echo "== $current:$line $ord -> Relaxed: $(basename "$b") $t" >>"$log"
        set +e
        timeout "$TIMEOUT" "$b" --exact "$t" --test-threads=1 >>"$log" 2>&1
        rc=$?
        set -e
        if [ $rc -eq 124 ]; then
          result="caught (timeout) by $t"
        elif [ $rc -ne 0 ]; then
          result="caught by $t"
        fi
        [ "$result" = "NOT caught" ] || break 2
      done
    done
  fi
  restore
  printf '%-34s %-5s %-24s %s\n' "${current#core-nostd/src/}:$line" "$lab" "$ord -> Relaxed" "$result"
done
