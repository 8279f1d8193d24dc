"""Runs a worker script under torchrun on loopback and checks every rank finished."""

import os
import subprocess
import sys
from pathlib import Path

WORKERS = Path(__file__).parent / "workers"
DONE = "RCOLL-TORCH-DONE"


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(n, worker, *args, env=None, deadline_s=300, check=True):
    """``torchrun --nproc-per-node n workers/<worker>.py args``; returns (code, output)."""
    e = dict(os.environ)
    # Loopback only: rcoll's rendezvous and gloo's sockets.
    e.update(RCOLL_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    e.update(env or {})
    cmd = [
        sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={n}",
        "--master-addr=127.0.0.1", f"--master-port={free_port()}",
        str(WORKERS / f"{worker}.py"), *map(str, args),
    ]
    try:
        p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=deadline_s)
        code, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as t:
        code, out = None, f"{t.stdout or ''}{t.stderr or ''}\n[killed after {deadline_s} s]"
    if check:
        missing = [r for r in range(n) if f"{DONE} rank {r}" not in out]
        assert code == 0 and not missing, f"exit {code}, ranks without marker {missing}\n{out}"
    return code, out


def spawn(n, worker, *args, env=None, deadline_s=180):
    """Starts ``workers/<worker>.py args`` as ``n`` ranks with torch's env:// variables
    (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), without torchrun's agent, so that a test
    can kill or stop a rank. Returns each rank's (exit code, output)."""
    e = dict(os.environ)
    e.update(
        RCOLL_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
        WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
        PYTHONUNBUFFERED="1",
    )
    e.update(env or {})
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKERS / f"{worker}.py"), *map(str, args)],
            env=dict(e, RANK=str(r), LOCAL_RANK=str(r)),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for r in range(n)
    ]
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            out += f"\n[killed after {deadline_s} s]"
        results.append((p.returncode, out))
    return results


def spawn_ok(n, worker, *args, **kw):
    """`spawn`, requiring every rank to exit 0 after printing its completion marker."""
    results = spawn(n, worker, *args, **kw)
    bad = [r for r, (code, out) in enumerate(results) if code != 0 or f"{DONE} rank {r}" not in out]
    assert not bad, "\n".join(f"--- rank {r}: exit {c}\n{o}" for r, (c, o) in enumerate(results))
    return results
