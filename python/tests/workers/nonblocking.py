"""Iallreduce, Ibcast, Iallgather, Ireduce_scatter in flight together, completed by Wait,
Test and Request.Waitall, in place and not, against numpy."""

import time

import numpy as np

import rcoll
from common import DTYPES, done, inputs, reference, same

comm = rcoll.init()
r, n = comm.rank, comm.size

for round_, dtype in enumerate(DTYPES):
    name = np.dtype(dtype).name
    count = 1000 + round_
    every = [inputs(q, dtype, count, round_) for q in range(n)]
    full = [inputs(q, dtype, n * count, 100 + round_) for q in range(n)]
    sum_ = reference("SUM", every, dtype)
    max_ = reference("MAX", every, dtype)
    rs_ = reference("SUM", full, dtype)[r * count : (r + 1) * count]
    root = round_ % n

    a = np.zeros(count, dtype)
    b = every[r].copy()
    c = every[r].copy()
    d = np.zeros(n * count, dtype)
    e = np.zeros(n * count, dtype)
    e[r * count : (r + 1) * count] = every[r]
    f = np.zeros(count, dtype)
    g = full[r].copy()
    reqs = [
        comm.Iallreduce(every[r], a),
        comm.Iallreduce(rcoll.IN_PLACE, b, op=rcoll.MAX),
        comm.Ibcast(c, root=root),
        comm.Iallgather(every[r], d),
        comm.Iallgather(rcoll.IN_PLACE, e),
        comm.Ireduce_scatter(full[r], f),
        comm.Ireduce_scatter_block(rcoll.IN_PLACE, g),
        comm.Ibarrier(),
    ]
    busy = sum(i * i for i in range(20000))  # overlaps the calls
    if round_ % 3 == 0:
        rcoll.Request.Waitall(reqs)
    elif round_ % 3 == 1:
        for q in reqs:
            q.Wait()
            q.Wait()  # a second Wait returns at once
    else:
        t0 = time.monotonic()
        while not all([q.Test() for q in reqs]):
            assert time.monotonic() - t0 < 30, "Test never said done"
            time.sleep(0.001)
        assert all(q.Test() for q in reqs)
    same(a, sum_, f"Iallreduce {name}")
    same(b, max_, f"Iallreduce in place {name}")
    same(c, every[root], f"Ibcast {name}")
    same(d, np.concatenate(every), f"Iallgather {name}")
    same(e, np.concatenate(every), f"Iallgather in place {name}")
    same(f, rs_, f"Ireduce_scatter {name}")
    same(g[:count], rs_, f"Ireduce_scatter in place {name}")

# A request dropped in flight keeps its buffer until its call is over, and a blocking call
# made after queued ones runs after them.
x = np.full(100000, r, np.float64)
req = comm.Iallreduce(rcoll.IN_PLACE, x)
del req
y = np.full(3, r, np.int64)
comm.Allreduce(rcoll.IN_PLACE, y)
same(x, np.full(100000, sum(range(n)), np.float64), "a dropped request's buffer")
same(y, np.full(3, sum(range(n)), np.int64), "the blocking call after it")
done(comm)
