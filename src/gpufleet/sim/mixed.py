"""Graphics and compute on one cluster: a training trace plus cloud-desktop sessions, replayed
through the scheduler on training nodes beside graphics nodes, under a placement policy.

Desktop sessions arrive as a Poisson process whose rate follows the working day (peak in the
afternoon, ``night`` of the peak at 03:00), last a log-normal time (median ``median_h``) and
each take a share of one GPU that has the graphics pipeline (``gpu_engines: {graphics: 1}``).
Two policies: ``apart`` keeps the training jobs on the training GPUs (their own pool), so the
graphics GPUs wait for desktops; ``together`` lets training fill the graphics GPUs while they
are free. The figures a planner asks for: each GPU model's utilization, who held it (training or
desktops), and the desktops' waits beside the training jobs' JCT.

Video jobs (transcodes: a share of one GPU and one NVENC, ``Videos``) may come too; with the
scheduler's ``pack_encoders`` (ADR 0050) one that finds no GPU with free compute may use the
encoder of a GPU that training holds whole, taking none of its compute. Each model's video
engines are reported as the share of their engine-time held (an L40S has 3 NVENC: one video
job on each of its GPUs holds a third of them).
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpufleet.core.commands import Command, Launch, Transition
from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.model.engines import engines_of
from gpufleet.model.job import JobSpec, JobState
from gpufleet.model.queue import QueueSpec
from gpufleet.model.resources import MILLI
from gpufleet.scheduler.framework import Profile
from gpufleet.sim.engine import SimConfig, Simulation, TraceJob
from gpufleet.sim.metrics import JobRow, job_rows

DESKTOP_QUEUE = "desktop"
VIDEO_QUEUE = "video"
VIDEO_ENGINES = ("nvenc", "nvdec", "nvjpg")
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


@dataclass(frozen=True, slots=True)
class Videos:
    """Transcode jobs: a steady Poisson arrival, each a share of one GPU and one NVENC."""

    per_hour: float = 0.0
    days: float = 2.0
    median_min: float = 20.0
    share_milli: int = 250


def video_jobs(v: Videos, seed: int = 0) -> list[TraceJob]:
    rng = random.Random(seed + 1_000_003)  # not the desktops' draws
    out: list[TraceJob] = []
    t, end, rate = 0.0, v.days * _DAY_S, v.per_hour / 3600.0
    while rate > 0:
        t += rng.expovariate(rate)
        if t >= end:
            break
        n = len(out)
        spec = JobSpec(
            f"video-{n}", f"editor{n % 8}", VIDEO_QUEUE, 1, 1, v.share_milli,
            cpu_milli=2_000, memory_mib=4_096, gpu_engines=(("nvenc", 1),),
        )  # fmt: skip
        duration = v.median_min * 60.0 * math.exp(rng.gauss(0.0, 0.5))
        out.append(TraceJob(f"vid{n}", spec, t, max(60.0, duration)))
    return out


def _kind(job_id: str) -> str:
    if job_id.startswith("desk"):
        return "desktop"
    return "video" if job_id.startswith("vid") else "training"


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
    training: Sequence[TraceJob],
    desktops: Sequence[TraceJob],
    policy: str,
    train_model: str,
    videos: Sequence[TraceJob] = (),
) -> list[TraceJob]:
    """The two workloads as one trace; ``apart`` pins training to the training GPUs."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    train = [
        replace(j, spec=replace(j.spec, gpu_models=(train_model,))) if policy == "apart" else j
        for j in training
    ]
    return sorted([*train, *desktops, *videos], key=lambda j: j.submit_time)


class _HeldBy(Simulation):
    """A simulation that also counts, per (GPU model, workload), the GPU-seconds held, and per
    (GPU model, video engine) the engine-seconds held; video jobs packed beside training."""

    def __init__(self, *a: object, engines: dict[str, dict[str, int]], **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.held_s: dict[tuple[str, str], float] = defaultdict(float)
        self.engine_s: dict[tuple[str, str], float] = defaultdict(float)
        self.packed: set[str] = set()  # video jobs that ran on a training GPU's encoder
        self._engines = engines  # job → the video engines it asks for, per GPU
        self._since: dict[str, tuple[float, dict[tuple[str, str], float]]] = {}

    def _held(self, c: Launch) -> dict[tuple[str, str], float]:
        """(model, workload or "engine:" + name) → GPUs (or engines) the launch holds."""
        by: dict[tuple[str, str], float] = defaultdict(float)
        for p in c.allocation:
            model = self._node_specs[p.node].gpu_model
            by[(model, _kind(c.job_id))] += len(p.gpus) * p.gpu_milli / MILLI
            for e, n in self._engines.get(c.job_id, {}).items():
                by[(model, "engine:" + e)] += len(p.gpus) * n
            if p.gpus and p.gpu_milli == 0:
                self.packed.add(c.job_id)
        return by

    def apply(self, commands: Sequence[Command]) -> None:
        for c in commands:
            if isinstance(c, Launch) and c.job_id in self.work:
                self._since[c.job_id] = (self.now, self._held(c))
            elif isinstance(c, Transition) and c.old in _HELD and c.new not in _HELD:
                since, held = self._since.pop(c.job_id, (c.time, {}))
                for (model, what), n in held.items():
                    got = self.engine_s if what.startswith("engine:") else self.held_s
                    got[(model, what.removeprefix("engine:"))] += n * (c.time - since)
        super().apply(commands)


@dataclass(frozen=True, slots=True)
class MixedFigures:
    policy: str
    utilization: dict[str, dict[str, float]]  # model → {training, desktop, video}: GPU-time share
    engines: dict[str, dict[str, float]]  # model → {nvenc, ...}: share of its engine-time held
    desktop_wait_p50_s: float | None
    desktop_wait_p90_s: float | None
    desktops: int
    desktops_unstarted: int
    training_mean_jct_s: float | None
    training_unfinished: int
    span_s: float
    videos: int = 0
    videos_packed: int = 0  # ran on a training GPU's encoder (pack_encoders)
    video_wait_p50_s: float | None = None
    video_wait_p90_s: float | None = None


def run_mixed(
    cluster: ClusterSpec, jobs: Sequence[TraceJob], profile: Profile, policy: str, seed: int = 0
) -> MixedFigures:
    queues = tuple(QueueSpec(q) for q in sorted({j.spec.queue for j in jobs}))
    engines = {
        j.id: {e: n for e, n in j.spec.gpu_engines if e in VIDEO_ENGINES}
        for j in jobs
        if any(e in VIDEO_ENGINES for e, _ in j.spec.gpu_engines)
    }
    sim = _HeldBy(
        replace(cluster, queues=queues), profile, jobs, SimConfig(seed=seed), engines=engines
    )
    sim.run()
    rows = job_rows(sim)
    f = _figures(policy, cluster, sim.held_s, rows, sim.now)
    vid = _waits([r for r in rows if r.queue == VIDEO_QUEUE])
    return replace(
        f,
        engines=_engine_shares(cluster, sim.engine_s, f.span_s),
        videos=sum(1 for r in rows if r.queue == VIDEO_QUEUE),
        videos_packed=len(sim.packed),
        video_wait_p50_s=_pct(vid, 0.5),
        video_wait_p90_s=_pct(vid, 0.9),
    )


def _waits(rows: Sequence[JobRow]) -> list[float]:
    return sorted(r.first_start - r.submit_time for r in rows if r.first_start is not None)


def _engine_shares(
    cluster: ClusterSpec, held: dict[tuple[str, str], float], span: float
) -> dict[str, dict[str, float]]:
    """Each model's video engines that any job held: engine-seconds over its capacity."""
    capacity: Counter[tuple[str, str]] = Counter()
    for n in cluster.nodes:
        e = engines_of(n.gpu_model)
        for name in VIDEO_ENGINES:
            capacity[(n.gpu_model, name)] += n.gpus * (e.count(name) or 0)
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (model, name), cap in sorted(capacity.items()):
        if cap and (model, name) in held:
            out[model][name] = round(held[(model, name)] / (cap * span), 4)
    return dict(out)


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
    kinds = ("training", "desktop", "video")
    util = {
        m: {k: round(held.get((m, k), 0.0) / (g * span), 4) for k in kinds}
        for m, g in sorted(capacity.items())
    }
    desk = [r for r in rows if r.queue == DESKTOP_QUEUE]
    waits = _waits(desk)
    others = (DESKTOP_QUEUE, VIDEO_QUEUE)
    train = [r.jct_s for r in rows if r.queue not in others and r.jct_s is not None]
    return MixedFigures(
        policy,
        util,
        {},
        _pct(waits, 0.5),
        _pct(waits, 0.9),
        len(desk),
        sum(1 for r in desk if r.first_start is None),
        sum(train) / len(train) if train else None,
        sum(1 for r in rows if r.queue not in others and r.jct_s is None),
        span,
    )


def _pct(xs: Sequence[float], q: float) -> float | None:
    if not xs:
        return None
    return xs[min(len(xs) - 1, int(q * len(xs)))]
