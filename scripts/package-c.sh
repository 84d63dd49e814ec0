#!/usr/bin/env bash
# Packages the copyrpc C library from the staticlib cargo built (libcopyrpc.a of the
# copyrpc-c crate) into what a C program links:
#
#   scripts/package-c.sh LIBCOPYRPC_A OUTDIR
#
#   OUTDIR/libcopyrpc.a           one object; every symbol but copyrpc_* made local
#   OUTDIR/libcopyrpc.so.X.Y.Z    SONAME libcopyrpc.so.X, copyrpc_* versioned COPYRPC_X.Y
#   OUTDIR/libcopyrpc.so.X, OUTDIR/libcopyrpc.so   symlinks
#
# Why not cargo's own artifacts: a Rust staticlib is the archive of every crate it
# contains (std, compiler built-ins, each dependency), and exports all their global
# symbols (mangled Rust names, __rust_alloc, weak maths functions...), which collide
# with anything else a C program links. Partially linking the archive into one object
# (`ld -r`) resolves the library's references to itself, after which every global but
# the copyrpc_* API can be made local (`objcopy --keep-global-symbol`): the C program
# sees the API and nothing else. The shared library is linked from that same object, so
# both carry the same code and the same symbols, with a SONAME and a version script
# (cargo's cdylib has neither, and rustc's own anonymous version script cannot be
# combined with a named one). The `.llvmbc` sections that thin LTO leaves in the objects
# go too: binutils' LTO plugin tries to read them and fails on this LLVM's bitcode.
#
# The symbol version is COPYRPC_<major>.<minor> while the major version is 0 (each
# 0.x is its own ABI, linker/src/version.rs), COPYRPC_<major> after: the dynamic loader
# then refuses a program built for another ABI by name, before it runs.
set -euo pipefail
in=${1:?usage: scripts/package-c.sh LIBCOPYRPC_A OUTDIR}
out=${2:?usage: scripts/package-c.sh LIBCOPYRPC_A OUTDIR}
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
major=${version%%.*}
rest=${version#*.}
minor=${rest%%.*}
if [ "$major" = 0 ]; then node="COPYRPC_$major.$minor"; else node="COPYRPC_$major"; fi
# What the library needs from the system, for the shared library's link (the same as the
# pkg-config file's static_libs: linker/capi/copyrpc.pc.in).
system_libs=(-lmlx5 -libverbs -lrdmacm -lgcc_s -lutil -lrt -lpthread -lm -ldl)

mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ld -r --whole-archive "$in" -o "$tmp/all.o"
objcopy --wildcard --keep-global-symbol='copyrpc_*' \
  --remove-section=.llvmbc --remove-section=.llvmcmd "$tmp/all.o" "$tmp/copyrpc.o"
rm -f "$out/libcopyrpc.a"
ar rcs "$out/libcopyrpc.a" "$tmp/copyrpc.o"

cat >"$tmp/copyrpc.map" <<EOF
$node {
  global:
    copyrpc_*;
  local:
    *;
};
EOF
so="libcopyrpc.so.$version"
cc -shared -o "$out/$so" "$tmp/copyrpc.o" \
  -Wl,-soname,"libcopyrpc.so.$major" -Wl,--version-script="$tmp/copyrpc.map" \
  -Wl,--gc-sections -Wl,--as-needed "${system_libs[@]}"
ln -sf "$so" "$out/libcopyrpc.so.$major"
ln -sf "libcopyrpc.so.$major" "$out/libcopyrpc.so"
