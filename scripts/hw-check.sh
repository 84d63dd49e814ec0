#!/usr/bin/env bash
# One command to check a machine with a ConnectX before a cluster run:
#   scripts/hw-check.sh [DEVICE]
# 1. lists the RDMA devices, their ports, link layers and GID tables (with the RoCE v2
#    entry --gid-index auto would pick);
# 2. runs the hardware tests (`#[ignore]`d in CI: `cargo test -- --ignored`) on DEVICE
#    (default: the first mlx5 device);
# 3. runs copyrpc-echo and benchkv at np = 2 on this host over --fabric verbs;
# and prints a verdict. Without an RDMA device it says so and exits 1.
set -uo pipefail
cd "$(dirname "$0")/.."
fail() { echo "hw-check: FAIL: $*"; exit 1; }
class=/sys/class/infiniband
if [ ! -d "$class" ] || [ -z "$(ls -A "$class" 2>/dev/null)" ]; then
    fail "no RDMA device: $class is empty or absent (no NIC, or no RDMA support in this kernel: modprobe mlx5_ib). Everything else runs on --fabric sim."
fi
dev=${1:-}
echo "== devices"
for d in "$class"/*; do
    name=$(basename "$d")
    echo "$name (numa node $(cat "$d/device/numa_node" 2>/dev/null || echo '?'))"
    for p in "$d"/ports/*; do
        port=$(basename "$p")
        echo "  port $port: $(cat "$p/state" 2>/dev/null), link layer $(cat "$p/link_layer" 2>/dev/null)"
        for g in "$p"/gids/*; do
            i=$(basename "$g")
            gid=$(cat "$g" 2>/dev/null) || continue
            [ "$gid" = "0000:0000:0000:0000:0000:0000:0000:0000" ] && continue
            echo "    gid $i $gid $(cat "$p/gid_attrs/types/$i" 2>/dev/null)"
        done
    done
    [ -z "$dev" ] && case "$name" in mlx5*) dev=$name ;; esac
done
[ -n "$dev" ] || fail "no mlx5 device among $(ls "$class" | tr '\n' ' ')(copyrpc drives ConnectX through mlx5dv)"
echo "== using $dev"
limit=$(ulimit -l)
echo "RLIMIT_MEMLOCK: $limit KiB$( [ "$limit" != unlimited ] && [ "$limit" -lt 65536 ] && echo ' (low: benchkv at many ranks needs more; ulimit -l unlimited)')"

verdict=0
echo "== hardware tests (cargo test -- --ignored)"
if COPYRPC_TEST_DEVICE=$dev cargo test --release -p copyrpc-host --test verbs_hw -- --ignored; then
    echo "hardware tests: ok"
else
    echo "hardware tests: FAILED"; verdict=1
fi

cargo build --quiet --release -p copyrpc-host -p benchkv || fail "build"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "== copyrpc-echo, np 2, verbs (batches above 220 B, SQ wraps)"
if timeout 120 mpirun -np 2 --oversubscribe target/release/copyrpc-echo --fabric verbs \
    --device "$dev" --calls 20000 --max-payload 2048; then
    echo "echo: ok"
else
    echo "echo: FAILED"; verdict=1
fi
echo "== benchkv, np 2, verbs, --verify"
if timeout 180 mpirun -np 2 --oversubscribe target/release/benchkv --fabric verbs --device "$dev" \
    --verify --duration 2s -C 2; then
    echo "benchkv: ok"
else
    echo "benchkv: FAILED"; verdict=1
fi
if [ $verdict -eq 0 ]; then
    echo "hw-check: PASS on $dev"
else
    echo "hw-check: FAIL on $dev (see above)"
fi
exit $verdict
