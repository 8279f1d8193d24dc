"""The default group over "rcoll" formed, used and destroyed N times in one process, as a
benchmark comparing backends does; every all_reduce checked.

    reinit.py N
"""

import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import rcoll.torch  # noqa: F401

for k in range(int(sys.argv[1])):
    dist.init_process_group("rcoll", timeout=timedelta(seconds=60))
    r, n = dist.get_rank(), dist.get_world_size()
    t = torch.full((1024,), float((r + 1) * (k + 1)))
    dist.all_reduce(t)
    want = (k + 1) * n * (n + 1) / 2
    assert torch.all(t == want), f"group {k}: {t[0].item()} != {want}"
    dist.barrier()
    dist.destroy_process_group()
print(f"RCOLL-TORCH-DONE rank {r}", flush=True)
