#!/usr/bin/env bash
# The first thing to run on a machine with a ConnectX (docs/HARDWARE.md walks through it):
#
#   scripts/hw-check.sh [--device DEV] [--port N] [--gid-index N] [--tclass N] [--sl N]
#                       [--hosts A,B | --hostfile FILE] [--list] [DEV]
#
# 1. lists the RDMA devices with their firmware, NUMA node, ports, states, link layers and
#    GID tables (RoCE type and netdev), and the rdma-core and kernel versions;
# 2. picks the device: the one named, else the first mlx5 device with an ACTIVE port;
# 3. runs the #[ignore]d hardware tests on it (cargo test -- --ignored);
# 4. runs copyrpc-echo (payloads to 2 KiB, send queues wrapping), a QD 1 echo (latency),
#    copyrpc-bulk (bandwidth) and benchkv --verify over --fabric verbs at np = 2: on this
#    host, or one rank on each of two hosts (--hosts / --hostfile, through mpirun; the
#    checkout must be at the same path on both);
# 5. prints the latency and bandwidth next to ib_write_lat / ib_write_bw when perftest is
#    installed, and the port's hardware counters that moved during the run;
# and a verdict. Without an RDMA device it says why and exits 1; a bad flag exits 2.
# --list stops after step 2 (what it would use), exit 0.
#
# SYSFS_PATH moves /sys, as it does for libibverbs (tests point it at fixture trees).
set -uo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
bad() { echo "hw-check: $*" >&2; exit 2; }
fail() { echo "hw-check: FAIL: $*"; exit 1; }
num() { # flag value lo hi
  [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -ge "$3" ] && [ "$2" -le "$4" ] || bad "$1 $2: expected $3..=$4"
}

dev='' port='' gid='' tclass=0 sl=0 hosts='' hostfile='' list=0
while [ $# -gt 0 ]; do
  case $1 in
    --device) [ $# -ge 2 ] || bad "--device needs a value"; [ -z "$dev" ] || bad "two devices named"; dev=$2; shift 2 ;;
    --port) [ $# -ge 2 ] || bad "--port needs a value"; num --port "$2" 1 255; port=$2; shift 2 ;;
    --gid-index) [ $# -ge 2 ] || bad "--gid-index needs a value"; num --gid-index "$2" 0 255; gid=$2; shift 2 ;;
    --tclass) [ $# -ge 2 ] || bad "--tclass needs a value"; num --tclass "$2" 0 255; tclass=$2; shift 2 ;;
    --sl) [ $# -ge 2 ] || bad "--sl needs a value"; num --sl "$2" 0 15; sl=$2; shift 2 ;;
    --hosts) [ $# -ge 2 ] || bad "--hosts needs a value"; hosts=$2; shift 2
      [[ $hosts =~ ^[^,]+,[^,]+$ ]] || bad "--hosts $hosts: expected two host names, A,B" ;;
    --hostfile) [ $# -ge 2 ] || bad "--hostfile needs a value"; hostfile=$2; shift 2
      [ -r "$hostfile" ] || bad "--hostfile $hostfile: cannot read it" ;;
    --list) list=1; shift ;;
    -h|--help) usage ;;
    -*) bad "unknown flag $1 (try --help)" ;;
    *) [ -z "$dev" ] || bad "two devices named: $dev and $1"; dev=$1; shift ;;
  esac
done
[ -n "$hosts" ] && [ -n "$hostfile" ] && bad "--hosts and --hostfile: give one"
named=$dev
case $dev in */*|.|..) bad "--device $dev: expected an RDMA device name (ibv_devices)" ;; esac

sys=${SYSFS_PATH:-/sys}
sys=${sys%/}
class=$sys/class/infiniband
if [ ! -d "$class" ] || [ -z "$(ls -A "$class" 2>/dev/null)" ]; then
  fail "no RDMA device: $class is empty or absent (no NIC, or no RDMA support in this kernel: modprobe mlx5_ib). Everything else runs on --fabric sim."
fi

# The device's driver: mlx5_core for a ConnectX (names like rocep1s0f0 hide it).
is_mlx5() {
  local drv
  drv=$(basename "$(readlink "$class/$1/device/driver" 2>/dev/null)" 2>/dev/null)
  [ "$drv" = mlx5_core ] || { [ -z "$drv" ] && [[ $1 == mlx5* ]]; }
}
active_port() { # dev -> first ACTIVE port number
  local p
  for p in "$class/$1"/ports/*; do
    [[ $(cat "$p/state" 2>/dev/null) == *ACTIVE* ]] && { basename "$p"; return 0; }
  done
  return 1
}

echo "== host $(hostname 2>/dev/null || echo '?'): kernel $(uname -r), rdma-core $(
  dpkg-query -W -f '${Version}' rdma-core 2>/dev/null || rpm -q --qf '%{VERSION}' rdma-core 2>/dev/null ||
  pkg-config --modversion libibverbs 2>/dev/null || echo unknown)"
echo "== devices"
pick=''
for d in "$class"/*; do
  name=$(basename "$d")
  mlx=no; is_mlx5 "$name" && mlx=yes
  echo "$name: mlx5 $mlx, firmware $(cat "$d/fw_ver" 2>/dev/null || echo '?'), board $(cat "$d/board_id" 2>/dev/null || echo '?'), numa node $(cat "$d/device/numa_node" 2>/dev/null || echo '?')"
  for p in "$d"/ports/*; do
    [ -d "$p" ] || continue
    echo "  port $(basename "$p"): $(cat "$p/state" 2>/dev/null), $(cat "$p/rate" 2>/dev/null), link layer $(cat "$p/link_layer" 2>/dev/null)"
    for g in "$p"/gids/*; do
      i=$(basename "$g")
      v=$(cat "$g" 2>/dev/null) || continue
      [ "$v" = "0000:0000:0000:0000:0000:0000:0000:0000" ] && continue
      echo "    gid $i $v $(cat "$p/gid_attrs/types/$i" 2>/dev/null || echo '-') $(cat "$p/gid_attrs/ndevs/$i" 2>/dev/null || echo '-')"
    done
  done
  if [ -z "$dev" ] && [ -z "$pick" ] && [ $mlx = yes ] && active_port "$name" >/dev/null; then
    pick=$name
  fi
done
if [ -n "$dev" ]; then
  [ -d "$class/$dev" ] || fail "--device $dev: no such RDMA device (present: $(ls "$class" | tr '\n' ' '))"
  is_mlx5 "$dev" || fail "--device $dev is not driven by mlx5 (copyrpc writes mlx5 WQEs itself)"
else
  dev=$pick
  [ -n "$dev" ] || fail "no mlx5 device with an ACTIVE port among $(ls "$class" | tr '\n' ' ')(check the cable and, on InfiniBand, the subnet manager; or name one: --device)"
fi
if [ -z "$port" ]; then
  port=$(active_port "$dev") || fail "$dev has no ACTIVE port (ibv_devinfo -d $dev)"
fi
state=$(cat "$class/$dev/ports/$port/state" 2>/dev/null) || fail "$dev has no port $port"
[[ $state == *ACTIVE* ]] || fail "$dev port $port is $state, not ACTIVE"
ll=$(cat "$class/$dev/ports/$port/link_layer" 2>/dev/null)
netdev=$(cat "$class/$dev/ports/$port/gid_attrs/ndevs/0" 2>/dev/null || ls "$class/$dev/device/net" 2>/dev/null | head -1)
echo "== using $dev port $port ($ll${netdev:+, netdev $netdev}), gid index ${gid:-auto}, tclass $tclass, sl $sl"
limit=$(ulimit -l)
echo "RLIMIT_MEMLOCK: $limit KiB$( [ "$limit" != unlimited ] && [ "$limit" -lt 65536 ] && echo ' (low: benchkv at many ranks needs more; ulimit -l unlimited)')"
[ $list = 1 ] && exit 0

fabric_flags=(--fabric verbs --port "$port" --tclass "$tclass" --sl "$sl")
[ -n "$gid" ] && fabric_flags+=(--gid-index "$gid")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi=(mpirun -np 2)
if [ -n "$hosts" ]; then
  mpi+=(--host "$hosts" --map-by node)
  where="one rank on each of $hosts"
elif [ -n "$hostfile" ]; then
  mpi+=(--hostfile "$hostfile" --map-by node)
  where="one rank on each host of $hostfile"
else
  mpi+=(--oversubscribe)
  where="both ranks on this host"
fi
# On this host the device checked above; across hosts only a device named on the command
# line (each host may call its NIC otherwise: each rank picks its own first mlx5 device).
if [ -z "$hosts$hostfile" ] || [ -n "$named" ]; then
  fabric_flags+=(--device "$dev")
fi

# The port's counters (hw_counters: transport errors and retries; counters: IB port
# counters) and, on RoCE, the netdev's PHY discards, one "name value" a line.
counters() {
  local f
  for f in "$class/$dev/ports/$port"/hw_counters/* "$class/$dev/ports/$port"/counters/*; do
    [ -f "$f" ] && echo "$(basename "$f") $(cat "$f" 2>/dev/null)"
  done
  if [ -n "$netdev" ] && command -v ethtool >/dev/null; then
    ethtool -S "$netdev" 2>/dev/null | awk -F: '/discard|pause|out_of_buffer|_err/ { gsub(/ /, "", $1); gsub(/ /, "", $2); print $1, $2 }'
  fi
}
before=$(counters)

verdict=0
step() { echo "$1: $2"; [ "$2" = ok ] || verdict=1; }
echo "== hardware tests (cargo test -- --ignored) on $dev"
if env COPYRPC_TEST_DEVICE="$dev" COPYRPC_TEST_PORT="$port" ${gid:+COPYRPC_TEST_GID_INDEX=$gid} \
  timeout 900 cargo test --release -p copyrpc-host --test verbs_hw -- --ignored --test-threads 1; then
  step "hardware tests" ok
else
  step "hardware tests" FAILED
fi

timeout 1800 cargo build --quiet --release -p copyrpc-host -p benchkv || fail "cargo build --release"
bin=$PWD/target/release
echo "== copyrpc-echo, np 2, verbs, $where (batches above 220 B, SQ wraps)"
if timeout 180 "${mpi[@]}" "$bin/copyrpc-echo" "${fabric_flags[@]}" --calls 20000 --max-payload 2048; then
  step echo ok
else
  step echo FAILED
fi

echo "== latency: copyrpc-echo, one call in flight per peer (QD 1), payloads up to 32 B"
lat_out=$(timeout 180 "${mpi[@]}" "$bin/copyrpc-echo" "${fabric_flags[@]}" --calls 20000 --window 1 \
  --max-payload 32 2>&1)
lat_rc=$?
echo "$lat_out" | grep '^rank'
# Each rank's one call in flight: elapsed / responses is a round trip; perftest's
# ib_write_lat reports half of one (RTT / 2), so the same half is printed here.
lat=$(echo "$lat_out" | awk '/^rank 0\/2: .*: ok$/ {
  for (i = 1; i <= NF; i++) { if ($i ~ /^responses=/) { split($i, a, "="); n = a[2] } if ($i == "in") t = $(i + 1) }
  sub(/s:?$/, "", t); if (n > 0) printf "%.2f", t / n * 1e6 / 2 }')
[ $lat_rc -eq 0 ] && [ -n "$lat" ] && step "latency run" ok || step "latency run" FAILED

echo "== bandwidth: copyrpc-bulk PUT (RDMA READ by the server) of 1 MiB and 8 MiB"
bw_out=$(timeout 300 "${mpi[@]}" "$bin/copyrpc-bulk" "${fabric_flags[@]}" --pattern put --sizes 1M,8M \
  --iters 20 2>&1)
bw_rc=$?
echo "$bw_out" | grep '^rank'
bw=$(echo "$bw_out" | awk '/^rank 0\/2: put 8388608 B/ { for (i = 1; i <= NF; i++) if ($i == "MiB/s") print $(i - 1) }')
[ $bw_rc -eq 0 ] && [ -n "$bw" ] && step "bandwidth run" ok || step "bandwidth run" FAILED

echo "== benchkv, np 2, verbs, --verify"
if timeout 240 "${mpi[@]}" "$bin/benchkv" "${fabric_flags[@]}" --verify --duration 2s -C 2; then
  step benchkv ok
else
  step benchkv FAILED
fi

perftest() { # tool args...: server through mpirun on the peer host (or here), client here
  local tool=$1; shift
  local pargs=(-d "$dev" -i "$port" -F --tclass="$tclass" --sl="$sl" "$@")
  [ -n "$gid" ] && pargs+=(-x "$gid")
  local peer=localhost srv
  if [ -n "$hosts" ]; then
    peer=${hosts#*,}
    timeout 60 mpirun -np 1 --host "$peer" "$tool" "${pargs[@]}" >/dev/null 2>&1 &
  else
    timeout 60 "$tool" "${pargs[@]}" >/dev/null 2>&1 &
  fi
  srv=$!
  # The server listens once it is up: the client retries its connection a few times.
  local try out
  for try in 1 2 3 4 5; do
    sleep 1
    out=$(timeout 60 "$tool" "${pargs[@]}" "$peer" 2>&1) && break
  done
  echo "$out"
  kill "$srv" 2>/dev/null
  wait "$srv" 2>/dev/null
}
echo "== against perftest"
if command -v ib_write_lat >/dev/null && [ -z "$hostfile" ]; then
  pl=$(perftest ib_write_lat -s 32 -n 20000 | awk '/^ *32 / { print $5 " us (t_typical), " $3 " us (t_min)" }')
  pb=$(perftest ib_write_bw -s 8388608 -n 200 | awk '/^ *8388608 / { print $4 " MB/s (BW average)" }')
  echo "latency   copyrpc QD 1: ${lat:-?} us (RTT/2)   ib_write_lat 32 B: ${pl:-did not run}"
  echo "bandwidth copyrpc PUT 8 MiB: ${bw:-?} MiB/s   ib_write_bw 8 MiB: ${pb:-did not run}"
else
  echo "latency   copyrpc QD 1: ${lat:-?} us (RTT/2)   (perftest not installed$( [ -n "$hostfile" ] && echo ' or --hostfile given'): ib_write_lat not run)"
  echo "bandwidth copyrpc PUT 8 MiB: ${bw:-?} MiB/s"
fi

echo "== port counters that moved during the run ($dev port $port${netdev:+, $netdev}; this host)"
after=$(counters)
moved=$(join <(sort <<<"$before") <(sort <<<"$after") | awk '$3 != $2 { printf "  %-36s %s -> %s (+%s)\n", $1, $2, $3, $3 - $2 }')
echo "${moved:-  (none)}"
# Transport trouble: any growth of these says the fabric dropped or reordered packets.
if grep -Eq 'out_of_sequence|local_ack_timeout_err|packet_seq_err|rnr_nak_retry_err|rx_discards_phy|implied_nak_seq_err' <<<"$moved"; then
  echo "warning: transport error counters moved (see docs/HARDWARE.md, 'hw-check lines')"
fi

if [ $verdict -eq 0 ]; then
  echo "hw-check: PASS on $dev port $port ($where)"
else
  echo "hw-check: FAIL on $dev port $port ($where; see above)"
fi
exit $verdict
