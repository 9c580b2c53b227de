"""What the replaying commands share: the workload (cluster, jobs, replay settings) read from
their options, the replays run with a progress bar, and the warnings about their jobs."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from gpufleet.cli.simulate.console import stderr, warn
from gpufleet.cli.simulate.flags import ClusterFlags, ProfileFlags, ReplayFlags, ScaleFlags
from gpufleet.io.specs import load_queues
from gpufleet.model.checkpoint import check_interval
from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.errors import SpecError
from gpufleet.sim import report
from gpufleet.sim.elastic import elastic_cluster
from gpufleet.sim.engine import SimConfig, TraceJob
from gpufleet.sim.replay import (
    ProfileChoice,
    ReplayRun,
    equal_share_queues,
    load_cluster_file,
    load_failures,
    run_replay,
    uniform_cluster,
    with_queues,
)
from gpufleet.sim.traces import FORMATS, TimeLimit, apply_time_limits, load_trace


@dataclass(frozen=True, slots=True)
class Workload:
    cluster: ClusterSpec
    jobs: list[TraceJob]
    config: SimConfig


def names(text: str) -> tuple[str, ...]:
    """A comma list of plugin names; ``none`` names none."""
    return tuple(n.strip() for n in text.split(",") if n.strip() and n.strip() != "none")


def las_options(las_thresholds: str) -> dict[str, dict[str, Any]]:
    """The plugins' options from ``--las-thresholds`` (both LAS orders' queues)."""
    if not las_thresholds:
        return {}
    try:
        values = [float(x) for x in las_thresholds.split(",") if x.strip()]
    except ValueError:
        raise SpecError(
            f"must be GPU-seconds separated by commas, got {las_thresholds!r}",
            field="--las-thresholds",
        ) from None
    return {o: {"thresholds_gpu_s": values} for o in ("order/las", "order/las-history")}


def profile(order: str, flags: ProfileFlags) -> ProfileChoice:
    """The profile ``order`` + the other plugins the flags name."""
    return ProfileChoice(
        order,
        flags.placement,
        flags.backfill,
        names(flags.preempt),
        flags.admit,
        las_options(flags.las_thresholds),
    )


def load_workload(
    trace: Path,
    fmt: str,
    layout: ClusterFlags,
    flags: ReplayFlags,
    seed: int,
    scale: ScaleFlags | None = None,
) -> Workload:
    """The cluster, the trace's jobs with their time limits, and the replay's settings."""
    if fmt not in FORMATS:
        raise SpecError(f"must be one of {', '.join(FORMATS)}, got {fmt!r}", field="--format")
    if flags.queues is not None and flags.equal_shares:
        raise SpecError("give --queues or --equal-shares, not both", field="--equal-shares")
    if (
        flags.restart_overhead < 0
        or flags.repair < 0
        or (flags.mtbf is not None and flags.mtbf <= 0)
        or (flags.node_grace_s is not None and not 0 < flags.node_grace_s < math.inf)
    ):
        raise SpecError(
            "--restart-overhead and --repair must be ≥ 0, --mtbf > 0 and --node-grace-s > 0 finite",
            field="options",
        )
    limits = TimeLimit.parse(flags.time_limit)
    scale = scale or ScaleFlags()
    if scale.node_hour_price is not None and not 0 <= scale.node_hour_price < math.inf:
        raise SpecError("must be a finite price >= 0", field="--node-hour-price")
    if scale.autoscale:
        cluster = _elastic(layout, scale)
    elif scale.autoscale_max is not None or scale.autoscale_min:
        raise SpecError("--autoscale-min and --autoscale-max need --autoscale", field="options")
    elif layout.cluster is not None:
        cluster = load_cluster_file(layout.cluster)
    else:
        cluster = uniform_cluster(layout.nodes, layout.gpus_per_node, layout.leaves)
    per_node = layout.gpus_per_node
    node_gpus = max((n.gpus for n in cluster.nodes), default=per_node) or per_node
    notes: list[str] = []
    jobs = load_trace(trace, fmt, gpus_per_node=node_gpus, notes=notes)
    for note in notes:
        warn(note)
    jobs = apply_time_limits(jobs, limits, slack_s=flags.restart_overhead)
    if flags.queues is not None:
        cluster = with_queues(cluster, load_queues(flags.queues))
    elif flags.equal_shares:
        cluster = with_queues(cluster, equal_share_queues(jobs))
    failures = load_failures(flags.fail, cluster, flags.repair) if flags.fail is not None else []
    config = SimConfig(
        restart_overhead_s=flags.restart_overhead,
        failures=failures,
        mtbf_s=flags.mtbf,
        repair_s=flags.repair,
        node_grace_s=flags.node_grace_s,
        seed=seed,
        checkpoint_interval_s=check_interval(
            flags.checkpoint_interval, field="--checkpoint-interval"
        ),
        checkpoint_on_preempt=flags.checkpoint_on_preempt,
        preempt_grace_s=flags.preempt_grace_s,
        node_hour_price=scale.node_hour_price,
    )
    return Workload(cluster, jobs, config)


def _elastic(layout: ClusterFlags, scale: ScaleFlags) -> ClusterSpec:
    """``--autoscale``: one elastic pool of ``--gpus-per-node`` nodes under ``--leaves``."""
    if layout.cluster is not None:
        raise SpecError(
            "--autoscale builds its own pool: a --cluster file declares elastic pools itself",
            field="--autoscale",
        )
    if scale.autoscale_max is None:
        raise SpecError("--autoscale needs --autoscale-max", field="--autoscale-max")
    from gpufleet.sim.replay import DEFAULT_GPU_MODEL

    return elastic_cluster(
        scale.autoscale_min,
        scale.autoscale_max,
        layout.gpus_per_node,
        layout.leaves,
        gpu_model=DEFAULT_GPU_MODEL,
        start=scale.autoscale_start_s,
        idle_s=scale.autoscale_idle_s,
    )


def run_all(
    workload: Workload, choices: Sequence[ProfileChoice], progress: bool
) -> list[ReplayRun]:
    """A replay of the workload through each profile, with a progress bar on stderr."""
    runs = []
    total = len(workload.jobs)
    if not progress:
        return [run_replay(workload.cluster, workload.jobs, c, workload.config) for c in choices]
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} jobs · t={task.fields[sim_t]}"),
        TimeElapsedColumn(),
        console=stderr(),
        transient=True,
    ) as bar:
        for c in choices:
            task = bar.add_task(c.label, total=total, sim_t="0 s")

            def advance(t: float, finished: int, task: Any = task) -> None:
                bar.update(task, completed=finished, sim_t=report.duration(t))

            runs.append(
                run_replay(workload.cluster, workload.jobs, c, workload.config, progress=advance)
            )
            bar.update(task, completed=total)
    return runs


def warn_unfinished(runs: Sequence[ReplayRun]) -> None:
    """A warning for each run's jobs that never could run, or never finished, and for the work
    its preemptions threw away."""
    for r in runs:
        m = r.metrics
        if m.never_schedulable:
            warn(
                f"{r.label}: {m.never_schedulable} job(s) can never be scheduled on this cluster "
                f"({', '.join(m.never_ids[:5])}{', …' if len(m.never_ids) > 5 else ''}); "
                "they are counted in jobs and left out of the other figures"
            )
        if m.unfinished:
            warn(f"{r.label}: {m.unfinished} job(s) never finished (see the per-job CSV)")
        if m.lost_gpu_hours_preemption > 0:  # LAS on a full cluster can lose more than it wins
            warn(
                f"{r.label}: {m.preemptions:,} preemption(s) threw away "
                f"{m.lost_gpu_hours_preemption:,.1f} GPU-h of work: a preempted job keeps only "
                "its last checkpoint (none unless --checkpoint-interval: it restarts from zero); "
                "--checkpoint-on-preempt models jobs that save their state at the stop signal, "
                "--preempt-grace-s S a checkpoint notice of S seconds"
            )


def nodes_text(n: int) -> str:
    """``64 nodes``, ``1 node``."""
    return f"{n:,} node{'s' if n != 1 else ''}"


def show_progress(as_json: bool) -> bool:
    """A progress bar only for a person watching: not with --json, not into a pipe."""
    return not as_json and sys.stderr.isatty()
