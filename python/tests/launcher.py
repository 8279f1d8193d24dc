"""Starts N Python processes as the ranks of one rcoll job on loopback.

Each rank runs a worker script (tests/workers/) with RCOLL_RANK, RCOLL_WORLD_SIZE,
RCOLL_ROOT_ADDR (a free loopback port), a fresh RCOLL_UNIQUE_ID (32 hex digits) and a small
RCOLL_TIMEOUT, and must print ``RCOLL-PY-DONE rank <r>`` and exit 0: a rank that skipped
its checks, or died after them, fails the test.
"""

import dataclasses
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

WORKERS = Path(__file__).parent / "workers"
DONE = "RCOLL-PY-DONE"


@dataclasses.dataclass
class Rank:
    rank: int
    returncode: int
    stdout: str
    stderr: str

    def done(self):
        return f"{DONE} rank {self.rank}" in self.stdout

    def describe(self):
        return (
            f"rank {self.rank}: exit {self.returncode}\n"
            f"--- stdout\n{self.stdout}--- stderr\n{self.stderr}"
        )


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(n, worker, *args, timeout_s=2.0, env=None, deadline_s=180):
    """Runs ``workers/<worker>.py args`` on ``n`` ranks; returns their `Rank`s."""
    common = dict(os.environ)
    common.update(
        RCOLL_WORLD_SIZE=str(n),
        RCOLL_ROOT_ADDR=f"127.0.0.1:{free_port()}",
        RCOLL_UNIQUE_ID=secrets.token_hex(16),
        RCOLL_TIMEOUT=str(timeout_s),
        PYTHONUNBUFFERED="1",
    )
    common.update(env or {})
    procs = []
    for r in range(n):
        e = dict(common, RCOLL_RANK=str(r))
        cmd = [sys.executable, str(WORKERS / f"{worker}.py"), *map(str, args)]
        procs.append(
            subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    ranks = []
    for r, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, err = p.communicate()
            err += f"\n[launcher: killed after {deadline_s} s]"
        ranks.append(Rank(r, p.returncode, out, err))
    return ranks


def run(n, worker, *args, **kw):
    """`launch`, requiring every rank to print its completion marker and exit 0."""
    ranks = launch(n, worker, *args, **kw)
    bad = [r for r in ranks if r.returncode != 0 or not r.done()]
    assert not bad, "\n".join(r.describe() for r in ranks)
    return ranks
