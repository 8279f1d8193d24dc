"""torch's own distributed test suite (torch.testing._internal.distributed.distributed_test)
against the "rcoll" backend, as out-of-tree backends (torch-ucc) drive it.

    python distributed_suite.py [--world-size N] [--list distributed_suite.txt] [test ...]

Runs the tests that distributed_suite.txt says must pass (or those named) on N ranks and
fails unless every one of them ran and passed on every rank. The suite skips silently (a
test whose decorators exclude the backend exits as a skip), so a skip of a listed test is
a failure here; the count of those that ran is printed.

torch's runner (MultiProcessTestCase) spawns N fresh processes per test, each importing
torch and its test modules again (10-40 s a test on this 2-core machine). Here N rank
processes are started once and run the tests one after another, doing for each what the
runner's child does (TestDistBackend._run): a fresh temporary directory (its file
barrier), ``init_process_group`` through a fresh file, the test method, a barrier,
``destroy_process_group``. A test that hangs is stopped by the deadline and every test
after it counts as not run.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIST = Path(__file__).with_suffix(".txt")
MARK = "RCOLL-SUITE"


def listed(path, world):
    """The list's tests that must pass on `world` ranks (lines `pass <name>` for 2 ranks,
    `pass@N <name>` for N); `skip <name> <reason>` lines name tests not run, with why."""
    must, skipped = [], {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        kind, name, *why = line.split(None, 2)
        if kind.startswith("pass"):
            if int(kind.partition("@")[2] or 2) == world:
                must.append(name)
        elif kind == "skip":
            skipped[name] = why[0] if why else ""
        else:
            raise SystemExit(f"{path}: unknown kind {kind!r} in {line!r}")
    return must, skipped


def rank_main(rank, world, root, names):
    """One rank: every test in turn, a result line each."""
    os.environ.update(BACKEND="rcoll", WORLD_SIZE=str(world), RANK=str(rank))
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    from datetime import timedelta
    import traceback
    import unittest

    import rcoll.torch  # noqa: F401 - registers "rcoll"
    import torch.distributed as dist
    from torch.testing._internal.common_distributed import DistTestCases, TEST_SKIPS

    # What the backend does, in the suite's words: a plugin serving DDP and subgroups;
    # rcoll lacks receiving from any source.
    DistTestCases.backend_feature["plugin"].add("rcoll")
    DistTestCases.backend_feature["ddp"].add("rcoll")
    DistTestCases.backend_feature["subgroup"].add("rcoll")
    DistTestCases.skip_collective["sendrecv anysource"].add("rcoll")
    from torch.testing._internal.common_utils import set_rng_seed
    from torch.testing._internal.distributed import distributed_test as dt

    class Test(dt.TestDistBackend, dt.DistributedTest._DistTestBase):
        pass

    skip_codes = {s.exit_code: s.message for s in TEST_SKIPS.values()}
    for i, name in enumerate(names):
        test_dir = Path(root) / f"t{i}"
        os.environ["TEMP_DIR"] = str(test_dir)
        dt.Barrier.barrier_id = 0
        start = time.monotonic()
        outcome, detail = "pass", ""
        try:
            t = Test(name)
            t.rank = rank
            t.file_name = str(test_dir / "init_file")
            seconds = dt.CUSTOM_PG_TIMEOUT.get(name, dt.default_pg_timeout)
            dist.init_process_group(
                init_method=f"file://{t.file_name}", backend="rcoll", world_size=world,
                rank=rank, timeout=timedelta(seconds=seconds),
            )
            t._barrier()
            set_rng_seed()
            getattr(t, name)()
            t._barrier()
        except unittest.SkipTest as e:
            outcome, detail = "skip", str(e)
        except SystemExit as e:
            outcome = "skip" if e.code in skip_codes else "fail"
            detail = skip_codes.get(e.code, f"exit {e.code}")
        except BaseException:  # noqa: BLE001 - reported, then the next test
            tb = traceback.format_exc()
            print(tb, flush=True)
            lines = [l for l in tb.splitlines() if l.strip() and not l.startswith(" ")]
            outcome, detail = "fail", lines[-1] if lines else "?"
            # torch's tests append a repro hint after the error: keep the error's line.
            errs = [l for l in lines if "Error" in l or "Exception" in l]
            detail = errs[-1] if errs else detail
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except BaseException:  # noqa: BLE001
                pass
        took = time.monotonic() - start
        detail = detail.strip().splitlines()[0] if detail.strip() else ""
        print(f"{MARK} {rank} {name} {outcome} {took:.1f}s {detail}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--list", type=Path, default=LIST)
    ap.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", "2")))
    ap.add_argument("--deadline", type=float, default=900, help="seconds for the whole run")
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("tests", nargs="*")
    args = ap.parse_args()
    n = args.world_size
    must, skipped = listed(args.list, n)
    names = args.tests or must
    if args.rank is not None:
        rank_main(args.rank, n, args.root, names)
        return
    root = tempfile.mkdtemp(prefix="rcoll-torch-suite-")
    for i in range(len(names)):
        for sub in ("barrier", "test_dir", "init_dir"):
            os.makedirs(Path(root) / f"t{i}" / sub)
    env = dict(os.environ, RCOLL_SOCKET_IFNAME="lo", GLOO_SOCKET_IFNAME="lo",
               MASTER_ADDR="127.0.0.1", PYTHONUNBUFFERED="1")
    start = time.monotonic()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--list", str(args.list), "--world-size", str(n),
             "--rank", str(r), "--root", root, *names],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for r in range(n)
    ]
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1, args.deadline - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            out += f"\n[killed after the run's deadline of {args.deadline:.0f} s]"
        outs.append(out)
    took = time.monotonic() - start
    results = {}  # name -> {rank: (outcome, line)}
    for r, out in enumerate(outs):
        for line in out.splitlines():
            if line.startswith(f"{MARK} {r} "):
                _, _, name, outcome, *_ = line.split(" ", 5)
                results.setdefault(name, {})[r] = (outcome, line)
    passed = []
    for name in names:
        per = results.get(name, {})
        ok = len(per) == n and all(o == "pass" for o, _ in per.values())
        worst = max((per.get(r, ("not run",))[0] for r in range(n)), key=["pass", "skip", "fail", "not run"].index)
        secs = max((float(line.split()[4][:-1]) for _, line in per.values()), default=0.0)
        print(f"{'PASS' if ok else worst.upper():8s} {name} ({secs:.1f} s)")
        if ok:
            passed.append(name)
        else:
            for r in range(n):
                if r in per and per[r][0] != "pass":
                    print("    " + per[r][1])
    print(
        f"{MARK}: ran and passed {len(passed)} of {len(names)} listed tests on {n} ranks in "
        f"{took:.0f} s ({len(skipped)} more listed as skipped, with reasons)"
    )
    if len(passed) != len(names):
        for r, out in enumerate(outs):
            tail = "\n".join(l for l in out.splitlines() if not l.startswith(MARK))[-3000:]
            print(f"--- rank {r}'s other output (last 3000 characters)\n{tail}")
        sys.exit(1)


if __name__ == "__main__":
    main()
