"""Comm.shrink: the survivors of a killed rank carry on."""

import pytest

from launcher import launch


@pytest.mark.parametrize("n", [2, 3])
def test_survivors_shrink_and_reduce_without_the_dead_rank(n):
    ranks = launch(n, "shrink", timeout_s=5)
    victim, others = ranks[-1], ranks[:-1]
    assert victim.returncode == 3, victim.describe()
    for r in others:
        assert r.returncode == 0 and r.done(), "\n".join(q.describe() for q in ranks)
