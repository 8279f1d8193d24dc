#!/bin/bash
# PID 1 of the Soft-RoCE VM, started by run-in-vm.sh's initramfs after it switched into the
# host's root filesystem (read-only 9p under a tmpfs overlay). Not for running by hand.
#
# It finishes the mounts, creates rxe0/rxe1 with soft-roce/setup.sh (the same script a host with
# rxe runs), runs the command in the caller's directory with the caller's environment, and
# powers off. The host side talks to it through:
#   /run/rcoll-vm      a 9p share: env.sh (command, directory, environment) and this
#                      script with setup.sh and teardown.sh in; status and setup.log out
#   /dev/hvc0, hvc1    the command's stdout and stderr (virtio consoles into host FIFOs)
#   /dev/hvc2          control lines for the host: "up", "ready", "exit N"
#   /dev/console       ttyS0, the kernel log; the host keeps it for when something fails
#
# As PID 1 it must never exit (that panics the kernel), so there is no `set -e`: every path
# ends in power_off.
set -uo pipefail

export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ctl=/run/rcoll-vm
here="$(dirname "${BASH_SOURCE[0]}")"

# shellcheck disable=SC2317 # called from the EXIT trap
power_off() {
    sync
    echo o >/proc/sysrq-trigger
    sleep 60 # the power-off is asynchronous; never return from PID 1
}
trap power_off EXIT

# The consoles stay open for the whole run: hvc resets a console's termios when its last
# user closes it, and the default adds a CR before every LF. Raw mode: no CR, no echo of
# anything the host might send. stty on a console also waits until what was written has left
# the guest, so it doubles as a drain.
exec 5>/dev/hvc0 6>/dev/hvc1 7>/dev/hvc2 # stdout, stderr, the control channel
drain_consoles() {
    local console
    for console in /dev/hvc0 /dev/hvc1 /dev/hvc2; do
        stty -F "$console" raw -echo 2>/dev/null
    done
}
drain_consoles
uptime() {
    local seconds _
    read -r seconds _ </proc/uptime
    echo "$seconds"
}
echo "up $(uptime)" >&7

# fail MESSAGE: tell the caller on its stderr, keep the exit status the host expects for a
# VM-side failure (125), and power off.
fail() {
    echo "rcoll-vm (guest): $*" >&6
    echo 125 >"$ctl/status"
    echo "exit 125" >&7
    drain_consoles
    exit 125
}

# What udev would add to devtmpfs: bash's process substitution needs /dev/fd.
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mkdir -p /dev/pts /dev/shm
mount -t devpts -o gid=5,mode=620,ptmxmode=666 devpts /dev/pts
mount -t tmpfs -o mode=1777 shm /dev/shm
echo 1 >/proc/sys/kernel/sysrq
ip link set lo up

# What the host writes into env.sh (these are the defaults when it says nothing).
vm_command="" vm_cwd=/ vm_mtu=1500 vm_hostname=rcoll-vm vm_verbose=0
command_env=("PATH=$PATH") # NAME=VALUE words: the command's whole environment
# shellcheck source=/dev/null
source "$ctl/env.sh" || fail "cannot read $ctl/env.sh"
hostname "$vm_hostname" 2>/dev/null

# Locked memory: verbs registration pins pages, and rxe counts them against RLIMIT_MEMLOCK.
ulimit -l unlimited
ulimit -n 65536

if ! "$here/setup.sh" -q --mtu "$vm_mtu" >"$ctl/setup.log" 2>&1; then
    cat "$ctl/setup.log" >&6
    fail "soft-roce/setup.sh failed (output above)"
fi
if [[ "$vm_verbose" == 1 ]]; then
    "$here/setup.sh" --show >&6 2>&1
fi

cd "$vm_cwd" || fail "cannot enter $vm_cwd"

# Give the command pipes, not the consoles: programs then see a pipe (no colour, no tty
# line discipline), and the relays end when every writer is gone.
mkfifo /run/rcoll-vm-out /run/rcoll-vm-err
cat /run/rcoll-vm-out >&5 &
out_relay=$!
cat /run/rcoll-vm-err >&6 &
err_relay=$!

echo "ready $(uptime)" >&7
env -i "${command_env[@]}" RCOLL_IN_VM=1 bash -c "$vm_command" \
    </dev/null >/run/rcoll-vm-out 2>/run/rcoll-vm-err 5>&- 6>&- 7>&-
status=$?

# A background process the command left running may still hold the pipes open: give the
# relays a few seconds to finish, then stop every remaining process (the relays included).
for _ in $(seq 50); do
    kill -0 "$out_relay" 2>/dev/null || kill -0 "$err_relay" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$out_relay" 2>/dev/null || kill -0 "$err_relay" 2>/dev/null; then
    echo "rcoll-vm (guest): processes left running by the command were killed" >&6
    kill -TERM -1 2>/dev/null
    sleep 1
    kill -KILL -1 2>/dev/null
fi
wait 2>/dev/null

echo "$status" >"$ctl/status"
echo "exit $status" >&7
drain_consoles
exit "$status"
