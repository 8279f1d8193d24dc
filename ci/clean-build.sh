#!/usr/bin/env bash
# The README's first command on a machine with nothing but Rust: builds the workspace and runs
# the benchmark inside a Debian 12 root filesystem made from packages (mmdebstrap) that holds
# a C toolchain (rustc links through cc) and none of libibverbs-dev, librdmacm-dev, libclang,
# pkg-config or rdma-core; then checks that the binary does not link libibverbs.
#
# Usage: ci/clean-build.sh [--keep]        (as root: mmdebstrap, mounts, chroot)
#   The root filesystem is cached in target/clean-root (rebuilt when this script changes);
#   the build goes to target/clean-root/build, a target directory of its own. Rust comes from
#   this machine's RUSTUP_HOME/CARGO_HOME, mounted into the root (the toolchain and the crate
#   cache shared); the checkout is mounted read-only. The resulting binary is target/clean-root/build/release/rcoll-bench.
#
# What it shows, in order: the packages the root lacks, `cargo build` (the default members), the
# README's command (`cargo run --release -p rcoll-bench -- all_reduce --ranks 4 ...`), and
# `ldd` of the binary.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
root=$repo/target/clean-root
fs=$root/fs
stamp=$root/stamp
want_stamp=$(sha256sum "$0" | cut -c1-16)

[ "$(id -u)" -eq 0 ] || { echo "ci/clean-build.sh: needs root (mmdebstrap, mount, chroot)" >&2; exit 1; }
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
cargo_home=${CARGO_HOME:-$HOME/.cargo}
toolchain=$(rustup show active-toolchain | cut -d' ' -f1)

if [ ! -d "$fs/usr" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want_stamp" ]; then
    command -v mmdebstrap >/dev/null || {
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -qq update
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -qq install -y \
            --no-install-recommends mmdebstrap >/dev/null
    }
    rm -rf "$fs"
    mkdir -p "$root"
    echo "== root filesystem: Debian 12 minbase + gcc, libc6-dev, ca-certificates (mmdebstrap)"
    # The same mirror this machine's apt uses.
    mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
    mmdebstrap --quiet --variant=minbase --include=gcc,libc6-dev,ca-certificates \
        bookworm "$fs" "${mirror:-http://deb.debian.org/debian}"
    echo "$want_stamp" >"$stamp"
fi

echo "== what the root does not have"
for p in libibverbs-dev librdmacm-dev libclang-dev pkg-config libibverbs1 rdma-core; do
    if chroot "$fs" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        echo "ci/clean-build.sh: $p is installed in the clean root" >&2
        exit 1
    fi
    echo "   $p: not installed"
done
if chroot "$fs" sh -c 'ls /usr/lib/*/libibverbs* /usr/include/infiniband /usr/lib/*/libclang* 2>/dev/null' | grep -q .; then
    echo "ci/clean-build.sh: verbs or clang files in the clean root" >&2
    exit 1
fi

# A private mount namespace: every mount below disappears with the process.
mkdir -p "$fs/src" "$fs/opt/rustup" "$fs/opt/cargo" "$root/build"
unshare --mount --fork bash -euo pipefail -c '
    fs=$1 repo=$2 rustup_home=$3 cargo_home=$4 build=$5 toolchain=$6
    mount --make-rprivate /
    mount -t proc proc "$fs/proc"
    mount --rbind /dev "$fs/dev"
    mount --rbind /sys "$fs/sys"
    mount -t tmpfs tmpfs "$fs/tmp"
    mount --bind "$repo" "$fs/src"
    mount -o remount,bind,ro "$fs/src"
    mount --bind "$build" "$fs/src/target"
    mount --bind "$rustup_home" "$fs/opt/rustup"
    mount --bind "$cargo_home" "$fs/opt/cargo"
    cp /etc/resolv.conf "$fs/etc/resolv.conf"
    chroot "$fs" /usr/bin/env -i HOME=/root TERM=dumb \
        PATH=/opt/cargo/bin:/usr/local/bin:/usr/bin:/bin \
        RUSTUP_HOME=/opt/rustup CARGO_HOME=/opt/cargo RUSTUP_TOOLCHAIN="$toolchain" \
        bash -euo pipefail -c "
            cd /src
            echo \"== rustc: \$(rustc --version); cc: \$(cc --version | head -n 1)\"
            echo \"== cargo build --release (the default members: rcoll-mpi and the Python package need an MPI and a Python, which such a root lacks)\"
            cargo build --locked --release
            echo \"== the README command: cargo run --release -p rcoll-bench -- all_reduce --ranks 4 -b 8 -e 64M -f 2 -c 1\"
            cargo run --locked --release -p rcoll-bench -- all_reduce --ranks 4 -b 8 -e 64M -f 2 -c 1
            echo \"== ldd target/release/rcoll-bench\"
            ldd target/release/rcoll-bench
            if ldd target/release/rcoll-bench | grep -q ibverbs; then
                echo \"rcoll-bench links libibverbs\" >&2
                exit 1
            fi
            echo \"== rcoll-bench doctor (no libibverbs here: it must say what to install)\"
            if target/release/rcoll-bench doctor >/tmp/doctor.txt; then
                echo \"doctor found RDMA in a root without libibverbs\" >&2
                exit 1
            fi
            grep -E \"not found: install rdma-core|^summary\" /tmp/doctor.txt
            echo \"== the C library as issue 13 states it: cc hello.c -I capi/include -L target/release -lrcoll; 2 ranks\"
            cc capi/examples/hello.c -I capi/include -L target/release -lrcoll -o /tmp/hello
            secret=\$(od -An -N16 -tx1 /dev/urandom | tr -d \" \\n\")
            # Each rank waited for by its pid: a second \`wait -n\` finds no child left
            # when both ranks have already exited, and fails with 127.
            pids=()
            for r in 0 1; do
                RCOLL_RANK=\$r RCOLL_WORLD_SIZE=2 RCOLL_ROOT_ADDR=127.0.0.1:29561 \\
                    RCOLL_UNIQUE_ID=\$secret LD_LIBRARY_PATH=target/release timeout 120 /tmp/hello &
                pids+=(\$!)
            done
            for pid in \"\${pids[@]}\"; do
                wait \$pid
            done
        "
' _ "$fs" "$repo" "$rustup_home" "$cargo_home" "$root/build" "$toolchain"
echo "== clean build OK: target/clean-root/build/release/rcoll-bench"
