"""Time of a small Allreduce through the Python API, to set beside rcoll-bench's.

    python python/bench/allreduce_latency.py [--ranks 2] [--bytes 8] [--iters 20000]

Starts the ranks itself on loopback (RCOLL_TRANSPORT as set, else shm), each calling
``comm.Allreduce(send, recv)`` on float32 arrays of --bytes bytes: a warm-up, then --iters
calls timed with time.perf_counter in 20 batches; prints rank 0's median and best batch
(microseconds per call) and, for the cost of the call itself, the same loop with
IN_PLACE.
"""

import argparse
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time


def worker(nbytes, iters):
    import numpy as np

    import rcoll

    comm = rcoll.init()
    count = max(1, nbytes // 4)
    send = np.ones(count, np.float32)
    recv = np.zeros(count, np.float32)
    batches = 20
    per = max(1, iters // batches)
    for form in ("separate", "in place"):
        call = (
            (lambda: comm.Allreduce(send, recv))
            if form == "separate"
            else (lambda: comm.Allreduce(rcoll.IN_PLACE, recv))
        )
        for _ in range(max(1000, per)):
            call()
        times = []
        for _ in range(batches):
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(per):
                call()
            times.append((time.perf_counter() - t0) / per * 1e6)
        if comm.rank == 0:
            print(
                f"{comm.size} ranks, {count * 4} B float32 Allreduce ({form}): "
                f"median {statistics.median(times):.2f} us, best {min(times):.2f} us "
                f"({batches} batches of {per})",
                flush=True,
            )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--bytes", type=int, default=8)
    p.add_argument("--iters", type=int, default=20000)
    a = p.parse_args()
    if "RCOLL_RANK" in os.environ:
        return worker(a.bytes, a.iters)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(
        os.environ,
        RCOLL_WORLD_SIZE=str(a.ranks),
        RCOLL_ROOT_ADDR=f"127.0.0.1:{port}",
        RCOLL_UNIQUE_ID=secrets.token_hex(16),
    )
    env.setdefault("RCOLL_TRANSPORT", "shm")
    procs = [
        subprocess.Popen([sys.executable, *sys.argv], env=dict(env, RCOLL_RANK=str(r)))
        for r in range(a.ranks)
    ]
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    main()
