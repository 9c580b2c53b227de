"""``gpufleet simulate compare``: one trace through several profiles, side by side."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Annotated

import typer

from gpufleet.cli.simulate.console import refusals, stdout
from gpufleet.cli.simulate.flags import (
    ClusterFlags,
    Json,
    OutDir,
    ProfileFlags,
    ReplayFlags,
    Seed,
    TraceFlags,
    flag_groups,
)
from gpufleet.cli.simulate.workload import (
    load_workload,
    nodes_text,
    profile,
    run_all,
    show_progress,
    warn_unfinished,
)
from gpufleet.model.errors import SpecError
from gpufleet.sim import report
from gpufleet.sim.replay import ProfileChoice, check_profile, parse_profile

Profiles = Annotated[
    list[str],
    typer.Option(
        "--profiles",
        help="comma list of ORDER[+PLACEMENT][+BACKFILL][+PREEMPT…], e.g. "
        "fifo+easy,las+none+order; repeatable",
    ),
]
Orders = Annotated[
    list[str],
    typer.Option("--order", help="an order to compare (repeatable), with the other flags' plugins"),
]


@flag_groups
def compare(
    *,
    workload: TraceFlags,
    profiles: Profiles = [],  # noqa: B006 (typer reads it, nothing changes it)
    orders: Orders = [],  # noqa: B006
    layout: ClusterFlags,
    plugins: ProfileFlags,
    replaying: ReplayFlags,
    seed: Seed = 0,
    as_json: Json = False,
    out: OutDir = None,
) -> None:
    """Replay one trace through several profiles: one table, one set of plots."""
    with refusals():
        choices = _choices(profile("fifo", plugins), orders, profiles)
        wl = load_workload(workload.trace, workload.fmt, layout, replaying, seed)
        runs = run_all(wl, choices, show_progress(as_json))
        warn_unfinished(runs)
        if out is not None:
            report.write_replay_outputs(out, runs)
        if as_json:
            print(json.dumps({r.label: r.metrics.to_json() for r in runs}))
            return
        title = (
            f"{workload.trace.name} · {len(wl.jobs):,} jobs · {nodes_text(len(wl.cluster.nodes))}, "
            f"{wl.cluster.total_gpus:,} GPUs"
        )
        con = stdout()
        con.print(title, style="bold")
        con.print(report.compare_table(runs))


def _choices(base: ProfileChoice, orders: list[str], profiles: list[str]) -> list[ProfileChoice]:
    """``base`` with each of ``orders``, then each of ``profiles``; each named once."""
    choices = [replace(base, order=o) for o in orders]
    for o in orders:
        check_profile(replace(base, order=o))
    for text in profiles:
        choices += [parse_profile(p, base) for p in text.split(",") if p.strip()]
    if not choices:
        raise SpecError(
            "name the profiles: --profiles fifo+easy,las+none or --order A --order B",
            field="--profiles",
        )
    labels = [c.label for c in choices]
    if len(set(labels)) != len(labels):
        raise SpecError(f"a profile is named twice in {', '.join(labels)}", field="--profiles")
    return choices
