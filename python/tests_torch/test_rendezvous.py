"""The unique id a group's ranks meet at, handed through torch's store: a store that
outlives a group (torchrun's agent store, kept across destroy_process_group and a new
init_process_group, which names the default group "0" each time) must never give a rank
the id of a group that is over."""

import threading
from datetime import timedelta

import pytest
import torch.distributed as dist

from launch import torchrun
from rcoll.torch import _backend


def test_a_rank_that_asks_first_waits_for_this_groups_id_not_the_last_ones():
    store = dist.HashStore()
    store.set_timeout(timedelta(seconds=20))
    # The first group: rank 0 hands out its id, rank 1 takes it.
    first = b"a" * 8
    assert _backend._exchange_unique_id(store, 0, 2, lambda: first) == first
    assert _backend._exchange_unique_id(store, 1, 2, lambda: b"never made") == first
    # The next group on the same store: rank 1 asks before rank 0 has made its id.
    got = {}

    def ask():
        try:
            got["id"] = _backend._exchange_unique_id(store, 1, 2, lambda: b"x")
        except BaseException as e:  # noqa: BLE001 - reported by the asserts below
            got["error"] = e

    asker = threading.Thread(target=ask)
    asker.start()
    asker.join(timeout=0.5)
    # Still waiting (the last group's id is not this one's); then rank 0 makes it.
    assert asker.is_alive(), f"rank 1 took {got!r} before rank 0 made this group's id"
    second = b"b" * 8
    assert _backend._exchange_unique_id(store, 0, 2, lambda: second) == second
    asker.join(timeout=20)
    assert got == {"id": second}, got


def test_a_rank_whose_group_rank_0_never_comes_is_told_why():
    store = dist.HashStore()
    store.set_timeout(timedelta(seconds=1))
    with pytest.raises(_backend.RcollError, match="rank 0 made no unique id"):
        _backend._exchange_unique_id(store, 1, 2, lambda: b"x")


def test_the_default_group_formed_again_and_again_in_one_process():
    torchrun(2, "reinit", 4, deadline_s=240)
