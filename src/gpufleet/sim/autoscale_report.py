"""Cost versus wait: what a capacity planner asks of an elastic pool.

The same trace replayed with the pool capped at a quarter, a half, three quarters and all of
its ``max``, and on a fixed cluster of the peak size the uncapped pool reached (what one would
buy to serve the same peak without elasticity). Each point is (node-hours or cost, average
wait): a table (``cost_wait.md``, ``cost_wait.csv``) and a plot (``cost_wait.png``)."""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.model.cluster import ClusterSpec, NodeSpec
from gpufleet.sim.engine import SimConfig, TraceJob
from gpufleet.sim.replay import ProfileChoice, ReplayRun, run_replay
from gpufleet.sim.report import _figure, _save, duration

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FRACTIONS = (0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True, slots=True)
class Point:
    label: str
    nodes: str  # "0–32 elastic" or "24 fixed"
    run: ReplayRun


def capped(cluster: ClusterSpec, top: int) -> ClusterSpec:
    """The cluster with each elastic pool's max cut to ``top`` (its min too, if above)."""
    pools = tuple(
        replace(
            p,
            spec=replace(p.spec, max=top, min=min(p.spec.min, top)),
            nodes=p.nodes[:top],
        )
        for p in cluster.elastic
    )
    return replace(cluster, elastic=pools)


def fixed_of(cluster: ClusterSpec, peak: int) -> ClusterSpec:
    """A fixed cluster of ``peak`` nodes: the fixed ones, then the pools' first nodes."""
    extra: list[NodeSpec] = []
    for p in cluster.elastic:
        extra += p.nodes
    nodes = (*cluster.nodes, *extra[: max(0, peak - len(cluster.nodes))])
    return replace(cluster, nodes=tuple(nodes), elastic=())


def cost_wait(
    cluster: ClusterSpec,
    jobs: Sequence[TraceJob],
    choice: ProfileChoice,
    config: SimConfig,
    full: ReplayRun,
    run: Callable[..., ReplayRun] = run_replay,
) -> list[Point]:
    """The curve's points; ``full``: the run at the pools' own max (already made)."""
    top = max((p.spec.max for p in cluster.elastic), default=0)
    out: list[Point] = []
    for cap in sorted({max(1, round(top * f)) for f in FRACTIONS}):
        r = full if cap == top else run(capped(cluster, cap), jobs, choice, config)
        out.append(Point(f"elastic ≤ {cap}", f"{_lo(cluster)}–{cap} elastic", r))
    peak = full.metrics.peak_nodes
    fixed = run(fixed_of(cluster, peak), jobs, choice, config)
    out.append(Point(f"fixed {peak}", f"{peak} fixed", fixed))
    return out


def _lo(cluster: ClusterSpec) -> int:
    return sum(p.spec.min for p in cluster.elastic) + len(cluster.nodes)


def table_rows(points: Sequence[Point]) -> list[list[str]]:
    rows = [["run", "nodes", "node-hours", "cost", "avg wait", "p95 wait", "avg JCT"]]
    for p in points:
        m = p.run.metrics
        rows.append(
            [
                p.label,
                p.nodes,
                f"{m.node_hours:,.0f}",
                "—" if m.cost is None else f"{m.cost:,.0f}",
                duration(m.avg_wait_s),
                duration(m.p95_wait_s),
                duration(m.avg_jct_s),
            ]
        )
    return rows


def write(out: Path, points: Sequence[Point]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    rows = table_rows(points)
    md = out / "cost_wait.md"
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    md.write_text("\n".join(lines) + "\n", encoding="utf-8")
    raw = out / "cost_wait.csv"
    with raw.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["run", "nodes", "node_hours", "cost", "avg_wait_s", "p95_wait_s", "avg_jct_s"])
        for p in points:
            m = p.run.metrics
            w.writerow(
                [p.label, p.nodes, m.node_hours, m.cost, m.avg_wait_s, m.p95_wait_s, m.avg_jct_s]
            )
    plot = out / "cost_wait.png"
    _save(_figure_of(points), plot)
    return [md, raw, plot]


def _figure_of(points: Sequence[Point]) -> Figure:
    fig, ax = _figure()
    priced = all(p.run.metrics.cost is not None for p in points)
    elastic = [p for p in points if p.label.startswith("elastic")]
    fixed = [p for p in points if not p.label.startswith("elastic")]

    def x(p: Point) -> float:
        m = p.run.metrics
        return float(m.cost) if priced and m.cost is not None else m.node_hours

    def y(p: Point) -> float:
        return (p.run.metrics.avg_wait_s or 0.0) / 3600

    ax.plot([x(p) for p in elastic], [y(p) for p in elastic], "o-", label="elastic pool (cap)")
    ax.plot([x(p) for p in fixed], [y(p) for p in fixed], "s", color="C3", label="fixed, peak size")
    for p in points:
        at = (x(p), y(p))
        ax.annotate(p.label, at, fontsize="small", xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("cost" if priced else "node-hours")
    ax.set_ylabel("average wait (h)")
    ax.set_title("cost versus wait")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return fig
