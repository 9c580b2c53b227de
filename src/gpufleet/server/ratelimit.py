"""Failed authentications per client address: a token bucket each, so a client that keeps
sending bad tokens is answered 429 before its token costs a database read. Only failures
count; a valid token is checked before the limit (auth.py), so it is never limited by
anyone's failures, even from the same address."""

from __future__ import annotations

import math
from collections.abc import Callable

from cachetools import TTLCache

# A client may fail BURST times at once, then once per 1 / PER_S seconds: a person mistyping a
# token is not slowed; a flood of guesses costs the controller PER_S token lookups a second.
BURST = 20
PER_S = 2.0
MAX_CLIENTS = 10_000  # addresses tracked at once (the least recently failed are forgotten)


class FailedAuthLimiter:
    def __init__(
        self,
        clock: Callable[[], float],
        *,
        burst: int = BURST,
        per_s: float = PER_S,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        self.burst = burst
        self.per_s = per_s
        # address → (tokens left, when counted); an entry is dropped once its bucket is full
        # again, which is all that a forgotten address would have had
        self._buckets: TTLCache[str, tuple[float, float]] = TTLCache(
            maxsize=max_clients, ttl=burst / per_s, timer=clock
        )
        self._clock = clock

    def _tokens(self, client: str) -> float:
        left, at = self._buckets.get(client, (float(self.burst), self._clock()))
        return min(float(self.burst), left + (self._clock() - at) * self.per_s)

    def retry_after(self, client: str) -> int | None:
        """Seconds until ``client`` may try again, or None if it may now."""
        left = self._tokens(client)
        if left >= 1.0:
            return None
        return max(1, math.ceil((1.0 - left) / self.per_s))

    def failed(self, client: str) -> None:
        self._buckets[client] = (max(0.0, self._tokens(client) - 1.0), self._clock())
