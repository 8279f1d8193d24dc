#!/usr/bin/env bash
# rcoll's container image, built here without a registry, and run on Soft-RoCE: `rcoll-bench
# doctor` and the verbs test suite inside the container, in the VM, with exactly the flags
# soft-roce/README.md documents (the device files, IPC_LOCK, memlock, the host network).
#
# Usage: soft-roce/container-test.sh          (as root)
#        RCOLL_CONTAINER_ONLY_BUILD=1 soft-roce/container-test.sh   (only make the image)
#        RCOLL_CONTAINER_BENCH=path/to/rcoll-bench soft-roce/container-test.sh   (pack that
#          binary instead of building target/release/rcoll-bench: CI gives ci/clean-build.sh's)
#
# 1. The image, on this host: a Debian 12 root filesystem made from packages with mmdebstrap
#    (minbase + libibverbs1, ibverbs-providers, ibverbs-utils, iproute2: the run-time verbs
#    stack and nothing to build with), with rcoll-bench and the verbs test binary in
#    /opt/rcoll, packed as target/container/rcoll-soft-roce.tar. `podman import` or
#    `docker import` turn that file into an image; no registry is involved. The root
#    filesystem is cached in target/container/base (rebuilt when the package list changes).
# 2. The run, in the VM (soft-roce/run-in-vm.sh: rxe0/rxe1 over a veth pair): podman imports
#    the tarball and runs it twice with
#        --network host --cap-add IPC_LOCK --ulimit memlock=-1:-1 --device /dev/infiniband/...
#    first `rcoll-bench doctor` (must exit 0), then the verbs suite's tests of what a
#    container changes (must pass). Podman keeps
#    its store in the VM's /tmp (vfs driver: the VM's root is already an overlay) and runs
#    without a cgroup of its own (the VM runs no cgroup manager); neither changes what the
#    container sees.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=$repo/target/container
base=$out/base
image_tar=$out/rcoll-soft-roce.tar
packages=libibverbs1,ibverbs-providers,ibverbs-utils,iproute2,procps

[ "$(id -u)" -eq 0 ] || { echo "soft-roce/container-test.sh: needs root (mmdebstrap, the VM)" >&2; exit 1; }

# podman for the VM (which runs this host's binaries), mmdebstrap for the image.
missing=()
for p in mmdebstrap podman crun uidmap; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "container-test: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -qq update
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -qq install -y \
        --no-install-recommends "${missing[@]}" >/dev/null
fi

# The binaries: rcoll-bench (release) and the verbs suite (its test binary).
if [ -n "${RCOLL_CONTAINER_BENCH:-}" ]; then
    bench=$RCOLL_CONTAINER_BENCH
else
    cargo build --release -p rcoll-bench
    bench=target/release/rcoll-bench
fi
[ -x "$bench" ] || { echo "container-test: no rcoll-bench at $bench" >&2; exit 1; }
build_log=$(cargo test --workspace --test verbs --no-run 2>&1) || { echo "$build_log" >&2; exit 1; }
verbs_test=$(grep -o 'target/[^ )]*/verbs-[0-9a-f]*' <<<"$build_log" | tail -n 1)
[ -x "$verbs_test" ] || { echo "container-test: no verbs test binary" >&2; exit 1; }

# The base root filesystem, cached by its package list.
mkdir -p "$out"
if [ ! -d "$base/usr" ] || [ "$(cat "$out/base.packages" 2>/dev/null)" != "$packages" ]; then
    rm -rf "$base"
    mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
    echo "container-test: root filesystem: Debian 12 minbase + $packages (mmdebstrap)" >&2
    mmdebstrap --quiet --variant=minbase --include="$packages" \
        --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
        bookworm "$base" "${mirror:-http://deb.debian.org/debian}"
    echo "$packages" >"$out/base.packages"
fi

# The image: the base plus /opt/rcoll.
# (One tree, one tar: an image layer may not name a path twice. Hard links keep it cheap.)
stage=$out/stage
rm -rf "$stage"
cp -al "$base" "$stage"
mkdir -p "$stage/opt/rcoll"
# Without debug information: a smaller image imports faster in the emulated VM.
objcopy --strip-debug "$bench" "$stage/opt/rcoll/rcoll-bench"
objcopy --strip-debug "$verbs_test" "$stage/opt/rcoll/verbs-tests"
tar -C "$stage" --numeric-owner -cf "$image_tar" .
rm -rf "$stage"
echo "container-test: image $image_tar ($(du -m "$image_tar" | cut -f1) MiB): $packages + rcoll-bench, verbs-tests" >&2
[ "${RCOLL_CONTAINER_ONLY_BUILD:-0}" = 1 ] && exit 0

# In the VM: import, then run doctor and the suite with the documented flags.
guest=$(mktemp "$out/guest.XXXXXX.sh")
trap 'rm -f "$guest"' EXIT
cat >"$guest" <<'GUEST'
set -euo pipefail
# crun checks the cgroup file system even when the container gets no cgroup of its own.
mountpoint -q /sys/fs/cgroup || mount -t cgroup2 cgroup2 /sys/fs/cgroup
podman=(podman --root /tmp/podman/root --runroot /tmp/podman/run --storage-driver vfs
        --cgroup-manager cgroupfs --events-backend none)
start=$(date +%s)
"${podman[@]}" import --quiet \
    --change 'ENV PATH=/opt/rcoll:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    target/container/rcoll-soft-roce.tar localhost/rcoll-soft-roce:test >/dev/null
echo "== podman import: $(( $(date +%s) - start )) s"
"${podman[@]}" images localhost/rcoll-soft-roce
devices=()
for d in /dev/infiniband/*; do devices+=(--device "$d"); done
flags=(--rm --network host --cgroups disabled --cap-add IPC_LOCK --ulimit memlock=-1:-1 "${devices[@]}")
# The caller's verbs settings (RCOLL_IB_SCOPED=1, say) reach the container too.
while IFS= read -r var; do flags+=(--env "$var"); done < <(env | grep '^RCOLL_IB_' || true)
echo "== podman run ${flags[*]} localhost/rcoll-soft-roce:test ..."
echo "== in the container: what it has"
"${podman[@]}" run "${flags[@]}" localhost/rcoll-soft-roce:test \
    sh -c 'grep PRETTY /etc/os-release; ls /opt/rcoll; ibv_devices; ulimit -l; grep CapEff /proc/self/status'
echo "== in the container: rcoll-bench doctor"
"${podman[@]}" run "${flags[@]}" localhost/rcoll-soft-roce:test rcoll-bench doctor
echo "== in the container: the verbs suite's tests of what a container changes"
# What the container must give rcoll, each through the tests that need it: the device files
# and locked memory (collectives on 2-4 ranks, registration with zero copy, the memlock
# limit named), /sys as the host shows it (the GID table, the topology), /dev/shm (shared
# memory inside a host beside verbs), signals between the ranks (a killed rank). The rest of
# the suite (the transport's protocol, the lossy and blackholed links, which need
# CAP_NET_ADMIN, the sweeps) asks the container for nothing these do not, and ci/test.sh's
# VM run has it all. The zero-copy test goes up to 16 MiB: its two buffers still need four
# times the 8 MiB a process may lock without --ulimit.
"${podman[@]}" run "${flags[@]}" --env RCOLL_TEST_LARGE_MIB=16 localhost/rcoll-soft-roce:test \
    verbs-tests --ignored --test-threads=1 --exact \
    every_collective_on_rxe_2_3_4_ranks \
    registered_buffers_go_zero_copy_and_stay_correct \
    too_little_locked_memory_is_named_on_every_rank \
    the_gid_table_from_one_library_call_is_the_one_sysfs_shows \
    the_topology_of_soft_roce_degrades_to_the_choice_by_address_and_says_so \
    shared_memory_inside_hosts_and_verbs_across \
    a_killed_rank_fails_the_others_naming_it
echo "== container test passed in $(( $(date +%s) - start )) s"
GUEST
# The emulated CPU without `rep movsb`, as in ci/test.sh (TCG runs it a byte at a time).
RCOLL_VM_TIMEOUT=${RCOLL_VM_TIMEOUT:-1800} RCOLL_VM_CPU_MODEL=${RCOLL_VM_CPU_MODEL:-max,erms=off,fsrm=off} \
    soft-roce/run-in-vm.sh bash "${guest#"$repo"/}"
