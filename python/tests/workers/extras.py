"""What came with the torch backend, against numpy: rcoll.alloc's registered arrays,
bfloat16 (ml_dtypes arrays and as_bfloat16), Alltoallv, and the nonblocking rooted and
point-to-point calls (Ireduce, Igather, Iscatter, Ialltoall, Ialltoallv, Isend, Irecv,
Iexchange), in place and not, every dtype."""

import ml_dtypes
import numpy as np

import rcoll
from common import DTYPES, FLOAT_OPS, INT_OPS, done, inputs, reference, same

comm = rcoll.init()
r, n = comm.rank, comm.size

# rcoll.alloc: arrays over memory the transport registered (ordinary memory on shm and TCP),
# used like any array, alive while any view is.
a = rcoll.alloc((4, 250), np.float32)
assert a.shape == (4, 250) and a.dtype == np.float32 and not a.any(), (a.shape, a.dtype)
a[:] = r + 1
comm.Allreduce(rcoll.IN_PLACE, a)
same(a, np.full((4, 250), sum(range(1, n + 1)), np.float32), "Allreduce on rcoll.alloc")
view = a[1]
del a  # the memory stays: `view` holds it
comm.Allreduce(rcoll.IN_PLACE, view, op=rcoll.MAX)
same(view, np.full(250, sum(range(1, n + 1)), np.float32), "a view of freed-by-name alloc")
b = rcoll.alloc(7, "int64")
assert b.shape == (7,) and b.dtype == np.int64
owner = b
while isinstance(owner, np.ndarray):
    owner = owner.base
assert isinstance(owner, rcoll.Memory) and owner.nbytes == 56, owner
z = rcoll.alloc(0, np.float64)
comm.Allreduce(rcoll.IN_PLACE, z)

# bfloat16: small integers, exact in 8 bits of mantissa; numpy's reference in float32.
for op in FLOAT_OPS:
    count = 300
    rop = getattr(rcoll, op)
    every = [inputs(q, np.float32, count, 7, op) for q in range(n)]
    want = reference(op, every, np.float32).astype(ml_dtypes.bfloat16)
    x = every[r].astype(ml_dtypes.bfloat16)
    got = np.zeros(count, ml_dtypes.bfloat16)
    comm.Allreduce(x, got, op=rop)
    same(got.astype(np.float32), want.astype(np.float32), f"bfloat16 Allreduce {op}", op)
    bits = every[r].astype(ml_dtypes.bfloat16).view(np.uint16)
    comm.Allreduce(rcoll.IN_PLACE, rcoll.as_bfloat16(bits), op=rop)
    same(bits.view(ml_dtypes.bfloat16).astype(np.float32), want.astype(np.float32),
         f"as_bfloat16 Allreduce in place {op}", op)
c = rcoll.alloc(5, "bfloat16")
c[:] = r
comm.Allreduce(rcoll.IN_PLACE, c)
same(c.astype(np.float32), np.full(5, sum(range(n)), np.float32), "bfloat16 rcoll.alloc")
try:
    comm.Allreduce(rcoll.IN_PLACE, rcoll.as_bfloat16(np.zeros(4, np.float32)))
except rcoll.InvalidArgumentError as e:
    assert "2-byte" in str(e), e
else:
    raise AssertionError("as_bfloat16 of 4-byte items did not raise")

# Alltoallv: rank q sends (q + j) % 3 elements to rank j (zero counts included).
cnt = lambda q, j: (q + j) % 3  # noqa: E731
for dtype in DTYPES:
    send = np.concatenate([np.full(cnt(r, j), 10 * r + j, dtype) for j in range(n)])
    recv = np.zeros(sum(cnt(q, r) for q in range(n)), dtype)
    want = np.concatenate([np.full(cnt(q, r), 10 * q + r, dtype) for q in range(n)])
    comm.Alltoallv(send, [cnt(r, j) for j in range(n)], recv, [cnt(q, r) for q in range(n)])
    same(recv, want, f"Alltoallv {np.dtype(dtype).name}")
    recv2 = np.zeros_like(recv)
    comm.Ialltoallv(send, [cnt(r, j) for j in range(n)], recv2, [cnt(q, r) for q in range(n)]).Wait()
    same(recv2, want, f"Ialltoallv {np.dtype(dtype).name}")
try:
    comm.Alltoallv(np.zeros(3, np.int32), [1] * n, np.zeros(3, np.int32), [1] * n)
except rcoll.InvalidArgumentError as e:
    assert "sendcounts" in str(e) or "recvcounts" in str(e), e
else:
    if n != 3:
        raise AssertionError("Alltoallv with counts not adding up did not raise")

# Nonblocking rooted calls and Ialltoall, all in flight at once, every dtype and op.
for k, dtype in enumerate(DTYPES):
    name = np.dtype(dtype).name
    ops = INT_OPS if np.issubdtype(dtype, np.integer) else FLOAT_OPS
    op = ops[k % len(ops)]
    count = 50 + k
    root = k % n
    every = [inputs(q, dtype, count, 200 + k, op) for q in range(n)]
    red = reference(op, every, dtype)
    blocks = [inputs(q, dtype, n * count, 300 + k) for q in range(n)]
    reduced = np.zeros(count, dtype) if r == root else None
    inplace = every[r].copy()
    gathered = np.zeros(n * count, dtype) if r == root else None
    scattered = np.zeros(count, dtype)
    a2a = np.zeros(n * count, dtype)
    a2a_in = blocks[r].copy()
    reqs = [
        comm.Ireduce(every[r], reduced, op=getattr(rcoll, op), root=root),
        comm.Ireduce(rcoll.IN_PLACE if r == root else inplace, inplace if r == root else None,
                     op=getattr(rcoll, op), root=root),
        comm.Igather(every[r], gathered, root=root),
        comm.Iscatter(blocks[root] if r == root else None, scattered, root=root),
        comm.Ialltoall(blocks[r], a2a),
        comm.Ialltoall(rcoll.IN_PLACE, a2a_in),
    ]
    rcoll.Request.Waitall(reqs)
    if r == root:
        same(reduced, red, f"Ireduce {op} {name}", op)
        same(inplace, red, f"Ireduce in place {op} {name}", op)
        same(gathered, np.concatenate(every), f"Igather {name}")
    same(scattered, blocks[root][r * count : (r + 1) * count], f"Iscatter {name}")
    want = np.concatenate([blocks[q][r * count : (r + 1) * count] for q in range(n)])
    same(a2a, want, f"Ialltoall {name}")
    same(a2a_in, want, f"Ialltoall in place {name}")

    # Isend/Irecv: a ring shift, both in flight.
    got = np.zeros(count, dtype)
    reqs = [comm.Isend(every[r], (r + 1) % n), comm.Irecv(got, (r - 1) % n)]
    rcoll.Request.Waitall(reqs)
    same(got, every[(r - 1) % n], f"Isend/Irecv ring {name}")

    # Iexchange, all in flight at once: each sends the first part of its buffer
    # to its right neighbour and the rest to its left; it receives from its right
    # neighbour first (that one's rest), then from its left (its first part). On 2 ranks both
    # neighbours are the other rank, whose two messages match the receives in order.
    left, right = (r - 1) % n, (r + 1) % n
    half = count // 2
    both = np.zeros(count, dtype)
    if n > 2:
        recvs = [(right, 0, count - half), (left, count - half, half)]
        want = np.concatenate([every[right][half:], every[left][:half]])
    else:
        recvs = [(left, 0, half), (left, half, count - half)]
        want = every[left]
    req = comm.Iexchange(every[r], [(right, 0, half), (left, half, count - half)], both, recvs)
    req.Wait()
    same(both, want, f"Iexchange {name}")

try:
    comm.Isend(np.zeros(1), r)
except rcoll.InvalidArgumentError as e:
    assert "not another rank" in str(e), e
else:
    raise AssertionError("Isend to itself did not raise")
done(comm)
