"""Time as the agent sees it. The lease, time limits and grace periods all read a ``Clock`` so
tests can step time instead of sleeping (``gpufleet.core.clock`` is out of this layer's reach)."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...


class MonotonicClock:
    """Real time that never jumps with NTP or a changed wall clock (leases must not)."""

    def now(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("time does not run backwards")
        self._now += seconds
        return self._now
