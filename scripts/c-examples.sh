#!/usr/bin/env bash
# The C examples as a new user builds them (README "Use from C"): install the library
# under a temporary prefix, compile examples/c/*.c with pkg-config, run them at full
# size (echo: 1 000 000 calls per process; deleg: 4 clients x 100 000 calls). Also
# links echo statically against libcopyrpc.a. Each must exit 0 with every call answered.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(mktemp -d /tmp/copyrpc-c.XXXXXX)
trap 'rm -rf "$prefix"' EXIT
scripts/install-c.sh "$prefix"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"

cc -O3 $(pkg-config --cflags --libs copyrpc) examples/c/echo.c -o "$prefix/echo"
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
check 5 "$prefix/deleg" 100000
check 2 "$prefix/echo-static" 10000
