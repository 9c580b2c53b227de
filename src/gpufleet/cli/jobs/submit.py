"""``gpufleet submit``: the command (its options are ``submit_options.py``'s), then its steps:
the submissions built (``submission.py``), checked, and sent, or printed for ``--dry-run``."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

from typer._click.globals import get_current_context

from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect
from gpufleet.cli.jobs.common import JsonOpt
from gpufleet.cli.jobs.parse_only import parse_only as print_parse_only
from gpufleet.cli.jobs.slurm_order import SubmitCommand
from gpufleet.cli.jobs.submission import Submission, build, container_of, flag_overrides
from gpufleet.cli.jobs.submit_options import (
    ArrayOpt,
    ChdirOpt,
    CommandArg,
    ContainerWorkdirOpt,
    CpusOpt,
    DatasetOpt,
    DependencyOpt,
    DryRunOpt,
    EnvOpt,
    ErrorOpt,
    ExportFileOpt,
    ExportOpt,
    FileOpt,
    GpuModelOpt,
    GpuShareOpt,
    GpusOpt,
    IdempotencyKeyOpt,
    ImageOpt,
    MemOpt,
    MinRuntimeOpt,
    MountOpt,
    NameOpt,
    OpenModeOpt,
    OutputOpt,
    ParseOnlyOpt,
    PreemptibleOpt,
    PriorityOpt,
    QueueOpt,
    RequeueOpt,
    ReservationOpt,
    RetriesOpt,
    SecretFileOpt,
    SecretOpt,
    SignalOpt,
    StrictTopologyOpt,
    TimeLimitOpt,
    TopologyOpt,
    UserOpt,
    WorkersOpt,
)
from gpufleet.client.http import ApiError
from gpufleet.io import sbatch
from gpufleet.io.sbatch import flags as sbatch_flags
from gpufleet.io.sbatch.flags import read_flags
from gpufleet.model.arrays import parse_array
from gpufleet.model.errors import SpecError, every
from gpufleet.model.job import JobSpec


@dataclass(frozen=True)
class SubmitArgs:
    """``submit``'s parameters, as one value."""

    command: list[str] | None
    file: Path | None
    name: str | None
    queue: str | None
    workers: int | None
    gpus: str | None  # sbatch's --gpus=[TYPE:]N
    gpu_share: float | None
    cpus: float | None
    mem: str | None
    gpu_model: list[str] | None
    time_limit: str | None
    priority: int | None
    preemptible: bool | None
    topology: str | None
    strict_topology: bool
    dataset: str | None
    reservation: str | None
    retries: int | None
    signal: str | None
    min_runtime: str | None
    requeue: bool | None
    env: list[str] | None
    secret: list[str] | None
    secret_file: list[str] | None
    chdir: str | None
    export: str | None
    export_file: str | None
    output: str | None
    error: str | None
    open_mode: str | None
    image: str | None
    mount: list[str] | None
    container_workdir: str | None
    array: str | None
    dependency: str | None
    user: str | None
    idempotency_key: str | None
    dry_run: bool
    parse_only: bool
    json_out: bool
    server: str | None
    token: str | None


def submit(
    command: CommandArg = None,
    file: FileOpt = None,
    name: NameOpt = None,
    queue: QueueOpt = None,
    workers: WorkersOpt = None,
    gpus: GpusOpt = None,
    gpu_share: GpuShareOpt = None,
    cpus: CpusOpt = None,
    mem: MemOpt = None,
    gpu_model: GpuModelOpt = None,
    time_limit: TimeLimitOpt = None,
    priority: PriorityOpt = None,
    preemptible: PreemptibleOpt = None,
    topology: TopologyOpt = None,
    strict_topology: StrictTopologyOpt = False,
    dataset: DatasetOpt = None,
    reservation: ReservationOpt = None,
    retries: RetriesOpt = None,
    signal: SignalOpt = None,
    min_runtime: MinRuntimeOpt = None,
    requeue: RequeueOpt = None,
    env: EnvOpt = None,
    secret: SecretOpt = None,
    secret_file: SecretFileOpt = None,
    chdir: ChdirOpt = None,
    export: ExportOpt = None,
    export_file: ExportFileOpt = None,
    output: OutputOpt = None,
    error: ErrorOpt = None,
    open_mode: OpenModeOpt = None,
    image: ImageOpt = None,
    mount: MountOpt = None,
    container_workdir: ContainerWorkdirOpt = None,
    array: ArrayOpt = None,
    dependency: DependencyOpt = None,
    user: UserOpt = None,
    idempotency_key: IdempotencyKeyOpt = None,
    dry_run: DryRunOpt = False,
    parse_only: ParseOnlyOpt = False,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Submit a job: flags and a command, a job YAML (-f), or an #SBATCH script as it is.

    Options come first, as with sbatch: everything from the command (or script) on is its own
    arguments. Flags override the file's or the script's values, as sbatch's options do.
    sbatch's other options (-N, -n, --ntasks-per-node, --gres, --gpus-per-node, --nice,
    --constraint, …) are read as sbatch reads them, or refused naming what to give instead.
    """
    run(SubmitArgs(**locals()))  # the parameters, and nothing else yet, are the locals


def run(a: SubmitArgs) -> None:
    try:
        if a.parse_only:  # sbatch's options before the script are its command line's
            command, slurm = split_slurm(a)
            print_parse_only(
                command,
                a.json_out,
                name=a.name,
                queue=a.queue,
                time_limit=a.time_limit,
                array=a.array,
                dependency=a.dependency,
                more=slurm,
            )
            return
        subs = submissions(a)
    except SpecError as e:
        out.fail(str(e), "fix the input; nothing was submitted", code=2)
    if a.dry_run:
        dry_run(subs, a.json_out)
        return
    ids = send(subs, a)
    if a.json_out:
        out.emit_json({"ids": ids})
    elif len(ids) == 1:
        print(f"Submitted job {ids[0]}")
    else:
        print(f"Submitted {len(ids)} jobs: {' '.join(ids)}")


def submissions(a: SubmitArgs) -> list[Submission]:
    """What is to be sent, checked here (SpecError), not at the server (which fills in the
    token's user when none is given); bad flags exit 2. sbatch's options that are not
    gpufleet's (``-N 3``, ``--gres=gpu:1``) come first in the command (``slurm_order.py``):
    read with sbatch's reader, for a command (``io/sbatch/flags.py``) or a script's."""
    if a.gpus is not None and not a.gpus.isdigit():  # --gpus=TYPE:N: read as sbatch reads it
        a = replace(a, gpus=None, command=[f"--gpus={a.gpus}", *(a.command or [])])
    command, slurm = split_slurm(a)
    job = None
    if slurm and not (command and is_script(command[0])):
        if a.workers is not None:
            raise SpecError(
                f"--workers is gpufleet's gang size; beside sbatch's options ({slurm[0]}) give "
                "the count as sbatch does: -n TASKS or -N NODES"
            )
        job = read_flags(as_sbatch(a) + slurm, own=own_options())
        for w in job.warnings:
            out.warn(w)
        a = replace(a, name=None, queue=None, gpus=None, cpus=None, mem=None, time_limit=None,
                    priority=None, signal=None, requeue=None)  # fmt: skip
    overrides = flag_overrides(
        name=a.name, queue=a.queue, workers=a.workers,
        gpus=None if a.gpus is None else int(a.gpus), gpu_share=a.gpu_share,
        cpus=a.cpus, mem=a.mem, gpu_model=a.gpu_model, time_limit=a.time_limit,
        priority=a.priority, preemptible=a.preemptible, topology=a.topology,
        strict_topology=a.strict_topology, dataset=a.dataset, retries=a.retries, env=a.env,
        signal=a.signal, requeue=a.requeue, reservation=a.reservation, min_runtime=a.min_runtime,
    )  # fmt: skip
    if a.secret or a.secret_file:
        from gpufleet.cli.secret import refs

        overrides["secrets"] = refs(a.secret, a.secret_file)
    given = {"chdir": a.chdir, "export": a.export, "export-file": a.export_file,
             "output": a.output, "error": a.error, "open-mode": a.open_mode}  # fmt: skip
    batch_opts = [f"--{k}={v}" for k, v in given.items() if v is not None]
    container = container_of(a.image, a.mount, a.container_workdir)
    if container is not None:
        overrides["container"] = container
    if slurm and job is None:  # a script's: sbatch's command-line options over its lines
        batch_opts += slurm
    subs = build(command, a.file, overrides, batch_opts, job.spec if job else None)
    problems: list[SpecError] = []
    for sub in subs:
        if job is not None:
            sub.array, sub.depends_on = job.array, list(job.depends_on)
        if a.user:
            sub.spec["user"] = a.user
        if a.array is not None:
            # its size from the text, before anything is expanded or sent
            parse_array(a.array, field="--array")
            sub.array = a.array
        if a.dependency is not None:
            try:
                sub.depends_on = list(sbatch.parse_dependency(a.dependency))
            except ValueError as e:
                raise SpecError(f"--dependency {a.dependency}: {e}") from None
        _, found = JobSpec.read_all({"user": "you", **sub.spec}, source=sub.source)
        problems += [sub.locate(e) if sub.locate else e for e in found]
    if problems:  # every problem of every job at once, in the file's order
        raise every(sorted(problems, key=lambda e: _at(e.source)))
    return subs


def _at(source: str) -> tuple[int, int]:
    """(line, column) of a problem whose source is ``FILE:LINE:COLUMN``; (0, 0) otherwise."""
    _, line, col = (["", "", "", *source.rsplit(":", 2)])[-3:]
    return (int(line), int(col)) if line.isdigit() and col.isdigit() else (0, 0)


def split_slurm(a: SubmitArgs) -> tuple[list[str], list[str]]:
    """(the command or script and its arguments, sbatch's options before it)."""
    command = list(a.command or [])
    if not command or not command[0].startswith("-") or command[0] == "-":
        return command, []
    options, command = sbatch_flags.split(command)
    if options and a.file is not None:
        raise SpecError(
            f"{options[0]}: sbatch's options are for a command or an #SBATCH script, not for "
            "a job YAML (-f): set the job's fields in it"
        )
    return command, options


def own_options() -> list[str]:
    """gpufleet submit's own option names (for a did-you-mean), from the running command."""
    ctx = get_current_context(silent=True)
    command = ctx.command if ctx is not None else None
    return list(command.own_options()) if isinstance(command, SubmitCommand) else []


def as_sbatch(a: SubmitArgs) -> list[str]:
    """gpufleet's flags that are sbatch's too, as sbatch's options (with sbatch's meaning)."""
    pairs = {"job-name": a.name, "partition": a.queue, "gpus": a.gpus, "mem": a.mem,
             "time": a.time_limit, "priority": a.priority, "signal": a.signal}  # fmt: skip
    words = [w for k, x in pairs.items() if x is not None for w in (f"--{k}", str(x))]
    if a.cpus is not None:
        if not float(a.cpus).is_integer() or a.cpus < 1:
            raise SpecError(
                f"--cpus {a.cpus:g}: beside sbatch's options it is sbatch's -c/--cpus-per-task, "
                "a whole number of CPUs per task"
            )
        words += ["--cpus-per-task", str(int(a.cpus))]
    if a.requeue is not None:
        words.append("--requeue" if a.requeue else "--no-requeue")
    return words


def is_script(word: str) -> bool:
    p = Path(word)
    return p.is_file() and sbatch.looks_like_sbatch(p)


def dry_run(subs: list[Submission], json_out: bool) -> None:
    bodies = [x.body() for x in subs]
    doc = bodies[0] if len(bodies) == 1 else bodies
    if json_out:
        out.emit_json(doc)
        return
    out.note("dry run: this would be submitted (nothing was sent)")
    import yaml  # only here: most commands never need it (issue 12)

    sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))


def send(subs: list[Submission], a: SubmitArgs) -> list[str]:
    ids: list[str] = []
    with connect(a.server, a.token) as c:
        for i, sub in enumerate(subs):
            # one key per job of a file, so that the server does not take them for one retried
            key = a.idempotency_key
            if key and len(subs) > 1:
                key = f"{key}#{i}"
            try:
                ids += c.submit(
                    sub.spec, array=sub.array, depends_on=sub.depends_on, idempotency_key=key
                )
            except ApiError:
                if ids:
                    out.note(f"submitted before the error: {' '.join(ids)}")
                raise
    return ids
