#!/usr/bin/env bash
# Install the host packages that Soft-RoCE work needs (Debian/Ubuntu). Idempotent: when every
# package is already installed it touches nothing, not even `apt-get update`.
#
# Usage: soft-roce/deps.sh [--no-vm]
#   --no-vm   skip what only run-in-vm.sh needs (qemu, busybox, cpio, ...): for a host or a
#             container whose kernel has rxe.
#
# Runs as root (CI, containers) or through sudo otherwise. Waits for a dpkg lock held by
# another apt run instead of failing, since builds and installs often overlap here.
set -euo pipefail

vm_packages=(
    # The VM (run-in-vm.sh): emulator, initramfs tools, module tools.
    qemu-system-x86 # qemu-system-x86_64, run with TCG (no usable KVM on these hosts)
    busybox-static  # the initramfs: one static binary, no libraries to copy
    cpio            # packs the initramfs
    kmod            # depmod/modprobe for the guest kernel's module tree
    xz-utils        # some kernels ship .ko.xz modules; busybox insmod wants plain .ko
    zstd            # ... or .ko.zst
)
packages=(
    iproute2 # ip, and `rdma link add ... type rxe`
    kmod     # modprobe rdma_rxe
    # Verbs user space: the rxe provider, device listing and the perftest baselines.
    rdma-core
    ibverbs-providers
    ibverbs-utils # ibv_devices, ibv_devinfo, ibv_rc_pingpong
    perftest      # ib_write_bw, ib_write_lat, ib_read_bw, ...
    rdmacm-utils  # rping, ucmatose, rdma_server/rdma_client
    iperf3        # TCP over the same veth, for the ratio
    # Nothing of this is needed to build rcoll (it loads libibverbs at run time); the verbs
    # headers are what the layout test checks rcoll's struct layouts against.
    libibverbs-dev
)
case "${1:-}" in
    --no-vm) ;;
    "") packages+=("${vm_packages[@]}") ;;
    *) echo "usage: soft-roce/deps.sh [--no-vm]" >&2; exit 2 ;;
esac

# A package counts only when fully installed: "install ok unpacked" (an interrupted install)
# is missing too, so that apt-get finishes configuring it.
missing=()
for package in "${packages[@]}"; do
    status="$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)"
    [[ "$status" == "install ok installed" ]] || missing+=("$package")
done
if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi

# Root runs apt directly; anyone else goes through sudo (which may prompt on a terminal).
as_root=()
if [[ "$(id -u)" -ne 0 ]]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "soft-roce/deps.sh: not root and no sudo; install as root: ${missing[*]}" >&2
        exit 1
    fi
    as_root=(sudo)
fi

echo "soft-roce/deps.sh: installing ${missing[*]}" >&2
# DPkg::Lock::Timeout makes apt wait for a concurrent apt/dpkg run instead of failing.
apt_options=(-o DPkg::Lock::Timeout=600 -o Dpkg::Use-Pty=0)
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_options[@]}" -qq update
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "${apt_options[@]}" -qq install \
    -y --no-install-recommends "${missing[@]}" >/dev/null
