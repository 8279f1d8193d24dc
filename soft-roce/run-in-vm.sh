#!/usr/bin/env bash
# Run a command inside a small VM that has two Soft-RoCE devices, for hosts whose kernel has
# no rxe (no RDMA at all, like these CI machines).
#
# Usage:
#   soft-roce/run-in-vm.sh 'COMMAND'         run COMMAND with bash -c
#   soft-roce/run-in-vm.sh PROGRAM ARG...    run PROGRAM with its arguments (quoted for you)
#
# The VM boots Debian's stock kernel (it has CONFIG_RDMA_RXE=m) under qemu's software emulator
# (TCG: the paravirtual KVM here cannot run it). Its root filesystem is the host's `/`, shared
# read-only over virtio-9p under a tmpfs overlay, so every host binary, library, toolchain and
# test binary runs unchanged; writes outside the current directory land in the overlay and are
# lost at power-off. The current directory is shared read-write at the same path, so results
# come back. /tmp, /run and /dev/shm are fresh tmpfs.
#
# Inside, soft-roce/setup.sh builds the same network a host with rxe gets:
#     rxe0 -- veth0 10.99.0.1/24 <=== veth pair ===> veth1 10.99.0.2/24 -- rxe1
# with policy routing so both devices are usable from one namespace and traffic between the
# two addresses (TCP too) really crosses the veth. GID index 1 is the RoCE v2 IPv4 GID.
# Then COMMAND runs as root in the same directory, with `ulimit -l unlimited`, RCOLL_IN_VM=1,
# and these variables of the caller: PATH HOME USER LOGNAME SHELL TERM LANG LC_ALL TZ CI
# NO_COLOR RUSTUP_HOME RUSTUP_TOOLCHAIN RUST_BACKTRACE RUST_LOG RUST_TEST_THREADS RUST_MIN_STACK
# RUSTFLAGS, every CARGO_* and RCOLL_* variable, and the names listed in RCOLL_VM_ENV.
# Its stdout and stderr stream back separately; the exit status is COMMAND's.
#
# Environment:
#   RCOLL_VM_TIMEOUT   seconds before the VM is killed (default 1800); exit status 124
#   RCOLL_VM_MTU       MTU of the veth pair (default 1500; 9000 for rxe active MTU 4096)
#   RCOLL_VM_MEMORY    guest memory (default 4G; the overlay's writes live in it too)
#   RCOLL_VM_CPUS      guest vCPUs (default 2; 1 makes busy-polling latency jump to ~4 ms)
#   RCOLL_VM_CPU_MODEL qemu's -cpu (default max). max,erms=off,fsrm=off keeps the kernel and
#                      glibc off `rep movsb`, which TCG runs a byte at a time: one-way
#                      ib_write_bw at MTU 9000 then rose from ~72 to ~116 MiB/s, while both
#                      ways together stayed ~95-100 (the two CPUs are the limit)
#   RCOLL_VM_CACHE     cache of kernels and initramfs images
#                      (default ${XDG_CACHE_HOME:-$HOME/.cache}/rcoll-vm)
#   RCOLL_VM_KERNEL_PACKAGE  kernel package to boot (default: what linux-image-amd64 names)
#   RCOLL_VM_ENV       more variable names to pass into the VM, separated by spaces
#   RCOLL_VM_VERBOSE=1 show the guest's rdma devices and GID tables before COMMAND
#   RCOLL_VM_KEEP=1    keep the run directory (kernel log, qemu log, setup log) afterwards
#
# Exit status: COMMAND's; 124 when the VM timed out; 125 when the VM failed before reporting
# a status (kernel log tail printed); 2 for a usage error.
#
# The first run installs missing packages (soft-roce/deps.sh), downloads the kernel package
# (~70 MB) and caches the kernel and a module subset (~10 MB); later runs boot in seconds.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
timeout_s="${RCOLL_VM_TIMEOUT:-1800}"
mtu="${RCOLL_VM_MTU:-1500}"
memory="${RCOLL_VM_MEMORY:-4G}"
cpus="${RCOLL_VM_CPUS:-2}"
cpu_model="${RCOLL_VM_CPU_MODEL:-max}"
cache_root="${RCOLL_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rcoll-vm}"

# Bump when the cached initramfs changes shape, so old caches are rebuilt.
initramfs_recipe=2

# Modules the initramfs loads to reach the root filesystem and the consoles.
boot_modules=(virtio_pci virtio_console 9pnet_virtio 9p overlay)
# Modules the guest loads later from the copied tree: rxe and its user-space interfaces, crc32
# for rxe's ICRC (rxe requests it when a device is created), veth, and netem for tests that
# inject delay or loss.
guest_modules=(veth rdma_rxe rdma_ucm ib_umad ib_uverbs crc32_generic crc32_pclmul sch_netem)

log() { echo "rcoll-vm: $*" >&2; }
die() {
    log "$1"
    exit "${2:-1}"
}
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

case "${1:-}" in
    -h | --help) usage; exit 0 ;;
    "") usage >&2; exit 2 ;;
esac
if [[ $# -eq 1 ]]; then
    command_text="$1"
else
    command_text="$(printf '%q ' "$@")"
fi
[[ "$timeout_s" =~ ^[0-9]+$ ]] || die "RCOLL_VM_TIMEOUT must be a number of seconds" 2
[[ "$(pwd)" != / ]] || die "run it from a directory other than / (that is shared read-write)" 2

as_root=()
[[ "$(id -u)" -eq 0 ]] || as_root=(sudo)

# ---------------------------------------------------------------------------------------------
# The kernel and initramfs, cached per kernel version

# The versioned kernel package Debian's linux-image-amd64 points at, e.g.
# linux-image-6.1.0-56-amd64. Falls back to the newest cached kernel when apt knows none
# (offline, or package lists not downloaded and no way to download them).
kernel_package() {
    local package=""
    if [[ -n "${RCOLL_VM_KERNEL_PACKAGE:-}" ]]; then
        echo "$RCOLL_VM_KERNEL_PACKAGE"
        return
    fi
    resolve() {
        apt-cache depends linux-image-amd64 2>/dev/null |
            awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
    }
    package="$(resolve)"
    if [[ -z "$package" ]]; then
        "${as_root[@]}" apt-get -o DPkg::Lock::Timeout=600 -qq update >&2 || true
        package="$(resolve)"
    fi
    if [[ -z "$package" ]]; then
        package="$(find "$cache_root" -mindepth 2 -maxdepth 2 -name ready 2>/dev/null |
            sort -V | tail -n 1 | xargs -r dirname | xargs -r basename)"
        [[ -z "$package" ]] || package="linux-image-$package"
    fi
    [[ -n "$package" ]] || die "cannot tell which kernel to boot: apt-cache knows no linux-image-amd64"
    echo "$package"
}

# build_cache KVER DIR: download the kernel package, keep vmlinuz and the modules we need,
# and pack the initramfs. Writes DIR/ready last, so a half-built DIR is never used.
build_cache() {
    local kver="$1" dir="$2" work stage rootfs module path relative
    log "preparing kernel $kver (first run with it; ~70 MB download)"
    work="$(mktemp -d "$cache_root/build.XXXXXX")"
    # apt-get download runs as the _apt user where it can; let it write here.
    chmod 0777 "$work"
    # (Its warning about downloading "unsandboxed as root" is noise here.)
    (cd "$work" && apt-get download -qq "linux-image-$kver") 2>&1 | grep -v unsandboxed >&2 || true
    compgen -G "$work/linux-image-*.deb" >/dev/null || die "apt-get download linux-image-$kver failed"
    dpkg-deb -x "$work"/linux-image-*.deb "$work/pkg"

    # depmod and modprobe -d want BASE/lib/modules/KVER; newer packages use usr/lib/modules.
    stage="$work/stage"
    mkdir -p "$stage/lib/modules"
    for path in "$work/pkg/lib/modules/$kver" "$work/pkg/usr/lib/modules/$kver"; do
        [[ -d "$path" ]] && mv "$path" "$stage/lib/modules/"
    done
    [[ -d "$stage/lib/modules/$kver" ]] || die "linux-image-$kver has no modules for $kver"
    depmod -b "$stage" "$kver"

    rootfs="$work/rootfs"
    mkdir -p "$rootfs"/{bin,dev,proc,sys,etc,lower,rw,newroot} "$rootfs/lib/modules/$kver"
    # Every module with its dependencies, in load order; uncompressed, since busybox's insmod
    # cannot read .ko.xz/.ko.zst.
    : >"$rootfs/etc/boot-modules"
    for module in "${boot_modules[@]}" "${guest_modules[@]}"; do
        modprobe -d "$stage" -S "$kver" --show-depends "$module" |
            awk '$1 == "insmod" { print $2 }' |
            while read -r path; do
                relative="${path#"$stage/lib/modules/$kver/"}"
                relative="${relative%.xz}"
                relative="${relative%.zst}"
                mkdir -p "$(dirname "$rootfs/lib/modules/$kver/$relative")"
                case "$path" in
                    *.xz) xz -dc "$path" >"$rootfs/lib/modules/$kver/$relative" ;;
                    *.zst) zstd -qdc "$path" >"$rootfs/lib/modules/$kver/$relative" ;;
                    *) cp "$path" "$rootfs/lib/modules/$kver/$relative" ;;
                esac
                if [[ " ${boot_modules[*]} " == *" $module "* ]] &&
                    ! grep -qxF "$relative" "$rootfs/etc/boot-modules"; then
                    echo "$relative" >>"$rootfs/etc/boot-modules"
                fi
            done
    done
    cp "$stage/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} \
        "$rootfs/lib/modules/$kver/" 2>/dev/null || true
    depmod -b "$rootfs" "$kver"

    cp "$(command -v busybox)" "$rootfs/bin/busybox"
    "$rootfs/bin/busybox" --list | grep -qx switch_root || die "busybox lacks switch_root"
    write_stage1_init >"$rootfs/init"
    chmod 0755 "$rootfs/init"

    mkdir -p "$dir"
    cp "$work/pkg/boot/vmlinuz-$kver" "$dir/vmlinuz"
    (cd "$rootfs" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$dir/initramfs.cpio"
    echo "$initramfs_recipe" >"$dir/ready"
    rm -rf "$work"
}

# The initramfs's /init (busybox sh): load the boot modules, mount the host's / read-only over
# 9p with a tmpfs overlay on top, mount the control share and the caller's directory, copy the
# module tree into the new root, and switch_root into soft-roce/guest-init.sh.
write_stage1_init() {
    cat <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t devtmpfs dev /dev
mount -t proc proc /proc
mount -t sysfs sys /sys
fail() {
    echo "rcoll-vm initramfs: $*"
    echo o >/proc/sysrq-trigger
    sleep 60
}
kver="$(uname -r)"
while read -r module; do
    insmod "/lib/modules/$kver/$module" || fail "insmod $module failed"
done </etc/boot-modules

nine_p="trans=virtio,version=9p2000.L,msize=262144"
# The host's / never changes under us in a way that matters: cache it (cache=loose is much
# faster for exec-heavy work). The caller's directory and control share are read back by the
# host, so they stay uncached (mmap keeps shared writable mappings working).
mount -t 9p -o "$nine_p,ro,cache=loose" hostroot /lower || fail "cannot mount the host's /"
mount -t tmpfs -o mode=0755 overlay-rw /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work root /newroot ||
    fail "cannot mount the overlay"
for fs in dev proc sys; do
    mount --move "/$fs" "/newroot/$fs"
done
mount -t tmpfs -o mode=1777 tmp /newroot/tmp
mount -t tmpfs -o mode=0755 run /newroot/run
mkdir -p /newroot/run/rcoll-vm
mount -t 9p -o "$nine_p,cache=none" ctl /newroot/run/rcoll-vm || fail "cannot mount the control share"
cwd="$(cat /newroot/run/rcoll-vm/cwd)"
mkdir -p "/newroot$cwd"
mount -t 9p -o "$nine_p,cache=mmap" cwd "/newroot$cwd" || fail "cannot mount $cwd"
mkdir -p /newroot/lib/modules
cp -a "/lib/modules/$kver" /newroot/lib/modules/
exec switch_root /newroot /bin/bash /run/rcoll-vm/guest-init.sh
INIT
}

# ---------------------------------------------------------------------------------------------
# Preparing a run

"$here/deps.sh"

package="$(kernel_package)"
kver="${package#linux-image-}"
cache="$cache_root/$kver"
mkdir -p "$cache_root"
(
    # One builder at a time; a concurrent run waits and then finds the cache ready.
    flock 9
    if [[ "$(cat "$cache/ready" 2>/dev/null)" != "$initramfs_recipe" ]]; then
        rm -rf "$cache" "$cache_root"/build.* # and what an interrupted build left
        build_cache "$kver" "$cache"
    fi
) 9>"$cache_root/.lock"

run="$(mktemp -d "${TMPDIR:-/tmp}/rcoll-vm.XXXXXX")"
qemu_pid=""
# shellcheck disable=SC2317 # called from the EXIT trap
cleanup() {
    [[ -z "$qemu_pid" ]] || kill -TERM "$qemu_pid" 2>/dev/null || true
    if [[ "${RCOLL_VM_KEEP:-0}" == 1 ]]; then
        log "run directory kept: $run"
    else
        rm -rf "$run"
    fi
}
trap cleanup EXIT
# On Ctrl-C or a kill, stop the VM (timeout(1) passes TERM on to qemu); the EXIT trap cleans up.
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# The control share: what the guest reads, and where it leaves its status. The guest's own
# scripts travel in it too: the checkout may be hidden in the guest (under /tmp, say, when the
# current directory is elsewhere), and a script edited during a run stays consistent.
mkdir -p "$run/ctl"
pwd >"$run/ctl/cwd"
cp "$here/guest-init.sh" "$here/setup.sh" "$here/teardown.sh" "$run/ctl/"
pass_names=(PATH HOME USER LOGNAME SHELL TERM LANG LC_ALL TZ CI NO_COLOR RUSTUP_HOME
    RUSTUP_TOOLCHAIN RUST_BACKTRACE RUST_LOG RUST_TEST_THREADS RUST_MIN_STACK RUSTFLAGS)
read -r -a extra_names <<<"${RCOLL_VM_ENV:-}"
mapfile -t prefixed_names < <(compgen -e | grep -E '^(RCOLL|CARGO)_' || true)
{
    printf 'vm_command=%q\n' "$command_text"
    printf 'vm_cwd=%q\n' "$(pwd)"
    printf 'vm_mtu=%q\n' "$mtu"
    printf 'vm_hostname=%q\n' "$(hostname 2>/dev/null || echo rcoll-vm)"
    printf 'vm_verbose=%q\n' "${RCOLL_VM_VERBOSE:-0}"
    echo 'command_env=('
    for name in "${pass_names[@]}" "${extra_names[@]}" "${prefixed_names[@]}"; do
        [[ -n "${!name+set}" ]] && printf '  %q\n' "$name=${!name}"
    done
    echo ')'
} >"$run/ctl/env.sh"

# The command's stdout/stderr and the control channel come back through virtio consoles
# written into FIFOs (qemu's `file` backend: its `pipe` backend would also read the FIFO back
# into the guest). The readers start first: qemu's open of a FIFO blocks until one is there.
mkfifo "$run/out" "$run/err" "$run/control"
cat "$run/out" &
out_reader=$!
cat "$run/err" >&2 &
err_reader=$!
started="${EPOCHREALTIME/./}"
# The control reader prints the boot line when the guest is ready to run the command.
while IFS= read -r line; do
    echo "$line" >>"$run/control.log"
    if [[ "$line" == ready* ]]; then
        now="${EPOCHREALTIME/./}"
        printf 'rcoll-vm: Linux %s up with rxe0+rxe1 (MTU %s) in %d.%01ds (qemu TCG, %s vCPU, %s)\n' \
            "$kver" "$mtu" $(((now - started) / 1000000)) $(((now - started) % 1000000 / 100000)) \
            "$cpus" "$memory" >&2
    fi
done <"$run/control" &
control_reader=$!

# qemu's option parser treats ',' as a separator: double it in paths.
qpath() { printf '%s' "${1//,/,,}"; }
# shellcheck disable=SC2054 # the commas are qemu's, not array separators
qemu_args=(
    -accel tcg,thread=multi -cpu "$cpu_model" -smp "$cpus" -m "$memory"
    -nodefaults -no-user-config -display none -vga none -nic none -no-reboot
    -kernel "$(qpath "$cache/vmlinuz")" -initrd "$(qpath "$cache/initramfs.cpio")"
    # panic=-1: reboot at once on a panic, which -no-reboot turns into qemu exiting.
    -append "console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off tsc=reliable"
    -serial "file:$(qpath "$run/console.log")"
    -fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap"
    -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot
    -fsdev "local,id=cwd,path=$(qpath "$(pwd)"),security_model=none,multidevs=remap"
    -device virtio-9p-pci,fsdev=cwd,mount_tag=cwd
    -fsdev "local,id=ctl,path=$(qpath "$run/ctl"),security_model=none"
    -device virtio-9p-pci,fsdev=ctl,mount_tag=ctl
    -device virtio-serial-pci
    -chardev "file,id=out,path=$(qpath "$run/out")" -device virtconsole,chardev=out
    -chardev "file,id=err,path=$(qpath "$run/err")" -device virtconsole,chardev=err
    -chardev "file,id=control,path=$(qpath "$run/control")" -device virtconsole,chardev=control
)

# ---------------------------------------------------------------------------------------------
# Running it

# In the background, so that the INT/TERM traps run while we wait.
timeout -k 10 "$timeout_s" qemu-system-x86_64 "${qemu_args[@]}" </dev/null >"$run/qemu.log" 2>&1 &
qemu_pid=$!
qemu_status=0
wait "$qemu_pid" || qemu_status=$?
qemu_pid=""

# If qemu never opened a FIFO (it failed early), its reader still waits in open(): opening the
# FIFO read-write ourselves (which never blocks) lets it see end-of-file.
for fifo in "$run/out" "$run/err" "$run/control"; do
    : 1<>"$fifo"
done
wait "$out_reader" "$err_reader" "$control_reader" 2>/dev/null || true

if [[ -s "$run/ctl/status" ]]; then
    exit "$(cat "$run/ctl/status")"
fi
if [[ "$qemu_status" -eq 124 ]]; then
    log "timed out after ${timeout_s}s (RCOLL_VM_TIMEOUT); the VM was killed"
    exit 124
fi
log "the VM stopped without reporting an exit status (qemu exit status $qemu_status)"
if [[ -s "$run/qemu.log" ]]; then
    log "qemu said:"
    tail -n 20 "$run/qemu.log" >&2
fi
if [[ -s "$run/console.log" ]]; then
    log "last lines of the guest's console:"
    tail -n 30 "$run/console.log" >&2
fi
exit 125
