#!/usr/bin/env bash
# The README's test command: sets up what is missing, then runs every check.
#
#   scripts/test.sh            everything (what CI runs)
#   FUZZ_SECONDS=60 scripts/test.sh   longer fuzz runs (default 20 s per target)
#
# Each step prints its name and time; the first failure stops the run with its output.
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS=${FUZZ_SECONDS:-20}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# Open MPI refuses root and the 2-core machines need oversubscription (for the MPI tests).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1

steps_done=()
step() {
  local name=$1; shift
  printf '\n\033[1m==> %s\033[0m\n' "$name"
  local t0=$SECONDS
  "$@"
  steps_done+=("$(printf '%-48s %4ss' "$name" $((SECONDS - t0)))")
}

nostd_sources_clean() {
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
}

bare_builds() {
  local t
  for t in x86_64-unknown-none aarch64-unknown-none; do
    cargo build --quiet -p copyrpc-core -p mlx5-raw --target "$t"
    cargo build --quiet --release -p copyrpc-core -p mlx5-raw --target "$t"
    echo "built core-nostd + mlx5-raw for $t (debug and release)"
  done
}

aarch64_tests() {
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

fuzz_all() {
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

loom_models() {
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

miri_unsafe() {
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

step "setup (installs what is missing)"      scripts/setup.sh
step "rustfmt"                                cargo fmt --all -- --check
step "clippy -D warnings"                     cargo clippy --quiet --workspace --all-targets -- -D warnings
step "cargo test --workspace"                 cargo test --workspace
step "no_std crates: no std/alloc in sources" nostd_sources_clean
step "core-nostd layering: protocols import no sibling" scripts/check-layering.sh
step "no_std crates: bare-metal builds"       bare_builds
step "freestanding link + run (x86_64, aarch64/qemu)" linker/freestanding/check.sh
step "C library: install, examples built with pkg-config, full-size runs" scripts/c-examples.sh
step "no_std crates' tests on aarch64 (qemu)"  aarch64_tests
step "std binaries for aarch64 Linux: cross-build + qemu smoke run" scripts/aarch64-linux.sh
step "loom models (core-nostd/tests/loom_*)"   loom_models
step "bulk: 1 000 seeded fault runs of mixed patterns (release)" \
  env BULK_FAULT_RUNS=1000 cargo test --quiet --release -p copyrpc-core --test bulk_faults seeded
step "miri: mlx5-raw, core-nostd shm protocols, Context::init" miri_unsafe
step "benches: each run once (criterion --test)" cargo test --quiet --benches --workspace
step "fuzz: build + bounded runs"             fuzz_all
# The mutation-testing exclusions still name the code they were argued for (a second;
# needs cargo-mutants, which scripts/mutants.sh runs with, so only when it is installed).
mutant_exclusions() {
  if cargo mutants --version >/dev/null 2>&1; then
    scripts/mutants.sh --check
  else
    echo "skipped: cargo-mutants is not installed (cargo install cargo-mutants --locked)"
  fi
}
step "mutants: every exclusion matches its code" mutant_exclusions
step "rustdoc -D warnings (no_std crates)"    env RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps -p copyrpc-core -p mlx5-raw

printf '\n\033[1mAll checks passed:\033[0m\n'
printf '  %s\n' "${steps_done[@]}"
