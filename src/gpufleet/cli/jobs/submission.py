"""What ``gpufleet submit`` sends: flags and a command, a job YAML (``-f``), or an #SBATCH
script, each as a ``Submission`` (its spec, array and dependencies), the flags over the file's
or the script's values as sbatch's options are over its #SBATCH lines."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from gpufleet.cli import output as out
from gpufleet.cli.submit_flags import flag_overrides as flag_overrides
from gpufleet.cli.submit_flags import merge_spec
from gpufleet.io import sbatch
from gpufleet.model.errors import SpecError


@dataclass
class Submission:
    spec: dict[str, Any]
    array: str | None = None
    depends_on: list[tuple[str, str]] = field(default_factory=list)
    source: str = "command line"
    # a problem of the spec as its file says where: line and column (a job YAML's)
    locate: Callable[[SpecError], SpecError] | None = None

    def body(self) -> dict[str, Any]:
        """What ``POST /jobs`` receives."""
        deps = [{"type": t, "job": j} for t, j in self.depends_on]
        return {"spec": self.spec, "array": self.array, "depends_on": deps}


def container_of(
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


def build(
    args: list[str],
    file: Path | None,
    overrides: dict[str, Any],
    batch_opts: Sequence[str] = (),
    base: dict[str, Any] | None = None,
) -> list[Submission]:
    """The submissions of a job YAML, an #SBATCH script, or a command (``base``: what sbatch's
    options before it ask for)."""
    script = Path(args[0]) if args else None
    if batch_opts and not (script and script.is_file() and sbatch.looks_like_sbatch(script)):
        what = (
            "a job YAML sets batch, workdir, output, error, open_mode and submit_env itself"
            if file is not None
            else "a command's output and error are its logs (gpufleet logs JOB), it starts in "
            "the job user's home"
        )
        raise SpecError(f"{batch_opts[0].split('=')[0]} is sbatch's, for an #SBATCH script; {what}")
    if file is not None:
        if args:
            raise SpecError("give either -f FILE or a command, not both")
        return _yaml_jobs(file, overrides)
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
    refuse_plain_file(script)
    spec = {"name": Path(args[0]).name, **(base or {}), "command": list(args)}
    return [_merge(Submission(spec), overrides)]


SPEC_SUFFIXES = (".yaml", ".yml", ".json")


def refuse_plain_file(path: Path) -> None:
    """A command that is a file here, neither executable nor a script with a ``#!`` line
    (``job.yaml`` without ``-f``): it could not run on the nodes, so it is refused now,
    before anything is stored."""
    if not path.is_file() or os.access(path, os.X_OK):
        return
    if "/" not in str(path) and shutil.which(str(path)) is not None:
        return  # a bare name runs from PATH (``true``), not the file of that name here
    try:
        with path.open("rb") as f:
            head = f.read(512)
    except OSError:
        return  # unreadable here: the command is the nodes' to run (or to refuse)
    if head.startswith(b"#!"):
        return
    text = head.decode("utf-8", "replace").lstrip()
    if path.suffix.lower() in SPEC_SUFFIXES or text.startswith(("{", "jobs:", "name:")):
        hint = f"to submit it as a job spec give it with -f: gpufleet submit -f {path}"
    else:
        hint = (
            f"to run it, make it executable (chmod +x {path}) or give it a #! line and "
            f"submit it as a batch script (sbatch {path})"
        )
    raise SpecError(
        f"{path} is a file that is neither executable nor a script with a #! line, so it "
        f"cannot run as the job's command; {hint}"
    )


def _submit_context(sub: Submission, req: sbatch.SlurmRequest) -> None:
    """What sbatch takes from where it runs: the working directory (the submit directory, or
    --chdir relative to it) and the environment (--export, --export-file), never GPUFLEET_*."""
    from gpufleet.io.export import submit_context
    from gpufleet.io.sbatch.output_env import output_env
    from gpufleet.shims.sbatch import own_env

    where, env, warnings = submit_context(
        req.chdir,
        req.export,
        req.export_file,
        environ={**os.environ, **own_env()},
        cwd=os.getcwd(),
        host=socket.gethostname(),
    )
    for w in warnings:
        out.warn(w)
    sub.spec["workdir"] = where
    sub.spec["submit_env"] = {**env, **output_env(req)}


def _yaml_jobs(file: Path, overrides: dict[str, Any]) -> list[Submission]:
    from gpufleet.io.specs import yaml_jobs  # yaml: only for -f FILE (issue 12)

    y = yaml_jobs(file)
    for i, j in enumerate(y.items):
        if not isinstance(j, dict):
            raise SpecError("expected a mapping", source=str(file), field=f"jobs[{i}]")
    return [
        _merge(Submission(dict(j), source=y.source, locate=partial(y.locate, i)), overrides)
        for i, j in enumerate(y.items)
    ]


def _merge(sub: Submission, overrides: dict[str, Any]) -> Submission:
    merge_spec(sub.spec, overrides)
    return sub
