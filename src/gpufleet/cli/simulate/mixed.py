"""``gpufleet simulate mixed``: a training trace beside cloud-desktop sessions (sim/mixed.py),
under each placement policy: per-engine utilization, desktop waits, training JCT."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.simulate.console import refusals, stdout
from gpufleet.cli.simulate.flags import Json, Seed
from gpufleet.model.errors import SpecError

Trace = Annotated[Path, typer.Option("--trace", help="the training trace (a file)")]
Format = Annotated[str, typer.Option("--format", help="the trace's format (philly, ...)")]
Jobs = Annotated[int, typer.Option("--jobs", help="its first N jobs (0: all)")]
TrainNodes = Annotated[int, typer.Option("--train-nodes", help="8-GPU training nodes")]
GfxNodes = Annotated[int, typer.Option("--graphics-nodes", help="graphics nodes")]
GfxModel = Annotated[str, typer.Option("--graphics-model", help="their GPU (L40S, L4, A16, ...)")]
GfxGpus = Annotated[int, typer.Option("--graphics-gpus", help="GPUs per graphics node")]
Rate = Annotated[float, typer.Option("--desktops-per-hour", help="arrivals at the peak")]
Share = Annotated[int, typer.Option("--desktop-share", help="milli-GPUs per desktop")]
Policy = Annotated[str, typer.Option("--policy", help="apart | together | both")]


def mixed(
    *,
    trace: Trace,
    fmt: Format = "philly",
    jobs: Jobs = 2000,
    train_nodes: TrainNodes = 8,
    graphics_nodes: GfxNodes = 4,
    graphics_model: GfxModel = "L40S",
    graphics_gpus: GfxGpus = 4,
    per_hour: Rate = 12.0,
    share: Share = 250,
    policy: Policy = "both",
    seed: Seed = 0,
    as_json: Json = False,
) -> None:
    """Replay a training trace beside desktop sessions with a day/night load, on training and
    graphics nodes: each GPU model's utilization by workload, desktop waits, training JCT."""
    from gpufleet.model.catalog import lookup
    from gpufleet.model.engines import lacking
    from gpufleet.scheduler.framework import Profile
    from gpufleet.sim.mixed import (
        POLICIES,
        Desktops,
        desktop_sessions,
        mixed_cluster,
        mixed_jobs,
        run_mixed,
    )
    from gpufleet.sim.traces.registry import load_trace

    with refusals():
        chosen = POLICIES if policy == "both" else (policy,)
        if any(p not in POLICIES for p in chosen):
            raise SpecError(f"must be apart, together or both, got {policy!r}", field="--policy")
        model = lookup(graphics_model, field="--graphics-model").name
        if lacking(model, {"graphics": 1}):
            raise SpecError(
                f"{model} has no graphics pipeline (no RT cores)", field="--graphics-model"
            )
        if not 0 < share <= 1000 or min(train_nodes, graphics_nodes, graphics_gpus) < 1:
            raise SpecError(
                "--desktop-share is 1..1000, node and GPU counts at least 1", field="options"
            )
        training = load_trace(trace, fmt, gpus_per_node=8)
        training = training[:jobs] if jobs > 0 else training
        span = max((j.submit_time for j in training), default=0.0)
        days = max(span / 86_400.0, 1.0)
        desktops = desktop_sessions(Desktops(per_hour, days, share_milli=share), seed)
        cluster = mixed_cluster(
            train_nodes, graphics_nodes, graphics_model=model, graphics_gpus=graphics_gpus
        )
        profile = Profile.build(order="fifo", place="bestfit", backfill="easy", explain=False)
        figures = [
            run_mixed(cluster, mixed_jobs(training, desktops, p, "H100-SXM"), profile, p, seed)
            for p in chosen
        ]
    if as_json:
        print(json.dumps([asdict(f) for f in figures]))
        return
    out = stdout()
    for f in figures:
        util = "; ".join(
            f"{m}: training {u['training']:.0%}, desktops {u['desktop']:.0%}"
            for m, u in f.utilization.items()
        )
        p50 = "—" if f.desktop_wait_p50_s is None else f"{f.desktop_wait_p50_s / 60:.1f} min"
        p90 = "—" if f.desktop_wait_p90_s is None else f"{f.desktop_wait_p90_s / 60:.1f} min"
        jct = "—" if f.training_mean_jct_s is None else f"{f.training_mean_jct_s / 3600:.2f} h"
        out.print(
            f"{f.policy}: {util}\n  desktops {f.desktops} (never started {f.desktops_unstarted}): "
            f"wait p50 {p50}, p90 {p90}; training mean JCT {jct}"
        )
