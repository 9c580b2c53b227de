"""What the cluster's own finished jobs say of a pending job's remaining service.

A duration-agnostic predictor in the spirit of Helios' QSSF (SC'21) and Lucid's estimator
(ASPLOS'23): no user states a duration; the GPU-time of the last ``window`` finished jobs of a
group stands for the distribution a new job of that group is drawn from. The groups, narrowest
first (``GROUPS``): the same user's jobs of the same name and GPU count (a script run again, the
recurring jobs Helios finds most of a cluster's work to be: a few runs are enough,
``name_min_samples``), the user's jobs of the queue and GPU count, the queue's of the GPU count,
the queue's, every job's (each of these with ``min_samples``). Given a job's attained service
``a``, its expected remaining service is the median of the narrowest group's samples above
``a``, less ``a`` (the conditional median, as a Gittins index reads a distribution); a job that
has outrun every sample is expected to run as long again.

A trace that names no user or gives every job a name of its own (Philly's) falls through the
first two groups to the queue's, as before them. Fed by the core as jobs finish (an order's
``finished`` hook); not stored, so a restarted controller learns again from the jobs that
finish after it. The groups of a user are kept for the ``keys_kept`` most recently finished
ones (names are many; the least recently seen are forgotten first).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import deque
from collections.abc import Callable

from gpufleet.model.job import JobSpec

Key = tuple[str | int, ...]
GROUPS: tuple[tuple[str, Callable[[JobSpec], Key]], ...] = (
    ("user+name+gpus", lambda s: (s.user, s.name, s.total_gpu_milli // 1000)),
    ("user+queue+gpus", lambda s: (s.user, s.queue, s.total_gpu_milli // 1000)),
    ("queue+gpus", lambda s: (s.queue, s.total_gpu_milli // 1000)),
    ("queue", lambda s: (s.queue,)),
    ("cluster", lambda s: ()),
)
PER_USER = 2  # the first groups of GROUPS are a user's: their tables are bounded
KEYS_KEPT = 100_000


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
    def __init__(
        self,
        window: int = 200,
        min_samples: int = 10,
        name_min_samples: int = 3,
        keys_kept: int = KEYS_KEPT,
    ) -> None:
        if window < 1 or not 1 <= min_samples <= window or not 1 <= name_min_samples <= window:
            raise ValueError("need window >= min_samples >= 1 and window >= name_min_samples >= 1")
        self.window = window
        self.keys_kept = keys_kept
        self._mins = (name_min_samples, *[min_samples] * (len(GROUPS) - 1))
        self._by: list[dict[Key, _Samples]] = [{} for _ in GROUPS]

    def learn(self, spec: JobSpec, service_gpu_s: float) -> None:
        """A job of ``spec`` finished after ``service_gpu_s`` GPU-seconds of service."""
        for i, ((_, key_of), table) in enumerate(zip(GROUPS, self._by, strict=True)):
            k = key_of(spec)
            s = table.pop(k, None) if i < PER_USER else table.get(k)
            if s is None:
                s = _Samples()
                if i < PER_USER and len(table) >= self.keys_kept:
                    del table[next(iter(table))]  # the least recently finished group
            table[k] = s  # (re)inserted last: the tables keep the groups by last use
            s.add(service_gpu_s, self.window)

    def remaining(self, spec: JobSpec, attained_gpu_s: float) -> float | None:
        """The expected remaining GPU-seconds of a job of ``spec`` that has had
        ``attained_gpu_s``, from the narrowest group with enough samples; None: too few."""
        for (_, key_of), table, least in zip(GROUPS, self._by, self._mins, strict=True):
            s = table.get(key_of(spec))
            if s is not None and len(s.order) >= least:
                return s.remaining(attained_gpu_s)
        return None
