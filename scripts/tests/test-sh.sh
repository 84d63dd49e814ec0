#!/usr/bin/env bash
# The test of scripts/test.sh itself (its `selftest` step): every step listed by --list
# resolves, an unknown step is refused with exit 2 before anything runs, one cheap step
# runs for real and ends with the timing table, and a failing step stops the run with
# exit 1 and is marked in the table. Runs in a few seconds; builds nothing.
#
#   scripts/tests/test-sh.sh        prints one line per check, exits 1 on the first failure
set -uo pipefail
cd "$(dirname "$0")/../.."

suite=scripts/test.sh
fails=0
ok() { printf 'ok    %s\n' "$1"; }
bad() { printf 'FAIL  %s\n' "$1"; fails=$((fails + 1)); }
tmp=$(mktemp -d /tmp/test-sh.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# --list: one line per step, the name first, names unique, the ones the README names.
if "$suite" --list >"$tmp/list" 2>"$tmp/err"; then ok "--list exits 0"; else bad "--list exits 0"; fi
awk '{print $1}' "$tmp/list" >"$tmp/names"
n=$(wc -l <"$tmp/names")
if [ "$n" -ge 15 ]; then ok "--list names $n steps"; else bad "--list names only $n steps"; fi
if [ -z "$(sort "$tmp/names" | uniq -d)" ]; then ok "step names are unique"; else bad "duplicate step names: $(sort "$tmp/names" | uniq -d | paste -sd' ')"; fi
for want in fmt clippy workspace layering loom miri qemu fuzz rustdoc; do
  grep -qx "$want" "$tmp/names" || bad "--list lacks step '$want'"
done
if awk 'NF < 2 {exit 1}' "$tmp/list"; then ok "every listed step has a description"; else bad "a listed step has no description"; fi

# Every listed name resolves to a step on its own (-n runs nothing).
for name in $(cat "$tmp/names"); do
  out=$("$suite" -n "$name" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] || [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ] || ! grep -q "^would run $name " <<<"$out"; then
    bad "-n $name (exit $rc): $out"
  fi
done
ok "-n resolves each listed step alone"

# With no names, -n plans every step in --list order (the default run's order).
"$suite" -n | awk '{print $3}' >"$tmp/plan"
if cmp -s "$tmp/plan" "$tmp/names"; then ok "the default run takes every step in --list order"; else bad "the default plan differs from --list"; fi
# Several names run in the order given.
if [ "$("$suite" -n miri loom | awk '{print $3}' | paste -sd' ')" = "miri loom" ]; then
  ok "named steps run in the order given"
else
  bad "named steps do not run in the order given"
fi

# An unknown name: exit 2, named in the message, nothing run.
"$suite" layering no-such-step >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 2 ]; then ok "an unknown step exits 2"; else bad "an unknown step exits $rc, not 2"; fi
if grep -q "no-such-step" "$tmp/err"; then ok "the error names the unknown step"; else bad "the error does not name the step: $(cat "$tmp/err")"; fi
if ! grep -q "==> layering" "$tmp/out"; then ok "nothing runs before the names are checked"; else bad "layering ran before the unknown name was refused"; fi
"$suite" --bogus >/dev/null 2>&1
rc=$?
if [ "$rc" -eq 2 ]; then ok "an unknown option exits 2"; else bad "an unknown option exits $rc, not 2"; fi

# One cheap step for real: its own time line, then the table with it and a total.
"$suite" layering >"$tmp/out" 2>&1
rc=$?
if [ "$rc" -eq 0 ]; then ok "layering alone exits 0"; else bad "layering alone exits $rc: $(tail -5 "$tmp/out")"; fi
if grep -qE '^<== layering: [0-9]+\.[0-9]s' <(sed 's/\x1b\[[0-9;]*m//g' "$tmp/out"); then
  ok "the step prints its wall time"
else
  bad "no '<== layering: N.Ns' line"
fi
table=$(sed 's/\x1b\[[0-9;]*m//g' "$tmp/out" | sed -n '/^All 1 steps passed:/,$p')
if grep -qE '^  layering +[0-9]+\.[0-9] ' <<<"$table" && grep -qE '^  total +[0-9]+\.[0-9]' <<<"$table"; then
  ok "the run ends with the timing table"
else
  bad "no timing table at the end: $(tail -5 "$tmp/out")"
fi

# A failing step: exit 1, marked FAILED in the table, later steps not run. The copy runs
# in a scratch tree whose layering check fails (test.sh runs from its own tree).
mkdir -p "$tmp/tree/scripts"
cp "$suite" "$tmp/tree/scripts/test.sh"
printf '#!/bin/sh\necho planted failure >&2\nexit 7\n' >"$tmp/tree/scripts/check-layering.sh"
chmod +x "$tmp/tree/scripts/check-layering.sh"
"$tmp/tree/scripts/test.sh" layering nostd >"$tmp/out" 2>&1
rc=$?
clean=$(sed 's/\x1b\[[0-9;]*m//g' "$tmp/out")
if [ "$rc" -eq 1 ]; then ok "a failing step exits 1"; else bad "a failing step exits $rc, not 1"; fi
if grep -qE '^  layering +[0-9]+\.[0-9] .*FAILED$' <<<"$clean"; then ok "the table marks the failed step"; else bad "the failed step is not marked: $clean"; fi
if ! grep -q "==> nostd" <<<"$clean"; then ok "the run stops at the failure"; else bad "a step ran after the failure"; fi

if [ "$fails" -ne 0 ]; then
  echo "error: $fails check(s) of scripts/test.sh failed" >&2
  exit 1
fi
echo "scripts/test.sh: every check passed"
