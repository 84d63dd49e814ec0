#!/usr/bin/env bash
# Builds the copyrpc C library (release) and installs it under PREFIX:
#   PREFIX/lib/libcopyrpc.a                    only the copyrpc_* API global
#   PREFIX/lib/libcopyrpc.so.X.Y.Z (.so.X, .so) SONAME libcopyrpc.so.X, symbols COPYRPC_X.Y
#   PREFIX/include/copyrpc.h  PREFIX/lib/pkgconfig/copyrpc.pc
# Then: PKG_CONFIG_PATH=PREFIX/lib/pkgconfig cc $(pkg-config --cflags --libs copyrpc) my_loop.c
#
# copyrpc-c is built on its own: built in one cargo run with a crate that turns
# copyrpc-host's `mpi` feature on (benchkv), cargo would build the host with MPI for it
# too, and a static link would then need libmpi. scripts/package-c.sh makes the two
# libraries from cargo's staticlib (why: see there).
set -euo pipefail
prefix=${1:?usage: scripts/install-c.sh PREFIX}
cd "$(dirname "$0")/.."
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
target=${CARGO_TARGET_DIR:-$PWD/target}

cargo build --quiet --release -p copyrpc-c
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
install -d "$prefix/lib/pkgconfig" "$prefix/include"
scripts/package-c.sh "$target/release/libcopyrpc.a" "$prefix/lib"
install -m 644 linker/include/copyrpc.h "$prefix/include/"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" linker/capi/copyrpc.pc.in \
  > "$prefix/lib/pkgconfig/copyrpc.pc"
echo "installed copyrpc $version under $prefix"
