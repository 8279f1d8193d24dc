#!/usr/bin/env bash
# 8-byte all_reduce over shared memory against Open MPI's (vader), interleaved round by
# round, in microseconds to three decimals: the figure behind "8-byte time <= Open MPI
# shm's" of the shared-memory issue. Both time 100,000 calls (Open MPI's benchmark
# calibrates to that many at this size). Needs ../shared/peers built (peers/build.sh).
#
# Usage: bench/figures/small.sh [--ranks N] [--rounds R]   (default 2 ranks, 8 rounds)
#
# This machine's two vCPUs switch between a fast state (a cache line crosses cores in
# ~40 ns) and a slow one (~200 ns) for minutes at a time: compare within a round only.
set -u
ranks=2
rounds=8
. "$(dirname "$0")/common.sh" "$@"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# round | Open MPI shm (us) | rcoll out of place / in place (us)"
for round in $(seq 1 "$rounds"); do
  "$P/run_mpi.sh" "$ranks" shm allreduce -b 8 -e 8 --csv "$tmp/o.csv" >/dev/null 2>&1
  o=$(tail -1 "$tmp/o.csv" | cut -d, -f15)
  $B all_reduce --ranks "$ranks" -b 8 -e 8 -n 100000 -w 1000 -J "$tmp/r.json" >/dev/null 2>&1
  r=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1]))[0]; print('%.3f / %.3f' % (d['oop']['time_us'], d['ip']['time_us']))" "$tmp/r.json")
  echo "$round | $o | $r"
done
