"""Replay and fill results for people (rich tables) and for files (CSV, PNG plots).

``write_replay_outputs(out, runs)`` writes, for each run, ``jobs[-LABEL].csv`` (one row per job)
and ``timeline[-LABEL].csv`` (pending, running and busy GPUs after each event), and for all runs
together ``jct_cdf.png``, ``queue_length.png`` and ``utilization.png``. ``write_fill_outputs``
writes the published CSV layout (``allocation_ratio.csv``, ``fragmentation_ratio.csv``) and
``allocation_vs_arrived.png``. Plots use matplotlib's Agg backend: no display needed. The
replay plots are built by ``*_figure(runs)`` functions, so the what-if page (sim/whatif_report.py)
embeds the same plots (``png_bytes``) rather than drawing its own.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from rich.table import Table

from gpufleet.sim.metrics import JobRow, ReplayMetrics
from gpufleet.sim.replay import ReplayRun

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from gpufleet.sim.fill import FillResult

PLOT_BINS = 2000  # timeline plots: time-weighted means over this many bins


# ---------------------------------------------------------------------------------------------
# numbers for people


def duration(s: float | None) -> str:
    """Seconds in the unit that reads best: 85 s, 42.1 min, 10.2 h, 3.4 d."""
    if s is None:
        return "—"
    if abs(s) < 120:
        return f"{s:.0f} s"
    if abs(s) < 7200:
        return f"{s / 60:.1f} min"
    if abs(s) < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def gpu_hours(h: float, unit: str = " GPU-h") -> str:
    """GPU-hours with the digits that matter: 0, 0.012, 3.4, 1,234."""
    if h == 0:
        return f"0{unit}"
    return (f"{h:.2g}" if h < 1 else f"{h:,.1f}" if h < 100 else f"{h:,.0f}") + unit


def _num(v: float | None, fmt: str = ".2f") -> str:
    return "—" if v is None else format(v, fmt)


def _ratio(m: ReplayMetrics) -> str:
    r = m.makespan_ratio
    return "—" if r is None else f"{r:.2f}"


def summary_table(m: ReplayMetrics, title: str = "") -> Table:
    t = Table(title=title or None, show_header=False, title_justify="left")
    t.add_column("figure", style="bold")
    t.add_column("value", justify="right")
    finished = sum(q.finished for q in m.queues.values())
    t.add_row("jobs (finished)", f"{m.jobs:,} ({finished:,})")
    t.add_row("JCT avg / p50", f"{duration(m.avg_jct_s)} / {duration(m.p50_jct_s)}")
    t.add_row("JCT p95 / p99", f"{duration(m.p95_jct_s)} / {duration(m.p99_jct_s)}")
    t.add_row("wait avg / p95", f"{duration(m.avg_wait_s)} / {duration(m.p95_wait_s)}")
    t.add_row("slowdown avg", _num(m.avg_slowdown))
    t.add_row("utilization", f"{100 * m.utilization:.1f} % of {m.gpus:,} GPUs")
    t.add_row(
        "makespan / lower bound",
        f"{duration(m.makespan_s)} / {duration(m.makespan_lower_bound_s)} = {_ratio(m)}",
    )
    t.add_row("last arrival + duration", duration(m.arrival_bound_s))
    t.add_row("fairness vs entitlement (Jain, hourly)", _num(m.entitlement_fairness, ".3f"))
    t.add_row("preemptions", f"{m.preemptions:,}")
    t.add_row(
        "work lost: preemption / node failure",
        f"{gpu_hours(m.lost_gpu_hours_preemption)} / {gpu_hours(m.lost_gpu_hours_node_failure)}",
    )
    never = f"{m.never_schedulable:,}"
    if m.never_ids:
        shown = ", ".join(m.never_ids[:5]) + (", …" if len(m.never_ids) > 5 else "")
        never += f" ({shown})"
    t.add_row("never schedulable", never)
    if m.unfinished:
        t.add_row("[red]unfinished[/red]", f"[red]{m.unfinished:,}[/red]")
    cost = "" if m.cost is None else f", cost {m.cost:,.2f}"
    t.add_row("node-hours (peak nodes)", f"{m.node_hours:,.1f} ({m.peak_nodes:,}){cost}")
    t.add_row("simulation wall", f"{m.wall_s:.2f} s")
    return t


def queue_table(m: ReplayMetrics) -> Table:
    t = Table(title="per queue", title_justify="left")
    for col in ("queue", "jobs", "finished", "never", "avg JCT", "p95 JCT", "avg wait"):
        t.add_column(col, justify="left" if col == "queue" else "right")
    t.add_column("slowdown", justify="right")
    t.add_column("GPU share", justify="right")
    t.add_column("of entitlement", justify="right")
    for name, q in m.queues.items():
        t.add_row(
            name,
            f"{q.jobs:,}",
            f"{q.finished:,}",
            f"{q.never_schedulable:,}",
            duration(q.avg_jct_s),
            duration(q.p95_jct_s),
            duration(q.avg_wait_s),
            _num(q.avg_slowdown),
            f"{100 * q.gpu_share:.1f} %",
            "—" if q.entitled_ratio is None else f"{100 * q.entitled_ratio:.0f} %",
        )
    return t


def compare_table(runs: Sequence[ReplayRun], title: str = "") -> Table:
    t = Table(title=title or None, title_justify="left")
    t.add_column("profile")
    for col in (
        "avg JCT",
        "p99 JCT",
        "avg wait",
        "slowdown",
        "util",
        "makespan/LB",
        "fair/entitl.",
        "preempt",
        "lost GPU-h",
        "never",
        "wall",
    ):
        t.add_column(col, justify="right")
    for r in runs:
        m = r.metrics
        t.add_row(
            r.label,
            duration(m.avg_jct_s),
            duration(m.p99_jct_s),
            duration(m.avg_wait_s),
            _num(m.avg_slowdown),
            f"{100 * m.utilization:.1f} %",
            _ratio(m),
            _num(m.entitlement_fairness, ".3f"),
            f"{m.preemptions:,}",
            gpu_hours(m.lost_gpu_hours_preemption + m.lost_gpu_hours_node_failure, unit=""),
            f"{m.never_schedulable:,}",
            f"{m.wall_s:.1f} s",
        )
    return t


def fill_table(r: FillResult, xs: Sequence[int] = (50, 80, 90, 100, 110, 120, 130)) -> Table:
    t = Table(
        title=f"fill · {r.policy} · seed {r.seed} · tune {r.tune:g}",
        title_justify="left",
    )
    t.add_column("arrived %", justify="right")
    t.add_column("allocation %", justify="right")
    t.add_column("fragmentation % of idle", justify="right")
    for x in xs:
        a, f = r.alloc.get(x), r.frag_ratio.get(x)
        t.add_row(str(x), _num(a), _num(f))
    t.caption = (
        f"{r.workload or 'pods'}: {r.pods_placed:,} of {r.pods_submitted:,} pods placed\n"
        f"on {r.total_gpus:,} GPUs in {r.wall_s:.2f} s"
    )
    return t


# ---------------------------------------------------------------------------------------------
# files


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("_")


def _suffix(runs: Sequence[ReplayRun], r: ReplayRun) -> str:
    return "" if len(runs) == 1 else f"-{_slug(r.label)}"


JOB_COLUMNS = (
    "id",
    "queue",
    "gpus",
    "submit_time",
    "duration_s",
    "first_start",
    "end_time",
    "jct_s",
    "wait_s",
    "slowdown",
    "state",
    "attempts",
    "preemptions",
    "run_s",
    "lost_work_s",
    "reason",
)


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}" if not v.is_integer() else str(int(v))
    return str(v)


def write_jobs_csv(path: Path, run: ReplayRun) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(JOB_COLUMNS)
        for row in run.rows:
            w.writerow([_cell(getattr(row, c)) for c in JOB_COLUMNS])


def write_timeline_csv(path: Path, run: ReplayRun) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(("time", "pending", "running", "busy_gpus", "utilization"))
        g = run.gpus or 1
        for t, pending, running, busy in run.timeline:
            w.writerow((_cell(t), pending, running, busy, f"{busy / g:.4f}"))


def _figure() -> tuple[Figure, Axes]:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    return fig, ax


def _save(fig: Figure, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes (for a self-contained HTML page), and the figure closed."""
    import io

    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def binned(
    timeline: Sequence[tuple[float, int, int, int]], column: int, bins: int = PLOT_BINS
) -> tuple[np.ndarray, np.ndarray]:
    """A step function (each value held until the next event) as (start times, values) for a
    ``where="post"`` step plot: as is when short, else the time-weighted mean per bin."""
    if not timeline:
        return np.zeros(0), np.zeros(0)
    arr = np.asarray(timeline, dtype=float)
    t, v = arr[:, 0], arr[:, column]
    end = t[-1]
    if end <= t[0] or len(t) <= bins:
        return t, v
    edges = np.linspace(t[0], end, bins + 1)
    # area under the step function up to each edge, by cumulative sums over the segments
    seg = np.diff(t) * v[:-1]
    cum = np.concatenate(([0.0], np.cumsum(seg)))
    idx = np.clip(np.searchsorted(t, edges, side="right") - 1, 0, len(t) - 1)
    area = cum[idx] + (edges - t[idx]) * v[idx]
    means = np.diff(area) / np.diff(edges)
    return edges[:-1], means


def _hours(xs: np.ndarray) -> np.ndarray:
    return xs / 3600.0


def _cdf_figure(
    runs: Sequence[ReplayRun], value: Callable[[JobRow], float | None], what: str
) -> Figure:
    fig, ax = _figure()
    low = None
    for r in runs:
        xs = np.sort([v for v in map(value, r.rows) if v is not None])
        if xs.size:
            ax.step(xs, np.arange(1, xs.size + 1) / xs.size, where="post", label=r.label)
            low = float(xs[0]) if low is None else min(low, float(xs[0]))
    if low is not None and low > 0:
        ax.set_xscale("log")
    elif low is not None:
        ax.set_xscale("symlog", linthresh=1.0)  # log past 1 s, and waits of 0 s stay on it
    ax.set_xlabel(f"{what} (s, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(f"{what} CDF")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    return fig


def jct_cdf_figure(runs: Sequence[ReplayRun]) -> Figure:
    return _cdf_figure(runs, lambda row: row.jct_s, "job completion time")


def wait_cdf_figure(runs: Sequence[ReplayRun]) -> Figure:
    return _cdf_figure(runs, lambda row: row.wait_s, "wait time")


def timeline_figure(
    runs: Sequence[ReplayRun], column: int, ylabel: str, title: str, scale: bool
) -> Figure:
    """Column 1 (pending jobs), 2 (running jobs) or 3 (busy GPUs; ``scale``: % of the
    cluster's GPUs) of each run's timeline over simulated time."""
    fig, ax = _figure()
    for r in runs:
        x, y = binned(r.timeline, column)
        if scale:
            y = 100 * y / (r.gpus or 1)
        ax.step(_hours(x), y, where="post", label=r.label, linewidth=0.8)
    ax.set_xlabel("simulated time (h)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def queue_length_figure(runs: Sequence[ReplayRun]) -> Figure:
    return timeline_figure(runs, 1, "pending jobs", "queue length over time", False)


def utilization_figure(runs: Sequence[ReplayRun]) -> Figure:
    return timeline_figure(runs, 3, "busy GPUs (%)", "GPU utilization over time", True)


def write_replay_outputs(out: Path, runs: Sequence[ReplayRun]) -> list[Path]:
    """Per-job and timeline CSVs for each run, and the three plots for all runs together."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for r in runs:
        sfx = _suffix(runs, r)
        jobs, timeline = out / f"jobs{sfx}.csv", out / f"timeline{sfx}.csv"
        write_jobs_csv(jobs, r)
        write_timeline_csv(timeline, r)
        written += [jobs, timeline]
    _save(jct_cdf_figure(runs), out / "jct_cdf.png")
    _save(queue_length_figure(runs), out / "queue_length.png")
    _save(utilization_figure(runs), out / "utilization.png")
    return [*written, out / "jct_cdf.png", out / "queue_length.png", out / "utilization.png"]


def write_fill_outputs(out: Path, result: FillResult) -> list[Path]:
    from gpufleet.sim.fill import write_csv

    out.mkdir(parents=True, exist_ok=True)
    alloc, frag = out / "allocation_ratio.csv", out / "fragmentation_ratio.csv"
    write_csv([result], alloc, "alloc")
    write_csv([result], frag, "frag")
    fig, ax = _figure()
    xs = sorted(result.alloc)
    ax.plot(xs, [result.alloc[x] for x in xs], label=f"{result.policy} allocation")
    fxs = sorted(result.frag_capacity)
    ax.plot(
        fxs,
        [result.frag_capacity[x] for x in fxs],
        label="fragmented GPUs (% of capacity)",
        linestyle="--",
    )
    ax.plot([0, 100], [0, 100], color="grey", linewidth=0.6, label="ideal")
    ax.set_xlabel("arrived workload (% of GPU capacity)")
    ax.set_ylabel("% of GPU capacity")
    ax.set_title(f"allocation vs arrived · {result.workload or 'pods'} · seed {result.seed}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    plot = out / "allocation_vs_arrived.png"
    _save(fig, plot)
    return [alloc, frag, plot]
