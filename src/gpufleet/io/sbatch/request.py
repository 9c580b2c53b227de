"""What sbatch makes of a script, in Slurm's terms (:class:`SlurmRequest`); the gpufleet job
made from it (:class:`SbatchJob`) and the state of that mapping (:class:`Build`); sbatch's
refusal (:class:`SbatchError`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gpufleet.io import slurm_values as v
from gpufleet.io.slurm_opts import Given, Problem
from gpufleet.model.arrays import MAX_ARRAY_SIZE
from gpufleet.model.errors import SpecError


@dataclass(frozen=True, slots=True)
class SlurmRequest:
    """What sbatch makes of a script and its command-line options, in Slurm's own fields.

    Counts are as sbatch computes them before the controller sees the job (``ntasks`` from
    ``--nodes × --ntasks-per-node``, one per node by default); memory in MB with 0 meaning all
    of each node's; time limits in minutes (``UNLIMITED`` for none, None when not given).
    """

    script: str
    job_name: str
    nodes: tuple[int, int]  # (min, max); max == min for a fixed count, 0 for no maximum
    nodes_set: bool
    ntasks: int
    ntasks_set: bool
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    cpus_per_gpu: int | None = None
    gres: tuple[v.Gres, ...] = ()  # per node, every kind (gpu, shard, nvme, …)
    gpus: tuple[v.Gpus, ...] = ()  # --gpus: for the whole job
    gpus_per_node: tuple[v.Gpus, ...] = ()  # --gpus-per-node and --gres=gpu…
    gpus_per_task: tuple[v.Gpus, ...] = ()
    gpus_per_socket: tuple[v.Gpus, ...] = ()
    ntasks_per_gpu: int | None = None
    mem_per_node_mb: int | None = None  # --mem; 0: all of each node's memory
    mem_per_cpu_mb: int | None = None
    mem_per_gpu_mb: int | None = None
    time_limit: v.TimeLimit | None = None  # minutes
    time_min: v.TimeLimit | None = None
    partitions: tuple[str, ...] = ()
    array: str | None = None
    dependency: str | None = None
    dependencies: tuple[v.Dependency, ...] = ()
    dependency_any: bool = False  # joined by "?": any one of them
    output: str = "slurm-%j.out"
    error: str = "slurm-%j.out"
    input: str | None = None
    constraint: str | None = None
    nodelist: str | None = None  # Slurm's hostlist syntax, as written
    exclude: str | None = None
    exclusive: str | None = None  # exclusive, user, mcs, topo, oversubscribe
    reservation: str | None = None  # the advance reservation it runs in
    signal: v.Signal | None = None
    requeue: bool | None = None
    kill_on_invalid_dep: bool | None = None  # yes/no; None: the controller's setting
    chdir: str | None = None
    export: str | None = None
    export_file: str | None = None
    open_mode: str | None = None
    account: str | None = None
    qos: str | None = None
    mail_type: tuple[str, ...] = ()
    mail_user: str | None = None
    hint: tuple[str, ...] = ()
    priority: int | str | None = None
    nice: int | None = None
    hold: bool = False
    begin_time: float | None = None  # --begin, in seconds since the epoch
    # pyxis's --container-image, --container-mounts (SRC:DST[:FLAGS],...), --container-workdir
    container_image: str | None = None
    container_mounts: str | None = None
    container_workdir: str | None = None
    het_components: int = 1  # "#SBATCH hetjob" lines start more components (not read)
    other: tuple[tuple[str, str | None], ...] = ()  # every other option given, as given
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (time limits also as [D-]HH:MM:SS)."""
        d = asdict(self)
        d["other"] = dict(self.other)
        for k in ("time_limit", "time_min"):
            limit = getattr(self, k)
            d[f"{k}_text"] = None if limit is None else v.format_minutes(limit)
        out: dict[str, Any] = json.loads(json.dumps(d))  # tuples become lists
        return out


@dataclass(frozen=True, slots=True)
class SbatchJob:
    spec: dict[str, Any]  # a JobSpec mapping, without ``user`` (the submitter adds it)
    array: str | None = None
    depends_on: tuple[tuple[str, str], ...] = ()
    output: str | None = None
    error: str | None = None
    warnings: tuple[str, ...] = ()
    request: SlurmRequest | None = None


class SbatchError(SpecError):
    """sbatch would refuse the script: every problem, each with its file and line."""

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        first = problems[0]
        reason = first.message if len(problems) == 1 else f"{len(problems)} problems"
        super().__init__(reason, source=source, field=f"line {first.line}")
        self.problems = tuple(problems)
        self.args = ("\n".join(where(source, p.line) + p.message for p in problems),)

    def __str__(self) -> str:
        return str(self.args[0])


def where(source: str, line: int) -> str:
    """The front of a message about ``line`` of ``source`` (0: the command line)."""
    return f"{source}:{line}: " if line else f"{source}: command line: "


CANNOT = "gpufleet cannot run this yet: "


@dataclass
class Build:
    """A SlurmRequest being mapped onto a JobSpec (``build`` and ``terms``): where each option
    was given, so that a refusal or a note names its line, and the notes so far."""

    req: SlurmRequest
    source: str
    seen: dict[str, Given] = field(default_factory=dict)
    max_array_size: int = MAX_ARRAY_SIZE
    notes: list[str] = field(default_factory=list)
    replicas: tuple[int, ...] | None = None  # the nodes' replica counts (None: not known)

    def err(self, message: str, *names: str) -> SpecError:
        """A refusal naming the lines where the options ``names`` were given."""
        lines = sorted({self.seen[n].line for n in names if n in self.seen})
        at = ", ".join(f"line {x}" if x else "command line" for x in lines)
        return SpecError(message, source=self.source, field=at)

    def text(self, name: str) -> str:
        """The option as it was written (``-N 2``), else its long name."""
        return self.seen[name].text if name in self.seen else f"--{name}"

    def note(self, name: str, message: str) -> None:
        """A warning about option ``name``, naming its line."""
        g = self.seen.get(name)
        self.notes.append(f"{where(self.source, g.line if g else 0)}{message}")
