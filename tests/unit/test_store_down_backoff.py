"""The rebuild's back-off after a store failure: it grows with failures in a row, failed
commits included (a full disk reads, so a rebuild alone would succeed at once), and only a
commit that worked starts it over."""

from __future__ import annotations

import pytest

from gpufleet.server.service.store_down import BACKOFF_FIRST_S, BACKOFF_MAX_S, StoreDown
from gpufleet.server.store import StoreUnavailable


class Mono:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


def test_while_down_requests_are_refused_as_an_outage_and_the_back_off_doubles_to_its_cap() -> None:
    mono = Mono()
    d = StoreDown(mono)
    d.check()  # up: nothing raised
    d.fall("the database is unavailable: connection refused")
    assert d and d.wait_s() == BACKOFF_FIRST_S
    with pytest.raises(StoreUnavailable, match="connection refused"):
        d.check()
    waits = []
    for _ in range(8):
        d.retry_failed("still refused")
        waits.append(d.wait_s())
    assert waits[:2] == [2 * BACKOFF_FIRST_S, 4 * BACKOFF_FIRST_S]
    assert waits == sorted(waits) and waits[-1] == BACKOFF_MAX_S
    mono.t += 3.5
    assert d.recovered() == 3.5 and not d and d.rebuilds == 1


def test_a_rebuild_does_not_reset_the_back_off_only_a_commit_does() -> None:
    d = StoreDown(Mono())
    for _ in range(3):  # rebuilt at once, and the next commit fails again (a full disk)
        d.fall("database or disk is full")
        d.recovered()
    assert d.wait_s() == 4 * BACKOFF_FIRST_S and d.falls == 3
    d.committed()
    d.fall("database or disk is full")
    assert d.wait_s() == BACKOFF_FIRST_S
