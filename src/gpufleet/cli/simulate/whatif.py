"""``gpufleet simulate whatif``: a history replayed as it is and with changes, and the deltas."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from gpufleet.cli.simulate.console import refusals, stdout
from gpufleet.cli.simulate.flags import (
    DEFAULT_ADMIT,
    DEFAULT_BACKFILL,
    DEFAULT_TIME_LIMIT,
    Admit,
    Backfill,
    ClusterFlags,
    EqualShares,
    Json,
    Queues,
    ReplayFlags,
    Seed,
    TimeLimitText,
    flag_groups,
)
from gpufleet.cli.simulate.workload import (
    load_workload,
    names,
    nodes_text,
    run_all,
    show_progress,
    warn_unfinished,
)
from gpufleet.model.errors import SpecError
from gpufleet.sim.replay import ProfileChoice, check_profile
from gpufleet.sim.whatif import DEFAULT_GPU_HOUR_PRICE_USD

if TYPE_CHECKING:
    from gpufleet.sim.whatif import WhatIf

History = Annotated[
    Path,
    typer.Option(
        "--history", help="the jobs to replay: gpufleet history export FILE (or --format)"
    ),
]
Changes = Annotated[
    list[str],
    typer.Option(
        "--change",
        help="nodes+=N | nodes-=N | nodes=N | order=NAME | placement=NAME | backfill=NAME | "
        "admit=NAME | preempt=A,B|none; repeatable, applied together",
    ),
]
HistoryFormat = Annotated[str, typer.Option("--format", help="the history's format, as for replay")]
BaselineOrder = Annotated[str, typer.Option("--order", help="baseline order (the live default)")]
BaselinePlacement = Annotated[str, typer.Option("--placement", help="baseline placement")]
BaselinePreempt = Annotated[str, typer.Option("--preempt", help="baseline preemption plugins")]
GpuHourPrice = Annotated[
    float,
    typer.Option(
        "--gpu-hour-price",
        metavar="USD",
        help="what one GPU-hour costs, flat for every GPU model (the catalog has no prices); "
        "cost = the cluster's GPUs × makespan × this",
    ),
]
ReportFile = Annotated[
    Path | None,
    typer.Option(
        "--report",
        metavar="FILE.html",
        help="also write one self-contained HTML page: the changes, the deltas and the plots",
    ),
]


@flag_groups
def whatif(
    *,
    history: History,
    changes: Changes = [],  # noqa: B006 (typer reads it, nothing changes it)
    fmt: HistoryFormat = "jobs",
    layout: ClusterFlags,
    order: BaselineOrder = "fairshare",
    placement: BaselinePlacement = "topology",
    backfill: Backfill = DEFAULT_BACKFILL,
    preempt: BaselinePreempt = "reclaim",
    admit: Admit = DEFAULT_ADMIT,
    queues: Queues = None,
    equal_shares: EqualShares = False,
    time_limit: TimeLimitText = DEFAULT_TIME_LIMIT,
    seed: Seed = 0,
    gpu_hour_price: GpuHourPrice = DEFAULT_GPU_HOUR_PRICE_USD,
    report_file: ReportFile = None,
    as_json: Json = False,
) -> None:
    """Replay a history as it is and with changes (more nodes, another order, …): the deltas
    of JCT, waits, utilization and cost. The baseline profile is the live controller's default."""
    from gpufleet.sim.whatif import WhatIf, apply_changes, check_price, parse_change

    with refusals():
        if not changes:
            raise SpecError(
                "name a change: --change nodes+=16, --change order=las", field="--change"
            )
        parsed = [parse_change(c) for c in changes]
        check_price(gpu_hour_price)
        base = ProfileChoice(order, placement, backfill, names(preempt), admit)
        check_profile(base)
        if report_file is not None:
            _check_writable(report_file)
        flags = ReplayFlags(queues=queues, equal_shares=equal_shares, time_limit=time_limit)
        wl = load_workload(history, fmt, layout, flags, seed)
        new_cluster, new_choice = apply_changes(wl.cluster, base, parsed)
        (before,) = run_all(wl, [base], show_progress(as_json))
        changed = replace(wl, cluster=new_cluster)
        (after,) = run_all(changed, [new_choice], show_progress(as_json))
        warn_unfinished([before, after])
        result = WhatIf(
            history=history.name,
            jobs=len(wl.jobs),
            changes=tuple(parsed),
            before=before,
            after=after,
            baseline_nodes=len(wl.cluster.nodes),
            whatif_nodes=len(new_cluster.nodes),
            price=gpu_hour_price,
        )
        from gpufleet.sim import whatif_report

        if report_file is not None:
            whatif_report.write(report_file, result)
        if as_json:
            print(json.dumps(result.to_json()))
            return
        _print(result, report_file)


def _print(result: WhatIf, report_file: Path | None) -> None:
    """The deltas as a table, the verdict under it."""
    from rich.table import Table

    from gpufleet.sim import whatif_report

    table = Table(title_justify="left")
    for col in ("figure", "baseline", "what-if", "delta"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    for d in result.deltas:
        table.add_row(d.label, _figure(d, d.baseline), _figure(d, d.whatif), _delta(d))
    table.caption = f"cost: the cluster's GPUs × makespan × ${result.price:,.2f}/GPU-h"
    con = stdout()
    before, after = result.before, result.after
    # Text, not markup: a file name may hold [brackets]
    con.print(
        Text(
            f"{result.history} · {result.jobs:,} jobs · baseline {before.label} on "
            f"{nodes_text(result.baseline_nodes)} · what-if "
            f"{', '.join(c.text for c in result.changes)}: "
            f"{after.label} on {nodes_text(result.whatif_nodes)}",
            style="bold",
        )
    )
    con.print(table)
    con.print(Text(whatif_report.verdict(result)))
    if report_file is not None:
        con.print(Text(f"report: {report_file}"))


def _check_writable(path: Path) -> None:
    """Refuse a report path that cannot be written before the replays run, not after."""
    if path.is_dir():
        raise SpecError("is a directory; name a file, e.g. whatif.html", field="--report")
    if not path.parent.is_dir():
        raise SpecError(f"no directory {str(path.parent)!r}", field="--report")


def _figure(d: Any, v: float | None) -> str:
    from gpufleet.sim.whatif_report import figure_text

    return figure_text(d, v)


def _delta(d: Any) -> Text:
    from gpufleet.sim.whatif_report import delta_text

    style = "" if d.better is None else ("green" if d.better else "red")
    return Text(delta_text(d), style=style)
