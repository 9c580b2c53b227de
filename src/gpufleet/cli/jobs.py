"""What users do: ``submit``, ``jobs``, ``show``, ``cancel``, ``logs``, ``accounting``."""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from gpufleet.api import schemas as s
from gpufleet.cli import listing, selection
from gpufleet.cli import output as out
from gpufleet.cli.config import ServerOpt, TokenOpt, connect
from gpufleet.client.http import ApiError, Client
from gpufleet.io import sbatch
from gpufleet.model.arrays import parse_array
from gpufleet.model.errors import SpecError
from gpufleet.model.job import JobSpec, JobState


def load_yaml(path: Path) -> Any:
    from gpufleet.io.specs import load_yaml  # yaml: only for -f FILE (issue 12)

    return load_yaml(path)


JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
sleep = time.sleep  # tests replace it: following logs never sleeps in a unit test
ENDED = {JobState.SUCCEEDED.value, JobState.CANCELLED.value, JobState.TIMED_OUT.value}


def register(app: typer.Typer) -> None:
    # sbatch's order: options first, then the script (or command) and its own arguments
    app.command(
        "submit",
        context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
    )(submit)
    app.command("jobs")(jobs)
    app.command("show")(show)
    app.command("cancel")(cancel)
    app.command("logs")(logs)
    app.command("accounting")(accounting)


# ----- submit -----------------------------------------------------------------------------


@dataclass
class Submission:
    spec: dict[str, Any]
    array: str | None = None
    depends_on: list[tuple[str, str]] = field(default_factory=list)
    source: str = "command line"

    def body(self) -> dict[str, Any]:
        """What ``POST /jobs`` receives."""
        deps = [{"type": t, "job": j} for t, j in self.depends_on]
        return {"spec": self.spec, "array": self.array, "depends_on": deps}


def submit(
    command: Annotated[
        list[str] | None,
        typer.Argument(
            help="The command to run (after --), or an #SBATCH script and its arguments.",
            show_default=False,
        ),
    ] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="A job YAML (one job or a list).")
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-J", help="Job name.")] = None,
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue",
            "-p",
            help="Queue (sbatch's partition); a,b: any of them, the first that admits the job.",
        ),
    ] = None,
    workers: Annotated[int | None, typer.Option("--workers", min=1, help="Gang size.")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", min=0, help="GPUs per worker.")] = None,
    gpu_share: Annotated[
        float | None,
        typer.Option("--gpu-share", min=0.001, max=1.0, help="Share of one GPU, e.g. 0.5."),
    ] = None,
    cpus: Annotated[float | None, typer.Option("--cpus", "-c", help="CPUs per worker.")] = None,
    mem: Annotated[
        str | None, typer.Option("--mem", help="Memory per worker: 64G, 500M (bare = MB).")
    ] = None,
    gpu_model: Annotated[
        list[str] | None, typer.Option("--gpu-model", help="Allowed GPU model (repeatable).")
    ] = None,
    time_limit: Annotated[
        str | None,
        typer.Option("--time", "-t", help="Time limit, Slurm formats: 90, 2:00:00, 1-12."),
    ] = None,
    priority: Annotated[int | None, typer.Option("--priority")] = None,
    preemptible: Annotated[
        bool | None, typer.Option("--preemptible/--no-preemptible", show_default=False)
    ] = None,
    topology: Annotated[
        str | None, typer.Option("--topology", help="node, leaf, pod or any (preferred).")
    ] = None,
    strict_topology: Annotated[
        bool, typer.Option("--strict-topology", help="Make --topology a requirement.")
    ] = False,
    dataset: Annotated[str | None, typer.Option("--dataset")] = None,
    retries: Annotated[int | None, typer.Option("--retries", min=0, help="Max retries.")] = None,
    signal: Annotated[
        str | None,
        typer.Option(
            "--signal",
            help="[B:]SIG[@SECONDS], as sbatch: send SIG (default 60 s) before the time limit to "
            "each task's process group; B: to each task's own process only.",
        ),
    ] = None,
    requeue: Annotated[
        bool | None,
        typer.Option(
            "--requeue/--no-requeue",
            show_default=False,
            help="Requeue after a lost node (the default), or fail instead.",
        ),
    ] = None,
    env: Annotated[list[str] | None, typer.Option("--env", help="KEY=VALUE (repeatable).")] = None,
    secret: Annotated[
        list[str] | None,
        typer.Option("--secret", help="NAME[:VAR]: a secret as a variable (repeatable)."),
    ] = None,
    secret_file: Annotated[
        list[str] | None,
        typer.Option(
            "--secret-file",
            help="NAME[:FILE]: a secret as a file in $GPUFLEET_SECRETS_DIR (repeatable).",
        ),
    ] = None,
    chdir: Annotated[
        str | None,
        typer.Option("--chdir", "-D", help="sbatch's: the script's directory (default: here)."),
    ] = None,
    export: Annotated[
        str | None, typer.Option("--export", help="sbatch's: ALL (default), NONE, A,B=v.")
    ] = None,
    export_file: Annotated[
        str | None, typer.Option("--export-file", help="sbatch's: NAME=value definitions.")
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="sbatch's: the script's stdout file.")
    ] = None,
    error: Annotated[
        str | None, typer.Option("--error", "-e", help="sbatch's: the script's stderr file.")
    ] = None,
    open_mode: Annotated[
        str | None, typer.Option("--open-mode", help="sbatch's: truncate (default) or append.")
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            "--image",
            "--container-image",
            help="Run in this container image (the node's apptainer, enroot, podman or docker).",
        ),
    ] = None,
    mount: Annotated[
        list[str] | None,
        typer.Option(
            "--mount",
            "--container-mounts",
            help="SRC:DST[:ro] bind-mounted into the container (repeatable, or comma-separated).",
        ),
    ] = None,
    container_workdir: Annotated[
        str | None,
        typer.Option("--container-workdir", help="Where the tasks start in the container."),
    ] = None,
    array: Annotated[
        str | None, typer.Option("--array", "-a", help="Indexes: 0-9, 1,3,5, 0-15%4.")
    ] = None,
    dependency: Annotated[
        str | None, typer.Option("--dependency", "-d", help="afterok:12:13,afterany:14")
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="Owner (admins; default: the token's user).")
    ] = None,
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would be submitted; contact nothing.")
    ] = False,
    parse_only: Annotated[
        bool,
        typer.Option(
            "--parse-only",
            help="Print what sbatch makes of an #SBATCH script (Slurm's fields); submit nothing.",
        ),
    ] = False,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Submit a job: flags and a command, a job YAML (-f), or an #SBATCH script as it is.

    Options come first, as with sbatch: everything from the command (or script) on is its own
    arguments. Flags override the file's or the script's values, as sbatch's options do.
    """
    if parse_only:
        _parse_only(command or [], json_out, name=name, queue=queue, time_limit=time_limit,
                    array=array, dependency=dependency)  # fmt: skip
        return
    overrides = _overrides(
        name=name,
        queue=queue,
        workers=workers,
        gpus=gpus,
        gpu_share=gpu_share,
        cpus=cpus,
        mem=mem,
        gpu_model=gpu_model,
        time_limit=time_limit,
        priority=priority,
        preemptible=preemptible,
        topology=topology,
        strict_topology=strict_topology,
        dataset=dataset,
        retries=retries,
        env=env,
        signal=signal,
        requeue=requeue,
    )
    if secret or secret_file:
        from gpufleet.cli.secret import refs

        overrides["secrets"] = refs(secret, secret_file)
    given = {"chdir": chdir, "export": export, "export-file": export_file, "output": output,
             "error": error, "open-mode": open_mode}  # fmt: skip
    batch_opts = [f"--{k}={v}" for k, v in given.items() if v is not None]
    container = _container(image, mount, container_workdir)
    if container is not None:
        overrides["container"] = container
    try:
        subs = _submissions(command or [], file, overrides, batch_opts)
        for sub in subs:
            if user:
                sub.spec["user"] = user
            if array is not None:
                # its size from the text, before anything is expanded or sent
                parse_array(array, field="--array")
                sub.array = array
            if dependency is not None:
                try:
                    sub.depends_on = list(sbatch.parse_dependency(dependency))
                except ValueError as e:
                    raise SpecError(f"--dependency {dependency}: {e}") from None
            # refuse here, not at the server (which fills in the token's user when none is given)
            JobSpec.from_dict({"user": "you", **sub.spec}, source=sub.source)
    except SpecError as e:
        out.fail(str(e), "fix the input; nothing was submitted", code=2)
    if dry_run:
        bodies = [x.body() for x in subs]
        doc = bodies[0] if len(bodies) == 1 else bodies
        if json_out:
            out.emit_json(doc)
        else:
            out.note("dry run: this would be submitted (nothing was sent)")
            import yaml  # only here: most commands never need it (issue 12)

            sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
        return
    ids: list[str] = []
    with connect(server, token) as c:
        for i, sub in enumerate(subs):
            # one key per job of a file, so that the server does not take them for one retried
            key = f"{idempotency_key}#{i}" if idempotency_key and len(subs) > 1 else idempotency_key
            try:
                ids += c.submit(
                    sub.spec, array=sub.array, depends_on=sub.depends_on, idempotency_key=key
                )
            except ApiError:
                if ids:
                    out.note(f"submitted before the error: {' '.join(ids)}")
                raise
    if json_out:
        out.emit_json({"ids": ids})
    elif len(ids) == 1:
        print(f"Submitted job {ids[0]}")
    else:
        print(f"Submitted {len(ids)} jobs: {' '.join(ids)}")


def _parse_only(
    args: list[str],
    json_out: bool,
    *,
    name: str | None,
    queue: str | None,
    time_limit: str | None,
    array: str | None,
    dependency: str | None,
) -> None:
    """Print the SlurmRequest sbatch would make of the script; exit 2 when sbatch refuses it.
    The flags that are sbatch's own options override the script's, as on sbatch's command line."""
    if not args:
        out.fail("--parse-only needs an #SBATCH script", code=2)
    script = Path(args[0])
    options = [
        f"--{opt}={val}"
        for opt, val in (
            ("job-name", name),
            ("partition", queue),
            ("time", time_limit),
            ("array", array),
            ("dependency", dependency),
        )
        if val is not None
    ]
    try:
        text = sbatch.read_script(script)  # bytes as they are: a DOS line break is refused
    except (OSError, UnicodeDecodeError) as e:
        out.fail(f"{script}: cannot read: {e}", code=2)
    try:
        req = sbatch.read_request(text, source=str(script), options=options)
    except sbatch.SbatchError as e:
        if json_out:
            out.emit_json({"accepted": False, "errors": str(e).splitlines()})
            raise typer.Exit(2) from None
        out.fail(str(e), "sbatch would refuse this script", code=2)
    if json_out:
        out.emit_json({"accepted": True, **req.to_dict()})
        return
    for w in req.warnings:
        out.warn(w)
    doc = {
        k: x for k, x in req.to_dict().items() if x not in (None, (), [], {}) and k != "warnings"
    }
    import yaml  # only for this human-readable print (the CLI's import cost, issue 12)

    sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))


def _container(
    image: str | None, mounts: list[str] | None, workdir: str | None
) -> dict[str, Any] | None:
    """--image, --mount and --container-workdir as the spec's ``container`` (read, and refused
    naming the field, by JobSpec.from_dict); the flags replace a file's container whole."""
    if image is None:
        if mounts or workdir:
            flag = "--mount" if mounts else "--container-workdir"
            out.fail(f"{flag} needs --image", "name the container image with --image", code=2)
        return None
    return {"image": image, "mounts": ",".join(mounts) if mounts else None, "workdir": workdir}


def _overrides(
    *,
    name: str | None,
    queue: str | None,
    workers: int | None,
    gpus: int | None,
    gpu_share: float | None,
    cpus: float | None,
    mem: str | None,
    gpu_model: list[str] | None,
    time_limit: str | None,
    priority: int | None,
    preemptible: bool | None,
    topology: str | None,
    strict_topology: bool,
    dataset: str | None,
    retries: int | None,
    env: list[str] | None,
    signal: str | None = None,
    requeue: bool | None = None,
) -> dict[str, Any]:
    """The spec fields the flags set, in JobSpec's names; bad values exit 2."""
    o: dict[str, Any] = {
        "name": name,
        "queue": queue,
        "workers": workers,
        "gpus_per_worker": gpus,
        "gpu_milli": round(gpu_share * 1000) if gpu_share is not None else None,
        "cpus": cpus,
        "gpu_models": list(gpu_model) if gpu_model else None,
        "priority": priority,
        "preemptible": preemptible,
        "dataset": dataset,
        "max_retries": retries,
        "signal": signal,  # read (and refused, naming it) by JobSpec.from_dict
        "requeue": requeue,
    }
    if queue is not None and "," in queue:  # sbatch's -p a,b: the job may use any of them
        o["queue"], o["queues"] = None, queue
    if gpu_share is not None and gpus is None:
        o["gpus_per_worker"] = 1  # a share is of one GPU
    if mem is not None:
        try:
            o["memory_mib"] = sbatch.parse_memory(mem)
        except ValueError as e:
            out.fail(f"--mem {mem}: {e}", code=2)
    if time_limit is not None:
        try:
            o["time_limit_s"] = sbatch.parse_time(time_limit) or 0  # 0: no limit
        except ValueError as e:
            out.fail(f"--time {time_limit}: {e}", code=2)
    if topology is not None:
        o["topology"] = {"level": topology, "required": strict_topology}
    elif strict_topology:
        out.fail("--strict-topology needs --topology LEVEL", code=2)
    if env:
        pairs = [e.partition("=") for e in env]
        bad = [e for e, (k, eq, _) in zip(env, pairs, strict=True) if not eq or not k]
        if bad:
            out.fail(f"--env {bad[0]!r}: expected KEY=VALUE", code=2)
        o["env"] = {k: v for k, _, v in pairs}
    return {k: v for k, v in o.items() if v is not None}


def _submissions(
    args: list[str], file: Path | None, overrides: dict[str, Any], batch_opts: list[str] = ()
) -> list[Submission]:
    script = Path(args[0]) if args else None
    if batch_opts and not (script and script.is_file() and sbatch.looks_like_sbatch(script)):
        raise SpecError(
            f"{batch_opts[0].split('=')[0]} is sbatch's, for an #SBATCH script; a job YAML sets "
            "batch, workdir, output, error, open_mode and submit_env itself"
        )
    if file is not None:
        if args:
            raise SpecError("give either -f FILE or a command, not both")
        return [_merge(Submission(j, source=str(file)), overrides) for j in _yaml_jobs(file)]
    if not args:
        raise SpecError(
            "nothing to run: give a command after --, a job YAML with -f, or an #SBATCH script"
        )
    script = Path(args[0])
    if script.suffix in (".sbatch", ".slurm") and not script.is_file():
        raise SpecError("no such file", source=str(script))  # a typo, not a command to run
    if script.is_file() and sbatch.looks_like_sbatch(script):
        job = sbatch.parse_sbatch(script, args[1:], options=batch_opts)
        for w in job.warnings:
            out.warn(w)
        sub = Submission(dict(job.spec), job.array, list(job.depends_on), str(script))
        if job.request is not None:
            _submit_context(sub, job.request)
        return [_merge(sub, overrides)]
    spec = {"name": Path(args[0]).name, "command": list(args)}
    return [_merge(Submission(spec), overrides)]


def _submit_context(sub: Submission, req: sbatch.SlurmRequest) -> None:
    """What sbatch takes from where it runs: the working directory (the submit directory, or
    --chdir relative to it) and the environment (--export, --export-file), never GPUFLEET_*."""
    from gpufleet.io.export import submit_context

    where, env, warnings = submit_context(
        req.chdir,
        req.export,
        req.export_file,
        environ=os.environ,
        cwd=os.getcwd(),
        host=socket.gethostname(),
    )
    for w in warnings:
        out.warn(w)
    sub.spec["workdir"] = where
    sub.spec["submit_env"] = env


def _yaml_jobs(file: Path) -> list[dict[str, Any]]:
    data = load_yaml(file)
    if isinstance(data, dict) and "jobs" in data:
        data = data["jobs"]
    items = data if isinstance(data, list) else [data]
    for i, j in enumerate(items):
        if not isinstance(j, dict):
            raise SpecError("expected a mapping", source=str(file), field=f"jobs[{i}]")
    return [dict(j) for j in items]


def _merge(sub: Submission, overrides: dict[str, Any]) -> Submission:
    env = {**sub.spec.get("env", {}), **overrides.get("env", {})}
    if "queue" in overrides or "queues" in overrides:  # -p replaces the file's queues
        sub.spec.pop("queue", None)
        sub.spec.pop("queues", None)
    sub.spec.update(overrides)
    if env:
        sub.spec["env"] = env
    if "memory_mib" in overrides:
        sub.spec.pop("memory_gib", None)  # the flag replaces the file's amount, in any unit
    return sub


# ----- jobs, show, cancel -----------------------------------------------------------------


def jobs(
    user: Annotated[str | None, typer.Option("--user", "-u")] = None,
    queue: Annotated[str | None, typer.Option("--queue", "-p")] = None,
    state: Annotated[
        str | None,
        typer.Option(
            "--state", "-t", help="States, as squeue: PD,R,CD,F,TO,CA,NF,PR (or names), or all."
        ),
    ] = None,
    job_ids: Annotated[
        str | None, typer.Option("--jobs", "-j", help="Only these job ids (comma list).")
    ] = None,
    names: Annotated[
        str | None, typer.Option("--name", "-n", help="Only jobs of these names (comma list).")
    ] = None,
    me: Annotated[bool, typer.Option("--me", help="Only my jobs (this Unix user's).")] = False,
    fmt: Annotated[
        str | None,
        typer.Option("--format", "-o", help="squeue's format, e.g. '%.18i %.9P %.8j %.2t %R'."),
    ] = None,
    noheader: Annotated[
        bool, typer.Option("--noheader", "-h", help="No header line (squeue's -h).")
    ] = False,
    all_states: Annotated[bool, typer.Option("--all", "-a", help="Include finished jobs.")] = False,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=10000, help="At most this many, newest first.")
    ] = 200,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """List jobs, like squeue: waiting jobs show their Reason, running ones their nodes.
    squeue's -t, -j, -n, --me, -o and -h work as squeue's."""

    wanted = _slurm_states(state)
    if state is not None and selection.lists_ended(wanted):
        all_states = True  # finished states are asked for: list them too
    user = _me(user, me)
    with connect(server, token) as c:
        rows, failed = selection.select(
            c,
            user=user,
            queue=queue,
            wanted=wanted,
            job_ids=job_ids,
            names=names,
            limit=limit,
            all_states=all_states,
            report=out.error,
        )
    try:
        listing.print_jobs(
            rows, json_out=json_out, fmt=fmt, noheader=noheader, all_states=all_states
        )
    except ValueError as e:
        out.fail(str(e), code=2)
    if failed:
        raise typer.Exit(1)


_gpus, _run_time, _nodes, _where = listing.gpus, listing.run_time, listing.nodes, listing.where


def show(
    job: Annotated[str, typer.Argument(help="Job id.")],
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """One job: state, placement, Reason, estimated start and its events."""
    with connect(server, token, {404: "check the job id (gpufleet jobs --all)"}) as c:
        j = c.job(job)
    if json_out:
        out.emit_json(j)
        return
    now = time.time()
    spec = j.spec
    retries = f"{j.retries_used} of {spec.get('max_retries', 0)}"
    command = spec.get("command")
    queues = spec.get("queues") or []
    out.fields(
        [
            ("Job", j.id),
            ("Name", j.name),
            ("User", j.user),
            ("Queue", j.queue),
            # Slurm's partition string: the one it runs (or last ran) in first
            (
                "Queues",
                ",".join([j.queue, *(q for q in queues if q != j.queue)]) if queues else None,
            ),
            ("State", j.state),
            ("Attempt", f"{j.attempt} (retries used {retries})"),
            ("GPUs", _gpus(j)),
            ("Submitted", out.when_relative(j.submit_time, now)),
            ("Started", out.when_relative(j.start_time, now) if j.start_time else None),
            ("Ended", out.when_relative(j.end_time, now) if j.end_time else None),
            ("Run time", _run_time(j, now) if j.start_time else None),
            (
                "Time limit",
                out.duration(spec.get("time_limit_s")) if spec.get("time_limit_s") else None,
            ),
            ("Command", " ".join(command) if isinstance(command, list) else command),
            ("Reason", f"{j.reason.code}: {j.reason.message}" if j.reason else None),
            ("Est. start", _estimated_start(j.reason, now) if j.reason else None),
        ]
    )
    if j.placement:
        out.table(
            ["RANK", "NODE", "GPUS", "CPUS", "MEMORY"],
            [
                [
                    i,
                    p.node,
                    _gpu_list(p),
                    out.number(p.cpu_milli / 1000),
                    f"{p.memory_mib / 1024:g} GiB",
                ]
                for i, p in enumerate(j.placement)
            ],
            title="Placement",
            right=["RANK", "CPUS", "MEMORY"],
        )
    if j.events:
        out.table(
            ["TIME", "ATTEMPT", "STATE", "WHY"],
            [[out.when(e.time, now), e.attempt, e.state, e.why] for e in j.events],
            title="Events",
            right=["ATTEMPT"],
        )


def _gpu_list(p: s.PlacementOut) -> str:
    gpus = ",".join(map(str, p.gpus)) or "-"
    return f"{gpus} ({out.number(p.gpu_milli / 1000)} of it)" if p.gpu_milli < 1000 else gpus


def cancel(
    job_ids: Annotated[
        list[str] | None, typer.Argument(help="Job ids.", metavar="[JOB...]", show_default=False)
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", "-u", help="Every job of this user (scancel -u).")
    ] = None,
    names: Annotated[
        str | None, typer.Option("--name", "-n", help="Jobs of these names (comma list).")
    ] = None,
    state: Annotated[
        str | None, typer.Option("--state", "-t", help="Only jobs in these states: PD, R, …")
    ] = None,
    me: Annotated[bool, typer.Option("--me", help="Every job of mine (this Unix user's).")] = False,
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cancel jobs, by id or as scancel selects them (-u, -n, -t, --me; with ids, only those
    that match); one that cannot be cancelled is reported and the others still are."""
    ids = list(job_ids or [])
    user = _me(user, me)
    filtered = user is not None or names is not None or state is not None
    if not ids and not filtered:
        out.fail("name the jobs to cancel: job ids, or -u/-n/-t/--me as scancel", code=2)
    wanted = _slurm_states(state)
    with connect(server, token) as c:
        done, failed = selection.cancel(
            c,
            ids,
            user=user,
            names=names,
            wanted=wanted,
            any_state=state is not None,
            report=out.error,
        )
    if json_out:
        out.emit_json(done)
    else:
        for j in done:
            if j.state in ("STARTING", "RUNNING"):  # the kill is on its way to the tasks
                print(f"job {j.id}: cancelling (its tasks are being stopped)")
            else:
                print(f"job {j.id}: {j.state}")
    if failed:
        raise typer.Exit(1)


# ----- logs -------------------------------------------------------------------------------


def logs(
    job: Annotated[str, typer.Argument(help="Job id.")],
    rank: Annotated[int, typer.Option("--rank", "-r", min=0, help="Which worker.")] = 0,
    stderr: Annotated[bool, typer.Option("--stderr", help="Show stderr, not stdout.")] = False,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")
    ] = False,
    offset: Annotated[int, typer.Option("--offset", min=0, help="Start at this byte.")] = 0,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0, help="Stop following after S seconds (0: never).")
    ] = 0.0,
    interval: Annotated[float, typer.Option("--interval", min=0.05, hidden=True)] = 1.0,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Print a worker's output; with -f, poll for more until the job ends."""
    stream = "stderr" if stderr else "stdout"
    with connect(server, token, {404: "check the job id and --rank (gpufleet show JOB)"}) as c:
        try:
            _print_logs(c, job, rank, stream, offset, follow, timeout, interval)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


def _print_logs(
    c: Client,
    job: str,
    rank: int,
    stream: str,
    offset: int,
    follow: bool,
    timeout: float,
    interval: float,
) -> None:
    deadline = time.monotonic() + timeout if timeout else None
    while True:
        chunk = c.logs(job, rank=rank, stream=stream, offset=offset)
        sys.stdout.write(chunk.data)
        sys.stdout.flush()
        offset = chunk.next_offset
        if not follow or chunk.complete:
            return
        if not chunk.data and _ended(c.job(job)):
            # the job ended between the two reads: print what arrived, then stop
            last = c.logs(job, rank=rank, stream=stream, offset=offset)
            sys.stdout.write(last.data)
            return
        if deadline is not None and time.monotonic() >= deadline:
            out.note(f"stopped following after {out.duration(timeout)}; job {job} still runs")
            return
        sleep(interval)


def _ended(j: s.JobOut) -> bool:
    if j.state in ENDED:
        return True
    return j.state == JobState.FAILED.value and j.retries_used >= int(j.spec.get("max_retries", 0))


# ----- accounting -------------------------------------------------------------------------


def parse_period(
    since: str | None, until: str | None, now: float
) -> tuple[float | None, float | None]:
    """``--since``/``--until`` as times (None: not given); a CLI error when unreadable or
    backwards."""
    try:
        t0 = parse_when(since, now) if since else None
        t1 = parse_when(until, now) if until else None
    except typer.BadParameter as e:
        out.fail(f"--since/--until {e.message}", code=2)
    if t0 is not None and t1 is not None and t1 <= t0:
        out.fail("--until must be after --since", code=2)
    return t0, t1


def _slurm_states(state: str | None) -> set[str] | None:
    """``-t`` as squeue and scancel take it (None: every state); a CLI error when unknown."""
    if state is None:
        return None
    from gpufleet.cli import slurm_style  # squeue's codes, only when asked

    try:
        return slurm_style.states(state)
    except ValueError as e:
        out.fail(f"--state: {e}", code=2)


def _me(user: str | None, me: bool) -> str | None:
    """``--me``: this Unix user's jobs, as Slurm's commands mean it."""
    if not me:
        return user
    import getpass

    return getpass.getuser()


def parse_when(text: str, now: float) -> float:
    """A point in time as sacct's -S/-E take it (``cli/when.py``); BadParameter when unread."""
    from gpufleet.cli import when

    try:
        return when.parse_when(text, now)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


def accounting(
    since: Annotated[
        str | None,
        typer.Option("--since", "-S", help="7d, today, 2025-03-01, … (default: server's)"),
    ] = None,
    until: Annotated[str | None, typer.Option("--until", "-E", help="Default: now.")] = None,
    by: Annotated[str, typer.Option("--by", help="user or queue.")] = "user",
    json_out: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """GPU-hours used per user or per queue over a period, like sreport."""
    if by not in ("user", "queue"):
        out.fail(f"--by {by}: expected user or queue", code=2)
    now = time.time()
    t0, t1 = parse_period(since, until, now)
    with connect(server, token) as c:
        rows = c.accounting(since=t0, until=t1, by=by)
    if json_out:
        out.emit_json(rows)
        return
    rows = sorted(rows, key=lambda r: -r.gpu_hours)
    period = f"{out.when(t0, now) if t0 else 'the start'} to {out.when(t1, now) if t1 else 'now'}"
    total = [["TOTAL", sum(r.jobs for r in rows), f"{sum(r.gpu_hours for r in rows):,.1f}"]]
    out.table(
        [by.upper(), "JOBS", "GPU-HOURS"],
        [[r.key, r.jobs, f"{r.gpu_hours:,.1f}"] for r in rows] + (total if len(rows) > 1 else []),
        title=f"GPU-hours by {by}, {period}",
        right=["JOBS", "GPU-HOURS"],
        empty="no usage in this period",
    )


BOUND_WORDS = {
    "reserved": "at the latest: reserved, unless nodes fail or a job of higher priority comes",
    "planned": "if every job runs to its time limit; earlier if they end sooner",
}


def _estimated_start(r: s.ReasonOut, now: float) -> str | None:
    """When a pending job should start, in local time, and how sure that is."""
    if r.estimated_start is None:
        return None
    words = BOUND_WORDS.get(r.start_bound)
    at = out.when_relative(r.estimated_start, now)
    return f"{at}, {words}" if words else at
