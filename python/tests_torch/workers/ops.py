"""Every process-group call on the "rcoll" backend, every dtype rcoll has, against results
computed here from every rank's inputs (which each rank can make: seeded by rank)."""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import rcoll.torch  # noqa: F401

cpus = os.sched_getaffinity(0)
dist.init_process_group("rcoll", timeout=timedelta(seconds=60))
r, n = dist.get_rank(), dist.get_world_size()
# The backend leaves the process's CPU affinity alone (no RCOLL_BIND set here): torch's
# threads keep every CPU they had.
assert "RCOLL_BIND" in os.environ or os.sched_getaffinity(0) == cpus, (cpus, os.sched_getaffinity(0))
R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
checked = 0


def inputs(rank, dtype, count, salt, low=0):
    g = torch.Generator().manual_seed(1000 * salt + 17 * rank + count)
    return torch.randint(low, 4, (count,), generator=g).to(dtype)


def reduced(op, xs, dtype):
    s = torch.stack([x.to(torch.float64) if dtype.is_floating_point else x.to(torch.int64) for x in xs])
    if op == R.SUM:
        v = s.sum(0)
    elif op == R.PRODUCT:
        v = s.prod(0)
    elif op == R.MIN:
        v = s.min(0).values
    elif op == R.MAX:
        v = s.max(0).values
    elif op == R.AVG:
        v = s.sum(0) / len(xs)
    else:
        v = s[0].clone()
        for x in s[1:]:
            v = {R.BAND: v & x, R.BOR: v | x, R.BXOR: v ^ x}[op]
    return v.to(dtype)


def same(got, want, what):
    global checked
    checked += 1
    if got.dtype.is_floating_point:
        ok = torch.allclose(got.double(), want.double(), rtol=1e-2)
    else:
        ok = torch.equal(got, want)
    if not ok:
        raise AssertionError(f"rank {r}: {what}: got {got[:6].tolist()}, want {want[:6].tolist()}")


salt = 0
for dtype in FLOATS + INTS:
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX] + ([R.AVG] if dtype.is_floating_point else [R.BAND, R.BOR, R.BXOR])
    for op in ops:
        for count in (1, 7, 1000):
            salt += 1
            low = 1 if op == R.PRODUCT else 0
            mine = inputs(r, dtype, count, salt, low)
            every = [inputs(q, dtype, count, salt, low) for q in range(n)]
            want = reduced(op, every, dtype)
            t = mine.clone()
            dist.all_reduce(t, op=op)
            same(t, want, f"all_reduce {op} {dtype} {count}")
            t = mine.clone()
            w = dist.all_reduce(t, op=op, async_op=True)
            (fut,) = w.get_future().wait()
            same(fut, want, f"all_reduce async future {op} {dtype} {count}")
            for root in range(n):
                t = mine.clone()
                dist.reduce(t, root, op=op)
                if r == root:
                    same(t, want, f"reduce {op} {dtype} {count} root {root}")
            big = [inputs(q, dtype, n * count, salt + 5000, low) for q in range(n)]
            want_rs = reduced(op, big, dtype)[r * count : (r + 1) * count]
            out = torch.empty(count, dtype=dtype)
            dist.reduce_scatter_tensor(out, big[r].clone(), op=op)
            same(out, want_rs, f"reduce_scatter_tensor {op} {dtype} {count}")
            out = torch.empty(count, dtype=dtype)
            dist.reduce_scatter(out, list(big[r].clone().chunk(n)), op=op)
            same(out, want_rs, f"reduce_scatter {op} {dtype} {count}")

# Data movements: every dtype torch has, rcoll reducing or not (bytes move).
for dtype in FLOATS + INTS + [torch.bool, torch.int16, torch.complex64, torch.uint32, torch.uint64]:
    salt += 1
    count = 11
    mk = lambda q: inputs(q, torch.int64, count, salt).to(dtype)  # noqa: E731
    every = [mk(q) for q in range(n)]
    for root in range(n):
        t = every[r].clone()
        dist.broadcast(t, root)
        same(t, every[root], f"broadcast {dtype} root {root}")
    outs = [torch.empty(count, dtype=dtype) for _ in range(n)]
    dist.all_gather(outs, every[r])
    for q in range(n):
        same(outs[q], every[q], f"all_gather {dtype} from {q}")
    out = torch.empty(n * count, dtype=dtype)
    dist.all_gather_into_tensor(out, every[r])
    same(out, torch.cat(every), f"all_gather_into_tensor {dtype}")
    root = n - 1
    outs = [torch.empty(count, dtype=dtype) for _ in range(n)] if r == root else None
    dist.gather(every[r], outs, dst=root)
    if r == root:
        for q in range(n):
            same(outs[q], every[q], f"gather {dtype} from {q}")
    out = torch.empty(count, dtype=dtype)
    dist.scatter(out, [every[q] for q in range(n)] if r == 0 else None, src=0)
    same(out, every[r], f"scatter {dtype} of every rank's input")
    blocks = [[mk(q * n + j) for j in range(n)] for q in range(n)]  # rank q's block for j
    got = [torch.empty(count, dtype=dtype) for _ in range(n)]
    dist.all_to_all(got, blocks[r])
    for q in range(n):
        same(got[q], blocks[q][r], f"all_to_all {dtype} from {q}")
    # Scatter's result: rank r gets root 0's block r.
    out = torch.empty(count, dtype=dtype)
    dist.scatter(out, blocks[0] if r == 0 else None, src=0)
    same(out, blocks[0][r], f"scatter {dtype}")

# all_to_all_single with uneven splits: rank q sends q + j + 1 rows to rank j.
rows = lambda q, j: q + j + 1  # noqa: E731
inp = torch.cat([torch.full((rows(r, j), 3), 100 * r + j, dtype=torch.float32) for j in range(n)])
out = torch.empty(sum(rows(q, r) for q in range(n)), 3)
dist.all_to_all_single(out, inp, [rows(q, r) for q in range(n)], [rows(r, j) for j in range(n)])
want = torch.cat([torch.full((rows(q, r), 3), 100 * q + r, dtype=torch.float32) for q in range(n)])
same(out, want, "all_to_all_single with splits")
inp = torch.arange(n * 4, dtype=torch.int64) + 1000 * r
out = torch.empty(n * 4, dtype=torch.int64)
dist.all_to_all_single(out, inp)
want = torch.cat([torch.arange(r * 4, r * 4 + 4) + 1000 * q for q in range(n)])
same(out, want, "all_to_all_single equal")

# Non-contiguous tensors: a column of a matrix, reduced in place.
m = torch.full((5, 3), float(r + 1))
dist.all_reduce(m[:, 1])
same(m[:, 1], torch.full((5,), float(sum(range(1, n + 1)))), "all_reduce of a column")
same(m[:, 0], torch.full((5,), float(r + 1)), "the column's neighbours untouched")

# Coalesced calls, and many async calls in flight completing in order.
ts = [torch.full((k + 1,), float(r + k)) for k in range(4)]
with dist._coalescing_manager(async_ops=True) as cm:
    for t in ts:
        dist.all_reduce(t)
cm.wait()
for k, t in enumerate(ts):
    same(t, torch.full((k + 1,), float(sum(q + k for q in range(n)))), f"coalesced all_reduce {k}")
works = [dist.all_reduce(torch.full((100,), float(r * k)), async_op=True) for k in range(20)]
for k, w in enumerate(works):
    w.wait()
    same(w.get_future().value()[0], torch.full((100,), float(k * sum(range(n)))), f"in flight {k}")

# Point to point: a ring shift with isend/irecv.
to, frm = (r + 1) % n, (r - 1) % n
got = torch.empty(6)
reqs = [dist.isend(torch.full((6,), float(r)), to), dist.irecv(got, frm)]
for q in reqs:
    q.wait()
same(got, torch.full((6,), float(frm)), "isend/irecv ring")
# batch_isend_irecv with every rank's receives listed first (issued one by one in that
# order, each rank would wait for ever), one into a non-contiguous column, and on 2 ranks
# two messages each way between one pair, which match in order.
left, column = torch.empty(7), torch.zeros(3, 4)
ops = [
    dist.P2POp(dist.irecv, left, frm),
    dist.P2POp(dist.irecv, column[:, 1], to),
    dist.P2POp(dist.isend, torch.full((7,), float(r)), to),
    dist.P2POp(dist.isend, torch.full((3,), r + 0.5), frm),
]
for q in dist.batch_isend_irecv(ops):
    q.wait()
same(left, torch.full((7,), float(frm)), "batch_isend_irecv from the left")
same(column[:, 1], torch.full((3,), to + 0.5), "batch_isend_irecv into a column")
same(column[:, 0], torch.zeros(3), "the column's neighbours untouched")
if n >= 2:
    if r == 0:
        dist.send(torch.arange(5.0), 1)
    elif r == 1:
        x = torch.empty(5)
        dist.recv(x, 0)
        same(x, torch.arange(5.0), "send/recv")

# Subgroups: new_group (its own communicator) and split_group (rcoll's Split).
evens = dist.new_group([q for q in range(n) if q % 2 == 0])
if r % 2 == 0:
    t = torch.ones(3)
    dist.all_reduce(t, group=evens)
    same(t, torch.full((3,), float(len(range(0, n, 2)))), "new_group all_reduce")
halves = dist.split_group(split_ranks=[list(range(0, n // 2)), list(range(n // 2, n))])
t = torch.full((2,), float(r))
dist.all_reduce(t, group=halves)
mine = range(0, n // 2) if r < n // 2 else range(n // 2, n)
same(t, torch.full((2,), float(sum(mine))), "split_group all_reduce")

# Object collectives (pickles through broadcast and all_gather).
objs = [None] * n
dist.all_gather_object(objs, {"rank": r})
assert objs == [{"rank": q} for q in range(n)], objs
lst = [r, "x"] if r == 0 else [None, None]
dist.broadcast_object_list(lst, 0)
assert lst == [0, "x"], lst

# An operation rcoll lacks: a clear error, no communication.
try:
    dist.all_reduce(torch.ones(2), op=dist._make_nccl_premul_sum(2.0))
except Exception as e:  # noqa: BLE001
    assert "PREMUL_SUM" in str(e), e
else:
    raise AssertionError("PREMUL_SUM did not raise")

dist.barrier()
dist.destroy_process_group()
print(f"rank {r}: {checked} results checked", flush=True)
print(f"RCOLL-TORCH-DONE rank {r}", flush=True)
