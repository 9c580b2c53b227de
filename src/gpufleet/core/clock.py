"""Time as the core sees it: a number passed in. The protocol and a clock tests can skip ahead."""

from __future__ import annotations

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
