#!/usr/bin/env bash
# Run the `reduce` criterion bench (collectives/benches/reduce.rs) and summarise it.
#
# Usage: ci/bench-reduce.sh [criterion args...]   e.g. ci/bench-reduce.sh reduce_f32_sum
#
# Prints criterion's time/thrpt lines, then the f32-sum vs memcpy ratios per size:
#   result  = (result bytes/s of the reduction) / (bytes/s of memcpy) = t_memcpy / t_reduce
#   traffic = result * 3/2   (memcpy moves 2N bytes per N of result, a reduction 3N)
# The issue's target is result ratio >= 0.8. Set MIN_RATIO=0.8 to fail when the
# `reduce_assign` result ratio is below it at any size (off by default).
# The table reads target/criterion/*/new/estimates.json: with a filter argument, sizes not
# re-run show the numbers of the previous run.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
log="$(mktemp "${TMPDIR:-/tmp}/bench-reduce.XXXXXX")"
trap 'rm -f "$log"' EXIT

if ! cargo bench -p rcoll --bench reduce -- "$@" >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
fi

echo "== criterion summary (thrpt = result bytes per second) =="
grep -E '^(reduce_f32_sum|memcpy|reduce_types)/|^ +(time|thrpt|change):' "$log" \
    | sed -E 's/^ +/    /'

if ! command -v python3 >/dev/null 2>&1; then
    echo "python3 not found: skipping ratio table" >&2
    exit 0
fi

python3 - "$target_dir/criterion" "${MIN_RATIO:-}" <<'PY'
import json, os, sys

base, min_ratio = sys.argv[1], sys.argv[2]
sizes = ["16KiB", "256KiB", "4MiB", "64MiB"]

def mean_ns(*parts):
    p = os.path.join(base, *parts, "new", "estimates.json")
    try:
        with open(p) as f:
            return json.load(f)["mean"]["point_estimate"]
    except FileNotFoundError:
        return None

def nbytes(size):
    return int(size[:-3]) * (1 << 20 if size.endswith("MiB") else 1 << 10)

print()
print("== f32 sum vs memcpy (mean times; GiB/s of result bytes) ==")
print(f"{'size':>7} {'kernel':>14} {'reduce GiB/s':>13} {'memcpy GiB/s':>13}"
      f" {'result ratio':>13} {'traffic ratio':>14}")
worst = None
for size in sizes:
    t_copy = mean_ns("memcpy", "copy_from_slice", size)
    for kernel in ("reduce_assign", "reduce_to"):
        t_red = mean_ns("reduce_f32_sum", kernel, size)
        if t_copy is None or t_red is None:
            continue
        gib = lambda t: nbytes(size) / t / (1 << 30) * 1e9
        ratio = t_copy / t_red
        if kernel == "reduce_assign":
            worst = ratio if worst is None else min(worst, ratio)
        print(f"{size:>7} {kernel:>14} {gib(t_red):13.2f} {gib(t_copy):13.2f}"
              f" {ratio:13.2f} {1.5 * ratio:14.2f}")

if min_ratio and worst is not None and worst < float(min_ratio):
    print(f"FAIL: worst reduce_assign result ratio {worst:.2f} < MIN_RATIO {min_ratio}")
    sys.exit(1)
PY
