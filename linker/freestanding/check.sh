#!/usr/bin/env bash
# Builds core-nostd + mlx5-raw as a freestanding staticlib for x86_64-unknown-none and
# aarch64-unknown-none, links each with gcc -nostdlib -static (no libc, no std), checks the
# archive for std/alloc symbols, and runs the result (aarch64 under qemu-aarch64).
set -euo pipefail
cd "$(dirname "$0")"
export CARGO_TARGET_DIR="$PWD/target"
lib=libcopyrpc_freestanding.a

check_one() {
  local target=$1 cc=$2 runner=$3
  cargo build --quiet --release --target "$target"
  local a="target/$target/release/$lib"
  # No symbol of std or alloc may be in the archive (core and compiler_builtins are fine).
  if nm -C "$a" 2>/dev/null | grep -E ' [TtDdRr] (std|alloc)::' | head -3 | grep -q .; then
    echo "error: $target archive defines std/alloc symbols" >&2; exit 1
  fi
  local exe="target/$target/freestanding"
  "$cc" -O2 -static -nostdlib -ffreestanding -fno-stack-protector -fno-pie -no-pie \
        -Wl,--gc-sections -I../include c/start.c "$a" -o "$exe"
  local out status=0
  out=$($runner "$exe") || status=$?
  echo "$target: $out (exit $status)"
  [ "$status" -eq 0 ] && [ "$out" = "freestanding copyrpc core: ok" ]
}

check_one x86_64-unknown-none gcc ""
if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; then
  check_one aarch64-unknown-none aarch64-linux-gnu-gcc qemu-aarch64
else
  echo "error: aarch64-linux-gnu-gcc or qemu-aarch64 missing (run scripts/setup.sh)" >&2; exit 1
fi
