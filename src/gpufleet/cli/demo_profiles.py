"""`gpufleet demo-profiles`: a sample cluster and workload, scheduled through every profile.

The first decisions of one profile with every waiting job's Reason, then the whole workload
replayed through each profile (the simulator drives the same core as the live controller)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.io.specs import example, load_cluster, load_yaml
from gpufleet.model.allocation import nodes_of
from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec, JobState
from gpufleet.scheduler.framework import Profile, available
from gpufleet.sim.engine import Simulation, TraceJob

DEFAULT_PROFILE = {
    "order": "fairshare",
    "place": "topology",
    "backfill": "easy",
    "preempt": ("reclaim",),
}


def load_workload(path: str | Path) -> list[TraceJob]:
    """The demo's YAML workload: JobSpec fields plus submit_time, duration_s and count."""
    data = load_yaml(path)
    items = data.get("jobs") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise SpecError("expected a list of jobs under 'jobs'", source=str(path))
    out: list[TraceJob] = []
    for i, raw in enumerate(items):
        if not isinstance(raw, dict):
            raise SpecError("expected a mapping", source=str(path), field=f"jobs[{i}]")
        raw = dict(raw)
        extra: dict[str, Any] = {
            k: raw.pop(k, None) for k in ("submit_time", "duration_s", "count")
        }
        for key in ("submit_time", "duration_s"):
            if not isinstance(extra[key], int | float) or extra[key] < 0:
                raise SpecError("must be a number ≥ 0", source=str(path), field=f"jobs[{i}].{key}")
        count = extra["count"] or 1
        if not isinstance(count, int) or count < 1:
            raise SpecError(
                "must be a positive integer", source=str(path), field=f"jobs[{i}].count"
            )
        spec = JobSpec.from_dict(raw, source=str(path), path=f"jobs[{i}]")
        for k in range(count):
            one = spec if count == 1 else replace(spec, name=f"{spec.name}-{k}")
            out.append(
                TraceJob(
                    f"{len(out) + 1}",
                    one,
                    float(extra["submit_time"]) + k,
                    float(extra["duration_s"]),
                )
            )
    return out


def _cluster_table(c: ClusterSpec) -> Table:
    t = Table(
        title=f"cluster {c.name}: {len(c.nodes)} nodes, {c.total_gpus} GPUs", title_justify="left"
    )
    for col in ("pool", "nodes", "GPU", "GPUs/node", "leaves"):
        t.add_column(col)
    pools: dict[str, list[Any]] = {}
    for n in c.nodes:
        p = pools.setdefault(n.pool or n.name, [0, n.gpu_model, n.gpus, set()])
        p[0] += 1
        p[3].add(n.leaf)
    for name, (count, model, gpus, leaves) in pools.items():
        t.add_row(name, str(count), model, str(gpus), ", ".join(sorted(leaves)))
    return t


def _decisions(sim: Simulation, jobs: dict[str, TraceJob], at: float, console: Console) -> None:
    ctrl = sim.controller
    t = Table(title=f"running at t={at:g} s", title_justify="left")
    for col in ("job", "queue", "asks", "nodes", "since"):
        t.add_column(col)
    for jid, r in ctrl.running.items():
        nodes = nodes_of(r.allocation)
        t.add_row(
            f"{jid} {r.spec.name}",
            r.spec.queue,
            r.spec.describe(),
            ", ".join(nodes[:4]) + (f" +{len(nodes) - 4}" if len(nodes) > 4 else ""),
            f"{r.start_time:g}",
        )
    console.print(t)
    w = Table(title=f"waiting at t={at:g} s, and why", title_justify="left")
    for col in ("job", "queue", "asks", "reason", "why", "est. start"):
        w.add_column(col, overflow="fold")
    for jid in [p.id for p in ctrl.pending_jobs()[:40]]:
        rec = ctrl.jobs[jid]
        reason = ctrl.last.reasons.get(jid) if ctrl.last else None
        est = (
            ""
            if reason is None or reason.estimated_start is None
            else f"t={reason.estimated_start:,.0f} s ({reason.start_bound})"
        )
        w.add_row(
            f"{jid} {rec.job.spec.name}",
            rec.job.spec.queue,
            rec.job.spec.describe(),
            reason.code.value if reason else "",
            reason.message if reason else "",
            est,
        )
    console.print(w)


def _summary(sim: Simulation) -> dict[str, float]:
    outs = list(sim.outcomes.values())
    done = [o for o in outs if o.jct is not None and o.state == JobState.SUCCEEDED.value]
    jcts = sorted(o.jct for o in done if o.jct is not None)
    waits = sorted(o.wait_s for o in done if o.wait_s is not None)
    gpus = sim.cluster.total_gpus
    start = min((o.submit_time for o in outs), default=0.0)
    end = max((o.end_time for o in done if o.end_time is not None), default=start)
    span = max(end - start, 1e-9)
    return {
        "done": len(done),
        "never": sum(1 for o in outs if o.end_time is None),
        "avg_jct": sum(jcts) / len(jcts) if jcts else 0.0,
        "p95_wait": waits[int(0.95 * (len(waits) - 1))] if waits else 0.0,
        "util": sim.gpu_seconds / (gpus * span) if gpus else 0.0,
        "makespan": span,
        "preemptions": sim.preemptions,
    }


def demo_profiles(
    cluster: Path = typer.Option(None, help="cluster spec YAML (default: the packaged lab)"),
    workload: Path = typer.Option(None, help="workload YAML (default: the packaged sample)"),
    at: float = typer.Option(300.0, help="show the decisions at this time (s)"),
) -> None:
    console = Console(width=None if Console().is_terminal else 150)
    try:
        spec = load_cluster(cluster or example("cluster.yaml"))
        jobs = load_workload(workload or example("workload.yaml"))
    except SpecError as e:
        console.print(f"[red]error:[/] {e}")
        raise typer.Exit(2) from None
    console.print(_cluster_table(spec))
    by_id = {j.id: j for j in jobs}
    prof = Profile.build(**DEFAULT_PROFILE)  # type: ignore[arg-type]
    console.rule(f"[bold]one profile: {prof.describe()}")
    sim = Simulation(spec, prof, jobs)
    sim.run(until=at)
    _decisions(sim, by_id, at, console)

    console.rule("[bold]the whole workload through every profile")
    t = Table(title=f"{len(jobs)} jobs; times in s", title_justify="left")
    for col in (
        "order",
        "placement",
        "backfill",
        "preempt",
        "done",
        "never",
        "avg JCT",
        "p95 wait",
        "GPU util",
        "makespan",
        "preempted",
    ):
        t.add_column(
            col,
            justify="right" if col not in ("order", "placement", "backfill", "preempt") else "left",
        )
    rows: list[tuple[str, str, str, tuple[str, ...]]] = []
    for order in available("order"):
        for backfill in available("backfill"):
            pre: tuple[str, ...] = ("order",) if order == "las" else ("reclaim",)
            rows.append((order, "topology", backfill, pre))
    for place in available("place"):
        if place != "topology":
            rows.append(("fairshare", place, "easy", ("reclaim",)))
    for order, place, backfill, pre in rows:
        s = Simulation(
            spec,
            Profile.build(order=order, place=place, backfill=backfill, preempt=pre, explain=False),
            jobs,
        )
        s.run()
        m = _summary(s)
        t.add_row(
            order,
            place,
            backfill,
            ",".join(pre),
            f"{m['done']:g}",
            f"{m['never']:g}",
            f"{m['avg_jct']:.0f}",
            f"{m['p95_wait']:.0f}",
            f"{m['util']:.0%}",
            f"{m['makespan']:.0f}",
            f"{m['preemptions']:g}",
        )
    console.print(t)
    console.print("Jobs that never run ask for more than the cluster has; their Reason says so.")
