# Sourced by the figure scripts (`. "$(dirname "$0")/common.sh" "$@"`), after they set
# their defaults: `rounds`, and `ranks` if they take --ranks. Moves to the repository root,
# reads --rounds N (and --ranks N), builds the benchmark, and sets P (the peers, PEERS or
# ../shared/peers), B (the benchmark) and rows (its table rows, rank 0's under a launcher).
cd "$(dirname "$0")/../.." || exit 2
usage="usage: $0 [--rounds N]${ranks+ [--ranks N]}"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --ranks) [ -n "${ranks+x}" ] || { echo "$usage" >&2; exit 2; }; ranks=$2; shift 2 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
P=${PEERS:-../shared/peers}
B=target/release/rcoll-bench
cargo build --release -p rcoll-bench >/dev/null 2>&1
rows() { grep -E "^ +[0-9]|^\[rank 0\] +[0-9]"; }
# How far apart two CPUs are right now (`rcoll-bench topo`): a VM's host may move its vCPUs
# between cores that share caches and cores that do not within minutes, and every figure
# moves with it. The scripts print it at the start and end of each round.
cpus_apart() { echo "== $($B topo 2>&1 | grep -m1 "cache line round trip" || echo "cache line round trip: not measured")"; }
# What PAIRS iperf3 sender/receiver process pairs with STREAMS streams each carry over
# loopback together (1 MiB writes, 3 s): "TOTAL EACH..." in GB/s, or "n/a ..." when a pair
# failed.
iperf_pairs() {
  local pairs=$1 streams=$2 dir i servers=() clients=()
  dir=$(mktemp -d)
  for i in $(seq 1 "$pairs"); do
    iperf3 -s -1 -p $((5300 + i)) >/dev/null 2>&1 &
    servers+=($!)
  done
  sleep 0.5
  for i in $(seq 1 "$pairs"); do
    iperf3 -c 127.0.0.1 -p $((5300 + i)) -t 3 -l 1M -P "$streams" -J >"$dir/$i.json" 2>/dev/null &
    clients+=($!)
  done
  wait "${clients[@]}"
  # A server whose client never reached it would wait for ever.
  kill "${servers[@]}" 2>/dev/null
  wait "${servers[@]}" 2>/dev/null
  python3 - "$dir" "$pairs" <<'PY'
import json, sys
rates = []
for i in range(1, int(sys.argv[2]) + 1):
    try:
        rates.append(json.load(open(f"{sys.argv[1]}/{i}.json"))["end"]["sum_received"]["bits_per_second"] / 8e9)
    except (OSError, ValueError, KeyError):
        print("n/a (a pair failed)")
        sys.exit()
print(f"{sum(rates):.2f} {' '.join(f'{r:.2f}' for r in rates)}")
PY
  rm -rf "$dir"
}
