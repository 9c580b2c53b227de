"""The agent's retry waits: exponential back-off with jitter.

Without jitter every agent that lost the controller at the same instant (a controller restart,
a network blink) retries at the same instants, and the controller meets them all at once on
every round. Each wait here is drawn uniformly from [d/2, d] ("equal jitter"), where d doubles
from ``first_s`` up to ``max_s``: never less than half the back-off, never in step."""

from __future__ import annotations

import random


class Backoff:
    def __init__(self, first_s: float, max_s: float, rng: random.Random | None = None) -> None:
        if not 0 < first_s <= max_s:
            raise ValueError(f"back-off needs 0 < first ({first_s}) <= max ({max_s})")
        self.first_s = first_s
        self.max_s = max_s
        self._rng = rng or random.Random()
        self._d = first_s

    def next(self) -> float:
        """The wait before the next try; the one after it doubles (up to ``max_s``)."""
        d = self._d
        self._d = min(self._d * 2, self.max_s)
        return self._rng.uniform(d / 2, d)

    def reset(self) -> None:
        """A try worked: the next failure starts from ``first_s`` again."""
        self._d = self.first_s
