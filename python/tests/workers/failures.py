"""A rank that dies (os._exit mid-loop) or stays silent: the others raise an rcoll error
naming it within the timeout."""

import os
import sys
import time

import numpy as np

import rcoll
from common import done

mode = sys.argv[1]
timeout = float(os.environ["RCOLL_TIMEOUT"])
comm = rcoll.init()
r, n = comm.rank, comm.size
victim = n - 1
x = np.ones(1000, np.float32)
t0 = None
try:
    for i in range(1000000):
        if r == victim and i == 50:
            if mode == "kill":
                os._exit(3)
            time.sleep(2 * timeout + 1)  # alive and silent
            done(comm)
        t0 = time.monotonic()
        comm.Allreduce(rcoll.IN_PLACE, x)
except rcoll.Error as e:
    waited = time.monotonic() - t0
    print(f"rank {r}: {type(e).__name__} after {waited:.2f} s: {e}", flush=True)
    assert f"rank {victim}" in str(e), str(e)
    assert waited < timeout + 3, waited
    if mode == "silent":
        assert isinstance(e, rcoll.TimeoutError), repr(e)
    done(comm)
raise AssertionError("the loop ended without an error")
