"""The one way a test waits for a state another thread or process brings about.

A test waits for a *state* (a job RUNNING, a node drained, a file written), never for a poll
window or a fixed time: the deadline only bounds a wait that has gone wrong, so it is generous
and never asserted on. Where a clock can be injected (a ``ManualClock``), a test moves it
instead of waiting at all."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    what: str,
    check: Callable[[], T | None],
    timeout_s: float = 10.0,
    every_s: float = 0.2,
    ignoring: tuple[type[BaseException], ...] = (),
) -> T:
    """``check()``'s first truthy value; past ``timeout_s`` an AssertionError naming ``what``
    and the last value seen. Polled at once, then after 10 ms, the pause doubling up to
    ``every_s`` (a state that comes quickly is seen quickly; a long wait does not hammer a
    server). Exceptions of the ``ignoring`` types count as "not yet" (a process starting, a
    controller restarting); any other is the test's failure and ends the wait at once."""
    deadline = time.monotonic() + timeout_s
    pause = min(0.01, every_s)
    last: object = None
    while True:
        try:
            v = check()
            if v:
                return v
            last = v
        except ignoring as e:
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s (last: {last!r})")
        time.sleep(pause)
        pause = min(pause * 2, every_s)
