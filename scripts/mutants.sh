#!/usr/bin/env bash
# Mutation testing of copyrpc-core's protocol arithmetic with cargo-mutants (issue 25):
# every mutant a test does not kill is a line whose breakage no test would notice.
# Not run in CI: on a 2-core machine a module takes tens of minutes.
#
#   scripts/mutants.sh [MODULE...]        default: wire ring credit copyrpc; also ops, bulk,
#                                          budget, deleg, ipc, flux, shm, mlx5 (the
#                                          driver's host side, in mlx5-raw) and sim (its
#                                          device model)
#   scripts/mutants.sh copyrpc/rx.rs copyrpc/tx   one file or folder of a module each
#                                          (a module too large for one sitting, run in parts)
#   scripts/mutants.sh --check             only check the exclusions (below), in a second
#
# Exclusions: .cargo/mutants.toml (patterns naming no position) and
# .cargo/mutants-equivalent.toml (one mutant each, anchored on file, function and line
# of code), resolved by scripts/mutants_exclusions.py against `cargo mutants --list`.
# A run refuses to start, exit 2, when any of them matches nothing (or, anchored, another
# number of mutants than it says): code moved or changed under it, and it must be
# argued again rather than hide nothing, or another mutant.
#
#   MUTANTS_BUDGET=3600   total seconds for the whole run, shared equally by the modules
#                         left; a module stopped by its share reports the shuffled sample
#                         it finished and says so
#   MUTANTS_TIMEOUT=60    seconds per mutant's test run (a mutant that loops is a kill)
#   MUTANTS_JOBS=1        mutants built and tested at once
#   MUTANTS_FAULT_SEEDS=100  copyrpc_faults' random-fault seeds in the first pass (its
#                         default, 1 000, is most of a surviving mutant's time); every
#                         mutant that pass misses is tested again at 1 000 seeds, so the
#                         smaller count can only cost time, never a kill
#
# Each module is tested against the test targets that exercise it (the whole crate's
# suite per mutant would take about a minute each, most of it the fault-injection test
# that no arithmetic mutant reaches first). Results go to target/mutants/<module>/
# mutants.out/ (caught.txt, missed.txt, timeout.txt, unviable.txt); the score printed is
# caught (timeouts included) over viable mutants. docs/TESTING.md records the last run
# and explains each surviving mutant.
set -euo pipefail
cd "$(dirname "$0")/.."

BUDGET=${MUTANTS_BUDGET:-3600}
TIMEOUT=${MUTANTS_TIMEOUT:-60}
JOBS=${MUTANTS_JOBS:-1}
modules=("$@")
[ ${#modules[@]} -gt 0 ] || modules=(wire ring credit copyrpc)
[ "${modules[0]}" != --check ] || modules=()

if ! cargo mutants --version >/dev/null 2>&1; then
  echo "cargo-mutants is missing: cargo install cargo-mutants --locked" >&2
  exit 2
fi

# The anchored exclusions, as --exclude-re of the mutants' current names; refuses to go
# on when an exclusion matches nothing.
if ! excluded=$(python3 scripts/mutants_exclusions.py --args); then
  echo "mutants: fix the exclusions above first (scripts/mutants.sh --check)" >&2
  exit 2
fi
mapfile -t excluded <<<"$excluded"
if [ "${1:-}" = --check ]; then
  echo "mutants: every exclusion matches (${#excluded[@]} anchored mutants)"
  exit 0
fi

# Test targets per module: the unit tests always, plus the integration tests that drive
# the module (directly, or end to end through copyrpc on the device model).
targets() {
  local t=(--lib)
  case ${1%%/*} in
    wire) t+=(--test wire_views --test wire_golden --test wire_props --test wire_structured) ;;
    ring) t+=(--test ring_props --test copyrpc_wrap --test copyrpc_edges) ;;
    credit) t+=(--test credit_model --test copyrpc_credit --test copyrpc_edges
                --test copyrpc_echo) ;;
    copyrpc) t+=(--test copyrpc_alloc --test copyrpc_api --test copyrpc_credit
                 --test copyrpc_echo --test copyrpc_edges --test copyrpc_faults
                 --test copyrpc_hygiene --test copyrpc_raw --test copyrpc_rules --test copyrpc_serve
                 --test copyrpc_wrap) ;;
    # Completion ownership and the bulk patterns: their unit tests and the bulk rig on
    # the device model (the loom model of the slot word needs --cfg loom: not here).
    ops | bulk) t+=(--test bulk_faults --test bulk_patterns) ;;
    # The adaptive poll budget's controller (issue 18): a pure state machine, driven by
    # its unit tests (benchkv's virtual world runs it too, but in another crate).
    budget) ;;
    # The shared-memory protocols and the pieces they share: their unit tests only (the
    # loom models need --cfg loom, and host's tests of them live in another crate).
    deleg | ipc | flux | shm) ;;
    # The driver, and its device model: every mlx5-raw test target (2 s in all), so
    # no --lib restriction.
    mlx5 | sim) t=() ;;
    *) echo "unknown module '$1' (wire, ring, credit, copyrpc, ops, bulk, budget, deleg, ipc, flux, shm, mlx5, sim)" >&2; exit 2 ;;
  esac
  [ ${#t[@]} -eq 0 ] || printf '%s\n' "${t[@]}" | sed -z 's/--test\n/--test=/g'
}

# The shared-memory protocols' unit tests reach none of the other modules: skipped,
# except the module under test's own (all of them for shm, which they stand on).
skips() {
  local m=${1%%/*} p
  [ "$m" = shm ] || [ "$m" = mlx5 ] || [ "$m" = sim ] && return 0
  for p in deleg ipc flux; do
    [ "$p" = "$m" ] || printf -- '--skip\n%s::\n' "$p"
  done
}

# Line tables only: linking the test binaries is most of a mutant's build time. No
# shrinking: a mutant is killed by the first failing case, and shrinking it only costs.
export CARGO_PROFILE_DEV_DEBUG=line-tables-only CARGO_TERM_COLOR=never
export PROPTEST_MAX_SHRINK_ITERS=1
export FAULT_SEEDS=${MUTANTS_FAULT_SEEDS:-100}

deadline=$((SECONDS + BUDGET))
summary=()
todo=${#modules[@]}
for m in "${modules[@]}"; do
  # As cargo arguments, so the build step compiles only these targets too.
  mapfile -t args < <(targets "$m" | sed 's/^/--cargo-arg=/')
  mapfile -t skip < <(skips "$m")
  # An equal share of what is left, so every module gets a (shuffled, so unbiased)
  # sample when the budget cannot cover them all.
  left=$(((deadline - SECONDS) / todo))
  todo=$((todo - 1))
  if [ "$left" -le 0 ]; then
    summary+=("$(printf '%-8s not run: the %ss budget was spent' "$m" "$BUDGET")")
    continue
  fi
  # `copyrpc/rx.rs` mutates that file; `copyrpc/tx` or `wire` every file below it.
  # mlx5 is the driver's host side; sim its device model (what every copyrpc test runs
  # on: a model that drifts from the hardware hides driver bugs), its own tests excluded.
  pkg=copyrpc-core
  if [ "$m" = mlx5 ]; then
    pkg=mlx5-raw
    files=(-f mlx5-raw/src/cq.rs -f mlx5-raw/src/srq.rs -f 'mlx5-raw/src/layout/*.rs'
           -f 'mlx5-raw/src/sq/*.rs' -f mlx5-raw/src/mem.rs -f mlx5-raw/src/bf.rs
           -f mlx5-raw/src/barrier.rs)
  elif [ "$m" = sim ]; then
    pkg=mlx5-raw
    files=(-f 'mlx5-raw/src/sim/*.rs' -e mlx5-raw/src/sim/tests.rs)
  elif [[ $m == *.rs ]]; then files=(-f "core-nostd/src/$m"); else files=(-f "core-nostd/src/$m/**"); fi
  out=target/mutants/${m//\//_}
  mkdir -p "$out"
  t0=$SECONDS
  status=0
  timeout --signal=INT --kill-after=30 "$left" \
    cargo mutants -p "$pkg" "${files[@]}" --shuffle -j "$JOBS" \
      --timeout "$TIMEOUT" --build-timeout 300 --output "$out" "${excluded[@]}" "${args[@]}" \
      -- -- "${skip[@]}" ||
    status=$?
  dir=$out/mutants.out
  # grep -c prints 0 (and fails) for an empty file.
  count() { if [ -f "$dir/$1" ]; then grep -c . "$dir/$1" || true; else echo 0; fi; }
  caught=$(count caught.txt) missed=$(count missed.txt)
  timeouts=$(count timeout.txt) unviable=$(count unviable.txt)
  # Second pass: the survivors again, with copyrpc_faults at its full seed count.
  # Only where copyrpc_faults is one of the module's targets: elsewhere it would rerun
  # the same tests.
  if [ "$missed" -gt 0 ] && [ "$FAULT_SEEDS" -lt 1000 ] && [[ " ${args[*]} " == *copyrpc_faults* ]]; then
    # Each survivor's name as an anchored regex (metacharacters escaped).
    mapfile -t again < <(sed -e 's/[][\\.*+?(){}|^$]/\\&/g' -e 's/.*/--re=^&$/' "$dir/missed.txt")
    status2=0
    FAULT_SEEDS=1000 cargo mutants -p "$pkg" "${files[@]}" -j "$JOBS" --timeout "$TIMEOUT" \
      --build-timeout 300 --output "$out/second" "${again[@]}" "${excluded[@]}" "${args[@]}" \
      -- -- "${skip[@]}" || status2=$?
    d2=$out/second/mutants.out
    if [ -f "$d2/missed.txt" ] || [ -f "$d2/caught.txt" ]; then
      late=$( (cat "$d2/caught.txt" "$d2/timeout.txt" 2>/dev/null || true) | grep -c . || true)
      echo "== $m: second pass at FAULT_SEEDS=1000 caught $late of $missed (exit $status2)"
      caught=$((caught + late))
      missed=$((missed - late))
      cp "$d2/missed.txt" "$dir/missed.txt" 2>/dev/null || : >"$dir/missed.txt"
    fi
  fi
  viable=$((caught + missed + timeouts))
  note=""
  # cargo-mutants exits 2 when mutants were missed, 3 on timeouts: both are results.
  total=$(cargo mutants -p "$pkg" "${files[@]}" "${excluded[@]}" --list 2>/dev/null | grep -c . || true)
  case $status in
    0 | 2 | 3) ;;
    124 | 130) note=" (stopped by the budget: $((viable + unviable)) of $total mutants, a random sample)" ;;
    *) note=" (cargo mutants exit $status)" ;;
  esac
  score=$(awk -v c=$((caught + timeouts)) -v v=$viable 'BEGIN { if (v) printf "%.1f%%", 100 * c / v; else print "n/a" }')
  summary+=("$(printf '%-8s score %6s  caught %3s  timeout %2s  missed %3s  unviable %3s  %5ss%s' \
    "$m" "$score" "$caught" "$timeouts" "$missed" "$unviable" $((SECONDS - t0)) "$note")")
  if [ "$missed" -gt 0 ]; then
    echo "== $m: surviving mutants"
    cat "$dir/missed.txt"
  fi
done
echo
printf '%s\n' "${summary[@]}"
