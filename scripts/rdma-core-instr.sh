#!/usr/bin/env bash
# Issue 24's anchor: the batch-1 round's driver work (one inline WRITE_IMM posted, one
# receive completion polled, one poll of the send CQ, the SRQ repost's share) done by
# rdma-core's own mlx5 provider, counted with callgrind as scripts/instr.sh counts
# mlx5-raw. The harness is tests/anchors/rdma_core_round.c.
#
#   scripts/rdma-core-instr.sh [RDMA_CORE_SRC]       (ROUNDS=N: rounds per run, 32000)
#
# RDMA_CORE_SRC: an rdma-core source tree, or a git repository (bare or not) that holds
# the pinned commit below, which is then extracted. Without one, the pinned commit is
# cloned into target/rdma-core-instr/src (needs network). The provider is built as
# distributions build it (RelWithDebInfo: -O2 -g). Installs cmake, ninja and libnl's
# headers when missing (rdma-core's build needs them). Not part of scripts/test.sh:
# it needs rdma-core's source, which CI does not fetch.
set -euo pipefail
cd "$(dirname "$0")/.."

pin=691953d8d502f54088f776c5ba2aeed0a5ac945d # v64.0-61, 2026-08-20
rounds=${ROUNDS:-32000}
work=$PWD/target/rdma-core-instr
src=${1:-${RDMA_CORE_SRC:-}}

die() { echo "rdma-core-instr: $*" >&2; exit 1; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root or sudo to run: $*"; fi
}

missing=()
for p in cmake ninja-build libnl-3-dev libnl-route-3-dev valgrind gcc pkg-config; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null || die "apt-get not found; install by hand: ${missing[*]}"
  as_root apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed"
fi

mkdir -p "$work"
if [ -n "$src" ] && [ ! -f "$src/providers/mlx5/qp.c" ] && git --git-dir="$src" cat-file -e "$pin^{commit}" 2>/dev/null; then
  rm -rf "$work/src" && mkdir -p "$work/src"
  git --git-dir="$src" archive "$pin" | tar -x -C "$work/src"
  echo "$pin" >"$work/src/.pinned"
  src=$work/src
elif [ -z "$src" ]; then
  src=$work/src
  if [ ! -f "$src/providers/mlx5/qp.c" ]; then
    rm -rf "$src"
    git clone --quiet https://github.com/linux-rdma/rdma-core "$src" \
      || die "cannot clone rdma-core (no network?): pass a source tree as RDMA_CORE_SRC"
  fi
  git -C "$src" checkout --quiet "$pin" || die "rdma-core commit $pin not found in $src"
fi
[ -f "$src/providers/mlx5/qp.c" ] || die "$src is not an rdma-core source tree (no providers/mlx5/qp.c)"

src=$(realpath "$src")
build=$work/build
# A build directory configured for another source tree is started afresh.
if [ -f "$build/CMakeCache.txt" ] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$src" "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DNO_PYVERBS=1 -DNO_MAN_PAGES=1 >"$work.cmake.log" 2>&1 \
  || die "cmake failed: $work.cmake.log"
ninja -C "$build" lib/libibverbs.so lib/libmlx5.so util/librdma_util.a ccan/libccan.a \
  >"$work.ninja.log" 2>&1 || die "building rdma-core failed: $work.ninja.log"

bin=$work/rdma_core_round
gcc -O2 -g -Wall -Werror -I"$build/include" -I"$src" -I"$src/providers/mlx5" \
  tests/anchors/rdma_core_round.c "$build"/providers/mlx5/CMakeFiles/mlx5.dir/*.o \
  "$build/util/librdma_util.a" "$build/ccan/libccan.a" \
  -L"$build/lib" -Wl,-rpath,"$build/lib" -libverbs -lpthread -o "$bin"

version=$(git -C "$src" describe --tags 2>/dev/null || cat "$src/.pinned" 2>/dev/null || echo "at $src")
echo "rdma-core $version, $rounds rounds," \
  "instructions per round (one call: /2 per message)"
printf '%-12s %8s %8s %8s %8s %8s %10s\n' mode post recv-poll send-poll srq round per-msg
for mode in post ex post-locked ex-locked; do
  "$bin" "$rounds" "$mode" >/dev/null || die "$mode: the harness's checks failed"
  out=$work/cg.$mode
  valgrind --tool=callgrind --collect-atstart=no --toggle-collect='m_*' \
    --callgrind-out-file="$out" "$bin" "$rounds" "$mode" >/dev/null 2>&1 \
    || die "$mode: callgrind run failed"
  # Inclusive cost of each counted function (m_post or m_post_ex, m_poll_recv[_ex],
  # m_poll_send[_ex], m_repost), per round.
  callgrind_annotate --inclusive=yes "$out" 2>/dev/null | awk -v mode="$mode" -v n="$rounds" '
    /PROGRAM TOTALS/ { gsub(",", "", $1); total = $1 }
    /rdma_core_round.c:m_post/ { gsub(",", "", $1); post = $1 }
    /rdma_core_round.c:m_poll_recv/ { gsub(",", "", $1); recv = $1 }
    /rdma_core_round.c:m_poll_send/ { gsub(",", "", $1); send = $1 }
    /rdma_core_round.c:m_repost/ { gsub(",", "", $1); srq = $1 }
    END { printf "%-12s %8.1f %8.1f %8.1f %8.1f %8.1f %10.1f\n", mode, post / n, recv / n, send / n, srq / n, total / n, total / n / 2 }'
done
