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
