#!/usr/bin/env bash
# Issue 54's figures: the time from a rank's death (SIGKILL, mid-loop of 1 MiB all_reduces)
# to the survivors' first all_reduce done without it, by Communicator::shrink against
# tearing the group down and forming a new one from a rendezvous
# (collectives/examples/shrink_recovery.rs). Each line: per mode, the slowest survivor's
# times since the death: its call failed, its new communicator was made, its first
# all_reduce there was done (ms).
#
#   bench/figures/shrink.sh [RANKS] [ROUNDS] [TRANSPORT]   (defaults 4, 5, $RCOLL_TRANSPORT or shm)
#   verbs: inside the Soft-RoCE VM, ranks alternating over rxe0 and rxe1:
#     cargo build --release -p rcoll --example shrink_recovery
#     SHRINK_RECOVERY=target/release/examples/shrink_recovery \
#         soft-roce/run-in-vm.sh bench/figures/shrink.sh 4 5 verbs
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:-4}
rounds=${2:-5}
transport=${3:-${RCOLL_TRANSPORT:-shm}}
exe=${SHRINK_RECOVERY:-target/release/examples/shrink_recovery}
[ -n "${SHRINK_RECOVERY:-}" ] || cargo build --release -q -p rcoll --example shrink_recovery
root=127.0.0.1
[ "$transport" != verbs ] || root=10.99.0.1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
once() { # mode: one run; the slowest survivor's three times
    local mode=$1 port=$((20000 + 2 * (RANDOM % 5000))) secret pids=()
    secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    rm -f "$scratch"/out.*
    for r in $(seq 0 $((n - 1))); do
        # Over verbs (in the VM), ranks alternate over rxe0 (veth0) and rxe1 (veth1).
        local ifname=lo
        [ "$transport" != verbs ] || ifname=veth$((r % 2))
        RCOLL_RANK=$r RCOLL_WORLD_SIZE=$n RCOLL_ROOT_ADDR=$root:$port RCOLL_SOCKET_IFNAME=$ifname \
            RCOLL_REBUILD_ADDR=$root:$((port + 1)) RCOLL_UNIQUE_ID=$secret \
            RCOLL_TRANSPORT=$transport RCOLL_TIMEOUT=${RCOLL_TIMEOUT:-10} \
            RCOLL_DEATH_FILE="$scratch/death" "$exe" "$mode" $((1 << 20)) \
            >"$scratch/out.$r" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || true; done
    if [ "$(cat "$scratch"/out.* | grep -c '^RECOVERY')" -ne $((n - 1)) ]; then
        echo "$mode: not every survivor recovered:" >&2
        cat "$scratch"/out.* >&2
        return 1
    fi
    cat "$scratch"/out.* | awk -v m="$mode" '/^RECOVERY/ {
        if ($4 > f) f = $4; if ($5 > s) s = $5; if ($6 > t) t = $6 }
        END { printf "%-8s failed %7.2f ms  new communicator %7.2f ms  first all_reduce %7.2f ms\n", m, f, s, t }'
}
echo "ranks $n, transport $transport, 1 MiB f32 all_reduce, the last rank killed"
for round in $(seq 1 "$rounds"); do
    for mode in shrink rebuild; do
        echo "round $round  $(once $mode)"
    done
done
