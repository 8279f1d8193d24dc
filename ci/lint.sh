#!/usr/bin/env bash
# Formatting and clippy, warnings as errors.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy -p rcoll-transport --features hwloc --all-targets -- -D warnings
# The API docs of every crate (rcoll-mpi's needs an mpicc and the Python package's a
# Python, as clippy above does; capi's documentation is its C header): a broken link, or
# a public item's doc linking a private one, fails here. Every public item has docs:
# missing_docs is on for the whole workspace ([workspace.lints]), so clippy above fails
# without them.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
# Shared memory is touched through atomics and raw copies only: a slice over memory that
# another process writes is undefined behaviour, whatever is checked before or after.
if grep -rn 'from_raw_parts' transport/src/shm; then
  echo "ci/lint.sh: a slice over shared memory (above); copy through raw pointers instead" >&2
  exit 1
fi
# Fault injection (a misbehaving verbs peer) is for test builds only: nothing a user builds
# (the bench, the C library, rcoll itself) turns the feature on.
if cargo tree -p rcoll -p rcoll-bench -p rcoll-capi -e normal,build,features -i rcoll-transport \
    | grep -q 'fault-injection'; then
  echo "ci/lint.sh: a non-test build enables rcoll-transport's fault-injection feature" >&2
  exit 1
fi
