#!/usr/bin/env bash
# The std side for a BlueField's Arm cores: cross-build host, benchkv and copyrpc-echo
# for aarch64-unknown-linux-gnu against Debian arm64 libibverbs / librdmacm / Open MPI,
# then smoke-run benchkv on the sim fabric under qemu-aarch64 (issue 21).
#
#   scripts/aarch64-linux.sh            build (debug) + smoke run
#   scripts/aarch64-linux.sh --release  build optimised binaries (what a DPU should run)
#   scripts/aarch64-linux.sh --env      print the exports, to cross-build by hand
#
#   AARCH64_SYSROOT=DIR   where the arm64 sysroot lives (default target/sysroot-arm64-<suite>)
#   DEBIAN_MIRROR=URL     where mmdebstrap fetches it (default http://deb.debian.org/debian)
#
# Why a sysroot and not `dpkg --add-architecture arm64`: on Debian 12 libopenmpi-dev:arm64
# cannot be installed beside the amd64 one (apt removes the host's MPI to make room). The
# sysroot is the arm64 packages unpacked into a directory (mmdebstrap's `extract` variant:
# no maintainer scripts, no root filesystem, ~460 MB, ~20 s), used for headers and
# libraries at build time and as qemu's library prefix at run time. It is reused while its
# package list is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=debug
cargo_profile=()
print_env=0
for a in "$@"; do
  case $a in
    --release) profile=release cargo_profile=(--release) ;;
    --env) print_env=1 ;;
    *) echo "aarch64-linux.sh: unknown argument '$a' (--release, --env)" >&2; exit 2 ;;
  esac
done

. /etc/os-release
suite=${VERSION_CODENAME:?/etc/os-release names no Debian suite}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
sr=$(realpath -m "${AARCH64_SYSROOT:-target/sysroot-arm64-$suite}")
# What rdma-sys (libibverbs, librdmacm), mpi-sys (Open MPI) and the linker (C library,
# libgcc) need; their run-time dependencies come with them.
pkgs=libc6-dev,libgcc-12-dev,libibverbs-dev,librdmacm-dev,libopenmpi-dev

if [ "$(cat "$sr/.copyrpc-packages" 2>/dev/null)" != "$suite $pkgs" ]; then
  command -v mmdebstrap >/dev/null || {
    echo "aarch64-linux.sh: mmdebstrap is missing (scripts/setup.sh installs it)" >&2
    exit 2
  }
  echo "building the arm64 sysroot in $sr ($suite from $mirror)"
  rm -rf "$sr"
  mkdir -p "$(dirname "$sr")"
  # chrootless: unpacking needs no chroot, so no root or user namespaces either.
  mmdebstrap --quiet --mode=chrootless --arch=arm64 --variant=extract --include="$pkgs" \
    "$suite" "$sr" "$mirror"
  echo "$suite $pkgs" >"$sr/.copyrpc-packages"
fi

lib=$sr/usr/lib/aarch64-linux-gnu
# pkg-config answers for the target from the sysroot (rdma-sys probes libibverbs and
# librdmacm; mpi-sys is pointed at ompi.pc rather than at an arm64 `mpicc` it cannot
# run); bindgen's clang reads the target's system headers there; the cross linker links
# against its libraries, and resolves their own dependencies (libmpi's) there too.
vars=(
  PKG_CONFIG_SYSROOT_DIR_aarch64_unknown_linux_gnu="$sr"
  PKG_CONFIG_LIBDIR_aarch64_unknown_linux_gnu="$lib/pkgconfig:$sr/usr/share/pkgconfig"
  MPI_PKG_CONFIG=ompi
  BINDGEN_EXTRA_CLANG_ARGS_aarch64_unknown_linux_gnu="--sysroot=$sr"
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C link-arg=--sysroot=$sr -C link-arg=-Wl,-rpath-link,$lib -C link-arg=-Wl,-rpath-link,$lib/openmpi/lib"
)
if [ $print_env = 1 ]; then
  printf 'export %q\n' "${vars[@]}"
  exit 0
fi
export "${vars[@]}"

cargo build --quiet "${cargo_profile[@]}" --target aarch64-unknown-linux-gnu \
  -p copyrpc-host -p benchkv --bins
bin=target/aarch64-unknown-linux-gnu/$profile
for b in benchkv copyrpc-echo copyrpc-bulk copyrpc-mpi-selftest; do
  readelf -h "$bin/$b" | grep -q 'Machine: *AArch64' || {
    echo "aarch64-linux.sh: $bin/$b is not an aarch64 executable" >&2
    exit 1
  }
done
echo "built for aarch64-unknown-linux-gnu ($profile): $bin/{benchkv,copyrpc-echo,copyrpc-bulk,copyrpc-mpi-selftest}"

# The smoke run: every library resolves from the sysroot (libmpi lives in Open MPI's own
# directory, which Debian finds through ld.so.conf.d, and qemu's loader does not read the
# sysroot's ld.so.cache), and the binaries do their work on an emulated Arm core.
run() {
  echo "+ qemu-aarch64 $*"
  timeout 300 qemu-aarch64 -L "$sr" -E LD_LIBRARY_PATH="$lib/openmpi/lib" "$@"
}
run "$bin/copyrpc-echo" --help >/dev/null
# One rank, two loopback ranks (the remote path through the in-process transport), both
# backends, every answer checked.
for backend in delegation meta; do
  out=$(run "$bin/benchkv" --fabric sim --backend "$backend" -K 2 -C 2 \
    --loopback-ranks 2 --duration 100ms --keys 4096 --verify 2>&1) || {
    echo "$out" >&2
    echo "aarch64-linux.sh: benchkv ($backend) failed under qemu-aarch64" >&2
    exit 1
  }
  echo "$out" | grep -E '^verify:' || {
    echo "$out" >&2
    echo "aarch64-linux.sh: benchkv ($backend) printed no verify line" >&2
    exit 1
  }
done
# The verbs path is built for real: with no device it must refuse, naming why.
if out=$(run "$bin/benchkv" --fabric verbs --duration 10ms 2>&1); then
  echo "$out" >&2
  echo "aarch64-linux.sh: benchkv --fabric verbs ran without an RDMA device" >&2
  exit 1
fi
echo "$out" | grep -i "device" | head -2
echo "aarch64 Linux smoke run: ok"
