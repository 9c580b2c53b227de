"""What will arrive: the jobs submitted over the last hours, as a forecast of the next ones.

Pure: the core records each job as it is submitted (``arrived``), live and in the simulator
alike (a restarted controller, the ended jobs it reads back); the start plan asks for the
window before its cycle (``recent``) and plays it again after it, window after window, as
jobs to come (``estimate_forward``). Under fair share a queue that has used less goes ahead of
one that has used more, so a job's start depends on what the other queues will submit while it
waits, which a plan of the pending jobs alone does not see. The forecast is the simplest one
that knows nothing of the trace: the next ``window_s`` look like the last (their jobs, sizes
and queues, at the same offsets). Only what has arrived by the cycle is used.
"""

from __future__ import annotations

import bisect
from collections import deque

from gpufleet.model.job import JobSpec

WINDOW_S = 6 * 3600.0  # the recent past played again as the future


class ArrivalHistory:
    """The jobs submitted in the last ``window_s`` (a little more: pruned as new ones come)."""

    def __init__(self, window_s: float | None = None, *, enabled: bool = True) -> None:
        self.window_s = WINDOW_S if window_s is None else window_s
        self.enabled = enabled  # False: nothing is kept (no plan forecasts arrivals)
        self._times: deque[float] = deque()  # in time order
        self._specs: deque[JobSpec] = deque()

    def arrived(self, spec: JobSpec, t: float) -> None:
        """A job submitted at ``t`` (in time order, or near it: a late one is put in place)."""
        if not self.enabled:
            return
        times, specs = self._times, self._specs
        if not times or t >= times[-1]:
            times.append(t)
            specs.append(spec)
        else:
            i = bisect.bisect_right(times, t)
            times.insert(i, t)
            specs.insert(i, spec)
        while times and times[0] < times[-1] - self.window_s:
            times.popleft()
            specs.popleft()

    def recent(self, now: float) -> list[tuple[float, JobSpec]]:
        """The jobs submitted in (``now`` − window, ``now``], in time order."""
        lo = now - self.window_s
        return [(t, s) for t, s in zip(self._times, self._specs, strict=True) if lo < t <= now]

    def __len__(self) -> int:
        return len(self._times)
