"""Nonblocking calls and Split."""

import pytest

from launcher import run


@pytest.mark.parametrize("n", [2, 3, 4])
def test_nonblocking_with_wait_test_and_waitall(n):
    run(n, "nonblocking")


@pytest.mark.parametrize("n", [2, 3, 4])
def test_split(n):
    run(n, "split")


@pytest.mark.parametrize("n", [2, 3, 4])
def test_alloc_bfloat16_alltoallv_and_the_other_nonblocking_calls(n):
    run(n, "extras")
