#!/usr/bin/env bash
# The virtual-world figures of docs/PERFORMANCE.md ("benchkv at scale in virtual time"):
#   scripts/virtual-world.sh scale   wall time of 10 ms of virtual time, NP = 2..64
#   scripts/virtual-world.sh memory  wall time and peak memory, NP = 8..256 (K 2, C 8, 10 ms)
#   scripts/virtual-world.sh seed001 the bistability settings (docs/spec/poll-budget.md#bistability) as
#                                     steady states at NP = 2..32, and the collapse's candidates
#   scripts/virtual-world.sh budget  the adaptive poll budget against fixed ones (issue 18)
#   scripts/virtual-world.sh budget-steady  the same in steady state: 21 ms, the first excluded,
#                                    five seeds (issue 48); budget-stall: a 1 ms NIC stall
#   scripts/virtual-world.sh dvm     Delegation against Meta as steady states at NP = 2, 16, 32
#   scripts/virtual-world.sh validate the virtual echo against the research code's CX-7
#                                     figures, benchkv's idle round trip, and the shm
#                                     bench's shape (docs/BENCHKV.md)
# Each line is one run; the runs are deterministic (same flags, same output), the wall
# times are this machine's (one core: the world runs on one thread).
set -euo pipefail
cd "$(dirname "$0")/.."
# BENCHKV, ECHO: binaries to run instead of building this tree's.
if [ -z "${BENCHKV:-}" ] || [ -z "${ECHO:-}" ]; then
    cargo build --quiet --release -p benchkv -p copyrpc-host --bin benchkv --bin copyrpc-echo
fi
B=${BENCHKV:-target/release/benchkv}
E=${ECHO:-target/release/copyrpc-echo}

summary() {
    python3 -c '
import json, sys
ls = [json.loads(l) for l in sys.stdin if l.strip()]
run = [l for l in ls if l["type"] == "run"][0]
m = [l for l in ls if l["type"] == "metrics"]
s = [l for l in ls if l["type"] == "summary"][0]
d = m[0]
tot = sum(d["cqe_batches"].values()) or 1
h = "/".join("%.0f" % (100 * d["cqe_batches"][k] / tot) for k in ["0", "1", "2-10", "11-100", ">100"])
np_ = len(run["per_rank"])
print("%s: %.2f M req/s per rank, %.1f M total; daemon#0 of rank 0: %d loops, %.0f %% idle, CQE batches %% [0/1/2-10/11-100/>100] %s, mean %.2f; p50 %.0f us; drained %s"
      % (sys.argv[1], run["total_rps"] / 1e6 / np_, run["total_rps"] / 1e6, d["loops"],
         100 * d["idle_loops"] / max(1, d["loops"]), h, d["cqe_batch_mean"], run["p50_ns"] / 1e3, s["drained"]))
' "$1"
}

case "${1:-scale}" in
scale)
    for np in 2 8 16 32 64; do
        start=$(date +%s.%N)
        $B --world "virtual:$np" -K 2 -C 8 --queue-depth 32 --duration 10ms --rpc-ring 16k --output json 2>/dev/null \
            | summary "NP=$np K=2 C=8 QD=32 10ms"
        echo "  wall $(echo "$(date +%s.%N) - $start" | bc) s"
    done
    ;;
seed001)
    # docs/spec/poll-budget.md#bistability as steady states (scripts/steady-state.sh: 5 seeds, 1 ms warmup, 20 ms):
    # the bistability settings of docs/spec/poll-budget.md#bistability (one daemon, 46
    # clients, QD 32, 256 KiB rings) on the built-in NIC and cost profile, with two
    # assumptions: turns vary +-30 % (jitter=0.3), and idle clients look every 0.5 us
    # (client_idle_ns=500; the measured look is ~70 ns at QD 32) to keep the runs short.
    # Then each candidate mechanism at its threshold, and a 1 ms stall at NP = 16.
    a=(-C 46 --queue-depth 32 --rpc-ring 256k)
    c=jitter=0.3,client_idle_ns=500
    for pb in off 2 16 adaptive; do
        for np in 2 4 8 16 32; do
            scripts/steady-state.sh "NP=$np poll-budget=$pb" --world "virtual:$np" "${a[@]}" \
                --poll-budget "$pb" --cost "$c"
        done
    done
    for np in 8 16; do
        for q in 12000 13000 14000; do
            scripts/steady-state.sh "NP=$np qp_packet_ns=$q" --world "virtual:$np" "${a[@]}" \
                --cost "$c" --nic "qp_packet_ns=$q"
        done
        for x in "nic_packet_ns=1000" "nic_packet_ns=300"; do
            scripts/steady-state.sh "NP=$np $x" --world "virtual:$np" "${a[@]}" --cost "$c" --nic "$x"
        done
        for x in "loop_client_ns=300" "post_ns=1000" "line_ns=300"; do
            scripts/steady-state.sh "NP=$np $x" --world "virtual:$np" "${a[@]}" --cost "$c,$x"
        done
    done
    # The NP = 16 high state after a 1 ms stall of rank 3's NIC at 3 ms: the 10 ms after
    # 10 ms (the stall and its aftermath are in the warmup).
    for nic in "" "qp_packet_ns=13000"; do
        WARMUP=10ms DURATION=10ms scripts/steady-state.sh "NP=16 stall:3@3ms+1ms ${nic:-built-in NIC}" \
            --world virtual:16 "${a[@]}" --cost "$c" ${nic:+--nic "$nic"} --vfault stall:3@3ms+1ms
    done
    ;;
budget)
    # Issue 18: the adaptive poll budget against every fixed one on the same plant (the
    # bistability settings with a 7 µs QP packet time, 1 µs extra polls), from a cold start,
    # then after a 1 ms stall of rank 3's NIC at 2 ms (10 ms runs), and the plot of u.
    plant=(-C 46 --queue-depth 32 --rpc-ring 256k --cost item_ns=40,jitter=0.3,line_ns=0 --nic qp_packet_ns=14000,nic_ns=7000)
    for np in 2 8 16 32; do
        for pb in off 1 2 3 4 8 16 adaptive adaptive-seed; do
            $B --world "virtual:$np" "${plant[@]}" --duration 5ms --poll-budget "$pb" \
                --output json 2>/dev/null | summary "NP=$np poll-budget=$pb"
        done
    done
    for pb in off 2 adaptive adaptive-seed; do
        $B --world virtual:8 "${plant[@]}" --duration 10ms --poll-budget "$pb" \
            --vfault stall:3@2ms+1ms --output json 2>/dev/null | summary "stall NP=8 poll-budget=$pb"
    done
    mkdir -p docs/figures
    for v in "8 5ms adaptive-np8" "16 5ms adaptive-np16" "8 10ms adaptive-stall-np8 --vfault stall:3@2ms+1ms"; do
        set -- $v
        $B --world "virtual:$1" "${plant[@]}" --duration "$2" --poll-budget adaptive "${@:4}" \
            --sample-every 25us --plot "docs/figures/budget-$3.svg" >/dev/null 2>&1
    done
    ;;
budget-steady)
    # Issue 48: the adaptive poll budget against fixed ones in steady state. Each run is
    # 21 back-to-back runs of 1 ms (`--runs 21 --duration 1ms`); the first (the cold
    # start's synchronised wave) is left out and the rate is the mean of the other 20.
    # One line per run: NP poll_ns budget seed M-req/s-per-rank; scripts/budget_table.py
    # makes the table of docs/PERFORMANCE.md. NPS, POLLS, BUDGETS and SEEDS select.
    plant=(-C 46 --queue-depth 32 --rpc-ring 256k --nic qp_packet_ns=12000)
    for np in ${NPS:-2 4 8 16 32 64}; do
        for poll in ${POLLS:-1000 5000}; do
            for pb in ${BUDGETS:-off 1 2 4 8 16 adaptive}; do
                for seed in ${SEEDS:-1 2 3 4 5}; do
                    $B --world "virtual:$np" "${plant[@]}" --cost "jitter=0.3,client_idle_ns=500,poll_ns=$poll" \
                        --duration 1ms --runs 21 --poll-budget "$pb" --seed "$seed" --output json 2>/dev/null \
                        | python3 -c '
import json, sys
runs = [json.loads(l) for l in sys.stdin if l.strip()]
runs = [r["total_rps"] for r in runs if r["type"] == "run"][1:]
np_ = int(sys.argv[1])
print(" ".join(sys.argv[1:5]), "%.3f" % (sum(runs) / len(runs) / 1e6 / np_) if runs else "failed")
' "$np" "$poll" "$pb" "$seed"
                done
            done
        done
    done
    ;;
budget-stall)
    # Issue 48: a 1 ms NIC stall of rank 3 at 5 ms, NP = 8 and 16, 21 ms in runs of 100 µs:
    # every rank's rate per 100 µs (one line per run: NP poll_ns budget seed, then the
    # rates in M req/s per rank); scripts/budget_table.py stall reads them.
    plant=(-C 46 --queue-depth 32 --rpc-ring 256k --nic qp_packet_ns=12000)
    for np in ${NPS:-8 16}; do
        for poll in ${POLLS:-1000 5000}; do
            for pb in ${BUDGETS:-off 1 adaptive}; do
                for seed in ${SEEDS:-1}; do
                    $B --world "virtual:$np" "${plant[@]}" --cost "jitter=0.3,client_idle_ns=500,poll_ns=$poll" \
                        --duration 100us --runs 210 --poll-budget "$pb" --seed "$seed" \
                        --vfault stall:3@5ms+1ms --output json 2>/dev/null \
                        | python3 -c '
import json, sys
runs = [json.loads(l) for l in sys.stdin if l.strip()]
np_ = int(sys.argv[1])
print(" ".join(sys.argv[1:5]), " ".join("%.2f" % (r["total_rps"] / 1e6 / np_) for r in runs if r["type"] == "run"))
' "$np" "$poll" "$pb" "$seed"
                done
            done
        done
    done
    ;;
dvm)
    # Delegation against Meta as steady states, the shape of docs/spec/benchkv.md#reference-figures
    # (2 daemons, 4 clients, QD 4) at 2, 16 and 32 ranks, with the same two assumptions as
    # seed001 (jitter=0.3, idle clients every 0.5 us).
    for np in 2 16 32; do
        for be in delegation meta; do
            scripts/steady-state.sh "NP=$np K=2 C=4 QD=4 $be" --world "virtual:$np" --backend "$be" \
                -K 2 -C 4 --queue-depth 4 --rpc-ring 16k --cost jitter=0.3,client_idle_ns=500
        done
    done
    ;;
validate)
    # The research code's copyrpc on a ConnectX-7 (memo/PERFORMANCE_ANALYSIS.md §4.1):
    # 1 endpoint x QD 1 ping-pong 3.76 us, 1 x 32 5.89 M calls/s, 8 x 256 28.8 M calls/s,
    # two threads (client, server). The virtual echo is symmetric: two ranks each call
    # and answer, so two CPUs carry both roles as the memo's two threads did, and the
    # calls/s of both ranks together compare with the memo's client's.
    for w in 1 16 256; do
        echo "echo 32 B, 2 ranks, window $w per rank: $($E --world virtual:2 --window $w --calls $((w == 1 ? 4000 : 40000)) --max-payload 32 2>/dev/null | tail -1)"
    done
    # benchkv's idle request: 2 ranks, 1 client, QD 1 (half local, half remote).
    $B --world virtual:2 -C 1 --queue-depth 1 --duration 2ms --output json 2>/dev/null \
        | python3 -c '
import json, sys
ls = [json.loads(l) for l in sys.stdin if l.strip()]
r = [l for l in ls if l["type"] == "run"][0]
print("benchkv idle (2 ranks, C 1, QD 1): p50 %.2f us, p99 %.2f us" % (r["p50_ns"] / 1e3, r["p99_ns"] / 1e3))'
    # The shm bench's shape (one client, one server of ipc, delegationrpc and Flux) on
    # the world's rules, against `cargo bench -p copyrpc-host --bench shm` (docs/BENCHKV.md).
    cargo build --quiet --release -p copyrpc-host --example shm_world
    target/release/examples/shm_world
    ;;
memory)
    # Peak memory three ways: the kernel's VmHWM (counts a /dev/shm page once per
    # mapping, and the world maps each link twice: its sender's and its receiver's),
    # PSS sampled every 0.2 s (each page once), and /dev/shm in use (the NICs' queues,
    # links and rings).
    for np in ${NPS:-8 16 32 64 128 256}; do
        shm0=$(df --output=used /dev/shm | tail -1)
        start=$(date +%s.%N)
        $B --world "virtual:$np" -K 2 -C 8 --duration 10ms --output json >/tmp/vw-mem-$np.json 2>/dev/null &
        pid=$!
        pss=0 shm=0 hwm=0
        while kill -0 $pid 2>/dev/null; do
            p=$(awk '/^Pss:/{print $2}' /proc/$pid/smaps_rollup 2>/dev/null || echo 0)
            h=$(awk '/^VmHWM:/{print $2}' /proc/$pid/status 2>/dev/null || echo 0)
            s=$(( $(df --output=used /dev/shm | tail -1) - shm0 ))
            [ "${p:-0}" -gt "$pss" ] && pss=$p
            [ "${h:-0}" -gt "$hwm" ] && hwm=$h
            [ "$s" -gt "$shm" ] && shm=$s
            sleep 0.2
        done
        wait $pid
        wall=$(echo "$(date +%s.%N) - $start" | bc)
        python3 -c '
import json, sys
np_, wall, hwm, pss, shm = sys.argv[1:6]
ls = [json.loads(l) for l in open("/tmp/vw-mem-%s.json" % np_) if l.strip()]
run = [l for l in ls if l["type"] == "run"][0]
s = [l for l in ls if l["type"] == "summary"][0]
print("NP=%s: wall %.1f s, peak RSS %.2f GiB, peak PSS %.2f GiB, /dev/shm %.2f GiB; %.2f M req/s per rank, drained %s"
      % (np_, float(wall), int(hwm) / 2**20, int(pss) / 2**20, int(shm) / 2**20,
         run["total_rps"] / 1e6 / int(np_), s["drained"]))
' "$np" "$wall" "$hwm" "$pss" "$shm"
    done
    ;;
*)
    echo "usage: $0 scale|memory|seed001|budget|budget-steady|budget-stall|dvm|validate" >&2
    exit 2
    ;;
esac
