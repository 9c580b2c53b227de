"""``gpufleet simulate replay|compare|whatif|sweep|fill``: workloads through the scheduler
core, offline.

Bad input (a file, a row, a flag's value) prints one ``error:`` line on stderr and exits 2; a
sweep whose runs partly failed prints the others' results, one ``error:`` line per failed run,
and exits 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text
from typer.core import TyperCommand

from gpufleet.core.controller import ControllerError
from gpufleet.io.specs import load_queues
from gpufleet.model.checkpoint import check_interval
from gpufleet.model.cluster import ClusterSpec
from gpufleet.model.errors import SpecError
from gpufleet.scheduler.framework import ProfileError
from gpufleet.sim import report
from gpufleet.sim.engine import SimConfig, TraceJob
from gpufleet.sim.replay import (
    ProfileChoice,
    ReplayRun,
    check_profile,
    equal_share_queues,
    load_cluster_file,
    load_failures,
    parse_profile,
    run_replay,
    uniform_cluster,
    with_queues,
)
from gpufleet.sim.traces import FORMATS, TimeLimit, apply_time_limits, load_trace
from gpufleet.sim.whatif import DEFAULT_GPU_HOUR_PRICE_USD

app = typer.Typer(no_args_is_help=True)
T = TypeVar("T")

FILL_ALIASES = {"packing": "gpupacking", "clustering": "gpuclustering"}


# ---------------------------------------------------------------------------------------------
# speaking


def _stdout() -> Console:
    tty = sys.stdout.isatty()
    # piped output keeps whole table rows instead of wrapping them at 80 columns
    return Console(file=sys.stdout, highlight=False, width=None if tty else 200)


def _stderr() -> Console:
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


def _fail(message: str) -> NoReturn:
    _stderr().print(Text("error: ", style="bold red") + Text(message))
    raise typer.Exit(2)


def _warn(message: str) -> None:
    _stderr().print(Text("warning: ", style="yellow") + Text(message))


class _OneLineUsageErrors(TyperCommand):
    """A bad or missing flag is one ``error:`` line and exit 2, like any other bad input."""

    def make_context(
        self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any
    ) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except Exception as exc:
            # click's UsageError (typer vendors its own copy): exit code 2 and a message
            if getattr(exc, "exit_code", None) != 2 or not hasattr(exc, "format_message"):
                raise
            _fail(f"{exc.format_message()} (see: gpufleet simulate {info_name} --help)")


@contextmanager
def _refusals() -> Iterator[None]:
    """Refused input becomes one line and exit code 2, never a traceback."""
    try:
        yield
    except (SpecError, ProfileError, ControllerError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))


# ---------------------------------------------------------------------------------------------
# shared options


@dataclass(frozen=True, slots=True)
class Workload:
    cluster: ClusterSpec
    jobs: list[TraceJob]
    config: SimConfig


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip() and n.strip() != "none")


def _options(las_thresholds: str) -> dict[str, dict[str, Any]]:
    if not las_thresholds:
        return {}
    try:
        values = [float(x) for x in las_thresholds.split(",") if x.strip()]
    except ValueError:
        raise SpecError(
            f"must be GPU-seconds separated by commas, got {las_thresholds!r}",
            field="--las-thresholds",
        ) from None
    return {"order/las": {"thresholds_gpu_s": values}}


def _load_workload(
    *,
    trace: Path,
    fmt: str,
    cluster_file: Path | None,
    nodes: int,
    gpus_per_node: int,
    leaves: int,
    queues_file: Path | None,
    equal_shares: bool,
    time_limit: str,
    restart_overhead: float,
    mtbf: float | None,
    repair: float,
    fail_file: Path | None,
    seed: int,
    checkpoint_interval: float | None = None,
) -> Workload:
    if fmt not in FORMATS:
        raise SpecError(f"must be one of {', '.join(FORMATS)}, got {fmt!r}", field="--format")
    if queues_file is not None and equal_shares:
        raise SpecError("give --queues or --equal-shares, not both", field="--equal-shares")
    if restart_overhead < 0 or repair < 0 or (mtbf is not None and mtbf <= 0):
        raise SpecError(
            "--restart-overhead and --repair must be ≥ 0 and --mtbf > 0", field="options"
        )
    limits = TimeLimit.parse(time_limit)
    if cluster_file is not None:
        cluster = load_cluster_file(cluster_file)
    else:
        cluster = uniform_cluster(nodes, gpus_per_node, leaves)
    node_gpus = max((n.gpus for n in cluster.nodes), default=gpus_per_node) or gpus_per_node
    notes: list[str] = []
    jobs = load_trace(trace, fmt, gpus_per_node=node_gpus, notes=notes)
    for note in notes:
        _warn(note)
    jobs = apply_time_limits(jobs, limits, slack_s=restart_overhead)
    if queues_file is not None:
        cluster = with_queues(cluster, load_queues(queues_file))
    elif equal_shares:
        cluster = with_queues(cluster, equal_share_queues(jobs))
    failures = load_failures(fail_file, cluster, repair) if fail_file is not None else []
    config = SimConfig(
        restart_overhead_s=restart_overhead,
        failures=failures,
        mtbf_s=mtbf,
        repair_s=repair,
        seed=seed,
        checkpoint_interval_s=check_interval(checkpoint_interval, field="--checkpoint-interval"),
    )
    return Workload(cluster, jobs, config)


def _run_all(
    workload: Workload, choices: Sequence[ProfileChoice], show_progress: bool
) -> list[ReplayRun]:
    runs = []
    total = len(workload.jobs)
    if not show_progress:
        return [run_replay(workload.cluster, workload.jobs, c, workload.config) for c in choices]
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} jobs · t={task.fields[sim_t]}"),
        TimeElapsedColumn(),
        console=_stderr(),
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


def _warn_unfinished(runs: Sequence[ReplayRun]) -> None:
    for r in runs:
        m = r.metrics
        if m.never_schedulable:
            _warn(
                f"{r.label}: {m.never_schedulable} job(s) can never be scheduled on this cluster "
                f"({', '.join(m.never_ids[:5])}{', …' if len(m.never_ids) > 5 else ''}); "
                "they are counted in jobs and left out of the other figures"
            )
        if m.unfinished:
            _warn(f"{r.label}: {m.unfinished} job(s) never finished (see the per-job CSV)")


def _nodes(cluster: ClusterSpec) -> str:
    n = len(cluster.nodes)
    return f"{n:,} node{'s' if n != 1 else ''}"


def _show_progress(as_json: bool) -> bool:
    return not as_json and sys.stderr.isatty()


# the options replay and compare share, as typer parameters
TraceOpt = typer.Option(..., "--trace", help="the trace file")
FormatOpt = typer.Option(
    ...,
    "--format",
    help="philly | openb | tiresias | jobs (gpufleet history export) | sacct (sacct "
    "--parsable2) | pai (Alibaba PAI 2020: pai_job_table.csv) | helios (cluster_log.csv)",
)
ClusterOpt = typer.Option(
    None, "--cluster", help="cluster spec (YAML), or an openb node list (.csv)"
)
NodesOpt = typer.Option(64, "--nodes", help="without --cluster: identical nodes")
GpusOpt = typer.Option(8, "--gpus-per-node", help="without --cluster: GPUs per node")
LeavesOpt = typer.Option(1, "--leaves", help="without --cluster: leaf switches")
QueuesOpt = typer.Option(None, "--queues", help="YAML list of queues: name, weight, cohort, quota")
EqualOpt = typer.Option(
    False, "--equal-shares", help="one queue of weight 1 per distinct queue of the trace"
)
LimitOpt = typer.Option(
    "auto",
    "--time-limit",
    help="auto (the trace's, else exact) | exact (= duration) | none | a factor × duration",
)
OverheadOpt = typer.Option(0.0, "--restart-overhead", help="seconds added to each restart")
MtbfOpt = typer.Option(None, "--mtbf", help="per-node mean time between failures (s)")
RepairOpt = typer.Option(3600.0, "--repair", help="repair time after a failure (s)")
FailOpt = typer.Option(None, "--fail", help="scripted failures, CSV time,node[,repair_s]")
CheckpointOpt = typer.Option(
    None,
    "--checkpoint-interval",
    help="seconds of work between checkpoints of every job (a job's own value wins); a "
    "preempted or failed job resumes from its last; default none: it restarts from zero",
)
SeedOpt = typer.Option(0, "--seed", help="seed of the profile and of random failures")
PlacementOpt = typer.Option("bestfit", "--placement", help="bestfit | topology | packing | …")
BackfillOpt = typer.Option("easy", "--backfill", help="easy | none | greedy")
PreemptOpt = typer.Option("", "--preempt", help="comma list: reclaim, priority, order (or none)")
AdmitOpt = typer.Option("quota", "--admit", help="quota | none")
LasOpt = typer.Option("", "--las-thresholds", help="LAS queue thresholds, GPU-s, comma list")
JsonOpt = typer.Option(False, "--json", help="print one JSON object instead of tables")
OutOpt = typer.Option(None, "--out", help="write per-job and timeline CSVs and PNG plots here")


# ---------------------------------------------------------------------------------------------
# replay


@app.command("replay", cls=_OneLineUsageErrors)
def replay(
    trace: Path = TraceOpt,
    fmt: str = FormatOpt,
    cluster: Path | None = ClusterOpt,
    nodes: int = NodesOpt,
    gpus_per_node: int = GpusOpt,
    leaves: int = LeavesOpt,
    order: str = typer.Option("fifo", "--order", help="fifo | priority | fairshare | las | sjf"),
    placement: str = PlacementOpt,
    backfill: str = BackfillOpt,
    preempt: str = PreemptOpt,
    admit: str = AdmitOpt,
    las_thresholds: str = LasOpt,
    queues: Path | None = QueuesOpt,
    equal_shares: bool = EqualOpt,
    time_limit: str = LimitOpt,
    restart_overhead: float = OverheadOpt,
    mtbf: float | None = MtbfOpt,
    repair: float = RepairOpt,
    fail: Path | None = FailOpt,
    checkpoint_interval: float | None = CheckpointOpt,
    seed: int = SeedOpt,
    as_json: bool = JsonOpt,
    out: Path | None = OutOpt,
) -> None:
    """Replay a trace through one scheduler profile and report JCT, waits, utilization and
    fairness."""
    with _refusals():
        choice = ProfileChoice(
            order, placement, backfill, _names(preempt), admit, _options(las_thresholds)
        )
        check_profile(choice)
        wl = _load_workload(
            trace=trace,
            fmt=fmt,
            cluster_file=cluster,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            leaves=leaves,
            queues_file=queues,
            equal_shares=equal_shares,
            time_limit=time_limit,
            restart_overhead=restart_overhead,
            mtbf=mtbf,
            repair=repair,
            fail_file=fail,
            seed=seed,
            checkpoint_interval=checkpoint_interval,
        )
        (run,) = _run_all(wl, [choice], _show_progress(as_json))
        _emit(run, wl, as_json, out)


def _emit(run: ReplayRun, wl: Workload, as_json: bool, out: Path | None) -> None:
    _warn_unfinished([run])
    if out is not None:
        report.write_replay_outputs(out, [run])
    if as_json:
        print(json.dumps(run.metrics.to_json()))
        return
    con = _stdout()
    title = (
        f"{run.label} · {len(wl.jobs):,} jobs · {_nodes(wl.cluster)}, "
        f"{wl.cluster.total_gpus:,} GPUs · {run.cycles:,} cycles"
    )
    con.print(title, style="bold")  # above the table, not wrapped to its width
    con.print(report.summary_table(run.metrics))
    if len(run.metrics.queues) > 1:
        con.print(report.queue_table(run.metrics))
    if out is not None:
        con.print(f"wrote {out}/ (jobs.csv, timeline.csv, jct_cdf.png, queue_length.png, …)")


# ---------------------------------------------------------------------------------------------
# compare


@app.command("compare", cls=_OneLineUsageErrors)
def compare(
    trace: Path = TraceOpt,
    fmt: str = FormatOpt,
    profiles: list[str] = typer.Option(
        [],
        "--profiles",
        help="comma list of ORDER[+PLACEMENT][+BACKFILL][+PREEMPT…], e.g. "
        "fifo+easy,las+none+order; repeatable",
    ),
    orders: list[str] = typer.Option(
        [], "--order", help="an order to compare (repeatable), with the other flags' plugins"
    ),
    cluster: Path | None = ClusterOpt,
    nodes: int = NodesOpt,
    gpus_per_node: int = GpusOpt,
    leaves: int = LeavesOpt,
    placement: str = PlacementOpt,
    backfill: str = BackfillOpt,
    preempt: str = PreemptOpt,
    admit: str = AdmitOpt,
    las_thresholds: str = LasOpt,
    queues: Path | None = QueuesOpt,
    equal_shares: bool = EqualOpt,
    time_limit: str = LimitOpt,
    restart_overhead: float = OverheadOpt,
    mtbf: float | None = MtbfOpt,
    repair: float = RepairOpt,
    fail: Path | None = FailOpt,
    checkpoint_interval: float | None = CheckpointOpt,
    seed: int = SeedOpt,
    as_json: bool = JsonOpt,
    out: Path | None = OutOpt,
) -> None:
    """Replay one trace through several profiles: one table, one set of plots."""
    with _refusals():
        base = ProfileChoice(
            "fifo", placement, backfill, _names(preempt), admit, _options(las_thresholds)
        )
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
        wl = _load_workload(
            trace=trace,
            fmt=fmt,
            cluster_file=cluster,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            leaves=leaves,
            queues_file=queues,
            equal_shares=equal_shares,
            time_limit=time_limit,
            restart_overhead=restart_overhead,
            mtbf=mtbf,
            repair=repair,
            fail_file=fail,
            seed=seed,
            checkpoint_interval=checkpoint_interval,
        )
        runs = _run_all(wl, choices, _show_progress(as_json))
        _warn_unfinished(runs)
        if out is not None:
            report.write_replay_outputs(out, runs)
        if as_json:
            print(json.dumps({r.label: r.metrics.to_json() for r in runs}))
            return
        title = (
            f"{trace.name} · {len(wl.jobs):,} jobs · {_nodes(wl.cluster)}, "
            f"{wl.cluster.total_gpus:,} GPUs"
        )
        con = _stdout()
        con.print(title, style="bold")
        con.print(report.compare_table(runs))


# ---------------------------------------------------------------------------------------------
# whatif


@app.command("whatif", cls=_OneLineUsageErrors)
def whatif(
    history: Path = typer.Option(
        ..., "--history", help="the jobs to replay: gpufleet history export FILE (or --format)"
    ),
    changes: list[str] = typer.Option(
        [],
        "--change",
        help="nodes+=N | nodes-=N | nodes=N | order=NAME | placement=NAME | backfill=NAME | "
        "admit=NAME | preempt=A,B|none; repeatable, applied together",
    ),
    fmt: str = typer.Option("jobs", "--format", help="the history's format, as for replay"),
    cluster: Path | None = ClusterOpt,
    nodes: int = NodesOpt,
    gpus_per_node: int = GpusOpt,
    leaves: int = LeavesOpt,
    order: str = typer.Option("fairshare", "--order", help="baseline order (the live default)"),
    placement: str = typer.Option("topology", "--placement", help="baseline placement"),
    backfill: str = BackfillOpt,
    preempt: str = typer.Option("reclaim", "--preempt", help="baseline preemption plugins"),
    admit: str = AdmitOpt,
    queues: Path | None = QueuesOpt,
    equal_shares: bool = EqualOpt,
    time_limit: str = LimitOpt,
    seed: int = SeedOpt,
    gpu_hour_price: float = typer.Option(
        DEFAULT_GPU_HOUR_PRICE_USD,
        "--gpu-hour-price",
        metavar="USD",
        help="what one GPU-hour costs, flat for every GPU model (the catalog has no prices); "
        "cost = the cluster's GPUs × makespan × this",
    ),
    report_file: Path | None = typer.Option(
        None,
        "--report",
        metavar="FILE.html",
        help="also write one self-contained HTML page: the changes, the deltas and the plots",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Replay a history as it is and with changes (more nodes, another order, …): the deltas
    of JCT, waits, utilization and cost. The baseline profile is the live controller's default."""
    from gpufleet.sim.whatif import WhatIf, apply_changes, check_price, parse_change

    with _refusals():
        if not changes:
            raise SpecError(
                "name a change: --change nodes+=16, --change order=las", field="--change"
            )
        parsed = [parse_change(c) for c in changes]
        check_price(gpu_hour_price)
        base = ProfileChoice(order, placement, backfill, _names(preempt), admit)
        check_profile(base)
        if report_file is not None:
            _check_writable(report_file)
        wl = _load_workload(
            trace=history,
            fmt=fmt,
            cluster_file=cluster,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            leaves=leaves,
            queues_file=queues,
            equal_shares=equal_shares,
            time_limit=time_limit,
            restart_overhead=0.0,
            mtbf=None,
            repair=3600.0,
            fail_file=None,
            seed=seed,
        )
        new_cluster, new_choice = apply_changes(wl.cluster, base, parsed)
        (before,) = _run_all(wl, [base], _show_progress(as_json))
        changed = replace(wl, cluster=new_cluster)
        (after,) = _run_all(changed, [new_choice], _show_progress(as_json))
        _warn_unfinished([before, after])
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
        from rich.table import Table

        table = Table(title_justify="left")
        for col in ("figure", "baseline", "what-if", "delta"):
            table.add_column(col, justify="left" if col == "figure" else "right")
        for d in result.deltas:
            table.add_row(d.label, _figure(d, d.baseline), _figure(d, d.whatif), _delta(d))
        table.caption = f"cost: the cluster's GPUs × makespan × ${gpu_hour_price:,.2f}/GPU-h"
        con = _stdout()
        # Text, not markup: a file name may hold [brackets]
        con.print(
            Text(
                f"{history.name} · {len(wl.jobs):,} jobs · baseline {before.label} on "
                f"{_nodes(wl.cluster)} · what-if {', '.join(c.text for c in parsed)}: "
                f"{after.label} on {_nodes(new_cluster)}",
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


# ---------------------------------------------------------------------------------------------
# sweep


@app.command("sweep", cls=_OneLineUsageErrors)
def sweep(
    trace: Path = TraceOpt,
    fmt: str = FormatOpt,
    profiles: list[str] = typer.Option(
        [],
        "--profiles",
        help="comma list of ORDER[+PLACEMENT][+BACKFILL][+PREEMPT…], as for compare; repeatable",
    ),
    orders: list[str] = typer.Option(
        [], "--order", help="an order to sweep (repeatable), with the other flags' plugins"
    ),
    capacities: str = typer.Option(
        "64",
        "--nodes",
        "--capacity",
        help="comma list of node counts, e.g. 16,32,64. Without --cluster: identical nodes laid "
        "out as replay's --nodes; with it: the file's cluster grown by copies of its last node "
        "or shrunk by dropping its last nodes (as whatif's nodes=N)",
    ),
    seeds: str = typer.Option(
        "0",
        "--seeds",
        help="comma list of seeds. A seed reaches the only random draws of a replay: --placement "
        "random and the failures of --mtbf. Traces are replayed as given (no sampling or "
        "jitter): without those two, every seed gives the same figures",
    ),
    workers: int | None = typer.Option(
        None, "--workers", help="local processes at once (default: the CPU count; 1: in this one)"
    ),
    ray_address: str | None = typer.Option(
        None,
        "--ray",
        help="run each run as a task on this Ray cluster instead of local processes: "
        "ray.init(address=…), i.e. the head's HOST:PORT or auto; needs ray here (pip install "
        "gpufleet's ray extra) and gpufleet in the cluster's Python",
    ),
    cluster: Path | None = ClusterOpt,
    gpus_per_node: int = GpusOpt,
    leaves: int = LeavesOpt,
    placement: str = PlacementOpt,
    backfill: str = BackfillOpt,
    preempt: str = PreemptOpt,
    admit: str = AdmitOpt,
    las_thresholds: str = LasOpt,
    queues: Path | None = QueuesOpt,
    equal_shares: bool = EqualOpt,
    time_limit: str = LimitOpt,
    restart_overhead: float = OverheadOpt,
    mtbf: float | None = MtbfOpt,
    repair: float = RepairOpt,
    fail: Path | None = FailOpt,
    checkpoint_interval: float | None = CheckpointOpt,
    as_json: bool = JsonOpt,
    out: Path | None = typer.Option(
        None, "--out", help="also write the results here: FILE.csv one row per run, else JSON"
    ),
) -> None:
    """Replay one workload over profiles × node counts × seeds, in parallel (local processes
    or Ray): a row per run and the mean and spread over seeds of each profile and capacity."""
    from gpufleet.sim import sweep as sw
    from gpufleet.sim import sweep_report

    with _refusals():
        problems: list[SpecError] = []
        base = ProfileChoice(
            "fifo", placement, backfill, _names(preempt), admit, _options(las_thresholds)
        )
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
        counts, bad = sw.parse_counts(capacities, "--nodes", minimum=1)
        problems += bad
        seed_list, bad = sw.parse_counts(seeds, "--seeds", minimum=0)
        problems += bad
        if workers is not None and workers < 1:
            problems.append(SpecError(f"must be at least 1, got {workers}", field="--workers"))
        if workers is not None and ray_address is not None:
            problems.append(
                SpecError("the Ray cluster's CPUs set how many run at once", field="--workers")
            )
        if out is not None and not out.parent.is_dir():
            problems.append(SpecError(f"no folder {str(out.parent)!r}", field="--out"))
        if fmt not in FORMATS:
            problems.append(
                SpecError(f"must be one of {', '.join(FORMATS)}, got {fmt!r}", field="--format")
            )
        try:
            TimeLimit.parse(time_limit)
        except SpecError as exc:
            problems.append(exc)
        if cluster is None:  # each node count's layout, before the trace is read
            problems += sw.clusters_for(
                uniform_cluster(1), counts, uniform=(gpus_per_node, leaves)
            )[1]
        if problems:
            raise sw.Problems(problems)
        wl = _load_workload(
            trace=trace,
            fmt=fmt,
            cluster_file=cluster,
            nodes=counts[0],
            gpus_per_node=gpus_per_node,
            leaves=min(leaves, counts[0]),  # each count's leaves are checked below
            queues_file=queues,
            equal_shares=equal_shares,
            time_limit=time_limit,
            restart_overhead=restart_overhead,
            mtbf=mtbf,
            repair=repair,
            fail_file=fail,
            seed=0,
            checkpoint_interval=checkpoint_interval,
        )
        uniform = None if cluster is not None else (gpus_per_node, leaves)
        clusters, problems = sw.clusters_for(wl.cluster, counts, uniform=uniform)
        problems += sw.check_failures(wl.config, clusters)
        if problems:
            raise sw.Problems(problems)
        if len(seed_list) > 1 and not sw.seeds_matter(choices, wl.config):
            _warn(
                "--seeds: nothing in these runs draws a random number (no --placement random, "
                "no --mtbf): every seed gives the same figures"
            )
        workload = sw.SweepWorkload(wl.jobs, wl.config, clusters)
        points = sw.grid(choices, counts, seed_list)
        runner: sw.Runner
        if ray_address is not None:
            runner = sw.RayCluster(ray_address)
        elif workers == 1:
            runner = sw.InProcess()
        else:
            runner = sw.LocalProcesses(workers) if workers else sw.LocalProcesses()
        results = _sweep_with_progress(runner, workload, points, _show_progress(as_json))
        for r in results:
            if r.metrics is not None:
                _warn_unfinished([_as_run(r)])
        if out is not None:
            sweep_report.write_out(out, results)
        failed = [r for r in results if not r.ok]
        if as_json:
            print(json.dumps(sw.sweep_json(results)))
        else:
            con = _stdout()
            con.print(
                f"{trace.name} · {len(wl.jobs):,} jobs · {len(choices)} profile(s) × "
                f"{len(counts)} capacit{'y' if len(counts) == 1 else 'ies'} × "
                f"{len(seed_list)} seed(s) = {len(points)} runs",
                style="bold",
            )
            con.print(sweep_report.runs_table(results))
            con.print("over the seeds: mean ± sample standard deviation", style="bold")
            con.print(sweep_report.aggregate_table(sw.aggregate(results)))
        for r in failed:
            _stderr().print(Text("error: ", style="bold red") + Text(f"{r.point.label}: {r.error}"))
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
        console=_stderr(),
        transient=True,
    ) as bar:
        task = bar.add_task("sweep", total=len(points))
        return runner.run(workload, points, lambda _r: bar.advance(task))


# ---------------------------------------------------------------------------------------------
# fill


@app.command("fill", cls=_OneLineUsageErrors)
def fill(
    pods: Path = typer.Option(..., "--pods", help="openb pod list (CSV)"),
    node_list: Path = typer.Option(..., "--nodes", help="openb node list (CSV)"),
    placement: str = typer.Option(
        "fgd", "--placement", help="random | dotprod | gpuclustering | packing | bestfit | fgd"
    ),
    seed: int = typer.Option(42, "--seed", help="shuffle seed (the paper uses 42-51)"),
    tune: float = typer.Option(1.3, "--tune", help="arrived workload, × the GPU capacity"),
    as_json: bool = JsonOpt,
    out: Path | None = typer.Option(
        None, "--out", help="write the published CSV layout and the plot here"
    ),
) -> None:
    """The FGD paper's fill experiment: GPU allocation ratio vs arrived workload."""
    from gpufleet.sim.fill import POLICIES, run_fill
    from gpufleet.sim.openb import load_nodes, load_pods

    with _refusals():
        policy = FILL_ALIASES.get(placement, placement)
        if policy not in POLICIES:
            raise SpecError(
                f"must be one of {', '.join(POLICIES)} (or packing), got {placement!r}",
                field="--placement",
            )
        if not tune > 0:
            raise SpecError(f"must be positive, got {tune:g}", field="--tune")
        pod_list = load_pods(pods)
        nodes = load_nodes(node_list)
        result = _checked(lambda: run_fill(pod_list, nodes, policy, seed, tune, workload=pods.stem))
        if out is not None:
            report.write_fill_outputs(out, result)
        if as_json:
            print(
                json.dumps(
                    {
                        "allocation_ratio": {str(x): v for x, v in sorted(result.alloc.items())},
                        "fragmentation_ratio": {
                            str(x): round(v, 4) for x, v in sorted(result.frag_ratio.items())
                        },
                        "wall_s": round(result.wall_s, 6),
                    }
                )
            )
            return
        _stdout().print(report.fill_table(result))


def _checked(fn: Callable[[], T]) -> T:
    """``run_fill`` refuses impossible input with ValueError: that is bad input here."""
    try:
        return fn()
    except ValueError as exc:
        raise SpecError(str(exc)) from None
