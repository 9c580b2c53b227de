"""Time as a number passed in: the ``Clock`` protocol every layer reads, the clock tests and the
simulator step (``ManualClock``) and the real one the live processes use (``MonotonicClock``).
The core's timers, the agent's lease, time limits and grace periods all read a ``Clock``, so a
test steps a ``ManualClock`` instead of sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...


class ManualClock:
    """A clock that moves only when told (the simulator's and the tests' clock)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("time does not run backwards")
        self._now += seconds
        return self._now

    def set(self, t: float) -> None:
        if t < self._now:
            raise ValueError("time does not run backwards")
        self._now = t


class MonotonicClock:
    """Real time that never jumps with NTP or a changed wall clock (leases must not)."""

    def now(self) -> float:
        return time.monotonic()
