#!/usr/bin/env python3
"""The words of each context a round touches, from a valgrind lackey trace.

    hot_words.py TRACE ROUNDS A_ADDR B_ADDR BYTES

TRACE is `valgrind --tool=lackey --trace-mem=yes --log-file=TRACE copyrpc-instr words
ROUNDS ...`; A_ADDR, B_ADDR and BYTES are what that run printed. A word (8 bytes) of a
context is hot when the run touched it at least ROUNDS times: once a round on average,
which setup alone (a few touches) never reaches. Prints, per side, the hot words, the
cache lines they fill, and each line's offset in the context with its hot words.
"""
import collections
import sys


def main():
    trace, rounds = sys.argv[1], int(sys.argv[2])
    bases = {"A": int(sys.argv[3], 16), "B": int(sys.argv[4], 16)}
    size = int(sys.argv[5])
    words = {side: collections.Counter() for side in bases}
    with open(trace) as f:
        for line in f:
            # Data accesses: " L addr,size", " S addr,size", " M addr,size".
            if len(line) < 4 or line[0] != " " or line[1] not in "LSM":
                continue
            addr, n = line[3:].split(",")
            addr, n = int(addr, 16), int(n)
            for side, base in bases.items():
                if base <= addr < base + size:
                    off = addr - base
                    for w in range(off // 8, (off + n - 1) // 8 + 1):
                        words[side][w] += 1
    for side in bases:
        hot = sorted(w for w, c in words[side].items() if c >= rounds)
        lines = collections.defaultdict(list)
        for w in hot:
            lines[w * 8 // 64].append(w * 8 % 64)
        print(f"{side}: {len(hot)} hot words, {len(lines)} cache lines")
        for line in sorted(lines):
            print(f"  {line * 64:#07x}: {' '.join(str(o) for o in lines[line])}")


if __name__ == "__main__":
    main()
