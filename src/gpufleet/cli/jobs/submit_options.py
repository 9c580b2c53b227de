"""``gpufleet submit``'s options, one alias each (typer reads them from the command's
signature: ``submit.py``), as sbatch's where sbatch has one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

CommandArg = Annotated[
    list[str] | None,
    typer.Argument(
        help="The command to run (after --), or an #SBATCH script and its arguments.",
        show_default=False,
    ),
]

FileOpt = Annotated[
    Path | None, typer.Option("--file", "-f", help="A job YAML (one job or a list).")
]

NameOpt = Annotated[str | None, typer.Option("--name", "-J", help="Job name.")]

QueueOpt = Annotated[
    str | None,
    typer.Option(
        "--queue",
        "-p",
        help="Queue (sbatch's partition); a,b: any of them, the first that admits the job.",
    ),
]

WorkersOpt = Annotated[int | None, typer.Option("--workers", min=1, help="Gang size.")]


def _gpus(value: str | None) -> str | None:
    """sbatch's ``--gpus=[TYPE:]N``: a count of GPUs, of one type if named."""
    if value is not None and not re.fullmatch(r"([A-Za-z0-9][\w.-]*:)?\d+", value):
        raise typer.BadParameter(
            f"{value!r}: sbatch's --gpus=[TYPE:]COUNT, e.g. --gpus 8 or --gpus h100:8"
        )
    return value


GpusOpt = Annotated[
    str | None,
    typer.Option(
        "--gpus",
        "-G",
        callback=_gpus,
        metavar="[TYPE:]N",
        help="GPUs of the job in all, as sbatch's --gpus: split evenly over its workers "
        "(per node: --gpus-per-node or --gres=gpu:N; per task: --gpus-per-task); TYPE:N, of "
        "that GPU type (sbatch's --gpus=h100:8).",
    ),
]

GpuShareOpt = Annotated[
    float | None,
    typer.Option("--gpu-share", min=0.001, max=1.0, help="Share of one GPU, e.g. 0.5."),
]

CpusOpt = Annotated[float | None, typer.Option("--cpus", "-c", help="CPUs per worker.")]

MemOpt = Annotated[
    str | None, typer.Option("--mem", help="Memory per worker: 64G, 500M (bare = MB).")
]

GpuModelOpt = Annotated[
    list[str] | None, typer.Option("--gpu-model", help="Allowed GPU model (repeatable).")
]

TimeLimitOpt = Annotated[
    str | None,
    typer.Option("--time", "-t", help="Time limit, Slurm formats: 90, 2:00:00, 1-12."),
]

PriorityOpt = Annotated[int | None, typer.Option("--priority")]

PreemptibleOpt = Annotated[
    bool | None, typer.Option("--preemptible/--no-preemptible", show_default=False)
]

TopologyOpt = Annotated[
    str | None, typer.Option("--topology", help="node, leaf, pod or any (preferred).")
]

StrictTopologyOpt = Annotated[
    bool, typer.Option("--strict-topology", help="Make --topology a requirement.")
]

DatasetOpt = Annotated[str | None, typer.Option("--dataset")]

ReservationOpt = Annotated[
    str | None,
    typer.Option(
        "--reservation",
        help="Run in this advance reservation (sbatch's --reservation): only on its nodes, "
        "only while it is active (gpufleet reserve ls).",
    ),
]

RetriesOpt = Annotated[int | None, typer.Option("--retries", min=0, help="Max retries.")]

SignalOpt = Annotated[
    str | None,
    typer.Option(
        "--signal",
        help="[B:]SIG[@SECONDS], as sbatch: send SIG (default 60 s) before the time limit to "
        "each task's process group; B: to each task's own process only.",
    ),
]

MinRuntimeOpt = Annotated[
    str | None,
    typer.Option(
        "--min-runtime",
        help="Not preempted before each attempt has run this long (sbatch's time format, as "
        "--time: MINUTES, HH:MM:SS, D-HH); the spec's min_runtime_s. sbatch has no such "
        "option (Slurm's PreemptExemptTime is the cluster's or a QOS's).",
    ),
]

RequeueOpt = Annotated[
    bool | None,
    typer.Option(
        "--requeue/--no-requeue",
        show_default=False,
        help="Requeue after a lost node (the default), or fail instead.",
    ),
]

EnvOpt = Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE (repeatable).")]

SecretOpt = Annotated[
    list[str] | None,
    typer.Option("--secret", help="NAME[:VAR]: a secret as a variable (repeatable)."),
]

SecretFileOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--secret-file",
        help="NAME[:FILE]: a secret as a file in $GPUFLEET_SECRETS_DIR (repeatable).",
    ),
]

ChdirOpt = Annotated[
    str | None,
    typer.Option("--chdir", "-D", help="sbatch's: the script's directory (default: here)."),
]

ExportOpt = Annotated[
    str | None, typer.Option("--export", help="sbatch's: ALL (default), NONE, A,B=v.")
]

ExportFileOpt = Annotated[
    str | None, typer.Option("--export-file", help="sbatch's: NAME=value definitions.")
]

OutputOpt = Annotated[
    str | None, typer.Option("--output", "-o", help="sbatch's: the script's stdout file.")
]

ErrorOpt = Annotated[
    str | None, typer.Option("--error", "-e", help="sbatch's: the script's stderr file.")
]

OpenModeOpt = Annotated[
    str | None, typer.Option("--open-mode", help="sbatch's: truncate (default) or append.")
]

ImageOpt = Annotated[
    str | None,
    typer.Option(
        "--image",
        "--container-image",
        help="Run in this container image (the node's apptainer, enroot, podman or docker).",
    ),
]

MountOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--mount",
        "--container-mounts",
        help="SRC:DST[:ro] bind-mounted into the container (repeatable, or comma-separated).",
    ),
]

ContainerWorkdirOpt = Annotated[
    str | None,
    typer.Option("--container-workdir", help="Where the tasks start in the container."),
]

ArrayOpt = Annotated[str | None, typer.Option("--array", "-a", help="Indexes: 0-9, 1,3,5, 0-15%4.")]

DependencyOpt = Annotated[
    str | None, typer.Option("--dependency", "-d", help="afterok:12:13,afterany:14")
]

UserOpt = Annotated[
    str | None, typer.Option("--user", help="Owner (admins; default: the token's user).")
]

IdempotencyKeyOpt = Annotated[str | None, typer.Option("--idempotency-key")]

DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print what would be submitted; contact nothing.")
]

ParseOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--parse-only",
        help="Print what sbatch makes of an #SBATCH script (Slurm's fields); submit nothing.",
    ),
]
