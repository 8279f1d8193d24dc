#!/usr/bin/env bash
# MPI_Allreduce (float sum, out of place) timed by an MPI program under plain Open MPI and
# with librcoll_mpi.so preloaded, interleaved (each size: plain, shim, then rcoll-bench at
# the same size, so that the machine's drift touches all three alike), over shared memory
# (Open MPI's vader against rcoll's shm) and TCP (Open MPI's tcp BTL against rcoll's TCP),
# on 2 and 4 ranks. The timing loop is any MPI program printing nccl-tests' columns, such
# as mpi_bench.c of the project's peer benchmarks (MPI_BENCH_SRC; compiled with mpicc).
#
# Usage: mpi/bench/vs_open_mpi.sh [ROUNDS]  (default 2; RANKS, SIZES, TRANSPORTS override)
# Prints one line per round x transport x ranks x size: the three times in us (mean per
# call of the slowest rank), shim/plain speed-up, shim/rcoll-bench (the shim's own cost),
# and whether the shim served every MPI_Allreduce and every result was right.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-2}
ranks=(${RANKS:-2 4})
sizes=(${SIZES:-8 64K 1M 16M 64M})
transports=(${TRANSPORTS:-shm tcp})
src=${MPI_BENCH_SRC:-../shared/peers/mpi_bench.c}
out=target/mpi-bench
mkdir -p "$out"
cargo build -q --release -p rcoll-mpi -p rcoll-bench
shim=$PWD/target/release/librcoll_mpi.so
rb=$PWD/target/release/rcoll-bench
mpicc -O2 -Wall -I "$(dirname "$src")" -o "$out/mpi_bench" "$src" -lm
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# The time (us) and #wrong of mpi_bench's one size row.
row() { awk '$1 ~ /^[0-9]+$/ { print $5, $8; exit }'; }

for round in $(seq "$rounds"); do
  for t in "${transports[@]}"; do
    case $t in
      shm) btl=vader,self ;;
      tcp) btl=tcp,self ;;
    esac
    for n in "${ranks[@]}"; do
      for s in "${sizes[@]}"; do
        # Unbound, as rcoll-bench's ranks are: bound to one core each (mpirun's default
        # for 2 ranks), a rank sharing its core with other work cannot move away from it
        # (8 B through the shim took 4.4-5.4 ms bound, 7.5-28 us unbound, this machine busy).
        run=(mpirun --oversubscribe --bind-to none -np "$n" --mca pml ob1 --mca btl "$btl"
          --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
        args=(-C allreduce -b "$s" -e "$s" -T 0.5 -c 1)
        read -r plain plain_wrong < <("${run[@]}" "$out/mpi_bench" "${args[@]}" </dev/null 2>&1 | row)
        "${run[@]}" -x LD_PRELOAD="$shim" -x RCOLL_MPI_STATS=1 -x RCOLL_TRANSPORT="$t" \
          -x RCOLL_SOCKET_IFNAME=lo "$out/mpi_bench" "${args[@]}" </dev/null >"$out/shim.txt" 2>&1 || true
        read -r shimmed shim_wrong < <(row <"$out/shim.txt")
        served=$(grep -c 'rcoll-mpi: MPI_Allreduce: [0-9]* served, 0 forwarded' "$out/shim.txt" || true)
        # About as many calls as mpi_bench's half second makes.
        case $s in 8) iters=5000 ;; 64K) iters=1000 ;; 1M) iters=100 ;; *) iters=20 ;; esac
        own=$(RCOLL_SOCKET_IFNAME=lo "$rb" all_reduce --ranks "$n" --transport "$t" -b "$s" -e "$s" \
          -n "$iters" -c 1 2>&1 | awk '$1 ~ /^[0-9]+$/ { print $6; exit }')
        awk -v r="$round" -v t="$t" -v n="$n" -v s="$s" -v p="$plain" -v m="$shimmed" -v o="$own" \
          -v ok="$([ "$served" = 1 ] && [ "$plain_wrong$shim_wrong" = 00 ] && echo yes || echo NO)" \
          'BEGIN { printf "round %s %s n=%s %5s  plain %10.2f  shim %10.2f  rcoll-bench %10.2f us  shim/plain speed-up %5.2fx  rcoll-bench/shim %4.2f  served+right %s\n",
                   r, t, n, s, p, m, o, p / m, o / m, ok }'
      done
    done
  done
done
