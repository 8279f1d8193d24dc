#!/usr/bin/env bash
# Fuzz the wire parsers (TCP framing, bootstrap messages, the verbs endpoint/credit/header
# formats) with cargo fuzz / libFuzzer.
# Usage: ci/fuzz.sh [seconds per target]   (default 60; the TCP issue asks for >= 600)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
# cargo fuzz wants nightly flags; the stable toolchain accepts them with RUSTC_BOOTSTRAP.
export RUSTC_BOOTSTRAP=1
for target in frame_decoder bootstrap_message verbs_wire; do
  echo "=== $target for ${seconds}s"
  cargo fuzz run --sanitizer none "$target" -- -max_total_time="$seconds" -print_final_stats=1 2>&1 \
    | grep -E "stat::number_of_executed_units|stat::peak_rss_mb|Done|ERROR|panicked|SUMMARY" || true
  test "${PIPESTATUS[0]}" -eq 0
done
