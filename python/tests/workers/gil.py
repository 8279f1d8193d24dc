"""A blocking call releases the GIL: a Python thread counts while rank 0 waits in Recv and
Barrier for rank 1, which sleeps first."""

import threading
import time

import numpy as np

import rcoll
from common import done

comm = rcoll.init()
r, n = comm.rank, comm.size
SLEEP = 1.2

for call in ("Recv", "Barrier", "Wait"):
    if r == 0:
        ticks = 0
        stop = False

        def count():
            global ticks
            while not stop:
                ticks += 1

        t = threading.Thread(target=count)
        t.start()
        # The thread's pace while this one sleeps (which releases the GIL): the yardstick.
        time.sleep(0.05)
        before, t0 = ticks, time.monotonic()
        time.sleep(0.2)
        pace = (ticks - before) / (time.monotonic() - t0)
        before = ticks
        t0 = time.monotonic()
        if call == "Recv":
            comm.Recv(np.zeros(4, np.int32), 1)
        elif call == "Barrier":
            comm.Barrier()
        else:
            comm.Ibarrier().Wait()
        blocked = time.monotonic() - t0
        counted = ticks - before
        stop = True
        t.join()
        print(
            f"{call}: blocked {blocked:.2f} s, the other thread counted {counted} "
            f"({counted / blocked / pace:.0%} of its pace while this one sleeps)",
            flush=True,
        )
        assert blocked > 0.5 * SLEEP, blocked
        assert counted > 0.25 * pace * blocked, f"{call}: only {counted} while blocked: GIL held?"
    else:
        time.sleep(SLEEP)
        if call == "Recv":
            if r == 1:
                comm.Send(np.zeros(4, np.int32), 0)
        elif call == "Barrier":
            comm.Barrier()
        else:
            comm.Ibarrier().Wait()
done(comm)
