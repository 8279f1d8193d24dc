#!/usr/bin/env bash
# The whole test suite: unit tests, the schedule verifier matrix, real-data tests on
# in-process groups, process groups over TCP, failure tests, the bench CLI tests and the
# doc tests on the host; then the verbs suite on Soft-RoCE devices (rxe0 and rxe1) inside
# a VM booted from Debian's stock kernel, since this host's kernel has no RDMA
# (soft-roce/run-in-vm.sh). On a host whose kernel has rxe set up by soft-roce/setup.sh,
# RCOLL_VERBS_ON_HOST=1 runs the verbs suite directly instead.
#
# Skips are loud: with CI set, a test that cannot run where CI must run it fails; a test
# that skips says so (`RCOLL-SKIP: <test>: <reason>`, appended to $RCOLL_SKIP_LOG, the VM's
# too), the run ends with the list, and fails on a skip ci/allowed-skips.txt does not name.
set -euo pipefail
cd "$(dirname "$0")/.."
export CI=true
export RCOLL_SKIP_LOG="$PWD/target/ci-skips.log"
mkdir -p target
: >"$RCOLL_SKIP_LOG"
# Each part says how long it took, so that CI's log shows where its budget goes.
timed() {
  local t0
  t0=$(date +%s)
  "$@"
  echo "=== ci/test.sh: '$*' took $(($(date +%s) - t0)) s" >&2
}
timed cargo test --workspace --all-targets
timed cargo test --workspace --doc
# The topology through hwloc itself (the optional `hwloc` feature): it must read the test
# machines' XML files and this host as rcoll's own readers do.
timed cargo test -p rcoll-transport --features hwloc --lib --test topology
timed ci/python.sh  # the Python package: a venv under target/, pip install ./python, pytest
# Real MPI programs nobody here wrote against the MPI shim (MPICH's and mpi4py's collective
# tests, the shim built for MPICH, MPI_Alloc_mem zero-copy in the Soft-RoCE VM).
timed ci/mpi-clients.sh
# The torch backend: torch from PyPI, torch's own suite, DDP.
RCOLL_REINSTALL=0 timed ci/torch.sh

# The verbs suite's binary, built on the host (the VM runs host binaries unchanged): the one
# the first command built (`--workspace`: the same features; `-p rcoll` would build it again).
# (Captured, then shown: `tee /dev/stderr` would reopen — and truncate — a log file.)
build_log=$(cargo test --workspace --test verbs --no-run 2>&1) || { echo "$build_log" >&2; exit 1; }
echo "$build_log" >&2
verbs_test=$(grep -o 'target/[^ )]*/verbs-[0-9a-f]*' <<<"$build_log" | tail -n 1)
[ -x "$verbs_test" ] || { echo "ci/test.sh: no verbs test binary found" >&2; exit 1; }
# The bench's tests that take another branch where RDMA devices exist (a verbs sweep,
# doctor listing the devices), run there too, told to expect them.
build_log=$(cargo test --workspace --test cli --no-run 2>&1) || { echo "$build_log" >&2; exit 1; }
cli_test=$(grep -o 'target/[^ )]*/cli-[0-9a-f]*' <<<"$build_log" | tail -n 1)
[ -x "$cli_test" ] || { echo "ci/test.sh: no bench cli test binary found" >&2; exit 1; }
on_rdma="RCOLL_TEST_EXPECT_RDMA=1 $cli_test --exact --test-threads=1 \
  verbs_is_accepted_and_runs_where_rdma_exists doctor_explains_what_rdma_needs_or_lists_the_devices"
if [ "${RCOLL_VERBS_ON_HOST:-0}" = 1 ]; then
  "$verbs_test" --ignored --test-threads=1
  bash -c "$on_rdma"
else
  # The emulated CPU without `rep movsb` (erms, fsrm), which qemu's TCG runs a byte at a
  # time: the kernel's copies (rxe's) and glibc's run at vector speed, and the suite takes
  # a fifth less time. Nothing here measures speed (soft-roce/compare.sh keeps the default).
  RCOLL_VM_TIMEOUT=${RCOLL_VM_TIMEOUT:-1800} \
    RCOLL_VM_CPU_MODEL=${RCOLL_VM_CPU_MODEL:-max,erms=off,fsrm=off} \
    timed soft-roce/run-in-vm.sh "$verbs_test --ignored --test-threads=1 && $on_rdma"
fi

# Every skip, in one summary; any not in ci/allowed-skips.txt fails the run.
ci/check-skips.sh "$RCOLL_SKIP_LOG" ci/allowed-skips.txt
