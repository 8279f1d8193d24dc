"""Bad buffers raise InvalidArgumentError before any communication: every rank makes each
mistake, and the communicator then works (had a bad call sent anything, the next calls
would mismatch). Last, a wrong size, which rcoll itself finds before moving data: the rank
raises naming the buffer, and rcoll aborts the group so the others raise naming it."""

import numpy as np

import rcoll
from common import done

comm = rcoll.init()
r, n = comm.rank, comm.size


def refused(what, call, *words):
    try:
        call()
    except rcoll.InvalidArgumentError as e:
        for w in words:
            assert w in str(e), f"{what}: {w!r} not in {e}"
        return
    raise AssertionError(f"{what}: no InvalidArgumentError")


f32 = np.zeros(8, np.float32)
ro = np.zeros(8, np.float32)
ro.flags.writeable = False
strided = np.zeros(16, np.float32)[::2]
refused("non-contiguous send", lambda: comm.Allreduce(strided, f32), "sendbuf", "contiguous")
refused("non-contiguous recv", lambda: comm.Allgather(f32, np.zeros((8, 2 * n), np.float32)[:, 0]), "recvbuf", "contiguous")
refused("read-only recv", lambda: comm.Allreduce(f32, ro), "recvbuf", "read-only")
refused("bytes as recv", lambda: comm.Allreduce(bytearray(4), bytes(4)), "recvbuf", "read-only")
refused("read-only Bcast", lambda: comm.Bcast(ro), "buf", "read-only")
refused("read-only Recv", lambda: comm.Recv(ro, (r + 1) % n), "buf", "read-only")
refused("dtypes", lambda: comm.Allreduce(f32, np.zeros(8, np.int32)), "float32", "int32")
refused("int16", lambda: comm.Allreduce(np.zeros(4, np.int16), np.zeros(4, np.int16)), '"h"', "element type")
refused("complex", lambda: comm.Bcast(np.zeros(4, np.complex64)), '"Zf"')
refused("a list", lambda: comm.Allreduce([1.0, 2.0], f32), "sendbuf", "buffer")
refused("no recv", lambda: comm.Allreduce(f32, None), "recvbuf")
refused("overlap", lambda: comm.Allreduce(f32, f32), "overlap", "IN_PLACE")
refused("overlapping views", lambda: comm.Allreduce(strided.base[:8], strided.base[4:12]), "overlap")
refused("root", lambda: comm.Reduce(f32, f32, root=n), "root", str(n))
refused("Bcast root", lambda: comm.Bcast(f32, root=-1 + 2 * n), "root")
refused("IN_PLACE off the root", lambda: comm.Reduce(rcoll.IN_PLACE, f32, root=(r + 1) % n) if n > 1 else (_ for _ in ()).throw(rcoll.InvalidArgumentError("IN_PLACE")), "IN_PLACE")
refused("nonblocking, read-only", lambda: comm.Iallreduce(f32, ro), "read-only")
refused("misaligned", lambda: comm.Allreduce(rcoll.IN_PLACE, memoryview(bytearray(12))[1:9].cast("f")), "aligned")
# Still one communicator, undisturbed; then a wrong size: rank 0's recvbuf is one element
# short. Rank 0 may abort the group before a slower rank has finished the first call, which
# then fails instead, naming rank 0 and why.
got = None
try:
    x = np.array([r], np.int64)
    comm.Allreduce(rcoll.IN_PLACE, x)
    assert x[0] == sum(range(n)), x
    comm.Allreduce(np.ones(4, np.float32), np.zeros(3 if r == 0 else 4, np.float32))
except rcoll.Error as e:
    got = e
assert got is not None, "a wrong size went through"
if r == 0:
    assert isinstance(got, rcoll.InvalidArgumentError), repr(got)
    assert "recv buffer has 3 elements, expected 4" in str(got), str(got)
else:
    assert "aborted by rank 0" in str(got), str(got)
    assert "recv buffer has 3 elements, expected 4" in str(got), str(got)
print(f"rank {r}: {type(got).__name__}: {got}", flush=True)
done(comm)
