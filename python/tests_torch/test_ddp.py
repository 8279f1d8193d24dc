"""DDP on CPU under gloo and rcoll: one model and data stream, ranks starting from
different weights. All ranks end equal; rcoll's parameters equal gloo's bitwise on 2 ranks
(a sum of two numbers does not depend on the order), within floating-point tolerance on 4;
the loss falls the same way under both."""

import pytest
import torch

from launch import torchrun


@pytest.mark.parametrize("n", [2, 4])
def test_ddp_rcoll_trains_as_gloo_does(n, tmp_path):
    torchrun(n, "ddp_train", tmp_path, "gloo", "rcoll")
    runs = {
        b: [torch.load(tmp_path / f"{b}-rank{r}.pt") for r in range(n)] for b in ("gloo", "rcoll")
    }
    for b, ranks in runs.items():
        for r in range(1, n):
            for k, v in ranks[0]["params"].items():
                assert torch.equal(v, ranks[r]["params"][k]), f"{b}: rank {r}'s {k} differs from rank 0's"
    gloo, ours = runs["gloo"][0], runs["rcoll"][0]
    for k, v in gloo["params"].items():
        if n == 2:
            assert torch.equal(ours["params"][k], v), f"{k}: rcoll differs from gloo bitwise"
        else:
            torch.testing.assert_close(ours["params"][k], v, rtol=1e-4, atol=1e-5, msg=k)
    # A training that learns: the last steps' loss is well below the first's, under both.
    for b, run in (("gloo", gloo), ("rcoll", ours)):
        first, last = sum(run["losses"][:3]) / 3, sum(run["losses"][-3:]) / 3
        assert last < 0.5 * first, f"{b}: loss {first:.4f} -> {last:.4f} did not fall"
    torch.testing.assert_close(
        torch.tensor(ours["losses"]), torch.tensor(gloo["losses"]), rtol=1e-4, atol=1e-6
    )
