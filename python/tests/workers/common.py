"""Shared by the workers: joining, the completion marker, inputs and numpy references."""

import sys

import numpy as np

import rcoll

DTYPES = [np.int32, np.int64, np.float32, np.float64, np.float16, np.uint8]
FLOAT_OPS = ["SUM", "PROD", "MIN", "MAX", "AVG"]
INT_OPS = FLOAT_OPS + ["BAND", "BOR", "BXOR"]


def done(comm):
    print(f"RCOLL-PY-DONE rank {comm.rank}", flush=True)
    sys.exit(0)


def inputs(rank, dtype, count, salt, op="SUM"):
    """Rank `rank`'s input: small integers, so that float16 sums and products are exact."""
    rng = np.random.default_rng([salt, rank, count])
    low = 1 if op == "PROD" else 0
    return rng.integers(low, 4, size=count).astype(dtype)


def reference(op, arrays, dtype):
    """The reduction numpy computes of every rank's input, independently of rcoll."""
    s = np.stack(arrays)
    if op == "SUM":
        return np.sum(s, axis=0, dtype=dtype)
    if op == "PROD":
        return np.prod(s, axis=0, dtype=dtype)
    if op == "MIN":
        return np.min(s, axis=0)
    if op == "MAX":
        return np.max(s, axis=0)
    if op == "AVG":
        total = np.sum(s.astype(np.float64), axis=0)
        if np.issubdtype(dtype, np.integer):
            return (total // len(arrays)).astype(dtype)  # inputs are >= 0: floor truncates
        return (total / len(arrays)).astype(dtype)
    ufunc = {"BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}[op]
    return ufunc.reduce(s, axis=0).astype(dtype)


def same(got, want, what, op="SUM"):
    dtype = got.dtype
    if op == "AVG" and np.issubdtype(dtype, np.floating):
        ok = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-3)
    else:
        ok = np.array_equal(got, want)
    if not ok:
        raise AssertionError(f"{what}: got {got[:8]}..., numpy says {want[:8]}...")
