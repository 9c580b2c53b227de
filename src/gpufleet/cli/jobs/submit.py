"""``gpufleet submit``: the command (its options are ``submit_options.py``'s), then its steps:
the submissions built (``submission.py``), checked, and sent, or printed for ``--dry-run``."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect
from gpufleet.cli.jobs.common import JsonOpt
from gpufleet.cli.jobs.parse_only import parse_only as print_parse_only
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
    MountOpt,
    NameOpt,
    OpenModeOpt,
    OutputOpt,
    ParseOnlyOpt,
    PreemptibleOpt,
    PriorityOpt,
    QueueOpt,
    RequeueOpt,
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
from gpufleet.model.arrays import parse_array
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec


@dataclass(frozen=True)
class SubmitArgs:
    """``submit``'s parameters, as one value."""

    command: list[str] | None
    file: Path | None
    name: str | None
    queue: str | None
    workers: int | None
    gpus: int | None
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
    retries: int | None
    signal: str | None
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
    retries: RetriesOpt = None,
    signal: SignalOpt = None,
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
    """
    run(SubmitArgs(**locals()))  # the parameters, and nothing else yet, are the locals


def run(a: SubmitArgs) -> None:
    if a.parse_only:
        print_parse_only(
            a.command or [],
            a.json_out,
            name=a.name,
            queue=a.queue,
            time_limit=a.time_limit,
            array=a.array,
            dependency=a.dependency,
        )
        return
    try:
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
    token's user when none is given); bad flags exit 2."""
    overrides = flag_overrides(
        name=a.name, queue=a.queue, workers=a.workers, gpus=a.gpus, gpu_share=a.gpu_share,
        cpus=a.cpus, mem=a.mem, gpu_model=a.gpu_model, time_limit=a.time_limit,
        priority=a.priority, preemptible=a.preemptible, topology=a.topology,
        strict_topology=a.strict_topology, dataset=a.dataset, retries=a.retries, env=a.env,
        signal=a.signal, requeue=a.requeue,
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
    subs = build(a.command or [], a.file, overrides, batch_opts)
    for sub in subs:
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
        JobSpec.from_dict({"user": "you", **sub.spec}, source=sub.source)
    return subs


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
