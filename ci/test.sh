#!/usr/bin/env bash
# The whole test suite: unit tests, the schedule verifier matrix, real-data tests on
# in-process groups, failure tests, the bench CLI tests and the doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace --all-targets
cargo test --workspace --doc
