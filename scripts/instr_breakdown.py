#!/usr/bin/env python3
"""Instructions per round of a callgrind run (`--dump-instr=yes`) grouped by what they do.

    scripts/instr_breakdown.py CALLGRIND_OUT BINARY ROUNDS [--by-function]

Each executed instruction's count is attributed, through `addr2line -i`, to the innermost
inlined frame that is not the standard library or a helper that only moves bytes
(`mlx5-raw/src/mem.rs`, `barrier.rs` count toward their caller), then grouped into the
categories of issue 24 (docs/PERFORMANCE.md, "Latency path"). Used by
scripts/instr-breakdown.sh, which runs callgrind on one side of the stepped echo.
"""
import collections
import re
import subprocess
import sys

CATEGORIES = [
    ("rig (function frames, loop, echo copy)", r"^tests/src/|^std copyrpc_tests"),
    ("doorbell record + BlueFlame", r"sq/mod.rs (ring_doorbell|fence)|srq.rs ring_doorbell"),
    ("WQE build (ctrl, raddr, inline, data seg, signaling)", r"mlx5-raw/src/sq/|layout/wqe.rs|mlx5-raw/src/lib.rs"),
    ("CQE poll + decode + CI doorbell", r"mlx5-raw/src/cq.rs|layout/cqe.rs"),
    ("SRQ free + repost", r"mlx5-raw/src/srq.rs"),
    ("flow metadata + batch/message encode/parse", r"core-nostd/src/wire/|tx/post.rs post_range"),
    ("credit bookkeeping",
     r"core-nostd/src/credit/|tx/mod.rs (wants_grant|refresh_call_limit|check_allowance)"
     r"|rx.rs credit_return_due|recv.rs take_credit_return|ring/remote.rs"
     r"|tx/call.rs (pay_for_call|call_has_room)"),
    ("ring positions (send/recv ring, rx state)", r"core-nostd/src/ring/|copyrpc/rx.rs|copyrpc/mem.rs"),
    ("call: pending table + call path", r"copyrpc/pending.rs|tx/call.rs|context.rs call_with_allowance"),
    ("answer: request table, recv, reply",
     r"copyrpc/requests.rs|tx/reply.rs|copyrpc/serve.rs|copyrpc/handle.rs"
     r"|context.rs (recv|link_requests|reply|release)"),
    ("poll loop (start_poll, CQ loops, dirty set, flush decision)",
     r"copyrpc/poll.rs|copyrpc/context.rs|copyrpc/post.rs|copyrpc/endpoint.rs"
     r"|copyrpc/liveness.rs|copyrpc/fifo.rs|copyrpc/tx/mod.rs|copyrpc/qpn_map.rs"),
    ("libc memcpy (inline WQE data, payload copies)", r"^\(libc"),
]
HELPER = re.compile(r"/rustc/|zerocopy|\.cargo/|mlx5-raw/src/mem.rs|mlx5-raw/src/barrier.rs")


def read_costs(path, binary):
    """Exclusive cost per (object, address); calls' inclusive lines are skipped."""
    costs = collections.Counter()
    objs, ob = {}, None
    addr = line = 0
    in_call = False

    def pos(tok, prev):
        if tok == "*":
            return prev
        if tok[0] in "+-":
            return prev + int(tok, 0)
        return int(tok, 0)

    for raw in open(path):
        raw = raw.rstrip("\n")
        m = re.match(r"^(c?ob)=\((\d+)\)(?: (.*))?$", raw)
        if m:
            kind, idx, name = m.groups()
            if name:
                objs[idx] = name
            if kind == "ob":
                ob = objs.get(idx)
            continue
        if raw.startswith("calls="):
            in_call = True
            continue
        if raw and raw[0] in "0123456789+-*":
            p = raw.split()
            addr = pos(p[0], addr)
            if len(p) > 1:
                line = pos(p[1], line)
            c = int(p[2]) if len(p) > 2 else 0
            if in_call:
                in_call = False
                continue
            costs[(ob, addr)] += c
    name = binary.rsplit("/", 1)[-1]
    mine = collections.Counter()
    other = 0
    for (o, a), c in costs.items():
        if o and (o.endswith(name) or o.endswith("copyrpc-instr")):
            mine[a] += c
        else:
            other += c
    return mine, other


def attribute(mine, binary):
    addrs = sorted(a for a, c in mine.items() if c)
    out = subprocess.run(
        ["addr2line", "-i", "-f", "-C", "-a", "-e", binary] + [hex(a) for a in addrs],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    frames = collections.defaultdict(list)
    cur, i = None, 0
    while i < len(out):
        if out[i].startswith("0x"):
            cur = int(out[i], 16)
            i += 1
            continue
        frames[cur].append((out[i], out[i + 1] if i + 1 < len(out) else ""))
        i += 2
    group = collections.Counter()
    for a in addrs:
        key = None
        for fn, loc in frames.get(a, []):
            if HELPER.search(loc):
                continue
            f = re.sub(r"^.*?/(core-nostd|mlx5-raw|tests)/", r"\1/", loc.split(":")[0])
            fn = re.sub(r"<impl [^>]*>", "", fn).split("::")[-1][:40]
            key = f"{f} {fn}"
            break
        if key is None:
            fs = frames.get(a) or [("?", "")]
            key = "std " + fs[0][0][:50]
        group[key] += mine[a]
    return group


def main():
    path, binary, rounds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    mine, other = read_costs(path, binary)
    group = attribute(mine, binary)
    group["(libc, e.g. memcpy)"] += other
    total = sum(group.values())
    if "--by-function" in sys.argv:
        for k, c in group.most_common():
            print(f"{c / rounds:8.1f}  {k}")
    else:
        cats = collections.Counter()
        for k, c in group.items():
            for name, rx in CATEGORIES:
                if re.search(rx, k):
                    cats[name] += c
                    break
            else:
                cats["other"] += c
        for name, _ in CATEGORIES + [("other", "")]:
            if cats[name]:
                print(f"{cats[name] / rounds:8.1f}  {name}")
    print(f"{total / rounds:8.1f}  total per round")


if __name__ == "__main__":
    main()
