"""A Work used from two threads at once: the completion thread settling it while the
caller waits with a timeout, a callback on its future that waits on the Work itself, and
a future the caller completed itself before the backend could.

    work_threads.py timeout|callback|completed|completed-failed
"""

import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import rcoll
import rcoll.torch  # noqa: F401

mode = sys.argv[1]
dist.init_process_group("rcoll", timeout=timedelta(seconds=60))
r, n = dist.get_rank(), dist.get_world_size()
t = torch.ones(1 << 10)
dist.all_reduce(t)  # everyone is there
assert t[0].item() == n


def within(seconds, done, what):
    """Polls ``done()`` for ``seconds``: a hang becomes this rank's failure, not the test's."""
    end = time.monotonic() + seconds
    while not done():
        if time.monotonic() > end:
            raise SystemExit(f"rank {r}: {what} did not finish within {seconds} s")
        time.sleep(0.01)


def completer_settling():
    """Whether the backend's completion thread is inside a Work's settling (its wait for
    the rcoll requests): read off its stack, as a debugger would."""
    import threading

    frames = sys._current_frames()
    for th in threading.enumerate():
        if th.name.startswith("rcoll-torch-completer"):
            f = frames.get(th.ident)
            while f is not None:
                if f.f_code.co_name == "_settle":
                    return True
                f = f.f_back
    return False


def leave_once(store, key):
    """Waits for ``key`` in torch's store, then ends this rank at once (no teardown that
    would talk to the others)."""
    import os

    store.wait([key], timedelta(seconds=60))
    print(f"RCOLL-TORCH-DONE rank {r}", flush=True)
    os._exit(0)


if mode == "timeout":
    # Rank 1 never joins; rank 0 hands its Work to the completion thread (by taking
    # the future) and, once that thread is settling it, waits with a 1 s timeout: the
    # timeout holds though another thread is inside the Work.
    store = dist.distributed_c10d._get_default_store()
    if r == 1:
        # Alive (its connections open) and silent until rank 0 is done.
        leave_once(store, "rank 0 done")
    w = dist.all_reduce(t, async_op=True)
    future = w.get_future()
    within(30, completer_settling, "the hand-off to the completion thread")
    start = time.monotonic()
    try:
        w.wait(timeout=timedelta(seconds=1))
    except rcoll.TimeoutError as e:
        took = time.monotonic() - start
        print(f"rank {r} raised after {took:.2f} s: {e}", flush=True)
        assert took < 5, f"rank {r}: Work.wait's 1 s timeout took {took:.2f} s"
        store.set("rank 0 done", "1")
        print(f"RCOLL-TORCH-DONE rank {r}", flush=True)
        sys.exit(0)
    raise SystemExit(f"rank {r}: wait(timeout=1 s) returned after {time.monotonic() - start:.2f} s")

if mode == "callback":
    # A callback chained on the future waits on its own Work (it runs on the thread that
    # completes the future): it returns at once, the outcome being known.
    w = dist.all_reduce(t, async_op=True)
    chained = w.get_future().then(lambda f: (w.wait(), f.value()[0][0].item())[1])
    within(30, chained.done, "the chained callback")
    assert chained.value() == n * n, chained.value()

if mode == "completed":
    # Rank 0 completes its Work's future itself while the call cannot finish yet (rank 1
    # joins only after that): the Work still settles (wait returns), and the completion
    # thread lives on for later Works.
    import threading

    store = dist.distributed_c10d._get_default_store()
    if r == 1:
        store.wait(["rank 0 completed its future"], timedelta(seconds=60))
    w = dist.all_reduce(t, async_op=True)
    if r == 0:
        w.get_future().set_result([torch.zeros(1)])
        store.set("rank 0 completed its future", "1")
    done = []
    threading.Thread(target=lambda: done.append(w.wait()), daemon=True).start()
    within(30, lambda: done, "Work.wait after the caller completed the future")
    assert t[0].item() == n * n, t[0].item()
    w2 = dist.all_reduce(t, async_op=True)
    f2 = w2.get_future()
    within(30, f2.done, "a later Work's future")
    assert t[0].item() == n * n * n, t[0].item()

if mode == "completed-failed":
    # As "completed", but the call then fails (rank 1 leaves): the future keeps the
    # caller's result, and the Work's own wait raises the failure.
    store = dist.distributed_c10d._get_default_store()
    if r == 1:
        leave_once(store, "rank 0 completed its future")
    w = dist.all_reduce(t, async_op=True)
    mine = [torch.full((1,), 7.0)]
    future = w.get_future()
    future.set_result(mine)
    store.set("rank 0 completed its future", "1")
    raised = []

    def wait_for_it():
        try:
            w.wait()
        except rcoll.Error as e:
            raised.append(e)

    import threading

    threading.Thread(target=wait_for_it, daemon=True).start()
    within(30, lambda: raised, "the failed call's Work.wait")
    print(f"rank {r} raised: {raised[0]}", flush=True)
    assert future.value() is mine and future.wait() is mine, future.value()

print(f"RCOLL-TORCH-DONE rank {r}", flush=True)
