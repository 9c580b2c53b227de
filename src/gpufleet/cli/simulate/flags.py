"""The options the ``simulate`` commands share, each declared once: as an ``Annotated`` alias
(its flag and help) and, where several always come together, as a group, a dataclass whose
fields are the options (:func:`flag_groups` turns a command's group parameter into the group's
options on the command line and back into one value when the command runs)."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., None])

FORMAT_HELP = (
    "philly | openb | tiresias | jobs (gpufleet history export) | sacct (sacct "
    "--parsable2) | pai (Alibaba PAI 2020: pai_job_table.csv) | helios (cluster_log.csv)"
)

Trace = Annotated[Path, typer.Option("--trace", help="the trace file")]
Format = Annotated[str, typer.Option("--format", help=FORMAT_HELP)]
ClusterFile = Annotated[
    Path | None,
    typer.Option("--cluster", help="cluster spec (YAML), or an openb node list (.csv)"),
]
Nodes = Annotated[int, typer.Option("--nodes", help="without --cluster: identical nodes")]
GpusPerNode = Annotated[
    int, typer.Option("--gpus-per-node", help="without --cluster: GPUs per node")
]
Leaves = Annotated[int, typer.Option("--leaves", help="without --cluster: leaf switches")]
Placement = Annotated[str, typer.Option("--placement", help="bestfit | topology | packing | …")]
Backfill = Annotated[str, typer.Option("--backfill", help="easy | none | greedy")]
Preempt = Annotated[
    str, typer.Option("--preempt", help="comma list: reclaim, priority, order, defrag (or none)")
]
Admit = Annotated[str, typer.Option("--admit", help="quota | none")]
LasThresholds = Annotated[
    str, typer.Option("--las-thresholds", help="LAS queue thresholds, GPU-s, comma list")
]
Queues = Annotated[
    Path | None,
    typer.Option("--queues", help="YAML list of queues: name, weight, cohort, quota"),
]
EqualShares = Annotated[
    bool,
    typer.Option("--equal-shares", help="one queue of weight 1 per distinct queue of the trace"),
]
TimeLimitText = Annotated[
    str,
    typer.Option(
        "--time-limit",
        help="auto (the trace's, else exact) | exact (= duration) | none | a factor × duration",
    ),
]
RestartOverhead = Annotated[
    float, typer.Option("--restart-overhead", help="seconds added to each restart")
]
Mtbf = Annotated[
    float | None, typer.Option("--mtbf", help="per-node mean time between failures (s)")
]
Repair = Annotated[float, typer.Option("--repair", help="repair time after a failure (s)")]
FailFile = Annotated[
    Path | None, typer.Option("--fail", help="scripted failures, CSV time,node[,repair_s]")
]
NodeGrace = Annotated[
    float | None,
    typer.Option(
        "--node-grace-s",
        help="as the live controller's: a failed node is declared lost this many seconds after "
        "its last heartbeat, its jobs holding their GPUs (and doing no work) until then, and "
        "one repaired sooner loses its jobs when it comes back; default: lost at once",
    ),
]
CheckpointInterval = Annotated[
    float | None,
    typer.Option(
        "--checkpoint-interval",
        help="seconds of work between checkpoints of every job (a job's own value wins); a "
        "preempted or failed job resumes from its last; default none: it restarts from zero",
    ),
]
CheckpointOnPreempt = Annotated[
    bool,
    typer.Option(
        "--checkpoint-on-preempt",
        help="every job saves its state when preempted (on the stop signal) and resumes there, "
        "as Tiresias' LAS assumes; default: a preempted job keeps only its last checkpoint",
    ),
]
PreemptGrace = Annotated[
    float | None,
    typer.Option(
        "--preempt-grace-s",
        min=0,
        help="every job declares checkpoint: {signal: USR1, grace_s: G}: a preempted job holds "
        "its GPUs for the grace (capped by its queue's preempt_grace_max_s) and resumes where "
        "it stopped; default: no notice, SIGTERM at once",
    ),
]
Autoscale = Annotated[
    bool,
    typer.Option(
        "--autoscale",
        help="one elastic pool of --gpus-per-node nodes instead of --nodes: nodes are asked for "
        "when jobs wait for them and released when idle (the simulator's provider)",
    ),
]
AutoscaleMin = Annotated[
    int, typer.Option("--autoscale-min", help="with --autoscale: nodes kept up (default 0)")
]
AutoscaleMax = Annotated[
    int | None, typer.Option("--autoscale-max", help="with --autoscale: the most nodes at once")
]
AutoscaleStart = Annotated[
    float,
    typer.Option("--autoscale-start-s", help="with --autoscale: seconds a new node takes to join"),
]
AutoscaleIdle = Annotated[
    float,
    typer.Option("--autoscale-idle-s", help="with --autoscale: a node idle this long is released"),
]
NodeHourPrice = Annotated[
    float | None,
    typer.Option(
        "--node-hour-price",
        help="price of one node-hour (fixed or elastic): the JSON's cost is node_hours × it",
    ),
]
Seed = Annotated[int, typer.Option("--seed", help="seed of the profile and of random failures")]
Json = Annotated[bool, typer.Option("--json", help="print one JSON object instead of tables")]
OutDir = Annotated[
    Path | None,
    typer.Option("--out", help="write per-job and timeline CSVs and PNG plots here"),
]

DEFAULT_NODES = 64
DEFAULT_GPUS_PER_NODE = 8
DEFAULT_LEAVES = 1
DEFAULT_BACKFILL = "easy"
DEFAULT_ADMIT = "quota"
DEFAULT_TIME_LIMIT = "auto"


@dataclasses.dataclass(frozen=True, slots=True)
class TraceFlags:
    """The workload: ``--trace`` and ``--format``."""

    trace: Trace
    fmt: Format


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterFlags:
    """The cluster: a file, or identical nodes laid out under leaf switches."""

    cluster: ClusterFile = None
    nodes: Nodes = DEFAULT_NODES
    gpus_per_node: GpusPerNode = DEFAULT_GPUS_PER_NODE
    leaves: Leaves = DEFAULT_LEAVES


@dataclasses.dataclass(frozen=True, slots=True)
class ProfileFlags:
    """The scheduler profile's plugins other than the order."""

    placement: Placement = "bestfit"
    backfill: Backfill = DEFAULT_BACKFILL
    preempt: Preempt = ""
    admit: Admit = DEFAULT_ADMIT
    las_thresholds: LasThresholds = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ReplayFlags:
    """How the trace is replayed: queues, time limits, restarts, failures and checkpoints."""

    queues: Queues = None
    equal_shares: EqualShares = False
    time_limit: TimeLimitText = DEFAULT_TIME_LIMIT
    restart_overhead: RestartOverhead = 0.0
    mtbf: Mtbf = None
    repair: Repair = 3600.0
    fail: FailFile = None
    node_grace_s: NodeGrace = None
    checkpoint_interval: CheckpointInterval = None
    checkpoint_on_preempt: CheckpointOnPreempt = False
    preempt_grace_s: PreemptGrace = None


@dataclasses.dataclass(frozen=True, slots=True)
class ScaleFlags:
    """An elastic pool instead of fixed nodes, and what a node-hour costs."""

    autoscale: Autoscale = False
    autoscale_min: AutoscaleMin = 0
    autoscale_max: AutoscaleMax = None
    autoscale_start_s: AutoscaleStart = 120.0
    autoscale_idle_s: AutoscaleIdle = 600.0
    node_hour_price: NodeHourPrice = None


def flag_groups(command: F) -> F:
    """``command`` as typer sees it: each parameter whose type is a group (a dataclass above)
    becomes the group's options, in place and in the group's order; when the command runs,
    they are put back together into the group."""
    hints = typing.get_type_hints(command, include_extras=True)
    groups: dict[str, type[Any]] = {}
    params: list[inspect.Parameter] = []
    for name, param in inspect.signature(command).parameters.items():
        hint = hints[name]
        if dataclasses.is_dataclass(hint) and isinstance(hint, type):
            groups[name] = hint
            params += _group_params(hint)
        else:
            params.append(param.replace(kind=_KEYWORD, annotation=hint))

    @functools.wraps(command)
    def run(**flags: Any) -> None:
        for name, group in groups.items():
            fields = [f.name for f in dataclasses.fields(group)]
            flags[name] = group(**{f: flags.pop(f) for f in fields})
        command(**flags)

    del run.__wrapped__  # typer must read the signature below, not the command's
    run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params}
    return typing.cast(F, run)


_KEYWORD = inspect.Parameter.KEYWORD_ONLY


def _group_params(group: type[Any]) -> list[inspect.Parameter]:
    hints = typing.get_type_hints(group, include_extras=True)
    return [
        inspect.Parameter(
            f.name,
            _KEYWORD,
            default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default,
            annotation=hints[f.name],
        )
        for f in dataclasses.fields(group)
    ]
