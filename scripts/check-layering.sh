#!/usr/bin/env bash
# Two layering rules, each printing every offending line; exit 1 if either breaks.
#
# The protocol modules of core-nostd (copyrpc, deleg, ipc, flux) may use the shared
# pieces (shm, wire, ring, credit, sync) but never each other: a change to one protocol
# must not reach into another. Prints every offending line and exits 1 if there is any.
set -euo pipefail
cd "$(dirname "$0")/.."
protocols=(copyrpc deleg ipc flux)
bad=0
for m in "${protocols[@]}"; do
  others=$(printf '%s\n' "${protocols[@]}" | grep -vx "$m" | paste -sd'|')
  # `crate::other`, `super::super::other`, and `use crate::{.., other, ..}` groups, in
  # code (a doc comment may still name a sibling).
  if grep -rnE "crate::($others)\b|super::super::($others)\b|crate::\{[^}]*\b($others)\b" \
      "core-nostd/src/$m" | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//'; then
    bad=1
  fi
done
# ops (completion ownership) sits under every protocol and imports none of them, nor bulk;
# bulk is a layer above copyrpc and ops, and no protocol imports it.
if grep -rnE "crate::(copyrpc|deleg|ipc|flux|bulk)\b|crate::\{[^}]*\b(copyrpc|deleg|ipc|flux|bulk)\b" \
    core-nostd/src/ops | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//'; then
  bad=1
fi
for m in "${protocols[@]}"; do
  if grep -rnE "crate::bulk\b|super::super::bulk\b" "core-nostd/src/$m" | grep -vE '^[^:]+:[0-9]+:[[:space:]]*//'; then
    bad=1
  fi
done
if [ "$bad" -ne 0 ]; then
  echo "error: a core-nostd protocol module imports a sibling protocol (see above)" >&2
  exit 1
fi
# benchkv: layers from the runners down to the key-value parts, no cycles (the rule is at
# the top of benchkv/src/main.rs).
python3 scripts/check_benchkv_layers.py benchkv/src
echo "layering ok: ${protocols[*]} import none of each other; ops imports no protocol; no protocol imports bulk"
