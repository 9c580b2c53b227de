"""The agent's retry waits: exponential, capped, jittered so that agents which lost the
controller together come back spread out, not in step."""

from __future__ import annotations

import random

import pytest

from gpufleet.agent.backoff import Backoff


def test_each_wait_is_between_half_and_all_of_a_doubling_capped_back_off() -> None:
    b = Backoff(0.5, 5.0, random.Random(1))
    bounds = [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    for d in bounds:
        w = b.next()
        assert d / 2 <= w <= d
    b.reset()
    assert 0.25 <= b.next() <= 0.5


def test_agents_that_failed_together_retry_at_different_instants() -> None:
    """Ten agents, the same failures at the same instant: their retry times differ."""
    times = []
    for seed in range(10):
        b = Backoff(0.5, 5.0, random.Random(seed))
        times.append(round(sum(b.next() for _ in range(5)), 3))
    assert len(set(times)) == 10
    # and spread over seconds, not a few milliseconds
    assert max(times) - min(times) > 1.0


@pytest.mark.parametrize(("first", "most"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0)])
def test_a_back_off_that_makes_no_sense_is_refused(first: float, most: float) -> None:
    with pytest.raises(ValueError, match="back-off needs"):
        Backoff(first, most)
