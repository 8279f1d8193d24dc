#!/usr/bin/env bash
# TCP on loopback against Open MPI's tcp BTL and Gloo, interleaved in one run: the
# commands behind the TCP figures of the performance issue's closing note (all_reduce,
# 4 ranks: 1 to 64 MiB, and 8 bytes). Needs ../shared/peers built (peers/build.sh; PEERS
# points elsewhere, for a writable copy) and iperf3.
#
# Each round also measures what loopback TCP carries on this machine: N iperf3 streams
# at once (N = ranks; 1 MiB writes, which loopback moves faster than iperf3's default
# 128 KiB), each its own sender and receiver process, all cores busy. An all_reduce over
# TCP moves at least 2(N-1) x size bytes through it, all ranks together (each sends
# 2(N-1)/N of the vector, the least any algorithm can): the time that takes at the
# streams' rate is printed per size as a reference ("at the loopback rate"). It is no strict
# bound (small vectors stay in cache, where loopback runs faster than iperf3's streams)
# and leaves out the reductions, which need the same cores.
#
# Each round ends with rcoll's ratio at each size: the best peer's time over rcoll's (out
# of place / in place; above 1 rcoll is faster), the best peer named.
set -u
rounds=2
ranks=4
. "$(dirname "$0")/common.sh" "$@"
n=$ranks
seen=$(mktemp)
trap 'rm -f "$seen"' EXIT
# Passes table rows through and keeps them, tagged with who made them, for the ratios.
keep() {
  local r
  r=$(rows) || return 0
  echo "$r"
  sed -e 's/^\[rank 0\]//' -e "s/^/$1 /" <<<"$r" >>"$seen"
}
ratios() {
  awk -v round="$1" '
    $1 != "rcoll" { t = $6; if (!($2 in best) || t < best[$2]) { best[$2] = t; who[$2] = $1 } }
    $1 == "rcoll" { out[$2] = $7; inp[$2] = $11; order[++k] = $2 }
    END {
      printf "== round %s: best peer time over rcoll'"'"'s (out of place / in place)\n", round
      for (i = 1; i <= k; i++) {
        s = order[i]
        if (s in best) printf "   %9d B: %.2f / %.2f (%s %.1f us)\n", s, best[s] / out[s], best[s] / inp[s], who[s], best[s]
      }
    }' "$seen"
  : >"$seen"
}
for round in $(seq 1 "$rounds"); do
  cpus_apart
  read -r total each < <(iperf_pairs "$n" 1)
  echo "== loopback TCP, round $round: $n iperf3 streams at once carry $total GB/s ($each)"
  for size in 1048576 4194304 16777216 67108864; do
    awk -v s="$size" -v n="$n" -v a="$total" 'BEGIN {
      printf "   all_reduce of %9d B on %d ranks at the loopback rate: %9.1f us (2(N-1) x size / %.2f GB/s)\n",
        s, n, 2 * (n - 1) * s / (a * 1e3), a }'
  done
  echo "== all_reduce, $n ranks, round $round: Open MPI tcp (1 MiB to 64 MiB, then 8 B)"
  "$P/run_mpi.sh" "$n" tcp allreduce -b 1M -e 64M -f 4 2>&1 | keep openmpi-tcp
  "$P/run_mpi.sh" "$n" tcp allreduce -b 8 -e 8 2>&1 | keep openmpi-tcp
  for a in ring_chunked halving_doubling; do
    echo "== all_reduce, $n ranks, round $round: Gloo $a"
    "$P/run_gloo.sh" "$n" "$a" -b 1M -e 64M -f 4 2>&1 | keep "gloo-$a"
  done
  echo "== all_reduce, $n ranks, round $round: rcoll over TCP"
  $B all_reduce --ranks "$n" --transport tcp -b 1M -e 64M -f 4 2>&1 | keep rcoll
  $B all_reduce --ranks "$n" --transport tcp -b 8 -e 8 -n 20000 -w 1000 2>&1 | keep rcoll
  ratios "$round"
  cpus_apart
done
