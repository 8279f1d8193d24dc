#!/usr/bin/env bash
# Auto's regret (its time over the best algorithm's), per size, all_reduce on 2, 3 and 4
# ranks over tcp and shm, 8 B to 64 MiB: built-in rates, then a tuning file written by
# `rcoll-bench calibrate` in a run of its own (every power of two, as evaluated here).
#
#   bench/figures/regret.sh [OUT_DIR]        (default /tmp/rcoll-regret)
#
# The evaluation times ITERS (default 40) interleaved rounds per size; calibrate keeps its
# own defaults (three passes of 10 rounds).
#
# Each configuration's line ends with the cache line round trip between two CPUs measured
# just before and just after it (`rcoll-bench topo`), which tells the machine's two states
# apart.
#
# MODES (default "builtin models-only tuned") picks the modes; with builtin (or online)
# alone nothing is calibrated. `online` is the built-in rates with selection by trial at
# run time (RCOLL_AUTOTUNE=on): auto warms up until its trials are over, and the table says
# after how many calls. Each run prints auto's worst regret and the worst regret of its choice (the
# chosen algorithm's own forced run in the same rounds over the best: no noise between two
# runs of one schedule), and how far auto's time strayed from that forced run of its
# choice: one schedule in two columns, the noise no choice can beat (with MODES=builtin
# no probe runs, so it is the noise alone).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-/tmp/rcoll-regret}
mkdir -p "$out"
cargo build --release -q -p rcoll-bench
b=target/release/rcoll-bench
tuning="$out/tuning.json"
modes=${MODES:-builtin models-only tuned}
needs_tuning() { [[ " $modes " == *" models-only "* || " $modes " == *" tuned "* ]]; }
if needs_tuning && [ ! -f "$tuning" ]; then
    $b calibrate --transport tcp --ranks 2,3,4 --collectives all_reduce -o "$tuning" > "$out/calibrate-tcp.txt"
    $b calibrate --transport shm --ranks 2,3,4 --collectives all_reduce --merge -o "$tuning" > "$out/calibrate-shm.txt"
fi
needs_tuning && python3 - "$tuning" "$out/models-only.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["rules"] = []
json.dump(d, open(sys.argv[2], "w"), indent=1)
PY
for t in tcp shm; do
    for n in 2 3 4; do
        for mode in $modes; do
            case $mode in
                builtin) env=();;
                models-only) env=(RCOLL_TUNING_FILE="$out/models-only.json");;
                tuned) env=(RCOLL_TUNING_FILE="$tuning");;
                online) env=(RCOLL_AUTOTUNE=on);;
                *) echo "unknown mode $mode (builtin, models-only, tuned, online)" >&2; exit 2;;
            esac
            # How far apart the CPUs are right now (the host moves this VM's vCPUs between
            # cores that share caches and cores that do not, within minutes).
            far=$($b topo 2>&1 | grep -m1 "cache line round trip" || echo "cache line round trip: not measured")
            env ${env[@]+"${env[@]}"} $b all_reduce --ranks $n --transport $t --algo all \
                -b 8 -e 64M -f 2 -n "${ITERS:-40}" -w 3 > "$out/$t-$n-$mode.txt"
            after=$($b topo 2>&1 | grep -m1 "cache line round trip" || echo "cache line round trip: not measured")
            printf '# before the run: %s\n# after it: %s\n' "$far" "$after" >> "$out/$t-$n-$mode.txt"
            echo "$t $n ranks, $mode: $(grep -E "^# auto's (regret|choice \(|trials|time over)" "$out/$t-$n-$mode.txt" | tr '\n' ' ')| ${far#cache line }, after: ${after##*: }"
        done
    done
done
