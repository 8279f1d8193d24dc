#!/usr/bin/env bash
# Shared memory on one host against Open MPI's (vader), interleaved in one run, and the
# two-level figure on emulated hosts: the commands behind the figures of the shared-memory
# issue's closing note. Needs ../shared/peers built (peers/build.sh), root for the last part.
#
# Usage: bench/figures/shm.sh [--rounds N]   (from the repository root; default 2 rounds)
set -u
rounds=2
. "$(dirname "$0")/common.sh" "$@"
echo "== memcpy (the local limit)"; "$P/memcpy_bench" 2>&1 | tail -2
for n in 2 4; do
  for round in $(seq 1 "$rounds"); do
    cpus_apart
    echo "== all_reduce, $n ranks, round $round: Open MPI shm (8 B, then 64 KiB to 64 MiB)"
    "$P/run_mpi.sh" "$n" shm allreduce -b 8 -e 8 2>&1 | rows
    "$P/run_mpi.sh" "$n" shm allreduce -b 64K -e 64M -f 4 2>&1 | rows
    echo "== all_reduce, $n ranks, round $round: rcoll"
    # As many calls as Open MPI's benchmark times at 8 B (it calibrates to 100,000 with
    # 2 ranks): 20,000 calls of 0.4 us are 8 ms, within one scheduler hiccup.
    $B all_reduce --ranks "$n" -b 8 -e 8 -n 100000 -w 1000 2>&1 | rows
    # 200 timed calls per size, not the default 20 (20 calls of 50 us are 1 ms: Open MPI's
    # benchmark times about 2,000 at 1 MiB, 20 only at 64 MiB).
    $B all_reduce --ranks "$n" -b 64K -e 64M -f 4 -n 200 -w 20 2>&1 | rows
    for c in broadcast:broadcast allgather:all_gather reducescatter:reduce_scatter; do
      echo "== ${c##*:}, $n ranks, round $round: Open MPI shm, then rcoll (1 MiB, 64 MiB)"
      "$P/run_mpi.sh" "$n" shm "${c%%:*}" -b 1M -e 64M -f 64 2>&1 | rows
      $B "${c##*:}" --ranks "$n" -b 1M -e 64M -f 64 -n 200 -w 20 2>&1 | rows
    done
    cpus_apart
  done
done
if [ "$(id -u)" -eq 0 ]; then
  for a in hierarchical ring auto; do
    echo "== 2 emulated hosts x 2 ranks, 1 Gbit/s links: all_reduce 64 MiB, --algo $a"
    ci/multihost.sh --hosts 2 --ranks-per-host 2 --rate 1gbit -- \
      $B all_reduce -b 64M -e 64M -n 3 -w 1 --algo "$a" 2>&1 | rows
  done
  for c in all_gather reduce_scatter; do
    for a in hierarchical ring auto; do
      echo "== 2 emulated hosts x 2 ranks, 1 Gbit/s links: $c 16 MiB, --algo $a"
      ci/multihost.sh --hosts 2 --ranks-per-host 2 --rate 1gbit -- \
        $B "$c" -b 16M -e 16M -n 3 -w 1 --algo "$a" 2>&1 | rows
    done
  done
fi
