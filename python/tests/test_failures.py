"""Bad arguments, dead and silent ranks, and the GIL."""

import pytest

from launcher import launch, run


@pytest.mark.parametrize("n", [2, 3])
def test_bad_buffers_raise_before_communicating(n):
    run(n, "bad_buffers")


@pytest.mark.parametrize("n", [2, 4])
def test_a_killed_rank_is_named_by_the_others(n):
    ranks = launch(n, "failures", "kill", timeout_s=3)
    victim, others = ranks[-1], ranks[:-1]
    assert victim.returncode == 3, victim.describe()
    for r in others:
        assert r.returncode == 0 and r.done(), "\n".join(q.describe() for q in ranks)


def test_a_silent_rank_times_out_naming_it():
    run(2, "failures", "silent", timeout_s=2)


@pytest.mark.parametrize("weak", ["0", "1", "+1", "abc", "0" * 32, "f" * 31, "f" * 33])
def test_weak_secrets_are_refused_naming_the_variable(weak):
    run(1, "weak_ids", weak)


def test_abort_from_another_thread_ends_the_blocked_call_and_the_peers():
    run(2, "abort", timeout_s=20)


def test_blocking_calls_release_the_gil():
    run(2, "gil", timeout_s=10)
