"""GPUs idle by fragmentation, from a replay's job rows: the free GPU-time during which a large
job waited although the cluster had, in all, as many GPUs free as it needed (so what kept it
out was where they were, or a reservation for an earlier job; never their number).

Free GPUs are the capacity less what the running attempts held (``JobRow.runs``, fractional
shares as their fraction); a job waits from its submission to its first start and between its
attempts. Pure: a sweep over the rows' times."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpufleet.sim.metrics import JobRow


@dataclass(frozen=True, slots=True)
class Fragmentation:
    idle_gpu_s: float  # free GPU-seconds while a large job waited that the free count could hold
    blocked_s: float  # seconds during which that was so
    capacity_gpu_s: float  # the cluster's GPU-seconds over the span of the replay

    @property
    def share(self) -> float:
        return self.idle_gpu_s / self.capacity_gpu_s if self.capacity_gpu_s else 0.0


def idle_by_fragmentation(
    rows: Iterable[JobRow], capacity: float, large_gpus: float, end: float | None = None
) -> Fragmentation:
    """``rows``' GPUs idle by fragmentation on a cluster of ``capacity`` GPUs, a large job
    being one of at least ``large_gpus``; up to ``end`` (default: the last run's end)."""
    rows = list(rows)
    busy: list[tuple[float, float]] = []  # (time, +-gpus)
    waits: list[tuple[float, int, float]] = []  # (time, +1 / -1, the waiting job's gpus)
    last = 0.0
    for r in rows:
        for s, e in r.runs:
            busy += [(s, r.gpus), (e, -r.gpus)]
            last = max(last, e)
        if r.gpus < large_gpus:
            continue
        t = r.submit_time
        for s, e in r.runs:
            if s > t:
                waits += [(t, 1, r.gpus), (s, -1, r.gpus)]
            t = e
        if r.end_time is None:  # still waiting (or running) at the end
            waits.append((t, 1, r.gpus))
    stop = last if end is None else end
    times = sorted({t for t, _ in busy} | {t for t, _, _ in waits} | {stop})
    start = min(times, default=0.0)
    bi = wi = 0
    busy.sort()
    waits.sort()
    used = 0.0
    waiting: dict[float, int] = {}
    idle = blocked = 0.0
    prev: float | None = None
    for t in times:
        if prev is not None and t > prev:
            free = capacity - used
            if any(n > 0 and g <= free + 1e-9 for g, n in waiting.items()):
                idle += free * (min(t, stop) - prev)
                blocked += min(t, stop) - prev
        if t >= stop:
            break
        while bi < len(busy) and busy[bi][0] <= t:
            used += busy[bi][1]
            bi += 1
        while wi < len(waits) and waits[wi][0] <= t:
            _, d, g = waits[wi]
            waiting[g] = waiting.get(g, 0) + d
            wi += 1
        prev = t
    return Fragmentation(idle, blocked, capacity * max(0.0, stop - start))
