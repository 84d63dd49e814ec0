#!/usr/bin/env bash
# The README's test command: sets up what is missing, then runs every check.
#
#   scripts/test.sh               every step, in the order of --list (what CI runs)
#   scripts/test.sh STEP...       only these steps, in the order given (e.g. `loom miri`)
#   scripts/test.sh --list        the step names, one line each
#   scripts/test.sh -n STEP...    resolve the names and say what would run; run nothing
#   FUZZ_SECONDS=60 scripts/test.sh fuzz   longer fuzz runs (default 20 s per target)
#
# Each step prints its name at the start and its wall time at the end; the run ends with
# a table of every step's time. The first failing step stops the run (its output is
# above the table) and the script exits 1. An unknown step name exits 2 before anything
# runs. Running a step alone does not run `setup` first.
set -uo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-20}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# Open MPI refuses root and the 2-core machines need oversubscription (for the MPI tests).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1

# --- the steps -------------------------------------------------------------------------
# One function per step, `step_<name>` with `-` as `_`. Each runs with `set -e` in a
# subshell, so its first failing command ends it with that command's status.

step_setup() { scripts/setup.sh; }
step_fmt() { cargo fmt --all -- --check; }
step_clippy() { cargo clippy --quiet --workspace --all-targets -- -D warnings; }
step_workspace() { cargo test --workspace; }

step_nostd() {
  # The no_std crates must not name std or alloc outside test code. Test code (under
  # `#[cfg(test)]` or `#[cfg(all(test, ..))]`) is either a `mod tests { .. }` block at the
  # end of a file (so each file is scanned up to its first `#[cfg(test)]`) or a whole file
  # its parent declares `#[cfg(test)] mod NAME;` (skipped; a `tests.rs` must be one).
  local bad=0 f m parent
  for f in $(find core-nostd/src mlx5-raw/src -name '*.rs'); do
    m=$(basename "$f" .rs)
    parent=$(dirname "$f")/mod.rs
    [ -f "$parent" ] || parent=$(dirname "$f").rs
    [ -f "$parent" ] || parent=$(dirname "$f")/lib.rs
    if grep -B2 -E "^\s*mod $m;" "$parent" 2>/dev/null | grep -qE '#\[cfg\((all\()?test[,)]'; then
      continue
    fi
    if [ "$m" = tests ]; then
      echo "$f: not declared under #[cfg(test)] in $parent"; bad=1
      continue
    fi
    if awk '/#\[cfg\((all\()?test[,)]/{exit} {print FILENAME": "FNR": "$0}' "$f" \
        | grep -E '(^|[^_[:alnum:]])(std|alloc)::|extern crate (std|alloc)' ; then
      bad=1
    fi
  done
  [ "$bad" -eq 0 ] || { echo "error: std/alloc used outside tests in a no_std crate" >&2; return 1; }
  echo "no std/alloc outside tests in core-nostd and mlx5-raw"
}

step_layering() { scripts/check-layering.sh; }
step_citations() { scripts/check-citations.sh; }
step_comments() { scripts/check-comments.sh; }
step_selftest() {
  local t
  for t in scripts/tests/*.sh; do "$t"; done
}

step_bare() {
  local t
  for t in x86_64-unknown-none aarch64-unknown-none; do
    cargo build --quiet -p copyrpc-core -p mlx5-raw --target "$t"
    cargo build --quiet --release -p copyrpc-core -p mlx5-raw --target "$t"
    echo "built core-nostd + mlx5-raw for $t (debug and release)"
  done
}

step_freestanding() { linker/freestanding/check.sh; }
step_c_examples() { scripts/c-examples.sh; }

step_qemu() {
  # The no_std crates' tests (unit and integration, the mlx5dv.h cross-check included),
  # compiled for aarch64 Linux and run under qemu: the barrier bodies and any ordering
  # assumptions differ from x86. copyrpc_faults runs 250 of its 1 000 random-fault seeds
  # here (every fault kind still comes up; the native run above does all 1 000): under
  # qemu each seed costs what ten do natively. The credit proptest runs 2 500 of its
  # 10 000 cases for the same reason.
  FAULT_SEEDS=250 CREDIT_MODEL_CASES=2500 \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu" \
    cargo test --quiet --target aarch64-unknown-linux-gnu -p copyrpc-core -p mlx5-raw --tests
}

step_aarch64_linux() { scripts/aarch64-linux.sh; }

step_loom() {
  # Every lock-free protocol has a loom model in core-nostd/tests/loom_*.rs (compiled to
  # nothing without --cfg loom). Own target dir: --cfg loom would otherwise invalidate the
  # normal build cache on every run.
  local t models=()
  for t in core-nostd/tests/loom_*.rs; do
    [ -e "$t" ] && models+=(--test "$(basename "$t" .rs)")
  done
  [ "${#models[@]}" -gt 0 ] || { echo "no loom models found" >&2; return 1; }
  CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=${LOOM_MAX_PREEMPTIONS:-2} \
    cargo test --quiet --release -p copyrpc-core "${models[@]}"
}

step_bulk_faults() {
  BULK_FAULT_RUNS=1000 cargo test --quiet --release -p copyrpc-core --test bulk_faults seeded
}

step_miri() {
  # Miri checks the raw-memory driver code (pointer provenance, alignment, data races
  # between the fake device thread and the poller in the tests). Not layout_golden (its
  # module forbids unsafe) nor the mlx5dv.h cross-check (it runs a C compiler).
  MIRIFLAGS="-Zmiri-strict-provenance" cargo +nightly miri test --quiet -p mlx5-raw \
    --lib --test sq --test cq --test srq
  # The shm protocols' slot cells and region casts (their unit tests use tiny regions),
  # and copyrpc's in-place construction (the pending table's, and a whole context's).
  MIRIFLAGS="-Zmiri-strict-provenance" cargo +nightly miri test --quiet -p copyrpc-core \
    --lib -- deleg ipc flux shm pending
  MIRIFLAGS="-Zmiri-strict-provenance" cargo +nightly miri test --quiet -p copyrpc-core \
    --test copyrpc_rules -- a_large_context_is_built_in_place
}

step_benches() { cargo test --quiet --benches --workspace; }

step_fuzz() {
  cargo +nightly fuzz build --fuzz-dir fuzz -O
  local t
  for t in $(cargo +nightly fuzz list --fuzz-dir fuzz); do
    mkdir -p "fuzz/corpus/$t"
    cp -n fuzz/seeds/"$t"/* "fuzz/corpus/$t/" 2>/dev/null || true
    echo "fuzzing $t for ${FUZZ_SECONDS}s"
    local log="target/fuzz-$t.log"
    mkdir -p target
    if ! cargo +nightly fuzz run --fuzz-dir fuzz -O "$t" "fuzz/corpus/$t" -- \
          -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 >"$log" 2>&1; then
      tail -n 60 "$log" >&2
      echo "error: fuzz target $t failed (log: $log)" >&2
      return 1
    fi
    grep -E '^(Done|stat::number_of_executed_units)' "$log" || true
  done
}

step_rustdoc() {
  RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps -p copyrpc-core -p mlx5-raw
}

# The suite, in the order a full run takes it: name, then what it checks (for --list and
# the timing table).
STEPS=(
  "setup|installs what is missing (scripts/setup.sh)"
  "fmt|rustfmt --check"
  "clippy|clippy -D warnings, every target of the workspace"
  "workspace|cargo test --workspace (unit, golden, proptest, MPI, chaos)"
  "nostd|no_std crates: no std/alloc in sources outside tests"
  "layering|layering: core-nostd protocols import no sibling; benchkv imports only downward"
  "citations|spec citations point at files and sections in the repository"
  "comments|no instruction counts or session history in code comments"
  "selftest|scripts/tests: this script's interface, and the two source checks"
  "bare|no_std crates: bare-metal builds (x86_64, aarch64)"
  "freestanding|freestanding link + run (x86_64, aarch64/qemu)"
  "c-examples|C library: install, examples built with pkg-config, full-size runs"
  "qemu|no_std crates' tests on aarch64 (qemu)"
  "aarch64-linux|std binaries for aarch64 Linux: cross-build + qemu smoke run"
  "loom|loom models (core-nostd/tests/loom_*)"
  "bulk-faults|bulk: 1 000 seeded fault runs of mixed patterns (release)"
  "miri|miri: mlx5-raw, core-nostd shm protocols, Context::init"
  "benches|benches: each run once (criterion --test)"
  "fuzz|fuzz: build + bounded runs (FUZZ_SECONDS per target)"
  "rustdoc|rustdoc -D warnings (no_std crates)"
)

step_title() {
  local s
  for s in "${STEPS[@]}"; do
    [ "${s%%|*}" = "$1" ] && { printf '%s' "${s#*|}"; return 0; }
  done
  return 1
}

usage() {
  sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$0"
}

# --- arguments -------------------------------------------------------------------------
dry_run=0
wanted=()
for a in "$@"; do
  case "$a" in
    --list)
      for s in "${STEPS[@]}"; do printf '%-14s %s\n' "${s%%|*}" "${s#*|}"; done
      exit 0 ;;
    -n|--dry-run) dry_run=1 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "error: unknown option '$a' (scripts/test.sh --help)" >&2; exit 2 ;;
    *) wanted+=("$a") ;;
  esac
done
if [ "${#wanted[@]}" -eq 0 ]; then
  for s in "${STEPS[@]}"; do wanted+=("${s%%|*}"); done
fi
for name in "${wanted[@]}"; do
  if ! step_title "$name" >/dev/null; then
    echo "error: unknown step '$name' (scripts/test.sh --list names them)" >&2
    exit 2
  fi
  if ! declare -F "step_${name//-/_}" >/dev/null; then
    echo "error: step '$name' is listed but has no function step_${name//-/_}" >&2
    exit 3
  fi
done

if [ "$dry_run" -eq 1 ]; then
  for name in "${wanted[@]}"; do printf 'would run %-14s %s\n' "$name" "$(step_title "$name")"; done
  exit 0
fi

# --- the run ---------------------------------------------------------------------------
now() { printf '%s' "${EPOCHREALTIME/[,.]/}"; }   # microseconds
secs() { local us=$1; printf '%d.%d' $((us / 1000000)) $((us % 1000000 / 100000)); }

rows=()
run_start=$(now)
table() {
  local status=$1
  printf '\n\033[1m%s\033[0m\n' "$status"
  printf '  %-14s %9s  %s\n' step seconds "what it checks"
  printf '  %s\n' "${rows[@]}"
  printf '  %-14s %9s\n' total "$(secs $(( $(now) - run_start )))"
}

for name in "${wanted[@]}"; do
  title=$(step_title "$name")
  printf '\n\033[1m==> %s: %s\033[0m\n' "$name" "$title"
  t0=$(now)
  ( set -e; "step_${name//-/_}" )
  rc=$?
  dt=$(secs $(( $(now) - t0 )))
  if [ "$rc" -ne 0 ]; then
    printf '\033[1;31m<== %s FAILED (exit %d) after %ss\033[0m\n' "$name" "$rc" "$dt"
    rows+=("$(printf '%-14s %9s  %s  FAILED' "$name" "$dt" "$title")")
    table "Step '$name' failed:"
    exit 1
  fi
  printf '\033[1m<== %s: %ss\033[0m\n' "$name" "$dt"
  rows+=("$(printf '%-14s %9s  %s' "$name" "$dt" "$title")")
done

table "All ${#wanted[@]} steps passed:"
