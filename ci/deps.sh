#!/usr/bin/env bash
# System packages the build and tests need (Debian). Idempotent.
set -euo pipefail
packages=(
  # The in-process and TCP transports need no system library. The verbs transport will
  # add rdma-core, libibverbs-dev, librdmacm-dev, libclang-dev, pkg-config,
  # qemu-system-x86 and perftest here.
  fonts-dejavu-core  # rcoll-bench --plot and `rcoll-bench plot`: DejaVuSans.ttf for the chart's text
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
command -v cargo >/dev/null || { echo "cargo not found: install Rust (https://rustup.rs)" >&2; exit 1; }
