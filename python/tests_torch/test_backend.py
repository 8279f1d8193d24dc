"""The "rcoll" backend's calls on 2, 3 and 4 ranks, and its failures."""

import os
import signal
import time

import pytest

from launch import spawn, spawn_ok


@pytest.mark.parametrize("n", [2, 3])
def test_every_call_every_dtype_against_local_results(n):
    spawn_ok(n, "ops", deadline_s=400)


@pytest.mark.parametrize("mode", ["dies", "late"])
def test_a_missing_rank_fails_every_survivor_naming_it(mode):
    n = 3
    results = spawn(n, "failures", mode, env={"RCOLL_TIMEOUT": "3"})
    victim = n - 1
    for r, (code, out) in enumerate(results):
        if mode == "dies" and r == victim:
            assert code == 3, out
            continue
        assert code == 0 and f"RCOLL-TORCH-DONE rank {r}" in out, f"rank {r}: exit {code}\n{out}"
        if mode == "dies":
            assert f"rank {victim}" in out.split("raised:", 1)[1], out
        elif r != victim:
            assert "TimeoutError" in out and "Work.wait's timeout" in out, out


def test_a_stopped_rank_fails_every_survivor_naming_it():
    """SIGSTOP: alive (its sockets open) but silent; rcoll's timeout names it."""
    from launch import DONE, WORKERS, free_port
    import subprocess
    import sys

    n, victim = 3, 2
    env = dict(os.environ, RCOLL_SOCKET_IFNAME="lo", WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), RCOLL_TIMEOUT="3", PYTHONUNBUFFERED="1")
    procs = [
        subprocess.Popen([sys.executable, str(WORKERS / "failures.py"), "stops"],
                         env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
        for r in range(n)
    ]
    try:
        outs = {}
        for r in range(n):
            if r == victim:
                continue
            outs[r] = procs[r].communicate(timeout=120)[0]
            assert procs[r].returncode == 0 and f"{DONE} rank {r}" in outs[r], outs[r]
            assert f"rank {victim}" in outs[r].split("raised:", 1)[1], outs[r]
    finally:
        procs[victim].send_signal(signal.SIGKILL)
        procs[victim].wait()


@pytest.mark.parametrize("mode", ["timeout", "callback", "completed", "completed-failed"])
def test_a_work_used_from_two_threads_keeps_its_timeout_and_never_hangs(mode):
    # RCOLL_TIMEOUT far above Work.wait's 1 s: only Work.wait's own timeout ends rank 0's wait.
    spawn_ok(2, "work_threads", mode, env={"RCOLL_TIMEOUT": "20"}, deadline_s=120)
