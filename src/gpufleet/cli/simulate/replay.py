"""``gpufleet simulate replay``: one trace through one scheduler profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.simulate.console import refusals, stdout
from gpufleet.cli.simulate.flags import (
    ClusterFlags,
    Json,
    OutDir,
    ProfileFlags,
    ReplayFlags,
    ScaleFlags,
    Seed,
    TraceFlags,
    flag_groups,
)
from gpufleet.cli.simulate.workload import (
    Workload,
    load_workload,
    nodes_text,
    profile,
    run_all,
    show_progress,
    warn_unfinished,
)
from gpufleet.sim import report
from gpufleet.sim.replay import ProfileChoice, ReplayRun, check_profile

Order = Annotated[str, typer.Option("--order", help="fifo | priority | fairshare | las | sjf")]


@flag_groups
def replay(
    *,
    workload: TraceFlags,
    layout: ClusterFlags,
    order: Order = "fifo",
    plugins: ProfileFlags,
    replaying: ReplayFlags,
    scaling: ScaleFlags,
    seed: Seed = 0,
    as_json: Json = False,
    out: OutDir = None,
) -> None:
    """Replay a trace through one scheduler profile and report JCT, waits, utilization and
    fairness."""
    with refusals():
        choice = profile(order, plugins)
        check_profile(choice)
        wl = load_workload(workload.trace, workload.fmt, layout, replaying, seed, scaling)
        (run,) = run_all(wl, [choice], show_progress(as_json))
        _emit(run, wl, as_json, out)
        if wl.cluster.elastic and out is not None:
            _cost_wait(run, wl, choice, out, as_json)


def _cost_wait(
    run: ReplayRun, wl: Workload, choice: ProfileChoice, out: Path, as_json: bool
) -> None:
    """The elastic run against smaller caps and a fixed cluster of its peak size."""
    from gpufleet.sim import autoscale_report as ar

    points = ar.cost_wait(wl.cluster, wl.jobs, choice, wl.config, run)
    ar.write(out, points)
    if not as_json:
        from rich.table import Table

        rows = ar.table_rows(points)
        t = Table(*rows[0], title="cost versus wait", title_justify="left")
        for r in rows[1:]:
            t.add_row(*r)
        stdout().print(t)
        stdout().print(f"wrote {out}/cost_wait.md, cost_wait.csv, cost_wait.png")


def _nodes(wl: Workload) -> str:
    c = wl.cluster
    if not c.elastic:
        return nodes_text(len(c.nodes))
    grow = " + ".join(f"{p.spec.min}–{p.spec.max} elastic" for p in c.elastic)
    return f"{nodes_text(len(c.nodes))} + {grow}" if c.nodes else f"{grow} nodes"


def _emit(run: ReplayRun, wl: Workload, as_json: bool, out: Path | None) -> None:
    warn_unfinished([run])
    if out is not None:
        report.write_replay_outputs(out, [run])
    if as_json:
        print(json.dumps(run.metrics.to_json()))
        return
    con = stdout()
    title = (
        f"{run.label} · {len(wl.jobs):,} jobs · {_nodes(wl)}, "
        f"{run.metrics.gpus:,} GPUs · {run.cycles:,} cycles"
    )
    con.print(title, style="bold")  # above the table, not wrapped to its width
    con.print(report.summary_table(run.metrics))
    if len(run.metrics.queues) > 1:
        con.print(report.queue_table(run.metrics))
    if out is not None:
        con.print(f"wrote {out}/ (jobs.csv, timeline.csv, jct_cdf.png, queue_length.png, …)")
