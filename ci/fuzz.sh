#!/usr/bin/env bash
# Fuzz what rcoll reads from outside with libFuzzer (fuzz/): the TCP frame decoder, the
# bootstrap messages and the acceptor's handshake, the verbs endpoint/credit/header
# formats, the job secret (RCOLL_UNIQUE_ID), the topology's texts (hwloc XML, CPU lists and
# masks), a local peer's shared-memory announcement and ring descriptors, the tuning and
# rack files, and the C ABI's argument checks.
#
# Usage: ci/fuzz.sh [seconds per target]   (default 60; CI runs 20, an issue's long run 600)
#
# Built with the coverage instrumentation cargo-fuzz would add (stable -C flags, no
# sanitizer), straight with cargo: nothing to install beyond Rust and a C++ compiler
# (libfuzzer-sys compiles libFuzzer). `cargo fuzz run <target>` works on the same crate.
# Corpora accumulate in fuzz/corpus/<target> (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
targets=(frame_decoder bootstrap_message verbs_wire unique_id topology_text shm_announcement
  acceptor_handshake shm_descriptors settings_files c_abi_args)
triple="$(rustc -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
# --target keeps the instrumentation off build scripts and proc macros. The C library
# first, instrumented alike, for c_abi_args to link as a C program would (fuzz/build.rs).
cargo build --quiet --release -p rcoll-capi --target "$triple" --target-dir fuzz/target-capi
cargo build --quiet --release --manifest-path fuzz/Cargo.toml --target "$triple" --bins
# One target's run; its output printed whole when it ends (runs overlap).
fuzz_one() {
  local target=$1 log
  mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
  log="$(mktemp)"
  if ! "fuzz/target/$triple/release/$target" "fuzz/corpus/$target" \
      -max_total_time="$seconds" -print_final_stats=1 \
      -artifact_prefix="fuzz/artifacts/$target/" >"$log" 2>&1; then
    echo "=== $target for ${seconds}s: FAILED"
    tail -n 40 "$log"
    echo "ci/fuzz.sh: $target failed (crash input in fuzz/artifacts/$target/)" >&2
    rm -f "$log"
    return 1
  fi
  echo "=== $target for ${seconds}s"
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb|^Done" "$log" || true
  rm -f "$log"
}
# libFuzzer runs one thread: a target per CPU at once, each its full time.
jobs=$(nproc)
pids=() status=0
for target in "${targets[@]}"; do
  fuzz_one "$target" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit "$status"
