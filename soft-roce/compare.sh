#!/usr/bin/env bash
# rcoll's all_reduce over verbs beside perftest's ib_write_bw / ib_write_lat and TCP over
# the same veth pair, in one run on the two Soft-RoCE devices (rxe0 on veth0 10.99.0.1,
# rxe1 on veth1 10.99.0.2). Run it where those devices exist:
#
#   cargo build --release -p rcoll-bench
#   soft-roce/run-in-vm.sh soft-roce/compare.sh          # RCOLL_VM_MTU=9000 for jumbo frames
#
# Prints: ib_write_bw (one direction, and -b both directions) at 1, 8 and 64 MiB, ib_write_lat
# at 8 B, rcoll all_reduce on 2 ranks (one per device) over verbs with registered buffers
# (zero-copy) and with RCOLL_IB_ZERO_COPY=0, over TCP, iperf3, and rxe's retransmission
# counters after each verbs run. Each verbs row ends with rcoll's rate in MiB/s (perftest's
# unit: its "MB/sec" are 2^20 bytes) out of place / in place and its ratio to ib_write_bw's
# one-direction average of the same size; an all_reduce row also with the bytes it carries
# both ways together (twice its busbw on 2 ranks: its reduce-scatter and all-gather halves
# send the vector each way) against ib_write_bw -b's sum of both directions, the same
# traffic pattern; the 8-byte rows, each round right after an ib_write_lat run, with their
# ratio to its round trip (twice its average one-way time) and the median over rounds.
#
# Every run is also charged the CPU time it took (all CPUs, from /proc/stat, setup included):
# rxe is the kernel's work on the guest's two CPUs, so on this VM the CPUs, not a wire, are
# the limit. "wire MiB per CPU-second" sets the bytes each run put on the veth (both
# directions; warm-up and check iterations counted) against that time: ib_write_bw's figure
# is what rxe itself costs, and a collective within it of that is as close to the limit as
# rxe allows. Note: ib_write_bw -b prints the sum of both directions.
#
# rxe's retransmit timer is started when none is pending and never stopped, so queue pairs
# that stream retry about once per ACK timeout although nothing is lost (sent_pkts equals
# the peer's rcvd_pkts): completer_retry_err counts them, each resending up to 128 packets.
#
# In the emulated VM (RCOLL_IN_VM=1), glibc's memcpy is kept off `rep movsb`: qemu's TCG
# runs that instruction one byte at a time, and glibc takes it for copies from 2 KiB up to
# its non-temporal threshold, so 4 MiB copied in 128 KiB pieces took 6.3 ms there against
# 0.9-1.0 with vector moves (KVM and hardware run either at memory speed). GLIBC_TUNABLES
# raises the threshold above any copy; RCOLL_VM_KEEP_REP_MOVSB=1 keeps glibc's choice.
# (The kernel's copies, rxe's among them, still use it: see RCOLL_VM_CPU_MODEL in
# run-in-vm.sh.)
set -euo pipefail
if [[ ${RCOLL_IN_VM:-} == 1 && -z ${RCOLL_VM_KEEP_REP_MOVSB:-} ]]; then
    export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.cpu.x86_rep_movsb_threshold=1099511627776"
fi
cd "$(dirname "$0")/.."
bench=target/release/rcoll-bench
[[ -x $bench ]] || { echo "compare.sh: build $bench first (cargo build --release -p rcoll-bench)" >&2; exit 1; }
sizes=(-b 1M -e 8M -f 8 -n 20 -w 3 -c 1)
devices=(--device "veth0,veth1")
counters() {
    echo "  rxe0 counters: $(rdma statistic show link rxe0/1 |
        grep -o -E '(duplicate_request|completer_retry_err|out_of_seq_request) [0-9]+' | tr '\n' ' ')"
}
rows() { grep -v '^#' || true; }
busy_jiffies() { awk '/^cpu /{print $2 + $3 + $4 + $7 + $8}' /proc/stat; }
hz=$(getconf CLK_TCK)
cpu_from=0
cpu_begin() { cpu_from=$(busy_jiffies); }
# cpu_end BYTES_ON_THE_WIRE: the CPU time since cpu_begin and the wire bytes per CPU-second.
cpu_end() {
    awk -v j=$(($(busy_jiffies) - cpu_from)) -v hz="$hz" -v b="$1" 'BEGIN {
        s = j / hz; printf "  CPU %.2f s for %.1f MiB on the wire: %.1f wire MiB per CPU-second\n", s, b / 1048576, (s > 0 ? b / 1048576 / s : 0)
    }'
}
declare -A bw bidir
# rcoll rows with their rate in MiB/s and its ratio to ib_write_bw's average of that size;
# the rate is busbw (size / time times the collective's bus factor, $1: 1 by default, 1/2
# for all_gather on 2 ranks).
rated() {
    rows | awk -v f="${1:-1}" -v ways="${2:-1}" \
        -v b1="${bw[1048576]:-0}" -v b8="${bw[8388608]:-0}" -v b64="${bw[67108864]:-0}" \
        -v d1="${bidir[1048576]:-0}" -v d8="${bidir[8388608]:-0}" -v d64="${bidir[67108864]:-0}" '{
        ref = ($1 == 1048576) ? b1 : (($1 == 8388608) ? b8 : (($1 == 67108864) ? b64 : 0))
        both = ($1 == 1048576) ? d1 : (($1 == 8388608) ? d8 : (($1 == 67108864) ? d64 : 0))
        oop = f * $1 / $6 * 1e6 / 1048576; ip = f * $1 / $10 * 1e6 / 1048576
        if (ref > 0) printf "%s   %.1f / %.1f MiB/s = %.2f / %.2f of ib_write_bw", $0, oop, ip, oop / ref, ip / ref
        else printf "%s", $0
        if (ways == 2 && both > 0) printf "; both ways %.1f / %.1f MiB/s = %.2f / %.2f of ib_write_bw -b", 2 * oop, 2 * ip, 2 * oop / both, 2 * ip / both
        printf "\n"
    }'
}

echo "MTU $(cat /sys/class/net/veth0/mtu), $(nproc) CPUs"
for size in 1048576 8388608 67108864; do
    iters=$((200 * 1048576 / size + 20))
    [[ $size -lt 67108864 ]] || iters=10
    for both in "" "-b"; do
        # shellcheck disable=SC2086 # $both is empty or one flag
        cpu_begin
        # 300 s: at MTU 1500, -b at 64 MiB (1280 MiB at ~11 MiB/s) took longer than 120.
        timeout 300 ib_write_bw -d rxe1 -x 1 -s "$size" -n "$iters" -F $both >/dev/null 2>&1 &
        sleep 1
        # shellcheck disable=SC2086
        line=$(timeout 300 ib_write_bw -d rxe0 -x 1 -s "$size" -n "$iters" -F $both 10.99.0.2 2>&1 |
            grep -A1 '#bytes' | tail -n 1)
        wait || { echo "compare.sh: ib_write_bw $both at $size B failed or timed out" >&2; exit 1; }
        echo "ib_write_bw ${both:-  } $size B: $line   (bytes, iters, peak MiB/s, average MiB/s, Mmsg/s)"
        if [[ -n $both ]]; then ways=2; else ways=1; fi
        cpu_end $((size * iters * ways))
        if [[ -z $both ]]; then bw[$size]=$(awk '{print $4}' <<<"$line"); else bidir[$size]=$(awk '{print $4}' <<<"$line"); fi
    done
done
timeout 60 ib_write_lat -d rxe1 -x 1 -s 8 -n 1000 -F >/dev/null 2>&1 &
sleep 1
lat=$(timeout 60 ib_write_lat -d rxe0 -x 1 -s 8 -n 1000 -F 10.99.0.2 2>&1 | grep -A1 '#bytes' | tail -n 1)
echo "ib_write_lat 8 B: $lat   (bytes, iters, min, max, typical, average us, ...)"
rtt=$(awk '{print 2 * $6}' <<<"$lat")
wait
counters
echo "== rcoll all_reduce, verbs, registered buffers (zero-copy)"
$bench all_reduce --transport verbs "${devices[@]}" "${sizes[@]}" 2>&1 | rated 1 2
$bench all_reduce --transport verbs "${devices[@]}" -b 64M -e 64M -n 5 -w 1 -c 1 2>&1 | rated 1 2
counters
echo "== rcoll all_reduce, verbs, copies into slots (RCOLL_IB_ZERO_COPY=0)"
RCOLL_IB_ZERO_COPY=0 $bench all_reduce --transport verbs "${devices[@]}" "${sizes[@]}" 2>&1 | rated 1 2
counters
echo "== rcoll broadcast and all_gather (busbw), verbs, registered buffers, 8 MiB"
# Wire bytes of one out-of-place and one in-place pass of 3 + 20 iterations plus the check
# of each: broadcast moves the vector once, all_gather on 2 ranks half of it each way, and
# all_reduce on 2 ranks (reduce-scatter, all-gather) the whole of it each way.
eight=$((2 * 24 * 8388608))
cpu_begin
$bench broadcast --transport verbs "${devices[@]}" -b 8M -e 8M -n 20 -w 3 -c 1 2>&1 | rated
cpu_end $eight
cpu_begin
$bench all_gather --transport verbs "${devices[@]}" -b 8M -e 8M -n 20 -w 3 -c 1 2>&1 | rated 0.5 2
cpu_end $eight
cpu_begin
$bench all_reduce --transport verbs "${devices[@]}" -b 8M -e 8M -n 20 -w 3 -c 1 2>&1 | rated 1 2
cpu_end $((2 * eight))
counters
echo "== rcoll all_reduce, verbs, 8 B, interleaved with ib_write_lat (${LAT_ROUNDS:-5} rounds)"
# Each round times ib_write_lat, then rcoll right after it, so that both see the VM in
# the same state (its latency drifts by 1.5x between minutes); the figure is the median
# over rounds of rcoll's time over the round trip (twice ib_write_lat's average one way).
ratios=()
for round in $(seq 1 "${LAT_ROUNDS:-5}"); do
    timeout 60 ib_write_lat -d rxe1 -x 1 -s 8 -n 1000 -F >/dev/null 2>&1 &
    sleep 1
    lat=$(timeout 60 ib_write_lat -d rxe0 -x 1 -s 8 -n 1000 -F 10.99.0.2 2>&1 | grep -A1 '#bytes' | tail -n 1)
    wait
    rtt=$(awk '{print 2 * $6}' <<<"$lat")
    row=$($bench all_reduce --transport verbs "${devices[@]}" -b 8 -e 8 -n 1000 -w 100 -c 1 2>&1 | rows)
    ratio=$(awk -v rtt="${rtt:-0}" '{ if (rtt > 0) printf "%.3f %.3f", $6 / rtt, $10 / rtt }' <<<"$row")
    echo "round $round: ib_write_lat round trip ${rtt:-?} us; rcoll $(awk '{print $6 " / " $10}' <<<"$row") us = $(awk '{print $1 " / " $2}' <<<"$ratio") of it"
    ratios+=("$ratio")
done
# The median of the numbers in column $1 of the ratios.
median() {
    printf '%s\n' "${ratios[@]}" | awk -v c="$1" '{ print $c }' | sort -g |
        awk '{ v[NR] = $1 } END { m = int((NR + 1) / 2); printf "%.2f", (NR % 2) ? v[m] : (v[m] + v[m + 1]) / 2 }'
}
echo "8 B all_reduce over the ib_write_lat round trip, median of ${#ratios[@]} rounds: $(median 1) / $(median 2) (out of place / in place)"
echo "== rcoll all_reduce, TCP over the same veth pair"
$bench all_reduce --transport tcp "${devices[@]}" "${sizes[@]}" 2>&1 | rows
$bench all_reduce --transport tcp "${devices[@]}" -b 8 -e 8 -n 1000 -w 100 -c 1 2>&1 | rows
echo "== iperf3 over the veth pair"
iperf3 -s -B 10.99.0.2 -1 -D
sleep 1
iperf3 -c 10.99.0.2 -B 10.99.0.1 -t 5 2>&1 | grep -E 'sender|receiver'
