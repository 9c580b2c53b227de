"""Each job's own metrics, as its agent last reported its metrics file (model/jobmetrics.py):
kept in the controller's memory for the newest ``LIMIT`` jobs (a restarted controller hears
them again when the job's agent registers anew: agent/runner/metricsfile.py), shown by
``GET /jobs/{id}`` and as the family ``gpufleet_job_metric{hpc_job, name}`` on /metrics."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from gpufleet.api.jobmetrics import JobMetricsIn, JobMetricsOut

LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class Reported:
    attempt: int
    values: tuple[tuple[str, float], ...]
    problems: tuple[str, ...]
    at: float

    def out(self) -> JobMetricsOut:
        return JobMetricsOut(values=dict(self.values), problems=list(self.problems), at=self.at)


class JobMetricsBook:
    def __init__(self, limit: int = LIMIT) -> None:
        self._d: OrderedDict[str, Reported] = OrderedDict()
        self.limit = limit

    def record(self, job: str, attempt: int, m: JobMetricsIn, now: float) -> None:
        """The newest report of the job's newest attempt (an older attempt's is stale)."""
        old = self._d.get(job)
        if old is not None and old.attempt > attempt:
            return
        self._d[job] = Reported(attempt, tuple(m.values.items()), tuple(m.problems), now)
        self._d.move_to_end(job)
        while len(self._d) > self.limit:
            self._d.popitem(last=False)

    def get(self, job: str) -> JobMetricsOut | None:
        r = self._d.get(job)
        return None if r is None else r.out()

    def items(self) -> list[tuple[str, Reported]]:
        return list(self._d.items())
