"""How long a job will run, learned from what the cluster's own finished jobs ran for.

Pure: the core records each job that ends (``record``), live and in the simulator alike, and the
controller feeds it the store's finished jobs when it starts; the start plan asks it for each
running and pending job's run time. A job is matched on the most specific history that has
enough samples, from its user, name, queue and GPU count down to the whole cluster (``KEYS``).
Where jobs have time limits, the history keeps the fraction of its limit each job used (users
who ask for 24 h and run 2 h do so again), so a job with a limit is predicted to use that
fraction of its own; without a limit (or peers with one), the run times themselves. Quantiles,
not a mean: the median is what the plan uses, the 10th and 90th percentiles say how sure it is.
The job's limit bounds every figure (it is killed there). A running job's figures are
conditional on what it has run so far: only the samples that ran longer count (a job past most
of its peers' run times is a long one).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from gpufleet.model.job import JobSpec

Key = tuple[str, ...]
# the histories a job is matched on, the most specific first (the last: every job)
KEYS: tuple[tuple[str, Callable[[JobSpec], Key]], ...] = (
    ("user+name+queue+gpus", lambda s: (s.user, s.name, s.queue, str(s.total_gpu_milli))),
    ("user+name", lambda s: (s.user, s.name)),
    ("user+queue+gpus", lambda s: (s.user, s.queue, str(s.total_gpu_milli))),
    ("queue+gpus", lambda s: (s.queue, str(s.total_gpu_milli))),
    ("queue", lambda s: (s.queue,)),
    ("cluster", lambda s: ()),
)
KEEP = 200  # the most recent samples kept per history
MIN_SAMPLES = 5  # fewer: the next, broader history is asked


@dataclass(frozen=True, slots=True)
class RuntimeQuantiles:
    """A job's predicted run time in seconds: its 10th, 50th and 90th percentiles."""

    low: float
    mid: float
    high: float
    basis: str  # the history it came from ("queue+gpus", …; "limit": none had enough)
    samples: int


class _Samples:
    """One history: the last ``keep`` jobs' fractions of their limit and their run times."""

    __slots__ = ("_fractions", "_runs", "_sorted_f", "_sorted_r")

    def __init__(self, keep: int) -> None:
        self._fractions: deque[float] = deque(maxlen=keep)  # jobs that had a limit
        self._runs: deque[float] = deque(maxlen=keep)  # every job
        self._sorted_f: list[float] | None = None
        self._sorted_r: list[float] | None = None

    def add(self, run_s: float, limit: float | None) -> None:
        self._runs.append(run_s)
        self._sorted_r = None
        if limit:
            self._fractions.append(min(1.0, run_s / limit))
            self._sorted_f = None

    def fractions(self) -> list[float]:
        if self._sorted_f is None:
            self._sorted_f = sorted(self._fractions)
        return self._sorted_f

    def runs(self) -> list[float]:
        if self._sorted_r is None:
            self._sorted_r = sorted(self._runs)
        return self._sorted_r


def _quantile(xs: list[float], q: float) -> float:
    """The ``q`` quantile of the sorted ``xs``, interpolated between order statistics."""
    pos = q * (len(xs) - 1)
    i = int(pos)
    j = min(i + 1, len(xs) - 1)
    return xs[i] + (xs[j] - xs[i]) * (pos - i)


class RuntimeHistory:
    """The finished jobs' run times, by history; asked for a job's quantiles."""

    def __init__(self, keep_per_key: int = KEEP, min_samples: int = MIN_SAMPLES) -> None:
        self.min_samples = min_samples
        self.keep = keep_per_key
        self._by_key: list[dict[Key, _Samples]] = [{} for _ in KEYS]
        self.recorded = 0

    def record(self, spec: JobSpec, run_s: float) -> None:
        """A job that ended after running ``run_s`` seconds (its last attempt)."""
        if run_s < 0:
            return
        self.recorded += 1
        for (_, key_of), table in zip(KEYS, self._by_key, strict=True):
            key = key_of(spec)
            s = table.get(key)
            if s is None:
                s = table[key] = _Samples(self.keep)
            s.add(run_s, spec.time_limit_s)

    def predict(self, spec: JobSpec, ran_s: float = 0.0) -> RuntimeQuantiles | None:
        """The job's run time quantiles, knowing it has run ``ran_s`` already; None when no
        history has enough samples and it has no limit."""
        limit = spec.time_limit_s
        for (basis, key_of), table in zip(KEYS, self._by_key, strict=True):
            s = table.get(key_of(spec))
            if s is None:
                continue
            xs, scale = s.fractions(), limit or 0.0
            if not limit or len(xs) < self.min_samples:  # run times, bounded by the limit
                xs, scale = s.runs(), 1.0
                if len(xs) < self.min_samples:
                    continue
            if ran_s > 0:  # only the samples that ran longer than it has
                xs = xs[bisect.bisect_right(xs, ran_s / scale) :]
                if len(xs) < self.min_samples:
                    continue
            low, mid, high = (_quantile(xs, q) * scale for q in (0.1, 0.5, 0.9))
            return RuntimeQuantiles(*_bounded(low, mid, high, ran_s, limit), basis, len(xs))
        if limit:
            return RuntimeQuantiles(limit, limit, limit, "limit", 0)
        return None


def _bounded(
    low: float, mid: float, high: float, ran_s: float, limit: float | None
) -> tuple[float, float, float]:
    top = limit if limit else float("inf")
    return tuple(min(top, max(ran_s, x)) for x in (low, mid, high))  # type: ignore[return-value]
