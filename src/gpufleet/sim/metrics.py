"""The figures of a finished replay: completion times, waits, slowdown, utilization, fairness.

Definitions (all times in seconds; trace time starts at the first submission, t = 0):

- JCT (job completion time) = end − submit; wait = JCT − time held on GPUs (all attempts, restart
  overheads included), so time spent pending again after a preemption counts as waiting.
- slowdown = JCT / duration, duration being the job's run time in the trace; jobs of zero
  duration are left out of the slowdown figures (their slowdown is undefined).
- Percentiles are numpy's default (linear interpolation between order statistics).
- utilization = allocated GPU-seconds / (cluster GPUs × makespan); a fractional GPU share counts
  its fraction; the cluster's GPUs are its nominal count (time nodes spend failed is not taken
  out). makespan = the last job's end (t = 0 is the first submission).
- makespan lower bound = max(Σ gᵢ·dᵢ / G, max dᵢ) over the jobs that can run at all (gᵢ GPUs,
  dᵢ duration, G the cluster's GPUs). It ignores arrival times, so on a trace that arrives over
  months (Philly) the bound is loose; ``arrival_bound_s`` (max sᵢ + dᵢ) is given beside it.
- entitlement_fairness: how close each queue's share of GPU-time came to its entitlement, per
  hour (``scheduler/entitlement.py``): in each hour with two or more queues with demand, Jain's
  index over received ÷ entitled GPU-time, the entitlement being the queue's weighted max-min
  fair share of the cluster given every queue's demand; the mean over those hours. 1 when every
  queue got its entitlement; it replaces Jain over mean slowdowns, which a fair-share scheduler
  rightly makes unequal. Per queue, ``entitled_ratio`` is received ÷ entitled over those hours.
- lost_gpu_hours_preemption / lost_gpu_hours_node_failure: GPU-hours of work a job had done
  and then lost, summed over its interruptions (preempted; node lost): per interruption, its GPUs
  × the useful seconds of the attempt (restart overhead excluded) past its last checkpoint (all
  of them without a checkpoint interval). The time the redo takes is in the allocated GPU-seconds
  already; these figures say how much of it was redone.
- never_schedulable: jobs still pending at the end whose reason is NeverSchedulable (larger than
  the cluster, even empty). They are counted in ``jobs`` and left out of the other figures.
  ``unfinished`` counts any other job that did not end (it should be 0).

Pure stdlib and numpy; ``from_simulation`` reads a finished ``Simulation``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from gpufleet.model.reason import Reason, ReasonCode
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.cycle import run_cycle
from gpufleet.scheduler.entitlement import Span, entitlement_fairness
from gpufleet.sim.elastic import max_gpus
from gpufleet.sim.engine import JobOutcome, Simulation

# the --json keys of the issue, in its order (plus "queues")
SUMMARY_KEYS = (
    "jobs",
    "avg_jct_s",
    "p50_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "avg_wait_s",
    "p95_wait_s",
    "avg_slowdown",
    "utilization",
    "makespan_s",
    "makespan_lower_bound_s",
    "entitlement_fairness",
    "preemptions",
    "lost_gpu_hours_preemption",
    "lost_gpu_hours_node_failure",
    "never_schedulable",
    "wall_s",
    "node_hours",
    "cost",
)


@dataclass(frozen=True, slots=True)
class JobRow:
    """One job's outcome with what the metrics need beside it."""

    id: str
    queue: str
    gpus: float  # total GPUs (fractional shares count their fraction)
    submit_time: float
    duration_s: float
    first_start: float | None
    end_time: float | None
    state: str
    attempts: int
    preemptions: int
    run_s: float
    reason: str = ""  # why it is still pending at the end ("" once ended)
    never: bool = False
    lost_preempted_s: float = 0.0  # seconds of the job's work lost to preemptions
    lost_failed_s: float = 0.0  # … to node failures
    runs: tuple[tuple[float, float], ...] = ()  # (start, end) of each attempt, when known

    @property
    def lost_work_s(self) -> float:
        return self.lost_preempted_s + self.lost_failed_s

    @property
    def finished(self) -> bool:
        return self.end_time is not None

    @property
    def jct_s(self) -> float | None:
        return None if self.end_time is None else self.end_time - self.submit_time

    @property
    def wait_s(self) -> float | None:
        jct = self.jct_s
        return None if jct is None else max(0.0, jct - self.run_s)

    @property
    def slowdown(self) -> float | None:
        jct = self.jct_s
        return None if jct is None or self.duration_s <= 0 else jct / self.duration_s


@dataclass(frozen=True, slots=True)
class QueueFigures:
    jobs: int
    finished: int
    never_schedulable: int
    avg_jct_s: float | None
    p95_jct_s: float | None
    avg_wait_s: float | None
    avg_slowdown: float | None
    gpu_seconds: float  # allocated GPU-seconds
    gpu_share: float  # of all allocated GPU-seconds
    entitled_ratio: float | None = None  # GPU-time received ÷ entitled (entitlement_fairness)


@dataclass(frozen=True, slots=True)
class ReplayMetrics:
    jobs: int
    avg_jct_s: float | None
    p50_jct_s: float | None
    p95_jct_s: float | None
    p99_jct_s: float | None
    avg_wait_s: float | None
    p95_wait_s: float | None
    avg_slowdown: float | None
    utilization: float
    makespan_s: float
    makespan_lower_bound_s: float
    entitlement_fairness: float | None
    preemptions: int
    never_schedulable: int
    wall_s: float
    lost_gpu_hours_preemption: float = 0.0
    lost_gpu_hours_node_failure: float = 0.0
    queues: dict[str, QueueFigures] = field(default_factory=dict)
    unfinished: int = 0
    arrival_bound_s: float = 0.0
    gpus: int = 0
    never_ids: tuple[str, ...] = ()
    node_hours: float = 0.0  # nodes powered × hours (fixed nodes all the run long)
    cost: float | None = None  # node-hours × price (sim/elastic.py); None: no price known
    peak_nodes: int = 0  # the most nodes powered at once

    @property
    def makespan_ratio(self) -> float | None:
        lb = self.makespan_lower_bound_s
        return self.makespan_s / lb if lb > 0 else None

    def to_json(self) -> dict[str, Any]:
        """Exactly the issue's keys, then ``queues`` (per-queue figures)."""
        out: dict[str, Any] = {k: _clean(getattr(self, k)) for k in SUMMARY_KEYS}
        out["queues"] = {
            q: {k: _clean(v) for k, v in asdict(f).items()} for q, f in sorted(self.queues.items())
        }
        return out


def _clean(v: Any) -> Any:
    """Plain JSON values: floats rounded to the microsecond scale, numpy types unwrapped."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float):
        return round(v, 6)
    return v


# ---------------------------------------------------------------------------------------------


def _mean(xs: Sequence[float]) -> float | None:
    return float(np.mean(xs)) if len(xs) else None


def _pct(xs: Sequence[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if len(xs) else None


def jain_index(values: Iterable[float]) -> float | None:
    """Jain's fairness index of ``values``; None for none; 1.0 when all are zero."""
    xs = np.asarray(list(values), dtype=float)
    if xs.size == 0:
        return None
    sq = float(np.sum(xs * xs))
    return 1.0 if sq == 0 else float(np.sum(xs) ** 2 / (xs.size * sq))


def compute(
    rows: Sequence[JobRow],
    *,
    gpus: int,
    preemptions: int,
    wall_s: float,
    weights: Mapping[str, float] | None = None,
) -> ReplayMetrics:
    """The figures of ``rows`` on a cluster of ``gpus`` GPUs (``weights``: the queues'
    fair-share weights, 1 where not given)."""
    done = [r for r in rows if r.finished]
    never = [r for r in rows if r.never]
    runnable = [r for r in rows if not r.never]
    jct = [r.jct_s for r in done if r.jct_s is not None]
    wait = [r.wait_s for r in done if r.wait_s is not None]
    slow = [r.slowdown for r in done if r.slowdown is not None]
    makespan = max((r.end_time for r in done if r.end_time is not None), default=0.0)
    allocated = sum(r.run_s * r.gpus for r in rows)
    work = sum(r.gpus * r.duration_s for r in runnable)
    lower = max(work / gpus if gpus else 0.0, max((r.duration_s for r in runnable), default=0.0))
    arrival = max((r.submit_time + r.duration_s for r in runnable), default=0.0)

    by_queue: dict[str, list[JobRow]] = {}
    for r in rows:
        by_queue.setdefault(r.queue, []).append(r)
    ent = entitlement_fairness(
        [_span(r) for r in rows if not r.never], gpus, weights or {}, until=makespan
    )
    queues: dict[str, QueueFigures] = {}
    for q, qrows in sorted(by_queue.items()):
        qdone = [r for r in qrows if r.finished]
        qjct = [r.jct_s for r in qdone if r.jct_s is not None]
        qslow = [r.slowdown for r in qdone if r.slowdown is not None]
        qgpu = sum(r.run_s * r.gpus for r in qrows)
        queues[q] = QueueFigures(
            jobs=len(qrows),
            finished=len(qdone),
            never_schedulable=sum(1 for r in qrows if r.never),
            avg_jct_s=_mean(qjct),
            p95_jct_s=_pct(qjct, 95),
            avg_wait_s=_mean([r.wait_s for r in qdone if r.wait_s is not None]),
            avg_slowdown=_mean(qslow),
            gpu_seconds=qgpu,
            gpu_share=qgpu / allocated if allocated else 0.0,
            entitled_ratio=ent.ratio.get(q),
        )
    return ReplayMetrics(
        jobs=len(rows),
        avg_jct_s=_mean(jct),
        p50_jct_s=_pct(jct, 50),
        p95_jct_s=_pct(jct, 95),
        p99_jct_s=_pct(jct, 99),
        avg_wait_s=_mean(wait),
        p95_wait_s=_pct(wait, 95),
        avg_slowdown=_mean(slow),
        utilization=allocated / (gpus * makespan) if gpus and makespan > 0 else 0.0,
        makespan_s=makespan,
        makespan_lower_bound_s=lower,
        entitlement_fairness=ent.jain,
        preemptions=preemptions,
        never_schedulable=len(never),
        wall_s=wall_s,
        lost_gpu_hours_preemption=sum(r.gpus * r.lost_preempted_s for r in rows) / 3600,
        lost_gpu_hours_node_failure=sum(r.gpus * r.lost_failed_s for r in rows) / 3600,
        queues=queues,
        unfinished=sum(1 for r in rows if not r.finished and not r.never),
        arrival_bound_s=arrival,
        gpus=gpus,
        never_ids=tuple(r.id for r in never),
    )


def _span(r: JobRow) -> Span:
    runs = r.runs
    if not runs and r.first_start is not None and r.run_s > 0:  # one attempt, as far as known
        runs = ((r.first_start, r.first_start + r.run_s),)
    return Span(r.queue, r.gpus, r.submit_time, r.end_time, runs)


# ---------------------------------------------------------------------------------------------
# from a finished Simulation


def final_reasons(sim: Simulation) -> Mapping[str, Reason]:
    """Why each job still pending at the end waits, by one extra, pure scheduling cycle with
    explanations on (the replay itself may run without them, for speed). Nothing is applied."""
    ctl = sim.controller
    if not ctl.pending_count:
        return {}
    profile = replace(ctl.profile, explain=True)
    return run_cycle(ctl.snapshot(ctl.now), profile).reasons


def job_rows(sim: Simulation) -> list[JobRow]:
    """Every job of the simulation, in submission order, with its final reason if pending."""
    reasons = final_reasons(sim)
    rows = []
    for o in sim.outcomes.values():
        rec = sim.controller.jobs.get(o.id)
        gpus = float(o.gpus)
        if rec is not None:
            gpus = rec.job.spec.total_gpu_milli / MILLI
        why = reasons.get(o.id) if o.end_time is None else None
        rows.append(_row(o, gpus, why))
    return rows


def _row(o: JobOutcome, gpus: float, why: Reason | None) -> JobRow:
    return JobRow(
        id=o.id,
        queue=o.queue,
        gpus=gpus,
        submit_time=o.submit_time,
        duration_s=o.duration_s,
        first_start=o.first_start,
        end_time=o.end_time,
        state=o.state,
        attempts=o.attempts,
        preemptions=o.preemptions,
        run_s=o.run_s,
        reason=str(why) if why is not None else "",
        never=why is not None and why.code is ReasonCode.NEVER,
        lost_preempted_s=o.lost_preempted_s,
        lost_failed_s=o.lost_failed_s,
        runs=tuple(o.runs),
    )


def from_simulation(sim: Simulation, wall_s: float) -> tuple[ReplayMetrics, list[JobRow]]:
    """The figures of a finished simulation and the per-job rows they come from."""
    rows = job_rows(sim)
    gpus = max_gpus(sim.cluster)
    weights = {q.name: q.weight for q in sim.controller.queues.values()}
    m = compute(rows, gpus=gpus, preemptions=sim.preemptions, wall_s=wall_s, weights=weights)
    p = sim.power
    return replace(m, node_hours=p.node_hours, cost=p.cost, peak_nodes=p.peak), rows
