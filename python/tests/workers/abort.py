"""Comm.Abort from a second thread while the first is blocked in an Allreduce that rank 1
never joins (rank 0), and rank 1 blocked in a Recv from rank 0 that never comes: both calls
raise an rcoll error naming rank 0, long before the timeout."""

import os
import threading
import time

import numpy as np

import rcoll
from common import done

timeout = float(os.environ["RCOLL_TIMEOUT"])
comm = rcoll.init()
r = comm.rank
x = np.ones(1000, np.float32)
comm.Allreduce(rcoll.IN_PLACE, x)  # the group works before the abort
if r == 0:
    caught = []

    def blocked():
        try:
            comm.Allreduce(rcoll.IN_PLACE, x)  # rank 1 never makes this call
        except rcoll.Error as e:
            caught.append((time.monotonic(), e))

    t = threading.Thread(target=blocked)
    t.start()
    # Let the call get under way (it must end with the abort's error either way).
    time.sleep(0.5)
    aborted_at = time.monotonic()
    comm.Abort("stopped from another thread")
    t.join(timeout)
    assert not t.is_alive(), "the blocked call did not end"
    assert caught, "the blocked call returned"
    at, e = caught[0]
    print(f"rank 0: {type(e).__name__} {at - aborted_at:.3f} s after Abort: {e}", flush=True)
    assert "aborted by rank 0" in str(e), str(e)
    assert at - aborted_at < timeout / 2, at - aborted_at
else:
    started = time.monotonic()
    try:
        comm.Recv(x, 0)  # rank 0 sends nothing
        raise AssertionError("rank 1's receive returned after rank 0 aborted")
    except rcoll.Error as e:
        waited = time.monotonic() - started
        print(f"rank {r}: {type(e).__name__} after {waited:.3f} s: {e}", flush=True)
        assert "rank 0" in str(e) and "abort" in str(e), str(e)
        assert waited < timeout / 2, waited
done(comm)
