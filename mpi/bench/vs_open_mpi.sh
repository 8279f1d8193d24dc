#!/usr/bin/env bash
# MPI_Allreduce (float sum, out of place) timed by an MPI program under plain Open MPI and
# with librcoll_mpi.so preloaded, interleaved (each size: plain, shim, then rcoll-bench at
# the same size, so that the machine's drift touches all three alike), over shared memory
# (Open MPI's vader against rcoll's shm) and TCP (Open MPI's tcp BTL against rcoll's TCP),
# on 2 and 4 ranks. The timing loop is any MPI program printing nccl-tests' columns, such
# as mpi_bench.c of the project's peer benchmarks (MPI_BENCH_SRC; compiled with mpicc).
#
# Usage: mpi/bench/vs_open_mpi.sh [ROUNDS]  (default 2; RANKS, SIZES, TRANSPORTS override)
# Prints one line per round x transport x ranks x size: the times in us (mean per call of
# the slowest rank) of plain Open MPI, the shim as it comes (which gives MPI the calls under
# RCOLL_MPI_SHM_MIN bytes inside one host: "to MPI" after its time), the shim serving every
# size on rcoll (RCOLL_MPI_SHM_MIN=0; over TCP the same run) and rcoll-bench; the shim's
# speed-up over plain, rcoll's (every size served), rcoll-bench over the shim serving
# every size (the shim's own cost), and whether every result was right and every
# MPI_Allreduce served (or, as it comes, given MPI for its size).
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

# The time (us) and #wrong of mpi_bench's one size row ("none none" without one: a run
# that failed shows so in the line, and the script goes on).
row() { awk '$1 ~ /^[0-9]+$/ { print $5, $8; found = 1; exit } END { if (!found) print "none", "none" }'; }

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
        shim_run() {
          "${run[@]}" -x LD_PRELOAD="$shim" -x RCOLL_MPI_STATS=1 -x RCOLL_TRANSPORT="$t" \
            -x RCOLL_SOCKET_IFNAME=lo "$@" "$out/mpi_bench" "${args[@]}" </dev/null >"$out/shim.txt" 2>&1 || true
        }
        shim_run
        read -r shimmed shim_wrong < <(row <"$out/shim.txt")
        # Served, or inside one host given MPI for its size (then "to MPI"): nothing else.
        served_all='rcoll-mpi: MPI_Allreduce: [0-9]+ served, 0 forwarded$'
        case $t in
          shm) pattern='rcoll-mpi: MPI_Allreduce: [0-9]+ served, (0 forwarded|[0-9]+ forwarded \([0-9]+ under [0-9]+ bytes inside one host\))$' ;;
          *) pattern=$served_all ;;
        esac
        served=$(grep -cE "$pattern" "$out/shim.txt" || true)
        to_mpi=$(grep -q 'MPI_Allreduce: 0 served' "$out/shim.txt" && echo "to MPI" || echo "")
        all=$shimmed all_wrong=$shim_wrong all_served=1
        if [ "$t" = shm ]; then
          shim_run -x RCOLL_MPI_SHM_MIN=0
          read -r all all_wrong < <(row <"$out/shim.txt")
          all_served=$(grep -cE "$served_all" "$out/shim.txt" || true)
        fi
        # About as many calls as mpi_bench's half second makes.
        case $s in 8) iters=5000 ;; 64K) iters=1000 ;; 1M) iters=100 ;; *) iters=20 ;; esac
        own=$(RCOLL_SOCKET_IFNAME=lo "$rb" all_reduce --ranks "$n" --transport "$t" -b "$s" -e "$s" \
          -n "$iters" -c 1 2>&1 | awk '$1 ~ /^[0-9]+$/ { print $6; exit }')
        awk -v r="$round" -v t="$t" -v n="$n" -v s="$s" -v p="$plain" -v m="$shimmed" -v o="$own" \
          -v a="$all" -v w="$to_mpi" \
          -v ok="$([ "$served$all_served" = 11 ] && [ "$plain_wrong$shim_wrong$all_wrong" = 000 ] && echo yes || echo NO)" \
          'function q(x, y) { return y + 0 ? x / y : 0 }
           BEGIN { printf "round %s %s n=%s %5s  plain %9.2f  shim %9.2f %-6s  shim, all on rcoll %9.2f  rcoll-bench %9.2f us  speed-up shim %5.2fx  all on rcoll %5.2fx  rcoll-bench/all on rcoll %4.2f  right %s\n",
                   r, t, n, s, p, m, w, a, o, q(p, m), q(p, a), q(o, a), ok }'
      done
    done
  done
done
