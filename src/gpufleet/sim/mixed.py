"""Graphics and compute on one cluster: a training trace plus cloud-desktop sessions, replayed
through the scheduler on training nodes beside graphics nodes, under a placement policy.

Desktop sessions arrive as a Poisson process whose rate follows the working day (peak in the
afternoon, ``night`` of the peak at 03:00), last a log-normal time (median ``median_h``) and
each take a share of one GPU that has the graphics pipeline (``gpu_engines: {graphics: 1}``).
Two policies: ``apart`` keeps the training jobs on the training GPUs (their own pool), so the
graphics GPUs wait for desktops; ``together`` lets training fill the graphics GPUs while they
are free. The figures a planner asks for: each GPU model's utilization, who held it (training or
desktops), and the desktops' waits beside the training jobs' JCT.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpufleet.core.commands import Command, Launch, Transition
from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.queue import QueueSpec
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.framework import Profile
from gpufleet.sim.engine import SimConfig, Simulation, TraceJob
from gpufleet.sim.metrics import JobRow, job_rows

DESKTOP_QUEUE = "desktop"
POLICIES = ("apart", "together")
_DAY_S = 86_400.0
_HELD = (JobState.STARTING, JobState.RUNNING)


@dataclass(frozen=True, slots=True)
class Desktops:
    """The desktop sessions' arrival pattern."""

    per_hour: float = 12.0  # at the afternoon peak
    days: float = 2.0
    night: float = 0.15  # the 03:00 rate as a share of the peak
    median_h: float = 1.5
    share_milli: int = 250  # of one GPU per session (4 desktops a GPU)
    users: int = 40


def desktop_sessions(d: Desktops, seed: int = 0) -> list[TraceJob]:
    """Sessions over ``d.days`` (thinning of a Poisson process at the peak rate)."""
    rng = random.Random(seed)
    out: list[TraceJob] = []
    t, end, peak = 0.0, d.days * _DAY_S, d.per_hour / 3600.0
    while peak > 0:
        t += rng.expovariate(peak)
        if t >= end:
            break
        hour = (t % _DAY_S) / 3600.0
        day = 0.5 - 0.5 * math.cos(2 * math.pi * (hour - 3.0) / 24.0)  # 0 at 03:00, 1 at 15:00
        if rng.random() > d.night + (1 - d.night) * day:
            continue
        n = len(out)
        spec = JobSpec(
            f"desktop-{n}",
            f"artist{n % d.users}",
            DESKTOP_QUEUE,
            1,
            1,
            d.share_milli,
            cpu_milli=2_000,
            memory_mib=8_192,
            gpu_engines=(("graphics", 1),),
        )
        duration = d.median_h * 3600.0 * math.exp(rng.gauss(0.0, 0.8))
        out.append(TraceJob(f"desk{n}", spec, t, max(60.0, duration)))
    return out


def mixed_cluster(
    train_nodes: int, graphics_nodes: int, *, train_model: str = "H100-SXM",
    graphics_model: str = "L40S", graphics_gpus: int = 4,
) -> ClusterSpec:  # fmt: skip
    """Training nodes (8 GPUs) on one leaf, graphics nodes on another."""
    train = [
        NodeSpec(f"train-{i:02d}", train_model, 8, 128_000, 1024 * 1024, "leaf-0", "pod-0")
        for i in range(train_nodes)
    ]
    gfx = [
        NodeSpec(
            f"gfx-{i:02d}", graphics_model, graphics_gpus, 64_000, 512 * 1024, "leaf-1", "pod-0"
        )
        for i in range(graphics_nodes)
    ]
    nodes = train + gfx
    return ClusterSpec.build("mixed", nodes)


def mixed_jobs(
    training: Sequence[TraceJob], desktops: Sequence[TraceJob], policy: str, train_model: str
) -> list[TraceJob]:
    """The two workloads as one trace; ``apart`` pins training to the training GPUs."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    train = [
        replace(j, spec=replace(j.spec, gpu_models=(train_model,))) if policy == "apart" else j
        for j in training
    ]
    return sorted([*train, *desktops], key=lambda j: j.submit_time)


class _HeldBy(Simulation):
    """A simulation that also counts, per (GPU model, workload), the GPU-seconds held."""

    def __init__(self, *a: object, **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.held_s: dict[tuple[str, str], float] = defaultdict(float)
        self._since: dict[str, tuple[float, dict[str, float]]] = {}

    def apply(self, commands: Sequence[Command]) -> None:
        for c in commands:
            if isinstance(c, Launch) and c.job_id in self.work:
                by: dict[str, float] = defaultdict(float)
                for p in c.allocation:
                    by[self._node_specs[p.node].gpu_model] += len(p.gpus) * p.gpu_milli / MILLI
                self._since[c.job_id] = (self.now, by)
            elif isinstance(c, Transition) and c.old in _HELD and c.new not in _HELD:
                held = self._since.pop(c.job_id, None)
                if held is not None:
                    kind = "desktop" if c.job_id.startswith("desk") else "training"
                    for model, gpus in held[1].items():
                        self.held_s[(model, kind)] += gpus * (c.time - held[0])
        super().apply(commands)


@dataclass(frozen=True, slots=True)
class MixedFigures:
    policy: str
    utilization: dict[str, dict[str, float]]  # model → {training, desktop}: share of its GPU-time
    desktop_wait_p50_s: float | None
    desktop_wait_p90_s: float | None
    desktops: int
    desktops_unstarted: int
    training_mean_jct_s: float | None
    training_unfinished: int
    span_s: float


def run_mixed(
    cluster: ClusterSpec, jobs: Sequence[TraceJob], profile: Profile, policy: str, seed: int = 0
) -> MixedFigures:
    queues = tuple(QueueSpec(q) for q in sorted({j.spec.queue for j in jobs}))
    sim = _HeldBy(replace(cluster, queues=queues), profile, jobs, SimConfig(seed=seed))
    sim.run()
    rows = job_rows(sim)
    return _figures(policy, cluster, sim.held_s, rows, sim.now)


def _figures(
    policy: str,
    cluster: ClusterSpec,
    held: dict[tuple[str, str], float],
    rows: Sequence[JobRow],
    end: float,
) -> MixedFigures:
    capacity: Counter[str] = Counter()
    for n in cluster.nodes:
        capacity[n.gpu_model] += n.gpus
    start = min((r.submit_time for r in rows), default=0.0)
    span = max(end - start, 1.0)
    util = {
        m: {k: round(held.get((m, k), 0.0) / (g * span), 4) for k in ("training", "desktop")}
        for m, g in sorted(capacity.items())
    }
    desk = [r for r in rows if r.queue == DESKTOP_QUEUE]
    waits = sorted(r.first_start - r.submit_time for r in desk if r.first_start is not None)
    train = [r.jct_s for r in rows if r.queue != DESKTOP_QUEUE and r.jct_s is not None]
    return MixedFigures(
        policy,
        util,
        _pct(waits, 0.5),
        _pct(waits, 0.9),
        len(desk),
        sum(1 for r in desk if r.first_start is None),
        sum(train) / len(train) if train else None,
        sum(1 for r in rows if r.queue != DESKTOP_QUEUE and r.jct_s is None),
        span,
    )


def _pct(xs: Sequence[float], q: float) -> float | None:
    if not xs:
        return None
    return xs[min(len(xs) - 1, int(q * len(xs)))]
