#!/usr/bin/env bash
# What offers are worth where memory windows are missing (Soft-RoCE): broadcast, all_gather
# and all_reduce of registered buffers on 2 ranks (rxe0, rxe1) with offers asked for
# (RCOLL_IB_DIRECT=1: the sender writes into the receiver's buffer under its region key,
# which every peer may then write for as long as it stays registered) and with the default
# there (no offers: every message through slots, copied out once), interleaved round by
# round so that both see the same machine. Run where the devices exist:
#
#   cargo build --release -p rcoll-bench
#   soft-roce/run-in-vm.sh soft-roce/offers.sh
set -euo pipefail
if [[ ${RCOLL_IN_VM:-} == 1 ]]; then
    # As compare.sh: qemu's TCG runs `rep movsb` a byte at a time.
    export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.cpu.x86_rep_movsb_threshold=1099511627776"
fi
bench=target/release/rcoll-bench
[[ -x $bench ]] || { echo "offers.sh: build $bench first (cargo build --release -p rcoll-bench)" >&2; exit 1; }
rounds=${RCOLL_OFFERS_ROUNDS:-3}
for collective in broadcast all_gather all_reduce; do
    for round in $(seq "$rounds"); do
        for direct in 1 default; do
            if [[ $direct == 1 ]]; then env=(RCOLL_IB_DIRECT=1); else env=(); fi
            line=$(env "${env[@]}" "$bench" "$collective" --transport verbs --device veth0,veth1 \
                -b 8M -e 8M -n 10 -w 2 -c 1 2>&1 | awk '$1 ~ /^[0-9]+$/ { print $6, $7 }')
            echo "$collective round $round offers=$direct: time_us algbw $line"
        done
    done
done
