"""Every blocking collective x dtype x in place and not, against numpy's result."""

import numpy as np

import rcoll
from common import DTYPES, FLOAT_OPS, INT_OPS, done, inputs, reference, same

comm = rcoll.init()
r, n = comm.rank, comm.size
calls = 0
salt = 0


def fresh():
    global salt
    salt += 1
    return salt


for dtype in DTYPES:
    name = np.dtype(dtype).name
    ops = INT_OPS if np.issubdtype(dtype, np.integer) else FLOAT_OPS
    for count in (1, 13, 1000):
        # Allreduce, Reduce and Reduce_scatter_block with every operation.
        for op in ops:
            rop = getattr(rcoll, op)
            s = fresh()
            mine = inputs(r, dtype, count, s, op)
            want = reference(op, [inputs(q, dtype, count, s, op) for q in range(n)], dtype)
            recv = np.zeros(count, dtype)
            comm.Allreduce(mine, recv, op=rop)
            same(recv, want, f"Allreduce {op} {name} {count}", op)
            buf = mine.copy()
            comm.Allreduce(rcoll.IN_PLACE, buf, op=rop)
            same(buf, want, f"Allreduce in place {op} {name} {count}", op)

            for root in range(n):
                recv = np.zeros(count, dtype)
                comm.Reduce(mine, recv if r == root else None, op=rop, root=root)
                if r == root:
                    same(recv, want, f"Reduce {op} {name} {count} root {root}", op)
                buf = mine.copy()
                if r == root:
                    comm.Reduce(rcoll.IN_PLACE, buf, op=rop, root=root)
                    same(buf, want, f"Reduce in place {op} {name} root {root}", op)
                else:
                    comm.Reduce(buf, None, op=rop, root=root)
                    same(buf, mine, f"Reduce in place: non-root {r}'s input changed")

            s = fresh()
            full = [inputs(q, dtype, n * count, s, op) for q in range(n)]
            want = reference(op, full, dtype)[r * count : (r + 1) * count]
            recv = np.zeros(count, dtype)
            comm.Reduce_scatter_block(full[r], recv, op=rop)
            same(recv, want, f"Reduce_scatter_block {op} {name} {count}", op)
            buf = full[r].copy()
            comm.Reduce_scatter_block(rcoll.IN_PLACE, buf, op=rop)
            same(buf[:count], want, f"Reduce_scatter_block in place {op} {name} {count}", op)
            calls += 4 + 2 * n

        # The movements.
        s = fresh()
        every = [inputs(q, dtype, count, s) for q in range(n)]
        for root in range(n):
            buf = every[r].copy()
            comm.Bcast(buf, root=root)
            same(buf, every[root], f"Bcast {name} {count} root {root}")

            recv = np.zeros(n * count, dtype)
            comm.Gather(every[r], recv if r == root else None, root=root)
            if r == root:
                same(recv, np.concatenate(every), f"Gather {name} {count} root {root}")
            if r == root:
                buf = np.zeros(n * count, dtype)
                buf[r * count : (r + 1) * count] = every[r]
                comm.Gather(rcoll.IN_PLACE, buf, root=root)
                same(buf, np.concatenate(every), f"Gather in place {name} root {root}")
            else:
                comm.Gather(every[r], None, root=root)

            blocks = np.concatenate(every)  # the root's send buffer
            recv = np.zeros(count, dtype)
            comm.Scatter(blocks if r == root else None, recv, root=root)
            same(recv, blocks[r * count : (r + 1) * count], f"Scatter {name} root {root}")
            if r == root:
                buf = blocks.copy()
                comm.Scatter(buf, rcoll.IN_PLACE, root=root)
                same(buf, blocks, f"Scatter in place: the root's buffer changed")
            else:
                recv = np.zeros(count, dtype)
                comm.Scatter(None, recv, root=root)
                same(recv, blocks[r * count : (r + 1) * count], f"Scatter {name} root {root}")
            calls += 5

        recv = np.zeros(n * count, dtype)
        comm.Allgather(every[r], recv)
        same(recv, np.concatenate(every), f"Allgather {name} {count}")
        buf = np.zeros(n * count, dtype)
        buf[r * count : (r + 1) * count] = every[r]
        comm.Allgather(rcoll.IN_PLACE, buf)
        same(buf, np.concatenate(every), f"Allgather in place {name} {count}")

        s = fresh()
        sends = [inputs(q, dtype, n * count, s) for q in range(n)]
        want = np.concatenate([sends[q][r * count : (r + 1) * count] for q in range(n)])
        recv = np.zeros(n * count, dtype)
        comm.Alltoall(sends[r], recv)
        same(recv, want, f"Alltoall {name} {count}")
        buf = sends[r].copy()
        comm.Alltoall(rcoll.IN_PLACE, buf)
        same(buf, want, f"Alltoall in place {name} {count}")

        # A message around the ring: rank 0 starts it, each adds its rank.
        msg = np.zeros(count, dtype)
        if r == 0:
            msg[:] = every[0]
            comm.Send(msg, (r + 1) % n)
            comm.Recv(msg, n - 1)
            total = sum(range(n))
            same(msg, (every[0].astype(np.int64) + total).astype(dtype), f"ring {name}")
        else:
            comm.Recv(msg, r - 1)
            msg += np.asarray(r, dtype=dtype)
            comm.Send(msg, (r + 1) % n)
        comm.Barrier()
        calls += 7

# Other buffers than numpy arrays: bytearray and memoryview (uint8), array.array('d').
import array

b = bytearray([r + 1] * 5)
comm.Allreduce(rcoll.IN_PLACE, b)
assert b == bytearray([n * (n + 1) // 2] * 5), b
m = memoryview(bytearray(8)).cast("d")
comm.Allreduce(array.array("d", [float(r)]), m[:1], op=rcoll.MAX)
assert m[0] == n - 1, m[0]
print(f"rank {r}: {calls} calls checked", flush=True)
done(comm)
