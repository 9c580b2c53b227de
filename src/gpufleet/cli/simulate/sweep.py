"""``gpufleet simulate sweep``: one workload over profiles × node counts × seeds, in parallel
(local processes or Ray). Every problem with the options is said at once, before the trace is
read; a sweep whose runs partly failed prints the others' results and exits 1."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from gpufleet.cli.simulate.console import refusals, stderr, stdout, warn
from gpufleet.cli.simulate.flags import (
    DEFAULT_GPUS_PER_NODE,
    DEFAULT_LEAVES,
    ClusterFile,
    ClusterFlags,
    GpusPerNode,
    Json,
    Leaves,
    ProfileFlags,
    ReplayFlags,
    TraceFlags,
    flag_groups,
)
from gpufleet.cli.simulate.workload import (
    load_workload,
    profile,
    show_progress,
    warn_unfinished,
)
from gpufleet.model.errors import SpecError
from gpufleet.sim.replay import (
    ProfileChoice,
    ReplayRun,
    check_profile,
    parse_profile,
    uniform_cluster,
)
from gpufleet.sim.traces import FORMATS, TimeLimit

if TYPE_CHECKING:
    from gpufleet.sim import sweep as sw

Profiles = Annotated[
    list[str],
    typer.Option(
        "--profiles",
        help="comma list of ORDER[+PLACEMENT][+BACKFILL][+PREEMPT…], as for compare; repeatable",
    ),
]
Orders = Annotated[
    list[str],
    typer.Option("--order", help="an order to sweep (repeatable), with the other flags' plugins"),
]
Capacities = Annotated[
    str,
    typer.Option(
        "--nodes",
        "--capacity",
        help="comma list of node counts, e.g. 16,32,64. Without --cluster: identical nodes laid "
        "out as replay's --nodes; with it: the file's cluster grown by copies of its last node "
        "or shrunk by dropping its last nodes (as whatif's nodes=N)",
    ),
]
Seeds = Annotated[
    str,
    typer.Option(
        "--seeds",
        help="comma list of seeds. A seed reaches the only random draws of a replay: --placement "
        "random and the failures of --mtbf. Traces are replayed as given (no sampling or "
        "jitter): without those two, every seed gives the same figures",
    ),
]
Workers = Annotated[
    int | None,
    typer.Option(
        "--workers", help="local processes at once (default: the CPU count; 1: in this one)"
    ),
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        "--ray",
        help="run each run as a task on this Ray cluster instead of local processes: "
        "ray.init(address=…), i.e. the head's HOST:PORT or auto; needs ray here (pip install "
        "gpufleet's ray extra) and gpufleet in the cluster's Python",
    ),
]
ResultsFile = Annotated[
    Path | None,
    typer.Option("--out", help="also write the results here: FILE.csv one row per run, else JSON"),
]


@flag_groups
def sweep(
    *,
    workload: TraceFlags,
    profiles: Profiles = [],  # noqa: B006 (typer reads it, nothing changes it)
    orders: Orders = [],  # noqa: B006
    capacities: Capacities = "64",
    seeds: Seeds = "0",
    workers: Workers = None,
    ray_address: RayAddress = None,
    cluster: ClusterFile = None,
    gpus_per_node: GpusPerNode = DEFAULT_GPUS_PER_NODE,
    leaves: Leaves = DEFAULT_LEAVES,
    plugins: ProfileFlags,
    replaying: ReplayFlags,
    as_json: Json = False,
    out: ResultsFile = None,
) -> None:
    """Replay one workload over profiles × node counts × seeds, in parallel (local processes
    or Ray): a row per run and the mean and spread over seeds of each profile and capacity."""
    from gpufleet.sim import sweep as sw

    with refusals():
        problems: list[SpecError] = []
        choices = _choices(profile("fifo", plugins), orders, profiles, problems)
        counts, bad = sw.parse_counts(capacities, "--nodes", minimum=1)
        problems += bad
        seed_list, bad = sw.parse_counts(seeds, "--seeds", minimum=0)
        problems += bad
        problems += _option_problems(workload, replaying, workers, ray_address, out)
        if cluster is None:  # each node count's layout, before the trace is read
            problems += sw.clusters_for(
                uniform_cluster(1), counts, uniform=(gpus_per_node, leaves)
            )[1]
        if problems:
            raise sw.Problems(problems)
        # each count's leaves are checked below
        layout = ClusterFlags(cluster, counts[0], gpus_per_node, min(leaves, counts[0]))
        wl = load_workload(workload.trace, workload.fmt, layout, replaying, 0)
        uniform = None if cluster is not None else (gpus_per_node, leaves)
        clusters, problems = sw.clusters_for(wl.cluster, counts, uniform=uniform)
        problems += sw.check_failures(wl.config, clusters)
        if problems:
            raise sw.Problems(problems)
        if len(seed_list) > 1 and not sw.seeds_matter(choices, wl.config):
            warn(
                "--seeds: nothing in these runs draws a random number (no --placement random, "
                "no --mtbf): every seed gives the same figures"
            )
        points = sw.grid(choices, counts, seed_list)
        runner = _runner(workers, ray_address)
        results = _sweep_with_progress(
            runner, sw.SweepWorkload(wl.jobs, wl.config, clusters), points, show_progress(as_json)
        )
        title = (
            f"{workload.trace.name} · {len(wl.jobs):,} jobs · {len(choices)} profile(s) × "
            f"{len(counts)} capacit{'y' if len(counts) == 1 else 'ies'} × "
            f"{len(seed_list)} seed(s) = {len(points)} runs"
        )
        _report(results, title, as_json, out)


def _choices(
    base: ProfileChoice, orders: list[str], profiles: list[str], problems: list[SpecError]
) -> list[ProfileChoice]:
    """``base`` with each of ``orders``, then each of ``profiles``; what is wrong with them
    goes to ``problems``."""
    choices: list[ProfileChoice] = []
    for o in orders:
        try:
            check_profile(replace(base, order=o))
            choices.append(replace(base, order=o))
        except SpecError as exc:
            problems.append(SpecError(f"{o!r}: {exc.reason}", field="--order"))
    for text in profiles:
        for p in (x for x in text.split(",") if x.strip()):
            try:
                choices.append(parse_profile(p, base))
            except SpecError as exc:
                problems.append(exc)
    if not choices and not problems:
        problems.append(
            SpecError(
                "name the profiles: --profiles fifo+easy,las+none or --order A --order B",
                field="--profiles",
            )
        )
    labels = [c.label for c in choices]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        problems.append(SpecError(f"{', '.join(twice)} named twice", field="--profiles"))
    return choices


def _option_problems(
    workload: TraceFlags,
    replaying: ReplayFlags,
    workers: int | None,
    ray_address: str | None,
    out: Path | None,
) -> list[SpecError]:
    problems: list[SpecError] = []
    if workers is not None and workers < 1:
        problems.append(SpecError(f"must be at least 1, got {workers}", field="--workers"))
    if workers is not None and ray_address is not None:
        problems.append(
            SpecError("the Ray cluster's CPUs set how many run at once", field="--workers")
        )
    if out is not None and not out.parent.is_dir():
        problems.append(SpecError(f"no folder {str(out.parent)!r}", field="--out"))
    if workload.fmt not in FORMATS:
        problems.append(
            SpecError(
                f"must be one of {', '.join(FORMATS)}, got {workload.fmt!r}", field="--format"
            )
        )
    try:
        TimeLimit.parse(replaying.time_limit)
    except SpecError as exc:
        problems.append(exc)
    return problems


def _runner(workers: int | None, ray_address: str | None) -> sw.Runner:
    from gpufleet.sim import sweep as sw

    if ray_address is not None:
        return sw.RayCluster(ray_address)
    if workers == 1:
        return sw.InProcess()
    return sw.LocalProcesses(workers) if workers else sw.LocalProcesses()


def _report(results: Sequence[sw.RunResult], title: str, as_json: bool, out: Path | None) -> None:
    """The runs' warnings, the results (to ``out`` too), one ``error:`` line per failed run."""
    from gpufleet.sim import sweep as sw
    from gpufleet.sim import sweep_report

    for r in results:
        if r.metrics is not None:
            warn_unfinished([_as_run(r)])
    if out is not None:
        sweep_report.write_out(out, results)
    failed = [r for r in results if not r.ok]
    if as_json:
        print(json.dumps(sw.sweep_json(results)))
    else:
        con = stdout()
        con.print(title, style="bold")
        con.print(sweep_report.runs_table(results))
        con.print("over the seeds: mean ± sample standard deviation", style="bold")
        con.print(sweep_report.aggregate_table(sw.aggregate(results)))
    for r in failed:
        stderr().print(Text("error: ", style="bold red") + Text(f"{r.point.label}: {r.error}"))
    if failed:
        raise typer.Exit(1)


def _as_run(r: Any) -> ReplayRun:
    """A sweep's run as the unfinished-jobs warning names it."""
    return ReplayRun(r.point.label, r.metrics, [], [], r.cycles, 0)


def _sweep_with_progress(runner: Any, workload: Any, points: Sequence[Any], show: bool) -> Any:
    if not show:
        return runner.run(workload, points)
    with Progress(
        TextColumn("sweep"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} runs"),
        TimeElapsedColumn(),
        console=stderr(),
        transient=True,
    ) as bar:
        task = bar.add_task("sweep", total=len(points))
        return runner.run(workload, points, lambda _r: bar.advance(task))
