"""The last rank dies (os._exit mid-loop); the others shrink and go on: Comm.shrink."""

import os

import numpy as np

import rcoll
from common import done

comm = rcoll.init()
r, n = comm.rank, comm.size
victim = n - 1
x = np.zeros(1000, np.int64)
for i in range(1000000):
    if r == victim and i == 20:
        os._exit(3)
    x[:] = r + 1
    try:
        comm.Allreduce(rcoll.IN_PLACE, x)
    except rcoll.Error as e:
        print(f"rank {r}: {e}", flush=True)
        break
new = comm.shrink(abort=True)
assert (new.rank, new.size) == (r, n - 1), (new.rank, new.size)
assert new.excluded == [victim], new.excluded
x[:] = r + 1
new.Allreduce(rcoll.IN_PLACE, x)
want = sum(q + 1 for q in range(n) if q != victim)
assert (x == want).all(), (x[:4], want)
done(new)
