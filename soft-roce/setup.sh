#!/usr/bin/env bash
# Create Soft-RoCE (rxe) devices on a Linux host whose kernel has rdma_rxe, and show them.
#
# Usage:
#   soft-roce/setup.sh [--mtu N] [-q]            a veth pair with two rxe devices (the default)
#   soft-roce/setup.sh [-q] NETDEV...            one rxe device on each existing netdev
#   soft-roce/setup.sh --show                    only show the devices and their GID tables
#   soft-roce/teardown.sh                        removes whatever setup.sh created
#
# The default builds the same two-device network that soft-roce/run-in-vm.sh builds inside its
# VM (the VM runs this script), so the same tests run on a host and in the VM:
#
#     rxe0 -- veth0 10.99.0.1/24 <=== veth pair ===> veth1 10.99.0.2/24 -- rxe1
#
# Both ends live in one network namespace, because a test process opens rxe0 and rxe1 (one rank
# on each). Left alone, the kernel would carry traffic between two local addresses over `lo`,
# and TCP, rdma_cm address resolution and rxe's own route lookups would all bypass the veth.
# A policy-routing rule sends locally generated traffic for 10.99.0.0/24 out of the veth, and
# the `local` table lookup moves behind it. The script checks the result with `ip route get`.
#
# Options and environment:
#   --mtu N   MTU of the veth pair (default $RCOLL_SOFTROCE_MTU, else 1500; 9000 gives rxe an
#             active MTU of 4096 instead of 1024).
#   -q        quiet: print nothing unless something fails.
#   RCOLL_SOFTROCE_STATE   where the undo log lives (default /run/rcoll-soft-roce.state).
#
# Every step that changes the system appends its inverse to the undo log; teardown.sh replays
# the log backwards, and a failing setup.sh rolls itself back the same way. Running setup.sh
# again first tears down what the previous run created.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
state="${RCOLL_SOFTROCE_STATE:-/run/rcoll-soft-roce.state}"

# The default topology. Rule preferences: ours must come before the `local` table, which the
# kernel puts at preference 0, so `local` moves to local_pref.
net_prefix=10.99.0
route_table=1099
rule_pref=90
local_pref=100

mtu="${RCOLL_SOFTROCE_MTU:-1500}"
quiet=false
show_only=false
netdevs=()

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }
say() { "$quiet" || echo "$@"; }
die() {
    echo "soft-roce/setup.sh: $*" >&2
    exit 1
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --mtu) mtu="${2:?--mtu needs a value}"; shift 2 ;;
        --mtu=*) mtu="${1#--mtu=}"; shift ;;
        -q | --quiet) quiet=true; shift ;;
        --show) show_only=true; shift ;;
        -h | --help) usage; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) netdevs+=("$1"); shift ;;
    esac
done
if ! [[ "$mtu" =~ ^[0-9]+$ ]] || ((mtu < 1280 || mtu > 65535)); then
    die "MTU must be 1280..65535, not '$mtu'"
fi

# ---------------------------------------------------------------------------------------------
# Showing devices

# The GID table of one port from sysfs: only the non-empty entries, with their type and netdev.
# On rxe, index 0 is the fe80:: link-local GID; the RoCE v2 IPv4 GID (::ffff:a.b.c.d), the one
# to use between IPv4 addresses, is usually index 1. Programs should pick it by type and
# address family, never by a fixed index. The table has gid_tbl_len entries (1024 on rxe), so
# it is read with builtins: a `cat` per entry takes minutes in an emulated VM.
show_gids() {
    local dev="$1" port_dir gid_file index gid type ndev
    port_dir="/sys/class/infiniband/$dev/ports/1"
    echo "GID table of $dev port 1 (active MTU $(active_mtu "$dev")):"
    printf '  %-5s %-40s %-14s %s\n' index gid type netdev
    for gid_file in "$port_dir"/gids/*; do
        index="${gid_file##*/}"
        read -r gid <"$gid_file" 2>/dev/null || continue
        [[ "$gid" == 0000:0000:0000:0000:0000:0000:0000:0000 ]] && continue
        read -r type <"$port_dir/gid_attrs/types/$index" 2>/dev/null || type='?'
        read -r ndev <"$port_dir/gid_attrs/ndevs/$index" 2>/dev/null || ndev='?'
        printf '  %-5s %-40s %-14s %s\n' "$index" "$gid" "$type" "$ndev"
    done | sort -n
}

# The RoCE v2 IPv4-mapped GID index of a device, or nothing while the table has none yet.
ipv4_gid_index() {
    local port_dir="/sys/class/infiniband/$1/ports/1" gid_file index gid type
    for gid_file in "$port_dir"/gids/*; do
        index="${gid_file##*/}"
        read -r gid <"$gid_file" 2>/dev/null || continue
        [[ "$gid" == 0000:0000:0000:0000:0000:ffff:* ]] || continue
        read -r type <"$port_dir/gid_attrs/types/$index" 2>/dev/null || continue
        [[ "$type" == "RoCE v2" ]] || continue
        echo "$index"
        return 0
    done
}

active_mtu() {
    ibv_devinfo -d "$1" 2>/dev/null | awk '/active_mtu/ { print $2; exit }'
}

show_all() {
    local dev_dir dev index
    echo "== rdma link"
    rdma link show
    echo "== ibv_devices"
    ibv_devices
    for dev_dir in /sys/class/infiniband/*; do
        [[ -e "$dev_dir" ]] || continue
        dev="${dev_dir##*/}"
        echo "== $dev"
        show_gids "$dev"
        index="$(ipv4_gid_index "$dev")"
        if [[ -n "$index" ]]; then
            echo "  -> RoCE v2 IPv4 GID index of $dev: $index (perftest: -x $index)"
        else
            echo "  -> $dev has no RoCE v2 IPv4 GID (is its netdev up with an IPv4 address?)"
        fi
    done
}

if "$show_only"; then
    show_all
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# Creating devices

if [[ "$EUID" -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "must run as root (no sudo found)"
    exec sudo RCOLL_SOFTROCE_STATE="$state" RCOLL_SOFTROCE_MTU="$mtu" "$0" "$@"
fi

if [[ -e "$state" ]]; then
    say "setup.sh: removing the devices of an earlier setup.sh first"
    "$here/teardown.sh" -q
fi

# record CMD...: remember CMD (shell-quoted) as the undo step of the change just made.
record() {
    printf '%q ' "$@" >>"$state"
    echo >>"$state"
}

# Any exit before the end (a failed command under `set -e`, or die) undoes the steps so far.
rollback() {
    echo "soft-roce/setup.sh: failed; undoing what it did" >&2
    "$here/teardown.sh" -q || true
}
: >"$state"
trap rollback EXIT

# The script runs a few dozen commands: in the emulated VM each exec costs ~50 ms, so it
# reads /proc and /sys with builtins and batches the `ip` calls.

# set_sysctl KEY VALUE: set a sysctl (through /proc/sys), recording its old value for teardown.
set_sysctl() {
    local path="/proc/sys/${1//.//}" old
    read -r old <"$path"
    [[ "$old" == "$2" ]] && return 0
    echo "$2" >"$path"
    record sysctl -qw "$1=$old"
}

# Modules: rdma_rxe itself, the user-space entry points (ib_uverbs for /dev/infiniband/uverbs*,
# rdma_ucm for rdma_cm, ib_umad for diagnostics), and crc32: rxe asks the crypto API for
# "crc32" when a device is created, and where that is a module the `rdma link add` fails with
# "No such file or directory" unless it is loaded.
modules=(rdma_rxe ib_uverbs rdma_ucm ib_umad)
[[ ${#netdevs[@]} -gt 0 ]] || modules+=(veth)
modprobe -a "${modules[@]}"
modprobe -q -a crc32_pclmul crc32_generic 2>/dev/null || true

# The first free rxeN name.
next_rxe_name() {
    local n=0
    while [[ -e "/sys/class/infiniband/rxe$n" ]]; do n=$((n + 1)); done
    echo "rxe$n"
}

# add_rxe NETDEV [NAME]: create an rxe device on NETDEV and wait until its port is up with an
# IPv4 GID (the GID table fills in asynchronously after the link is added).
created=()
add_rxe() {
    local netdev="$1" name="${2:-$(next_rxe_name)}" try
    if [[ "$(rdma link show) " == *" netdev $netdev "* ]]; then
        say "setup.sh: $netdev already has an rdma link; leaving it as it is"
        return 0
    fi
    rdma link add "$name" type rxe netdev "$netdev"
    record rdma link delete "$name"
    created+=("$name")
    for ((try = 0; try < 50; try++)); do
        [[ -n "$(ipv4_gid_index "$name")" ]] && return 0
        sleep 0.1
    done
    echo "soft-roce/setup.sh: warning: $name has no IPv4 RoCE v2 GID after 5 s" >&2
}

if [[ ${#netdevs[@]} -gt 0 ]]; then
    for netdev in "${netdevs[@]}"; do
        ip link show dev "$netdev" >/dev/null || die "no network device $netdev"
        add_rxe "$netdev"
    done
else
    for dev in veth0 veth1 rxe0 rxe1; do
        [[ ! -e "/sys/class/net/$dev" && ! -e "/sys/class/infiniband/$dev" ]] ||
            die "$dev already exists; remove it, or pass the netdevs to use"
    done
    ip link add veth0 mtu "$mtu" type veth peer name veth1 mtu "$mtu"
    record ip link delete veth0 # takes the addresses, neighbours and table routes with it

    # Packets arriving from one of our own addresses are martians unless accept_local is set;
    # strict reverse-path filtering would drop them too (loose mode is fine).
    for dev in veth0 veth1; do
        set_sysctl "net.ipv4.conf.$dev.accept_local" 1
        set_sysctl "net.ipv4.conf.$dev.rp_filter" 0
    done
    read -r all_rp_filter </proc/sys/net/ipv4/conf/all/rp_filter
    [[ "$all_rp_filter" != 1 ]] || set_sysctl net.ipv4.conf.all.rp_filter 2

    # Addresses, a static neighbour entry each way (no ARP between two local addresses), and
    # policy routing: locally generated traffic ("iif lo") to the pair's subnet goes through
    # table route_table, which sends each address out of the *other* end. Received packets do
    # not match (their iif is a veth) and reach the `local` table as usual.
    read -r mac0 </sys/class/net/veth0/address
    read -r mac1 </sys/class/net/veth1/address
    # Undo steps are recorded before a batch: one that failed half-way is then still undone
    # (teardown reports and skips the steps that had not happened).
    record ip rule del pref "$rule_pref" iif lo to "$net_prefix.0/24" lookup "$route_table"
    ip -batch - <<EOF
addr add $net_prefix.1/24 dev veth0
addr add $net_prefix.2/24 dev veth1
link set veth0 up
link set veth1 up
neigh replace $net_prefix.2 lladdr $mac1 dev veth0 nud permanent
neigh replace $net_prefix.1 lladdr $mac0 dev veth1 nud permanent
route add $net_prefix.2 dev veth0 src $net_prefix.1 table $route_table
route add $net_prefix.1 dev veth1 src $net_prefix.2 table $route_table
rule add pref $rule_pref iif lo to $net_prefix.0/24 lookup $route_table
EOF

    # The `local` table's rule moves from preference 0 to behind ours.
    rules="$(ip rule show)"
    if [[ $'\n'"$rules" == *$'\n0:\tfrom all lookup local'* ]]; then
        while IFS=: read -r pref _; do
            if ((pref > 0 && pref < local_pref && pref != rule_pref)); then
                echo "soft-roce/setup.sh: warning: rule $pref now runs before the local table" >&2
            fi
        done <<<"$rules"
        record ip rule del pref "$local_pref" lookup local
        record ip rule add pref 0 lookup local
        ip -batch - <<EOF
rule add pref $local_pref lookup local
rule del pref 0 lookup local
EOF
    fi

    # Check: each address must leave through the other end's veth.
    routes="$(ip -batch - <<<"route get $net_prefix.2"$'\n'"route get $net_prefix.1")"
    if [[ "$routes" != "$net_prefix.2 dev veth0 "*$'\n'"$net_prefix.1 dev veth1 "* ]]; then
        die "policy routing failed: the veth pair is bypassed:"$'\n'"$routes"
    fi

    add_rxe veth0 rxe0
    add_rxe veth1 rxe1
fi
trap - EXIT

if ! "$quiet"; then
    echo "setup.sh: created ${created[*]:-nothing}; undo log $state"
    show_all
fi
