"""How far the start plan's estimates were off on this cluster, learned as jobs start: the
80 % band of a new estimate.

Pure: the core keeps one (``ClusterState.start_errors``), live and in the simulator alike. The
first estimate a job is told (``told``: its plan's wait, from the cycle that first works one out
for it, and the band it was shown) is paired with its actual wait when it starts (``started``).
A plan assumes nobody arrives after it is made, which is never true on a shared cluster: jobs
of queues under their share arrive and go ahead, jobs end before their predicted time and bring
others forward. How far that moves a start grows with how far away the plan puts it, so the
score kept is the error relative to the planned wait plus an hour, |actual − planned| ÷
(planned + 1 h), over the last ``KEEP`` estimates that came out. A new estimate's band is its
planned wait ± (planned + 1 h) times a quantile of those scores: split conformal prediction.

Which quantile is learned online too (adaptive conformal inference, Gibbs & Candès, NeurIPS
2021): split conformal holds 80 % only where the errors to come are like the last ones, and
here they come in runs (a flood at a time), so the level itself is steered by how the bands
came out: each banded estimate whose job started outside its band raises the level by
``GAMMA`` × 0.8, each inside lowers it by ``GAMMA`` × 0.2, so that over any long stretch the
share of starts within their band tends to 80 % whatever the errors do (the paper's bound: off
by at most (1 + ``GAMMA``) ÷ (``GAMMA`` × the number of bands that came out)). Nothing in it is
fitted to a trace: ``GAMMA`` is the paper's step.

The estimate itself stays the plan's (shifting it by the errors' median was worse: errors come
in runs). Chosen on Philly's first 10,000 jobs (10 % sample), replayed: per-queue and per-wait
classes of 20 or more, or the 10th to 90th percentiles of the ratio actual ÷ planned, held 13 %
to 55 % of starts (too few recent errors per class, and the errors of a run are alike); the
80th percentile of the last 200 scores, pooled, held 76 % there and 74.4 % over the whole trace.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

H = 3600.0
SCALE = H  # the error is relative to the planned wait plus this
KEEP = 200  # the most recent errors kept
MIN_SAMPLES = 20  # fewer: no band yet
COVER = 0.8  # the band's share of starts
GAMMA = 0.005  # how far one band's outcome moves the level (Gibbs & Candès' step)


@dataclass(frozen=True, slots=True)
class StartBand:
    low: float  # 80 % of such estimates' jobs started between low and high
    high: float
    samples: int


class StartErrors:
    def __init__(
        self,
        min_samples: int = MIN_SAMPLES,
        keep: int = KEEP,
        cover: float = COVER,
        gamma: float = GAMMA,
    ) -> None:
        self.min_samples, self.cover, self.gamma = min_samples, cover, gamma
        # job → (told at, planned wait, the band shown: low, high; None: none shown)
        self._told: dict[str, tuple[float, float, tuple[float, float] | None]] = {}
        self._errors: deque[float] = deque(maxlen=keep)
        self._sorted: list[float] | None = None
        self.level = cover  # the scores' quantile a band is made of, steered by outcomes
        self.learned = 0
        self.banded = 0  # bands that came out …
        self.within = 0  # … with their job's start inside

    def told(
        self,
        job_id: str,
        now: float,
        planned_at: float,
        queue: str,
        bound: str,
        band: StartBand | None = None,
    ) -> None:
        """The plan's first estimate for ``job_id``, made at ``now``, and the band it was shown
        with (later ones are not learned from: the first is the one its user planned on)."""
        if job_id not in self._told:
            shown = None if band is None else (band.low, band.high)
            self._told[job_id] = (now, max(0.0, planned_at - now), shown)

    def started(self, job_id: str, now: float) -> None:
        """The job started: how far its first estimate was off is learned, and whether its
        band held the start steers the level."""
        told = self._told.pop(job_id, None)
        if told is None:
            return
        at, planned, shown = told
        self._errors.append(abs(now - at - planned) / (planned + SCALE))
        self._sorted = None
        self.learned += 1
        if shown is not None:
            inside = shown[0] - 1e-6 <= now <= shown[1] + 1e-6
            self.banded += 1
            self.within += inside
            # ACI: α ← α + γ(α* − miss), on the level 1 − α
            self.level += self.gamma * ((0.0 if inside else 1.0) - (1.0 - self.cover))

    def forget(self, job_id: str) -> None:
        """The job ended without starting (cancelled): nothing to learn."""
        self._told.pop(job_id, None)

    def band(self, now: float, planned_at: float, queue: str, bound: str) -> StartBand | None:
        """The band of a plan's estimate; None while too few estimates came out."""
        n = len(self._errors)
        if n < self.min_samples:
            return None
        if self._sorted is None:
            self._sorted = sorted(self._errors)
        # split conformal's order statistic: the ⌈(n + 1) × level⌉-th smallest score (a level
        # beyond the last: the largest, where the method would say "unbounded")
        k = math.ceil((n + 1) * self.level)
        q = 0.0 if k <= 0 else self._sorted[min(n, k) - 1]
        wait = max(0.0, planned_at - now)
        half = (wait + SCALE) * q
        return StartBand(max(now, planned_at - half), planned_at + half, n)
