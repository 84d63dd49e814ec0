#!/usr/bin/env bash
# Installs what the build and the tests need, only where it is missing.
#
#   scripts/setup.sh            system packages + rustup targets/components + cargo-fuzz
#   scripts/setup.sh --run-only just what building and running benchkv needs
#
# Idempotent: a second run installs nothing. Needs root or sudo for apt-get.
set -euo pipefail

run_only=0
[ "${1:-}" = "--run-only" ] && run_only=1

say() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31m[setup] error:\033[0m %s\n' "$*" >&2; exit 1; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else die "need root or sudo to run: $*"; fi
}

# --- system packages -------------------------------------------------------------------
# libibverbs-dev: ibverbs + mlx5dv.h (rdma-sys and our mlx5dv cross-check build against it)
# librdmacm-dev, ibverbs-providers: rdma-sys links them; libmlx5 lives in ibverbs-providers
# libopenmpi-dev, openmpi-bin: rsmpi and mpirun for the multi-rank tests
# libclang-dev, pkg-config: bindgen (rdma-sys, mpi-sys) needs libclang at build time
pkgs=(libibverbs-dev librdmacm-dev ibverbs-providers libopenmpi-dev openmpi-bin libclang-dev pkg-config gcc)
if [ "$run_only" -eq 0 ]; then
  # cross toolchain + qemu: the no_std core's tests also run on aarch64, and the
  # freestanding aarch64 link check runs under qemu-aarch64; mmdebstrap unpacks the arm64
  # sysroot the std binaries cross-build against (scripts/aarch64-linux.sh)
  pkgs+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user valgrind mmdebstrap)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null || die "apt-get not found; install by hand: ${missing[*]}"
  say "installing system packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- Rust ------------------------------------------------------------------------------
command -v cargo >/dev/null || die "cargo not found. Install Rust with rustup (https://rustup.rs), then rerun."
command -v rustup >/dev/null || die "rustup not found: the bare-metal targets and nightly tools come from rustup."

[ "$run_only" -eq 1 ] && { say "ready to build and run"; exit 0; }

installed_targets=$(rustup target list --installed)
for t in x86_64-unknown-none aarch64-unknown-none aarch64-unknown-linux-gnu; do
  grep -qx "$t" <<<"$installed_targets" || { say "rustup target add $t"; rustup target add "$t" >/dev/null; }
done

# nightly: cargo-fuzz (-Z flags) and Miri
if ! rustup toolchain list | grep -q '^nightly'; then
  say "installing the nightly toolchain (fuzzing and Miri need it)"
  rustup toolchain install nightly --profile minimal >/dev/null
fi
nightly_components=$(rustup +nightly component list --installed 2>/dev/null || true)
for c in rust-src miri; do
  grep -q "^$c" <<<"$nightly_components" || { say "rustup component add $c (nightly)"; rustup component add "$c" --toolchain nightly >/dev/null; }
done

if ! cargo fuzz --version >/dev/null 2>&1; then
  say "cargo install cargo-fuzz (about a minute, once)"
  cargo install cargo-fuzz --locked --quiet
fi
say "ready"
