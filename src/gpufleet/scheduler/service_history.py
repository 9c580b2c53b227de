"""What the cluster's own finished jobs say of a pending job's remaining service.

A duration-agnostic predictor in the spirit of Helios' QSSF (SC'21) and Lucid's estimator
(ASPLOS'23): no user states a duration; the GPU-time of the last ``window`` finished jobs of
the same queue and GPU count (else the queue, else every job) stands for the distribution a new
job is drawn from. Given a job's attained service ``a``, its expected remaining service is the
median of those samples above ``a``, less ``a`` (the conditional median, as a Gittins index
reads a distribution); a job that has outrun every sample is expected to run as long again.

Fed by the core as jobs finish (an order's ``finished`` hook); not stored, so a restarted
controller learns again from the jobs that finish after it.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import deque

from gpufleet.model.job import JobSpec

Key = tuple[str, int]  # (queue, whole GPUs); ("", -1): every job


class _Samples:
    __slots__ = ("order", "sorted")

    def __init__(self) -> None:
        self.order: deque[float] = deque()  # arrival order, to forget the oldest
        self.sorted: list[float] = []

    def add(self, x: float, window: int) -> None:
        self.order.append(x)
        insort(self.sorted, x)
        if len(self.order) > window:
            old = self.order.popleft()
            del self.sorted[bisect_right(self.sorted, old) - 1]

    def remaining(self, attained: float) -> float:
        s = self.sorted
        i = bisect_right(s, attained)
        if i == len(s):
            return max(attained, 1.0)
        return s[(i + len(s)) // 2] - attained


class ServiceHistory:
    def __init__(self, window: int = 200, min_samples: int = 10) -> None:
        if window < 1 or not 1 <= min_samples <= window:
            raise ValueError("need window >= min_samples >= 1")
        self.window = window
        self.min_samples = min_samples
        self._by: dict[Key, _Samples] = {}

    @staticmethod
    def keys(spec: JobSpec) -> tuple[Key, Key, Key]:
        return (spec.queue, spec.total_gpu_milli // 1000), (spec.queue, -1), ("", -1)

    def learn(self, spec: JobSpec, service_gpu_s: float) -> None:
        """A job of ``spec`` finished after ``service_gpu_s`` GPU-seconds of service."""
        for k in self.keys(spec):
            self._by.setdefault(k, _Samples()).add(service_gpu_s, self.window)

    def remaining(self, spec: JobSpec, attained_gpu_s: float) -> float | None:
        """The expected remaining GPU-seconds of a job of ``spec`` that has had
        ``attained_gpu_s``, from the narrowest group with ``min_samples``; None: too few."""
        for k in self.keys(spec):
            s = self._by.get(k)
            if s is not None and len(s.order) >= self.min_samples:
                return s.remaining(attained_gpu_s)
        return None
