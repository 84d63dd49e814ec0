#!/usr/bin/env python3
"""Resolves the mutation-testing exclusions against the mutants cargo-mutants lists now.

    scripts/mutants_exclusions.py [--args]

Checks that every `exclude_re` of .cargo/mutants.toml matches at least one mutant, and
that every entry of .cargo/mutants-equivalent.toml (file, name regex, the whole line of
code the mutant changes, whitespace aside) matches exactly the number of mutants it says. Prints each problem and exits 1 if there
is any: an exclusion that matches nothing was left behind by moved or changed code, and
would otherwise hide nothing while its mutant counts as a survivor (or, anchored by
line, hide another). With `--args`, prints one `--exclude-re=<regex>` per mutant the
anchored entries resolve to (their current names, exact), for scripts/mutants.sh.

The mutants are listed with `cargo mutants --list --json --no-config` for copyrpc-core
and mlx5-raw (under a second; nothing is built).
"""

import json
import re
import subprocess
import sys
import tomllib

PACKAGES = ["copyrpc-core", "mlx5-raw"]


def listed():
    mutants = []
    for pkg in PACKAGES:
        out = subprocess.run(
            ["cargo", "mutants", "-p", pkg, "--list", "--json", "--no-config"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        mutants += json.loads(out)
    return mutants


def squash(text):
    return " ".join(text.split())


def main():
    want_args = "--args" in sys.argv[1:]
    mutants = listed()
    lines = {}

    def code_at(m):
        f = m["file"]
        if f not in lines:
            with open(f, encoding="utf-8") as fh:
                lines[f] = fh.read().split("\n")
        return squash(lines[f][m["span"]["start"]["line"] - 1])

    problems = []
    with open(".cargo/mutants.toml", "rb") as fh:
        cfg = tomllib.load(fh)
    for rx in cfg.get("exclude_re", []):
        if not any(re.search(rx, m["name"]) for m in mutants):
            problems.append(f".cargo/mutants.toml: exclude_re {rx!r} matches no mutant")

    with open(".cargo/mutants-equivalent.toml", "rb") as fh:
        eq = tomllib.load(fh).get("equivalent", [])
    names = []
    for e in eq:
        tail = re.compile(e["name"])
        code = squash(e["code"])
        found = sorted(
            (
                m
                for m in mutants
                if m["file"] == e["file"]
                and tail.fullmatch(m["name"].split(": ", 1)[1])
                and code == code_at(m)
            ),
            key=lambda m: (m["span"]["start"]["line"], m["span"]["start"]["column"]),
        )
        if "occurrence" in e:
            n = e["occurrence"]
            found = found[n - 1 : n]
        count = e.get("count", 1)
        if len(found) != count:
            problems.append(
                f".cargo/mutants-equivalent.toml: {e['file']}: {e['name']!r} at "
                f"{e['code']!r} matches {len(found)} mutant(s), not {count}"
                + "".join(f"\n    {m['name']}" for m in found)
            )
        names += [m["name"] for m in found]

    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(
            f"{len(problems)} exclusion(s) no longer match what they were argued for: "
            "find the mutant's code again and fix the entry (docs/HISTORY.md argues each)",
            file=sys.stderr,
        )
        return 1
    if want_args:
        for n in names:
            print(f"--exclude-re=^{re.escape(n)}$")
    else:
        print(
            f"{len(cfg.get('exclude_re', []))} exclude_re and {len(eq)} anchored entries "
            f"({len(names)} mutants) match",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
