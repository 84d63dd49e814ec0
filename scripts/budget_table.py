#!/usr/bin/env python3
"""The table of docs/PERFORMANCE.md, "Adaptive poll budget", from the lines of
`scripts/virtual-world.sh budget-steady` (NP poll_ns budget seed rate) on stdin (`stall`: the lines of
`budget-stall`): per cell
(NP, poll_ns) the median and min-max of each budget over the seeds, adaptive against the
best fixed median and against every fixed one (acceptance: >= 95 % of the best, never
more than 5 % below any)."""
import statistics
import sys
from collections import defaultdict

def table(lines):
    cells = defaultdict(lambda: defaultdict(list))
    for line in lines:
        w = line.split()
        if len(w) != 5 or w[4] == "failed":
            continue
        cells[(int(w[0]), int(w[1]))][w[2]].append(float(w[4]))

    fixed = ["off", "1", "2", "4", "8", "16"]
    print("| NP | extra poll | " + " | ".join(("0" if f == "off" else f) for f in fixed)
          + " | **adaptive** | vs best fixed | holds |")
    print("|" + "---|" * (len(fixed) + 5))
    for (np_, poll), by in sorted(cells.items()):
        med = {b: statistics.median(v) for b, v in by.items()}
        row = []
        for b in fixed + ["adaptive"]:
            v = by.get(b)
            row.append("%.2f (%.2f–%.2f)" % (med[b], min(v), max(v)) if v else "—")
        have = [b for b in fixed if b in med]
        if "adaptive" in med and have:
            best = max(med[b] for b in have)
            ratio = med["adaptive"] / best
            ok = ratio >= 0.95
            verdict = "yes" if ok else "**no**"
            vs = "%+.1f %%" % (100 * (ratio - 1))
        else:
            vs, verdict = "—", "not run"
        print("| %d | %d µs | %s | %s | %s |" % (np_, poll // 1000, " | ".join(row), vs, verdict))


def stall(lines):
    """`budget-stall` lines (NP poll_ns budget seed, then M req/s per rank per 100 µs,
    the stall at 5-6 ms): the rate before (3-5 ms), the time from the stall's end until
    a 300 µs mean is back at >= 80 % of it, and the mean of 15-21 ms against it."""
    print("| NP | extra poll | budget | before | back to 80 % after | 15–21 ms |")
    print("|---|---|---|---|---|---|")
    for line in lines:
        w = line.split()
        if len(w) < 200:
            continue
        r = [float(x) for x in w[4:]]
        before = sum(r[30:50]) / 20
        back = next((i - 60 for i in range(60, len(r) - 2)
                     if sum(r[i:i + 3]) / 3 >= 0.8 * before), None)
        late = sum(r[150:210]) / 60
        print("| %s | %d µs | %s | %.2f | %s | %.2f (%.0f %%) |" % (
            w[0], int(w[1]) // 1000, w[2], before,
            "never" if back is None else "%d µs" % (100 * back), late, 100 * late / before))


if __name__ == "__main__":
    (stall if sys.argv[1:] == ["stall"] else table)(sys.stdin.readlines())
