"""Split: colors by parity with reversed keys, a rank joining none, the parent still usable."""

import numpy as np

import rcoll
from common import done

comm = rcoll.init()
r, n = comm.rank, comm.size

color = r % 2
# With 3 ranks or more, the last joins no group.
leave = n >= 3 and r == n - 1
sub = comm.Split(None if leave else color, key=-r)
if leave:
    assert sub is None, sub
else:
    members = [q for q in range(n) if q % 2 == color and not (n >= 3 and q == n - 1)]
    members.sort(key=lambda q: -q)  # by key, -rank
    assert sub.size == len(members), (sub.size, members)
    assert sub.rank == members.index(r), (sub.rank, members)
    x = np.array([r, 1], np.int64)
    sub.Allreduce(rcoll.IN_PLACE, x)
    assert list(x) == [sum(members), len(members)], (x, members)
    order = np.zeros(sub.size, np.int64)
    sub.Allgather(np.array([r], np.int64), order)
    assert list(order) == members, (order, members)
y = np.array([1.0])
comm.Allreduce(rcoll.IN_PLACE, y)
assert y[0] == n, y
done(comm)
