#!/usr/bin/env bash
# TCP on loopback against Open MPI's tcp BTL and Gloo, interleaved in one run: the
# commands behind the TCP figures of the performance issue's closing note (all_reduce,
# 4 ranks: 1 to 64 MiB, and 8 bytes). Needs ../shared/peers built (peers/build.sh; PEERS
# points elsewhere, for a writable copy).
#
# Usage: bench/figures/tcp.sh [--rounds N] [--ranks N]   (from the repository root)
set -u
cd "$(dirname "$0")/../.."
rounds=2
n=4
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --ranks) n=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--ranks N]" >&2; exit 2 ;;
  esac
done
P=${PEERS:-../shared/peers}
B=target/release/rcoll-bench
cargo build --release -p rcoll-bench >/dev/null 2>&1
rows() { grep -E "^ +[0-9]|^\[rank 0\] +[0-9]"; }
for round in $(seq 1 "$rounds"); do
  echo "== all_reduce, $n ranks, round $round: Open MPI tcp (1 MiB to 64 MiB, then 8 B)"
  "$P/run_mpi.sh" "$n" tcp allreduce -b 1M -e 64M -f 4 2>&1 | rows
  "$P/run_mpi.sh" "$n" tcp allreduce -b 8 -e 8 2>&1 | rows
  for a in ring_chunked halving_doubling; do
    echo "== all_reduce, $n ranks, round $round: Gloo $a"
    "$P/run_gloo.sh" "$n" "$a" -b 1M -e 64M -f 4 2>&1 | rows
  done
  echo "== all_reduce, $n ranks, round $round: rcoll over TCP"
  $B all_reduce --ranks "$n" --transport tcp -b 1M -e 64M -f 4 2>&1 | rows
  $B all_reduce --ranks "$n" --transport tcp -b 8 -e 8 -n 20000 -w 1000 2>&1 | rows
done
