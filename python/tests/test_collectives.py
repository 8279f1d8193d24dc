"""The blocking API on 2, 3 and 4 ranks against numpy."""

import pytest

from launcher import run


@pytest.mark.parametrize("n", [2, 3, 4])
def test_every_collective_every_dtype_in_place_and_not(n):
    run(n, "collectives")
