#!/usr/bin/env bash
# What two TCP options the performance issue names would give on this machine's loopback,
# measured below rcoll (no rcoll code involved): several streams per peer, and
# MSG_ZEROCOPY sends. Needs iperf3 and python3.
#
#   bench/figures/tcp-options.sh [--rounds N]      (default 2)
#
# 1. Streams per peer: one iperf3 sender process and one receiver (1 MiB writes, 3 s) with
#    1, 2 and 4 parallel streams (-P) between them, as a rank would use several sockets to
#    one peer; first one pair alone (a CPU to spare), then as many pairs at once as the
#    machine has CPUs and twice that (every CPU busy, as in a collective on a crowded host).
# 2. MSG_ZEROCOPY: one Python sender writes 256 KiB and 1 MiB buffers over loopback for 3 s
#    with plain send() and with SO_ZEROCOPY + MSG_ZEROCOPY (reaping its completion
#    notifications as they come); a receiver process reads them into one buffer. Prints
#    GB/s and the sender's CPU. The kernel copies every zero-copy skb that loops to a
#    local socket (Documentation/networking/msg_zerocopy.rst, "Loopback"), so here it can
#    only add the notifications' cost; on a NIC it may not.
set -u
rounds=2
. "$(dirname "$0")/common.sh" "$@"
cpus=$(nproc)

# GB/s that $1 iperf3 pairs with $2 streams each carry together.
streams() { iperf_pairs "$1" "$2" | cut -d' ' -f1; }

zerocopy() {
  python3 - "$1" <<'PY'
import os, socket, struct, sys, time
SO_ZEROCOPY, MSG_ZEROCOPY = 60, 0x4000000
size, secs = int(sys.argv[1]), 3.0

def receive(listener, ready):
    os.write(ready, b"x")
    conn, _ = listener.accept()
    view = memoryview(bytearray(1 << 20))
    while conn.recv_into(view):
        pass
    os._exit(0)

def run(zc):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        receive(listener, w)
    os.read(r, 1)
    s = socket.create_connection(listener.getsockname())
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    if zc:
        s.setsockopt(socket.SOL_SOCKET, SO_ZEROCOPY, 1)
    data = memoryview(bytearray(os.urandom(1 << 16)) * (size >> 16))
    sent = notes = copied = 0
    t0, c0 = time.perf_counter(), os.times()
    while time.perf_counter() - t0 < secs:
        off = 0
        while off < size:
            off += s.send(data[off:], MSG_ZEROCOPY if zc else 0)
        sent += size
        while zc:
            try:
                _, ancillary, _, _ = s.recvmsg(0, 256, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            for _, _, err in ancillary:
                # struct sock_extended_err: ee_code bit 0 is SO_EE_CODE_ZEROCOPY_COPIED.
                notes += 1
                copied += struct.unpack("IBBBBII", err[:16])[3] & 1
    dt, c1 = time.perf_counter() - t0, os.times()
    s.close()
    os.waitpid(pid, 0)
    cpu = (c1.user - c0.user + c1.system - c0.system) / dt
    return sent / dt / 1e9, cpu, notes, copied

plain, zc = run(False), run(True)
print(f"{size >> 10:5d} KiB writes: plain {plain[0]:.2f} GB/s (sender CPU {plain[1]:.0%}), "
      f"MSG_ZEROCOPY {zc[0]:.2f} GB/s (sender CPU {zc[1]:.0%}; {zc[3]} of {zc[2]} notifications: copied): "
      f"{zc[0] / plain[0]:.2f} of plain")
PY
}

for round in $(seq 1 "$rounds"); do
  cpus_apart
  echo "== round $round: loopback TCP, GB/s carried by iperf3 pairs with 1 / 2 / 4 streams each"
  for pairs in 1 "$cpus" $((2 * cpus)); do
    echo "   $pairs pair(s): $(streams "$pairs" 1) / $(streams "$pairs" 2) / $(streams "$pairs" 4)"
  done
  echo "== round $round: loopback TCP, plain send against MSG_ZEROCOPY (one sender, one receiver)"
  for size in 262144 1048576; do
    echo "   $(zerocopy "$size")"
  done
  cpus_apart
done
