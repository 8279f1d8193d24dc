"""One rank of a small DDP training, run under torchrun once per backend in the same
processes (gloo first, then rcoll): each rank starts from its own weights (seeded by rank),
trains on its shard of a seeded synthetic regression, and writes its final parameters and
loss curve to <out>/<backend>-rank<r>.pt. The test (test_ddp.py) compares the files.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

import rcoll.torch  # noqa: F401 - registers "rcoll"

STEPS = 60
BATCH = 32


def model(seed):
    torch.manual_seed(seed)
    # Several buckets: bucket_cap_mb below splits the ~70 k parameters into more than one.
    return nn.Sequential(
        nn.Linear(32, 256), nn.Tanh(), nn.Linear(256, 128), nn.Tanh(), nn.Linear(128, 1)
    )


def data(rank, world):
    """A fixed teacher network's outputs plus noise, each rank its own shard."""
    g = torch.Generator().manual_seed(1234)
    teacher = torch.randn(32, 1, generator=g)
    x = torch.randn(STEPS * BATCH * world, 32, generator=g)
    y = torch.tanh(x @ teacher / 4) + 0.05 * torch.randn(x.shape[0], 1, generator=g)
    return x[rank::world], y[rank::world]


def train(backend, out):
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    net = model(seed=100 + rank)  # different weights on every rank: DDP must broadcast
    ddp = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.05)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    x, y = data(rank, world)
    losses = []
    for step in range(STEPS):
        xb, yb = x[step * BATCH : (step + 1) * BATCH], y[step * BATCH : (step + 1) * BATCH]
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(xb), yb)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    params = {k: v.detach().clone() for k, v in net.state_dict().items()}
    torch.save({"params": params, "losses": losses}, os.path.join(out, f"{backend}-rank{rank}.pt"))
    dist.barrier()
    dist.destroy_process_group()
    return rank


if __name__ == "__main__":
    out = sys.argv[1]
    for backend in sys.argv[2:]:
        rank = train(backend, out)
    print(f"RCOLL-TORCH-DONE rank {rank}", flush=True)
