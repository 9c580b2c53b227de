"""The agent's task types, shared by its pure state machine (``state``) and the I/O that runs
tasks (``runner``): a task's key, the exit codes the agent gives a task it did not run, and the
events the runner reports. No I/O here (``.importlinter`` keeps ``state`` off the runner)."""

from __future__ import annotations

import signal
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal

from gpufleet.api.jobmetrics import JobMetricsIn
from gpufleet.api.schemas import AgentEvent
from gpufleet.model.notice import EVICTION_KILLS

Key = tuple[str, int, int]  # (job, attempt, rank)
EXIT_REFUSED = 125  # the agent refused the launch or could not start it (as docker run does)
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127
# the start of the why of a task its node stopped for its own sake (its lease expired): such
# an exit goes to the controller as cause "fenced", requeued rather than charged to the job
FENCED = "fenced:"


@dataclass(frozen=True, slots=True)
class RunnerEvent:
    kind: Literal["started", "exited", "checkpoint", "metrics"]
    key: Key
    exit_code: int = 0
    why: str = ""
    age_s: float = 0.0  # "checkpoint": the job's checkpoint file was written this long ago
    # "metrics": what the task's metrics file says now (model/jobmetrics.py)
    metrics: tuple[tuple[str, float], ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def cause(self) -> Literal["", "fenced", "evicted"]:
        """ "fenced": stopped for the node's sake; "evicted": stopped on the controller's Kill
        of an eviction (its reason first in the why: ``exits.describe``)."""
        if self.why.startswith(FENCED):
            return "fenced"
        if self.kind == "exited" and self.why.split(";", 1)[0] in EVICTION_KILLS:
            return "evicted"
        return ""

    def wire(self) -> AgentEvent:
        job, attempt, rank = self.key
        return AgentEvent(
            kind=self.kind,
            job=job,
            attempt=attempt,
            rank=rank,
            exit_code=self.exit_code,
            why=self.why,
            cause=self.cause,
            age_s=self.age_s,
            metrics=(
                JobMetricsIn(values=dict(self.metrics), problems=list(self.problems))
                if self.kind == "metrics"
                else None
            ),
        )


class LatestAttempts:
    """Job → the newest attempt seen, for the last ``limit`` jobs (the oldest are forgotten:
    their attempts were superseded long ago)."""

    def __init__(self, limit: int = 100_000) -> None:
        self._d: OrderedDict[str, int] = OrderedDict()
        self._limit = limit

    def get(self, job: str) -> int | None:
        return self._d.get(job)

    def put(self, job: str, attempt: int) -> None:
        self._d[job] = max(attempt, self._d.get(job, attempt))
        self._d.move_to_end(job)
        while len(self._d) > self._limit:
            self._d.popitem(last=False)


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
