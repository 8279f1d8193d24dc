#!/usr/bin/env bash
# System packages the build and tests need (Debian). Idempotent.
set -euo pipefail
packages=(
  # The verbs headers (for the layout test) and the Soft-RoCE VM (qemu, rdma-core,
  # perftest, ...) come from soft-roce/deps.sh below. Building rcoll needs none of them.
  fonts-dejavu-core  # rcoll-bench --plot and `rcoll-bench plot`: DejaVuSans.ttf for the chart's text
  g++                # ci/fuzz.sh: libfuzzer-sys compiles libFuzzer
  iproute2           # the blackholed-link test (a namespace and a veth pair); ss in the TCP tests
  libopenmpi-dev     # capi tests: mpicc for the MPI example (checks rcoll against MPI)
  openmpi-bin        # capi tests: mpirun with 2, 3 and 4 ranks
  libmpich-dev       # ci/mpi-clients.sh: the MPI shim built for MPICH (mpicc.mpich) and its tests
  mpich              # ... under mpiexec.mpich (Open MPI stays the default mpicc and mpirun)
  pkg-config         # capi tests: `pkg-config --cflags --libs rcoll` after capi/install.sh
  libhwloc-dev       # the `hwloc` feature's tests (hwloc and rcoll read topologies alike)
  libudev-dev        # ... which links hwloc statically as its build script asks (-ludev)
  hwloc              # lstopo: transport/tests/topologies/make.py reads its files back
)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
fi
"$(dirname "$0")/../soft-roce/deps.sh"
command -v cargo >/dev/null || { echo "cargo not found: install Rust (https://rustup.rs)" >&2; exit 1; }
