#!/usr/bin/env bash
# Issue 13's figures: an 8-byte and a 64 MiB in-place f32 all_reduce through the C ABI
# (capi/examples/bench.c) and through the Rust API (collectives/examples/allreduce_time.rs),
# the same loop, interleaved in one run, on local ranks (RCOLL_TRANSPORT, default auto:
# shared memory); then the overlap rcollIAllReduce achieves with computation: on local ranks
# (where the collective needs the same cores as the computation), and across 2 emulated hosts
# behind 1 Gbit/s links (ci/multihost.sh, as root: the wire is the limit, the cores idle).
#
#   bench/figures/capi.sh [RANKS] [ROUNDS]      (defaults 2, 5)
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-2}
rounds=${2:-5}
cargo build --release -q -p rcoll-capi
cargo build --release -q -p rcoll --example allreduce_time
out=target/release/capi-bench
cc -O2 capi/examples/bench.c -I capi/include -L target/release -lrcoll \
    -Wl,-rpath,"$PWD/target/release" -o "$out"
rust=target/release/examples/allreduce_time
ranks() { # command...: n ranks by the environment launcher; rank 0's output
    local port=$((20000 + RANDOM % 20000)) secret pids=()
    secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    for r in $(seq 1 $((n - 1))); do
        RCOLL_RANK=$r RCOLL_WORLD_SIZE=$n RCOLL_ROOT_ADDR=127.0.0.1:$port \
            RCOLL_UNIQUE_ID=$secret "$@" >/dev/null &
        pids+=($!)
    done
    RCOLL_RANK=0 RCOLL_WORLD_SIZE=$n RCOLL_ROOT_ADDR=127.0.0.1:$port RCOLL_UNIQUE_ID=$secret "$@"
    for p in "${pids[@]}"; do wait "$p"; done
}
echo "ranks $n, transport ${RCOLL_TRANSPORT:-auto}"
for round in $(seq 1 "$rounds"); do
    for size in 8:100000 67108864:20; do
        bytes=${size%%:*} iters=${size##*:}
        c=$(ranks "$out" time "$bytes" "$iters" | awk '/^TIME/ {print $3}')
        r=$(ranks "$rust" "$bytes" "$iters" | awk '/^TIME/ {print $3}')
        echo "round $round  $bytes B  C ABI ${c} us  Rust ${r} us  C/Rust $(awk -v c="$c" -v r="$r" 'BEGIN {printf "%.3f", c / r}')"
    done
done
echo "overlap, $n local ranks"
for bytes in 1048576 16777216 67108864; do
    ranks "$out" overlap "$bytes" | grep OVERLAP
done
if [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null; then
    echo "overlap, 2 emulated hosts x 1 rank, 1 Gbit/s links"
    for bytes in 1048576 16777216 67108864; do
        ci/multihost.sh --hosts 2 --ranks-per-host 1 --rate 1gbit -- "$PWD/$out" overlap "$bytes" |
            grep OVERLAP
    done
fi
