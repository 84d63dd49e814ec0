#!/usr/bin/env python3
"""benchkv's dependency rule (stated at the top of benchkv/src/main.rs), checked.

Each top-level module of benchkv/src sits in a layer; a module may import (`crate::x`)
only modules of its own layer or of a layer below it, and `cli` only from `config` and
`main`. Among top-level modules there must be no import cycle (a module and its own
children are one module here). Test code (from a file's first `#[cfg(test)]`, and files
named `tests.rs`) and comments are not checked.

Usage: check_benchkv_layers.py [SRC_DIR]   (default: benchkv/src). Exit 1 on a breach.
"""
import os
import re
import sys

# Top to bottom: a module depends only on its own layer and the layers below. The runners
# build and run ranks from a configuration; the configuration is parsed from the command
# line (which nothing else sees) and names the key-value parts' own types; results are
# assembled from what the key-value parts measured; the key-value parts know nothing of
# how they are configured or run.
LAYERS = [
    ("entry", ["main"]),
    ("runners", ["orchestrate", "vworld", "rank", "cluster", "watchdog", "resources"]),
    ("configuration", ["config", "cli"]),
    ("results", ["report", "output", "plot"]),
    ("key-value parts", ["msg", "route", "store", "workload", "client", "daemon", "remote",
                         "histogram", "metrics"]),
]
# Only these may name the command-line types.
CLI_USERS = {"main", "config", "cli"}

LEVEL = {m: i for i, (_, ms) in enumerate(LAYERS) for m in ms}


def module_of(rel):
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def code_lines(path):
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if re.match(r"\s*#\[cfg\((all\()?test[,)]", line):
                return
            stripped = line.split("//", 1)[0]
            if stripped.strip():
                yield n, stripped


def imports(line):
    found = set(re.findall(r"\bcrate::([a-z_]+)", line))
    for group in re.findall(r"\bcrate::\{([^}]*)\}", line):
        found.update(re.findall(r"(?:^|,)\s*([a-z_]+)", group))
    return found


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "benchkv/src"
    bad = []
    edges = {}
    for root, _, files in os.walk(src):
        for name in sorted(files):
            if not name.endswith(".rs") or name == "tests.rs":
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)
            me = module_of(rel)
            if me not in LEVEL:
                bad.append(f"{rel}: module `{me}` has no layer in {sys.argv[0]}")
                continue
            for n, line in code_lines(path):
                for other in imports(line):
                    if other == me:
                        continue
                    if other not in LEVEL:
                        bad.append(f"{rel}:{n}: imports `crate::{other}`, which has no layer")
                        continue
                    edges.setdefault(me, set()).add(other)
                    if other == "cli" and me not in CLI_USERS:
                        bad.append(f"{rel}:{n}: `{me}` imports the command line (`crate::cli`); "
                                   "only config parses it")
                    elif LEVEL[other] < LEVEL[me]:
                        bad.append(f"{rel}:{n}: `{me}` ({LAYERS[LEVEL[me]][0]}) imports "
                                   f"`{other}` ({LAYERS[LEVEL[other]][0]}), a layer above it")
    # Cycles among top-level modules.
    seen, on_path, cycles = set(), [], []

    def visit(m):
        if m in on_path:
            cycles.append(on_path[on_path.index(m):] + [m])
            return
        if m in seen:
            return
        seen.add(m)
        on_path.append(m)
        for o in sorted(edges.get(m, ())):
            visit(o)
        on_path.pop()

    for m in sorted(edges):
        visit(m)
    for c in cycles:
        bad.append("import cycle: " + " -> ".join(c))
    for b in bad:
        print(b)
    if bad:
        print("error: benchkv's layering is broken (see above; the rule is at the top of "
              "benchkv/src/main.rs)", file=sys.stderr)
        return 1
    print("layering ok: benchkv: " + " > ".join(name for name, _ in LAYERS) + ", no cycles")
    return 0


if __name__ == "__main__":
    sys.exit(main())
