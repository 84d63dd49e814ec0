#!/usr/bin/env bash
# The C examples as a new user builds them (README "Use from C"): install the library
# under a temporary prefix, compile examples/c/*.c with pkg-config, run them at full
# size (echo and busy_poll: 1 000 000 calls per process; deleg: 4 clients x 100 000
# calls). Also links echo statically against libcopyrpc.a. Each must exit 0 with every
# call answered. Then the installed libraries' hygiene: the static library and the
# shared one export the copyrpc_* API only, the shared one has its SONAME, and neither
# the shared library nor the statically linked program needs libmpi.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(mktemp -d /tmp/copyrpc-c.XXXXXX)
trap 'rm -rf "$prefix"' EXIT
scripts/install-c.sh "$prefix"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"

cc -O3 $(pkg-config --cflags --libs copyrpc) examples/c/echo.c -o "$prefix/echo"
cc -O3 $(pkg-config --cflags --libs copyrpc) examples/c/busy_poll.c -o "$prefix/busy_poll"
cc -O2 $(pkg-config --cflags --libs copyrpc) examples/c/deleg.c -o "$prefix/deleg"
cc -O2 $(pkg-config --cflags copyrpc) examples/c/echo.c "$prefix/lib/libcopyrpc.a" \
   $(pkg-config --variable=static_libs copyrpc) -o "$prefix/echo-static"

check() {
  local want=$1; shift
  local out
  out=$(timeout 600 "$@") || { echo "error: $* failed" >&2; echo "$out" >&2; return 1; }
  echo "$out"
  local got
  got=$(grep -c ': ok$' <<<"$out" || true)
  [ "$got" -eq "$want" ] || { echo "error: $*: $got of $want lines ok" >&2; return 1; }
}
check 2 "$prefix/echo" 1000000
check 2 "$prefix/busy_poll" 1000000
check 5 "$prefix/deleg" 100000
check 2 "$prefix/echo-static" 10000

fail() { echo "error: $*" >&2; exit 1; }
major=$(sed -n 's/^version = "\([0-9]*\)\..*/\1/p' Cargo.toml | head -1)
others=$(nm -g --defined-only "$prefix/lib/libcopyrpc.a" | awk 'NF == 3 && $3 !~ /^copyrpc_/ { print $3 }')
[ -z "$others" ] || fail "libcopyrpc.a exports more than copyrpc_*: $(head -5 <<<"$others")"
others=$(readelf --dyn-syms -W "$prefix/lib/libcopyrpc.so" |
  awk '$1 ~ /^[0-9]+:$/ && $7 != "UND" && $8 !~ /^copyrpc_[a-z0-9_]*@@COPYRPC_/ && $8 !~ /^COPYRPC_/ { print $8 }')
[ -z "$others" ] || fail "libcopyrpc.so exports more than copyrpc_*: $(head -5 <<<"$others")"
readelf -d "$prefix/lib/libcopyrpc.so" | grep -q "Library soname: \[libcopyrpc.so.$major\]" ||
  fail "libcopyrpc.so has no SONAME libcopyrpc.so.$major"
! ldd "$prefix/lib/libcopyrpc.so" | grep -q libmpi || fail "libcopyrpc.so needs libmpi"
! ldd "$prefix/echo-static" | grep -q libmpi || fail "a program linked with libcopyrpc.a needs libmpi"
echo "libcopyrpc.a and libcopyrpc.so export copyrpc_* only; SONAME libcopyrpc.so.$major; no libmpi: ok"
