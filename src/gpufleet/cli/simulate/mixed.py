"""``gpufleet simulate mixed``: a training trace beside cloud-desktop sessions (sim/mixed.py),
under each placement policy: per-engine utilization, desktop waits, training JCT."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpufleet.cli.simulate.console import refusals, stdout
from gpufleet.cli.simulate.flags import Json, Seed
from gpufleet.model.errors import SpecError

if TYPE_CHECKING:
    from gpufleet.sim.mixed import MixedFigures

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
Videos = Annotated[
    float, typer.Option("--videos-per-hour", help="transcode jobs (a share and one NVENC)")
]
Pack = Annotated[
    bool, typer.Option("--pack-encoders", help="video jobs may use training GPUs' encoders")
]


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
    videos_per_hour: Videos = 0.0,
    pack_encoders: Pack = False,
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
        Videos,
        desktop_sessions,
        mixed_cluster,
        mixed_jobs,
        run_mixed,
        video_jobs,
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
        if (
            not 0 < share <= 1000
            or min(train_nodes, graphics_nodes, graphics_gpus) < 1
            or videos_per_hour < 0
        ):
            raise SpecError(
                "--desktop-share is 1..1000, node and GPU counts at least 1, "
                "--videos-per-hour at least 0",
                field="options",
            )
        training = load_trace(trace, fmt, gpus_per_node=8)
        training = training[:jobs] if jobs > 0 else training
        span = max((j.submit_time for j in training), default=0.0)
        days = max(span / 86_400.0, 1.0)
        desktops = desktop_sessions(Desktops(per_hour, days, share_milli=share), seed)
        videos = video_jobs(Videos(videos_per_hour, days), seed)
        cluster = mixed_cluster(
            train_nodes, graphics_nodes, graphics_model=model, graphics_gpus=graphics_gpus
        )
        profile = Profile.build(
            order="fifo", place="bestfit", backfill="easy", explain=False,
            pack_encoders=pack_encoders,
        )  # fmt: skip
        figures = [
            run_mixed(
                cluster, mixed_jobs(training, desktops, p, "H100-SXM", videos), profile, p, seed
            )
            for p in chosen
        ]
    if as_json:
        print(json.dumps([asdict(f) for f in figures]))
        return
    _print(figures)


def _minutes(s: float | None) -> str:
    return "—" if s is None else f"{s / 60:.1f} min"


def _print(figures: list[MixedFigures]) -> None:
    out = stdout()
    for f in figures:
        util = "; ".join(
            f"{m}: training {u['training']:.0%}, desktops {u['desktop']:.0%}"
            + (f", video {u['video']:.0%}" if f.videos else "")
            for m, u in f.utilization.items()
        )
        jct = "—" if f.training_mean_jct_s is None else f"{f.training_mean_jct_s / 3600:.2f} h"
        out.print(
            f"{f.policy}: {util}\n  desktops {f.desktops} (never started {f.desktops_unstarted}): "
            f"wait p50 {_minutes(f.desktop_wait_p50_s)}, p90 {_minutes(f.desktop_wait_p90_s)}; "
            f"training mean JCT {jct}"
        )
        if f.videos:
            engines = "; ".join(
                f"{m} " + ", ".join(f"{e.upper()} {v:.0%}" for e, v in es.items())
                for m, es in f.engines.items()
            )
            out.print(
                f"  videos {f.videos} ({f.videos_packed} on a training GPU's encoder): wait p50 "
                f"{_minutes(f.video_wait_p50_s)}, p90 {_minutes(f.video_wait_p90_s)}; "
                f"engines held: {engines or 'none'}"
            )
