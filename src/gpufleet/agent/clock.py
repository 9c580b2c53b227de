"""The agent's real clock. The lease, time limits and grace periods read a ``core.clock.Clock``
so tests can step a ``ManualClock`` instead of sleeping; this is the one production uses."""

from __future__ import annotations

import time


class MonotonicClock:
    """Real time that never jumps with NTP or a changed wall clock (leases must not)."""

    def now(self) -> float:
        return time.monotonic()
