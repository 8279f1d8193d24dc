"""A rank that dies, stops, or is late past Work.wait's timeout: every survivor raises an
error naming it (or the abort), never hangs.

    failures.py dies|stops|late
"""

import os
import signal
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import rcoll
import rcoll.torch  # noqa: F401

mode = sys.argv[1]
dist.init_process_group("rcoll", timeout=timedelta(seconds=60))
r, n = dist.get_rank(), dist.get_world_size()
victim = n - 1
t = torch.ones(1 << 16)
dist.all_reduce(t)  # everyone is there
assert t[0].item() == n

if mode == "dies" and r == victim:
    os._exit(3)
if mode == "stops" and r == victim:
    print(f"RCOLL-TORCH-DONE rank {r}", flush=True)  # its end is the test's to make
    os.kill(os.getpid(), signal.SIGSTOP)
if mode == "late" and r == victim:
    time.sleep(8)
    try:
        dist.all_reduce(t)
    except rcoll.Error as e:
        print(f"late rank raised: {type(e).__name__}: {e}", flush=True)
        print(f"RCOLL-TORCH-DONE rank {r}", flush=True)
        os._exit(0)
    raise SystemExit("the late rank's all_reduce succeeded on an aborted group")

try:
    w = dist.all_reduce(t, async_op=True)
    if mode == "late":
        w.wait(timeout=timedelta(seconds=1))
    else:
        w.wait()
except rcoll.Error as e:
    print(f"rank {r} raised: {type(e).__name__}: {e}", flush=True)
    # The future carries the same error.
    try:
        w.get_future().wait()
    except Exception as f:  # noqa: BLE001
        print(f"rank {r} future: {f}", flush=True)
    print(f"RCOLL-TORCH-DONE rank {r}", flush=True)
    os._exit(0)
raise SystemExit(f"rank {r}: all_reduce succeeded without rank {victim}")
