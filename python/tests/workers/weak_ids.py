"""Weak or malformed secrets, each refused by rcoll.init / rcoll.init_rank naming what is
wrong, the value not repeated: RCOLL_UNIQUE_ID as the launcher sets it (argv[1]), then a
unique id in bytes whose secret is zero."""

import os
import sys

import rcoll

weak = sys.argv[1]
os.environ["RCOLL_UNIQUE_ID"] = weak
try:
    rcoll.init()
    raise AssertionError(f"RCOLL_UNIQUE_ID={weak!r} formed a group")
except rcoll.Error as e:
    print(f"refused {weak!r}: {type(e).__name__}: {e}", flush=True)
    assert "RCOLL_UNIQUE_ID" in str(e), str(e)
    assert len(weak) < 2 or weak not in str(e), str(e)

os.environ["RCOLL_UNIQUE_ID"] = "0123456789abcdef0123456789abcdef"
good = bytearray(rcoll.unique_id())
good[24:40] = bytes(16)  # the secret, zeroed
try:
    rcoll.init_rank(bytes(good), 0, 1, timeout=2.0)
    raise AssertionError("a unique id with a zero secret formed a group")
except rcoll.Error as e:
    print(f"refused a zero secret: {type(e).__name__}: {e}", flush=True)
    assert "secret is zero" in str(e), str(e)
print("RCOLL-PY-DONE rank 0", flush=True)
