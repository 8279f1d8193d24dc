#!/usr/bin/env bash
# Several hosts on one machine: each emulated host is a network namespace whose ranks
# share memory (RCOLL_HOST names the host) and reach the other hosts through one veth
# link to a bridge, shaped to a rate (tc tbf, both directions) and, where the kernel has
# netem, a delay. Runs COMMAND once per rank, as a launcher would (RCOLL_RANK,
# RCOLL_WORLD_SIZE, RCOLL_ROOT_ADDR on host 0, RCOLL_HOST, one RCOLL_UNIQUE_ID), waits for
# every rank, prints each rank's output with its rank in front, and removes the namespaces,
# links and bridge however it ends. Needs root and iproute2.
#
# Usage: ci/multihost.sh [--hosts H] [--ranks-per-host M] [--rate RATE] [--delay DELAY]
#                        [--cyclic] [--timeout SECONDS] -- COMMAND [ARGS...]
#   --hosts 2 --ranks-per-host 2    (defaults)
#   --cyclic                        rank r on host r % hosts (as many launchers place them),
#                                   instead of in blocks
#   --rate 1gbit                    tc rate of each host's link, each way (0: unshaped)
#   --delay 100us                   one-way delay on each host's link (needs sch_netem;
#                                   without it the script says so and goes on undelayed)
#   --timeout 600                   kill every rank after this many seconds
# Exit status: 0 if every rank exited 0, else the first failing rank's status.
#
# Example (64 MiB all_reduce on 2 hosts x 2 ranks behind 1 Gbit/s links):
#   ci/multihost.sh --hosts 2 --ranks-per-host 2 --rate 1gbit -- \
#       target/release/rcoll-bench all_reduce -b 64M -e 64M
set -euo pipefail

hosts=2 per_host=2 rate=1gbit delay="" limit=600 cyclic=0
while [ $# -gt 0 ]; do
    case "$1" in
        --hosts) hosts=$2; shift 2 ;;
        --ranks-per-host) per_host=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --delay) delay=$2; shift 2 ;;
        --timeout) limit=$2; shift 2 ;;
        --cyclic) cyclic=1; shift ;;
        --) shift; break ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "multihost: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ $# -gt 0 ] || { echo "multihost: no command (see --help)" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "multihost: needs root (network namespaces)" >&2; exit 2; }
command -v ip >/dev/null || { echo "multihost: needs iproute2 (ip, tc)" >&2; exit 2; }
[[ "$hosts" =~ ^[1-9][0-9]?$ && "$per_host" =~ ^[1-9][0-9]?$ ]] \
    || { echo "multihost: --hosts and --ranks-per-host take 1 to 99" >&2; exit 2; }

id=$(( $$ % 10000 ))
net="10.$(( 100 + id / 250 % 100 )).$(( id % 250 ))"
bridge="rcmhbr$id"
out=$(mktemp -d "${TMPDIR:-/tmp}/rcoll-multihost.XXXXXX")
pids=()

cleanup() {
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for h in $(seq 0 $(( hosts - 1 ))); do
        ip netns del "rcmh$id-$h" 2>/dev/null || true
        ip link del "rcmh${id}h$h" 2>/dev/null || true
    done
    ip link del "$bridge" 2>/dev/null || true
    rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Shapes egress of $2 (in namespace $1, or the root one if empty) to the rate and delay.
shape() {
    local ns=$1 dev=$2 run=(tc)
    [ -n "$ns" ] && run=(ip netns exec "$ns" tc)
    if [ -n "$delay" ]; then
        if "${run[@]}" qdisc add dev "$dev" root handle 1: netem delay "$delay" 2>/dev/null; then
            [ "$rate" = 0 ] || "${run[@]}" qdisc add dev "$dev" parent 1: handle 2: \
                tbf rate "$rate" burst 256kb latency 50ms
            return
        fi
        echo "multihost: no netem in this kernel: links undelayed" >&2
        delay=""
    fi
    [ "$rate" = 0 ] || "${run[@]}" qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 50ms
}

ip link add "$bridge" type bridge
ip link set "$bridge" up
for h in $(seq 0 $(( hosts - 1 ))); do
    ns="rcmh$id-$h" outer="rcmh${id}h$h"
    ip netns add "$ns"
    ip link add "$outer" type veth peer name eth0 netns "$ns"
    ip link set "$outer" master "$bridge" up
    ip netns exec "$ns" ip addr add "$net.$(( h + 1 ))/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
    shape "$ns" eth0      # host -> switch
    shape "" "$outer"     # switch -> host
done

n=$(( hosts * per_host ))
root="$net.1:$(( 20000 + id ))"
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
echo "multihost: $hosts hosts x $per_host ranks$([ "$cyclic" = 1 ] && echo ' (cyclic)'), links ${rate} each way${delay:+, ${delay} delay}, root $root" >&2
for r in $(seq 0 $(( n - 1 ))); do
    h=$(( cyclic ? r % hosts : r / per_host ))
    ip netns exec "rcmh$id-$h" env \
        RCOLL_RANK=$r RCOLL_WORLD_SIZE=$n RCOLL_ROOT_ADDR="$root" \
        RCOLL_HOST="emulated-host-$h" RCOLL_UNIQUE_ID="$secret" \
        timeout -s KILL "$limit" "$@" >"$out/$r.log" 2>&1 &
    pids+=($!)
done
status=0
for r in $(seq 0 $(( n - 1 ))); do
    s=0
    wait "${pids[$r]}" || s=$?
    if [ "$s" -ne 0 ]; then
        [ "$status" -ne 0 ] || status=$s
        echo "multihost: rank $r exited with status $s" >&2
    fi
done
pids=()
for r in $(seq 0 $(( n - 1 ))); do
    sed "s/^/[rank $r] /" "$out/$r.log"
done
exit "$status"
