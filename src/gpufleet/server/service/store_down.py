"""Whether the controller's memory is being rebuilt because the store failed, and the back-off
of the rebuild.

While it is down, a request that needs the store or the controller's state answers 503 with
Retry-After at once (the memory that would answer it is gone: it held what the store had not
committed); registered agents' heartbeats and command polls keep working, so leases do not
run out because the database blinked (``agents.py``, ``heartbeat``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpufleet.server.refusals import RETRY_AFTER_S
from gpufleet.server.store.records import StoreUnavailable

BACKOFF_FIRST_S = 0.25
BACKOFF_MAX_S = 2.0


class StoreDown:
    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self.why: str | None = None  # None: the store answers
        self.since = 0.0  # monotonic time of the failure
        self.failures = 0  # failed commits and rebuilds in a row (the back-off grows with it)
        self.falls = 0  # failed turns since the start (GET /healthz)
        self.rebuilds = 0
        self.last_recovery_s: float | None = None  # failure to rebuilt, the last time

    def __bool__(self) -> bool:
        return self.why is not None

    def check(self) -> None:
        """Raise StoreUnavailable (503) while down."""
        if self.why is not None:
            raise StoreUnavailable(
                f"the controller is rebuilding its state from the store ({self.why}): "
                f"retry in {RETRY_AFTER_S} s"
            )

    def fall(self, why: str) -> None:
        if self.why is None:
            self.since = self._monotonic()
        self.why = why
        self.failures += 1
        self.falls += 1

    def wait_s(self) -> float:
        """Before the next rebuild: doubling from BACKOFF_FIRST_S up to BACKOFF_MAX_S. It
        counts failed commits too, so a store that reads but cannot write (a full disk) is
        not rebuilt from in a tight loop."""
        return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2.0 ** max(0, self.failures - 1))

    def retry_failed(self, why: str) -> None:
        self.why = why
        self.failures += 1

    def recovered(self) -> float:
        """Rebuilt: how long since the failure (s). ``failures`` stays until a commit works."""
        self.why = None
        self.rebuilds += 1
        self.last_recovery_s = self._monotonic() - self.since
        return self.last_recovery_s

    def committed(self) -> None:
        self.failures = 0
