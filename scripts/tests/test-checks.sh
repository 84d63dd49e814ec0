#!/usr/bin/env bash
# The test of the two source checks (`citations`, `comments` steps of scripts/test.sh):
# each passes on a clean scratch tree, fails on every kind of planted defect it exists
# for, and lets the legitimate look-alikes through. Builds nothing.
#
#   scripts/tests/test-checks.sh     one line per case, exits 1 if any case is wrong
set -uo pipefail
cd "$(dirname "$0")/../.."

fails=0
tmp=$(mktemp -d /tmp/test-checks.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# A scratch tree: the checks, the docs they resolve against, and one file to plant in.
fresh() {
  rm -rf "$tmp/tree"
  mkdir -p "$tmp/tree/scripts" "$tmp/tree/src"
  cp scripts/check-citations.sh scripts/check-comments.sh "$tmp/tree/scripts/"
  mkdir -p "$tmp/tree/docs"
  cp -r docs/spec "$tmp/tree/docs/spec"
  # The other docs as their headings only: what citations resolve against, and small.
  local d
  for d in docs/*.md; do grep -E '^#{1,6} ' "$d" >"$tmp/tree/$d" || true; done
}

# expect PASS|FAIL CHECK FILE CONTENT DESCRIPTION
expect() {
  local want=$1 check=$2 file=$3 content=$4 what=$5 got
  fresh
  printf '%s\n' "$content" >"$tmp/tree/$file"
  # A failure counts only if it names the planted file: anything else failing in the
  # scratch tree would otherwise pass every FAIL case.
  if "$tmp/tree/scripts/$check" >"$tmp/out" 2>&1; then
    got=PASS
  elif grep -q "^$file:" "$tmp/out"; then
    got=FAIL
  else
    got="FAIL, but not on $file"
  fi
  if [ "$got" = "$want" ]; then
    printf 'ok    %-9s %-20s %s\n' "$want" "$check" "$what"
  else
    printf 'FAIL  %-20s %s: wanted %s, got %s\n' "$check" "$what" "$want" "$got"
    sed "s/^/        /" "$tmp/out" | head -5
    fails=$((fails + 1))
  fi
}

c=check-citations.sh
expect PASS $c src/a.rs '// see docs/spec/credit.md#lifecycle' "a spec section that exists"
expect PASS $c docs/a.md 'See [credit](spec/credit.md#grant) and [here](#a).
# A' "Markdown links that resolve"
expect PASS $c src/a.rs '// the RNG seed 42 of each client' "an RNG seed"
expect PASS $c src/a.rs '// scripts/virtual-world.sh seed001 runs the table' "a script mode named seed001"
expect FAIL $c src/a.rs '// layout of seed 000 §2.1' "seed NNN §"
expect FAIL $c src/a.rs "/// Seed 001's controller" "Seed NNN's"
expect FAIL $c src/a.rs '//! (seed §9 steps 6, 8)' "seed §"
expect FAIL $c src/a.rs "// the seed's padding" "the seed's"
expect FAIL $c src/a.rs '// rdma-core get_sw_cqe (reference §4.7)' "reference §"
expect FAIL $c src/a.rs '//! vectors of reference/mlx5-formats.md' "reference/<file>.md"
expect FAIL $c docs/a.md 'The design is in the shared design folder.' "the shared design folder"
expect FAIL $c src/a.rs '// docs/spec/credit.md#no-such-section' "a spec section that does not exist"
expect FAIL $c src/a.rs '// docs/spec/nofile.md#lifecycle' "a spec file that does not exist"
expect FAIL $c src/a.rs '// docs/NOFILE.md, "Inlining"' "a doc that does not exist"
expect FAIL $c docs/a.md 'See [credit](spec/credit.md#nope).' "a Markdown link to a missing section"
expect FAIL $c docs/a.md 'See [x](#nowhere).' "a Markdown link to a missing section of its own file"
expect FAIL $c src/a.rs '// the exchange over MPI (seed
// §9 steps 6 and 8)' "a citation split over two comment lines"
expect FAIL $c src/a.rs '/// Bytes of one slot (seed: `align_up(16 + n, 64)`).' "(seed: ...)"
expect FAIL $c src/a.rs '// 16 blocks with the seed settings' "seed settings"
expect FAIL $c src/a.rs '/// as the seed does, fresh ids first' "the seed does"
expect FAIL $c src/a.rs '// docs/PERFORMANCE.md, "No such section"' "a quoted section title no heading starts with"
expect PASS $c src/a.rs 'fn run(seed: u64) -> u64 { seed }' "a function argument named seed"
expect PASS $c src/a.rs '// see docs/PERFORMANCE.md, "Latency path"' "a quoted section title that exists"

c=check-comments.sh
expect PASS $c src/a.rs '// a `dmb` barrier instruction; `fence(Release)` emits no instruction' "barrier instructions"
expect PASS $c src/a.rs '//! Instructions per call of delegationrpc, for callgrind' "a tool that counts instructions"
expect PASS $c src/a.rs '/// A compressed-session title CQE (format 3).' "a CQE compressed session"
expect PASS $c src/a.rs '/// Issue 23, item 1: four ranks under back-pressure.' "a test naming the issue it guards"
expect PASS $c src/a.rs 'let s = "// 3 instructions"; // a string, not a comment' "text inside a string literal"
expect FAIL $c src/a.rs '// computed each time, it cost 3 instructions more per WQE' "N instructions"
expect FAIL $c src/a.rs '/// (~40 instructions per batch received)' "~N instructions"
expect FAIL $c src/a.rs '/// instead of the 16-instruction frame' "N-instruction"
expect FAIL $c src/a.rs '/// each lookup pays more
/// instructions more for the base' "instructions more"
expect FAIL $c src/a.rs '// it reloaded `ci`, one instruction a call' "one instruction"
expect FAIL $c src/a.rs '/// (instruction counts unchanged, docs/PERFORMANCE.md)' "instruction counts unchanged"
expect FAIL $c src/a.rs '// measured in the sixth session' "an ordinal session"
expect FAIL $c src/a.rs '// before issue 21 each WQE began with a zero-length segment' "before issue N"
expect FAIL $c src/a.rs '/// (Before 0.2 this was `--poll-budget`.)' "before a version"
expect FAIL $c src/a.rs '// below it the value used to become 0 ns' "used to become"
expect FAIL $c src/a.rs '/// four cache lines (was 6)' "(was N)"
expect FAIL $c src/a.rs '// checked by hand on 2026-11-27' "a date"
expect FAIL $c src/a.rs '// every row against commit dd3f57c' "a commit hash"

if [ "$fails" -ne 0 ]; then
  echo "error: $fails case(s) of the source checks went wrong" >&2
  exit 1
fi
echo "source checks: every case behaved"
