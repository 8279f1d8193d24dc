"""torch.distributed on rcoll against gloo: ``dist.all_reduce`` times and DDP step times.

Run one process per rank under torchrun, loopback only; each backend in turn in the same
processes (the first one named warms the machine up less than it would alone: run both
orders when it matters)::

    RCOLL_SOCKET_IFNAME=lo GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 \\
      torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29600 \\
      python/bench/torch_bench.py allreduce gloo rcoll

    ... torch_bench.py ddp gloo rcoll none  # DDP median step time, 8.4 M parameters
    ... torch_bench.py layer rcoll          # dist.all_reduce against rcoll's own call
    python python/bench/torch_bench.py single   # the same model's step on one process

``allreduce``: float32 tensors of 8 B, 1 MiB, 16 MiB and 64 MiB, in place, SUM; for each
size the median and best of batches of calls (rank 0's clock, a barrier before each batch).
``ddp``: an MLP of 8.4 M parameters (two 25 MB buckets), batch 32 (``BATCH=``), SGD; the median
step (forward, backward with DDP's overlapped all-reduces, optimizer) over 30 steps after
5 warm-up steps. The backend ``none`` is the bound no backend can pass on this machine: the
same DDP step, every rank computing at once, with a comm hook that hands each bucket back
untouched (rcoll sets the group up; nothing moves during the steps).

Name gloo once per run: a process that forms gloo's default group a second time hangs in
DDP's parameter check (``ddp gloo gloo`` hangs with torch 2.15, rcoll not in the run; likely
the last group's keys left in torchrun's store, which rcoll's backend no longer trips on),
which is why ``none`` sets its group up with rcoll. ``none`` is for ``ddp`` only.
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
    caller's thread, as rcoll-bench makes it), and between them the backend's own
    ``allreduce`` called directly and waited for (what rcoll's Python backend costs, apart
    from torch's dispatch to it). Batches of each are interleaved so that the machine's
    load falls on all alike. ``torch's share`` is the direct call's time taken from
    ``dist.all_reduce``'s: no backend of torch's Python API could cost less; ``bound`` is
    the ratio rcoll/torch would reach if rcoll's backend cost nothing."""
    import rcoll

    assert backend == "rcoll", "layer compares rcoll through torch with rcoll itself"
    be = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    comm = be._comm
    opts = dist.AllreduceOptions()
    for size in SIZES:
        t = torch.ones(size // 4, dtype=torch.float32)
        a = t.numpy()
        calls = max(3, min(2000, (64 << 20) // max(size, 1) // 8 or 3))
        ways = {
            "torch": lambda: dist.all_reduce(t),
            "backend": lambda: be.allreduce([t], opts).wait(),
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
            share = med["torch"] - med["backend"]
            print(
                f"layer {dist.get_world_size()} ranks {fmt_bytes(size):>7s}: medians: through "
                f"torch {med['torch'] * 1e6:9.1f} us, backend called directly "
                f"{med['backend'] * 1e6:9.1f} us, rcoll's Allreduce {med['rcoll'] * 1e6:9.1f} us; "
                f"rcoll/torch {med['rcoll'] / med['torch']:.2f} (torch's share "
                f"{share * 1e6:.1f} us: bound {med['rcoll'] / (med['rcoll'] + max(share, 0)):.2f})",
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
    if backend == "none":
        d.register_comm_hook(None, _no_communication)
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


def _no_communication(state, bucket):
    done = torch.futures.Future()
    done.set_result(bucket.buffer())
    return done


def single():
    net = model()
    times = steps(net, net.parameters())
    print(f"single process, batch {BATCH}: median step {statistics.median(times) * 1e3:.1f} ms, best {min(times) * 1e3:.1f} ms")


def main():
    mode, backends = sys.argv[1], sys.argv[2:]
    if "none" in backends and mode != "ddp":
        raise SystemExit("none is a DDP step without communication: ddp only")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if mode == "single":
        single()
        return
    for backend in backends:
        dist.init_process_group("rcoll" if backend == "none" else backend)
        {"allreduce": allreduce, "ddp": ddp, "layer": layer}[mode](backend)
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
