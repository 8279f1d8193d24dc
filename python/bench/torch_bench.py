"""torch.distributed on rcoll against gloo: ``dist.all_reduce`` times and DDP step times.

Run one process per rank under torchrun, loopback only; each backend in turn in the same
processes (the first one named warms the machine up less than it would alone: run both
orders when it matters)::

    RCOLL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 \\
      torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29600 \\
      python/bench/torch_bench.py allreduce gloo rcoll

    ... torch_bench.py ddp gloo rcoll       # DDP median step time, 8.4 M parameters
    ... torch_bench.py layer rcoll          # dist.all_reduce against rcoll's own call
    python python/bench/torch_bench.py single   # the same model's step on one process

``allreduce``: float32 tensors of 8 B, 1 MiB, 16 MiB and 64 MiB, in place, SUM; for each
size the median and best of batches of calls (rank 0's clock, a barrier before each batch).
``ddp``: an MLP of 8.4 M parameters (two 25 MB buckets), batch 32 (``BATCH=``), SGD; the median
step (forward, backward with DDP's overlapped all-reduces, optimizer) over 30 steps after
5 warm-up steps.
"""

import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import rcoll.torch  # noqa: F401 - registers "rcoll"

SIZES = [8, 1 << 20, 16 << 20, 64 << 20]


def fmt_bytes(b):
    return f"{b} B" if b < 1024 else f"{b >> 20} MiB"


def allreduce(backend):
    rank = dist.get_rank()
    rows = []
    for size in SIZES:
        t = torch.ones(size // 4, dtype=torch.float32)
        # Batches long enough to time: ~0.2 s of calls each.
        calls = max(3, min(2000, (64 << 20) // max(size, 1) // 8 or 3))
        dist.all_reduce(t)  # warm-up (and any first-use setup)
        times = []
        for _ in range(7 if size >= 16 << 20 else 11):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(calls):
                dist.all_reduce(t)
            times.append((time.perf_counter() - t0) / calls)
        rows.append((size, statistics.median(times), min(times)))
    if rank == 0:
        for size, med, best in rows:
            print(
                f"allreduce {backend:5s} {dist.get_world_size()} ranks {fmt_bytes(size):>7s}: "
                f"median {med * 1e6:10.1f} us  best {best * 1e6:10.1f} us",
                flush=True,
            )


def layer(backend):
    """What torch's layer costs: ``dist.all_reduce(t)`` against the same communicator's
    ``Allreduce`` on the same memory through the numpy API (rcoll's blocking call on the
    caller's thread, as rcoll-bench makes it), batches of each interleaved so that the
    machine's load falls on both alike."""
    import rcoll

    assert backend == "rcoll", "layer compares rcoll through torch with rcoll itself"
    comm = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))._comm
    for size in SIZES:
        t = torch.ones(size // 4, dtype=torch.float32)
        a = t.numpy()
        calls = max(3, min(2000, (64 << 20) // max(size, 1) // 8 or 3))
        ways = {
            "torch": lambda: dist.all_reduce(t),
            "rcoll": lambda: comm.Allreduce(rcoll.IN_PLACE, a),
        }
        times = {k: [] for k in ways}
        for f in ways.values():
            f()
        for _ in range(7 if size >= 16 << 20 else 11):
            for k, f in ways.items():
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(calls):
                    f()
                times[k].append((time.perf_counter() - t0) / calls)
        if dist.get_rank() == 0:
            med = {k: statistics.median(v) for k, v in times.items()}
            best = {k: min(v) for k, v in times.items()}
            print(
                f"layer {dist.get_world_size()} ranks {fmt_bytes(size):>7s}: through torch median "
                f"{med['torch'] * 1e6:9.1f} us best {best['torch'] * 1e6:9.1f} us; rcoll's "
                f"Allreduce median {med['rcoll'] * 1e6:9.1f} us best {best['rcoll'] * 1e6:9.1f} us; "
                f"rcoll/torch (speed of torch's path relative to rcoll's) median "
                f"{med['rcoll'] / med['torch']:.2f}, best {best['rcoll'] / best['torch']:.2f}",
                flush=True,
            )


def model():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(1024, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 1024)
    )


BATCH = int(os.environ.get("BATCH", "32"))


def steps(net, params, n=30, warm=5):
    opt = torch.optim.SGD(params, lr=0.01)
    x, y = torch.randn(BATCH, 1024), torch.randn(BATCH, 1024)
    times = []
    for i in range(warm + n):
        t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        if i >= warm:
            times.append(time.perf_counter() - t0)
    return times


def ddp(backend):
    net = model()
    d = nn.parallel.DistributedDataParallel(net)
    dist.barrier()
    times = steps(d, d.parameters())
    # Every rank's median, so that the slowest rank shows.
    med = torch.tensor([statistics.median(times)])
    every = [torch.zeros(1) for _ in range(dist.get_world_size())]
    dist.all_gather(every, med)
    if dist.get_rank() == 0:
        nparams = sum(p.numel() for p in net.parameters())
        print(
            f"ddp {backend:5s} {dist.get_world_size()} ranks, {nparams / 1e6:.1f} M params, "
            f"batch {BATCH}: "
            f"median step {max(e.item() for e in every) * 1e3:.1f} ms (slowest rank's median; "
            f"rank 0 best {min(times) * 1e3:.1f} ms)",
            flush=True,
        )


def single():
    net = model()
    times = steps(net, net.parameters())
    print(f"single process, batch {BATCH}: median step {statistics.median(times) * 1e3:.1f} ms, best {min(times) * 1e3:.1f} ms")


def main():
    mode, backends = sys.argv[1], sys.argv[2:]
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if mode == "single":
        single()
        return
    for backend in backends:
        dist.init_process_group(backend)
        {"allreduce": allreduce, "ddp": ddp, "layer": layer}[mode](backend)
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
