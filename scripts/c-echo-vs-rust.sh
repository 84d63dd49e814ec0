#!/usr/bin/env bash
# The C echo (examples/c/echo.c over libcopyrpc: an engine thread per process, a loop that
# yields when a pass does nothing), the C busy-poll loop (examples/c/busy_poll.c: manual
# stepping, never yields) and the Rust echo (copyrpc-echo under mpirun), alternated RUNS
# times (default 5) in one go so all three see the same machine. All: two processes,
# CALLS calls each way (default 1 000 000), 16 in flight, payloads cycling up to 1024 B,
# the sim fabric, rank r on CPU r. Prints rank 0's calls/s per run, the medians, and each
# against the Rust echo. Used for docs/PERFORMANCE.md (the C library's sections).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-5}
calls=${CALLS:-1000000}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1
prefix=$(mktemp -d /tmp/copyrpc-c-perf.XXXXXX)
trap 'rm -rf "$prefix"' EXIT
scripts/install-c.sh "$prefix" >/dev/null
cargo build --quiet --release -p copyrpc-host --bin copyrpc-echo
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cc -O3 $(pkg-config --cflags --libs copyrpc) examples/c/echo.c -o "$prefix/echo"
cc -O3 $(pkg-config --cflags --libs copyrpc) examples/c/busy_poll.c -o "$prefix/busy_poll"
rust=${CARGO_TARGET_DIR:-target}/release/copyrpc-echo

# calls/s of rank 0 from a run's output: responses / seconds on its line.
rate() { awk '/^rank 0\/2: responses=/ { split($3, r, "="); for (i = 1; i <= NF; i++) if ($i == "in") s = $(i + 1); sub(/s:?$/, "", s); printf "%.0f\n", r[2] / s }'; }

c_rates=() busy_rates=() rust_rates=()
for i in $(seq "$runs"); do
  c=$(timeout 900 "$prefix/echo" "$calls" | rate)
  b=$(timeout 900 "$prefix/busy_poll" "$calls" | rate)
  r=$(timeout 900 mpirun -np 2 "$rust" --fabric sim --calls "$calls" --deadline-s 900 2>/dev/null | rate)
  echo "run $i: C echo $c calls/s, C busy-poll $b calls/s, Rust echo $r calls/s"
  c_rates+=("$c") busy_rates+=("$b") rust_rates+=("$r")
done
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
mc=$(median "${c_rates[@]}") mb=$(median "${busy_rates[@]}") mr=$(median "${rust_rates[@]}")
awk -v c="$mc" -v b="$mb" -v r="$mr" 'BEGIN {
  printf "median of %d: C echo %d, C busy-poll %d, Rust echo %d calls/s; busy-poll/C echo %.3f, C echo/Rust %.3f, busy-poll/Rust %.3f\n", '"$runs"', c, b, r, b / c, c / r, b / r }'
