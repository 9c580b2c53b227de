"""Each trace job's time limit (the CLI's ``--time-limit``): ``auto`` (the default) keeps a limit
the trace gives (only ``jobs`` files can) and otherwise sets the exact duration; ``exact`` sets
every job's limit to its duration; ``none`` removes them; a number f sets f × duration. ``exact``
is the default because EASY backfill needs an end time for every running job, and the traces
record no requested limits: the exact duration is the idealised setting most trace studies of
backfill use, and it never cuts a job. Users' real estimates are poorer; ``--time-limit 2`` or
more models them. With a restart overhead, the limit also covers it (``slack_s``), so a resumed
job is not cut by the overhead alone."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpufleet.model.errors import SpecError
from gpufleet.sim.engine import TraceJob


@dataclass(frozen=True, slots=True)
class TimeLimit:
    """How each job's time limit is set: ``auto``, ``exact``, ``none`` or ``factor`` × duration."""

    mode: str = "auto"
    factor: float = 1.0

    @staticmethod
    def parse(text: str) -> TimeLimit:
        t = text.strip().lower()
        if t in ("auto", "exact", "none"):
            return TimeLimit(t)
        try:
            f = float(t)
        except ValueError:
            raise SpecError(
                f"must be auto, exact, none or a factor such as 1.5; got {text!r}",
                field="--time-limit",
            ) from None
        if not math.isfinite(f) or f <= 0:
            raise SpecError(
                f"a factor must be a positive number, got {text!r}", field="--time-limit"
            )
        return TimeLimit("factor", f)

    def describe(self) -> str:
        return f"{self.factor:g} × duration" if self.mode == "factor" else self.mode

    def limit_for(self, job: TraceJob, slack_s: float = 0.0) -> float | None:
        if self.mode == "none":
            return None
        if self.mode == "auto" and job.spec.time_limit_s is not None:
            return job.spec.time_limit_s
        factor = self.factor if self.mode == "factor" else 1.0
        # a zero limit means "none" to JobSpec: keep a tiny positive one for zero-length jobs
        return max(factor * job.duration_s + slack_s, 1e-6)


def apply_time_limits(
    jobs: Sequence[TraceJob], policy: TimeLimit, slack_s: float = 0.0
) -> list[TraceJob]:
    """The jobs with their limits set by ``policy`` (``slack_s`` added to derived limits)."""
    out = []
    for j in jobs:
        limit = policy.limit_for(j, slack_s)
        out.append(
            j
            if limit == j.spec.time_limit_s
            else replace(j, spec=replace(j.spec, time_limit_s=limit))
        )
    return out
