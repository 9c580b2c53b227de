"""The failed-authentication limit per client: a burst, then one try per 1/rate seconds, on an
injected clock; clients do not share a bucket; the table of clients is bounded."""

from __future__ import annotations

from gpufleet.server.ratelimit import FailedAuthLimiter


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_burst_then_one_try_per_interval() -> None:
    clock = Clock()
    lim = FailedAuthLimiter(clock, burst=3, per_s=0.5)
    for _ in range(3):
        assert lim.retry_after("a") is None
        lim.failed("a")
    assert lim.retry_after("a") == 2  # one token back after 1 / 0.5 s
    clock.t += 1.0
    assert lim.retry_after("a") == 1
    clock.t += 1.0
    assert lim.retry_after("a") is None
    lim.failed("a")
    assert lim.retry_after("a") == 2


def test_clients_do_not_share_a_bucket_and_the_least_recent_is_forgotten() -> None:
    clock = Clock()
    lim = FailedAuthLimiter(clock, burst=1, per_s=1.0, max_clients=2)
    lim.failed("a")
    assert lim.retry_after("a") == 1 and lim.retry_after("b") is None
    lim.failed("b")
    lim.failed("c")  # the table holds two: the oldest goes, as if its bucket were full
    assert lim.retry_after("c") == 1 and lim.retry_after("b") == 1
    assert lim.retry_after("a") is None  # forgotten: the table is bounded, not the clients
    clock.t += 5.0
    assert all(lim.retry_after(x) is None for x in "abc")
