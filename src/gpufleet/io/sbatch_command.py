"""``sbatch [options] script [args]`` (or ``--wrap``, or the script on stdin) as sbatch reads its
command line: the options, then the script's ``#SBATCH`` lines under them and the submitter's
``SBATCH_*`` variables between the two (``io/sbatch``), then where it is submitted from
(``io/export``), to what ``POST /jobs`` receives.

One reader for the two places that read it (issue 27): the controller (``POST /sbatch``, so that
the ``sbatch`` shim sends its command line and imports none of this) and the shim itself, against
a controller without that endpoint. Where the script comes from is the caller's: ``script(path)``
returns its text (``path`` None: stdin) or raises; the controller, which cannot read the
submitter's files, raises ``NeedScript`` and is sent it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpufleet.io import sbatch as reader
from gpufleet.io.export import submit_context
from gpufleet.io.sbatch.input_env import env_options
from gpufleet.io.sbatch.output_env import output_env
from gpufleet.io.sbatch.verify import WRAP_SOURCE
from gpufleet.io.slurm_opts import Word, getopt
from gpufleet.model.errors import SpecError

# sbatch's own behaviour, not the job's: read here, not passed to the script's reader
OWN = frozenset({"parsable", "wrap", "quiet", "verbose", "wait", "test-only"})
NO_SCRIPT = "no batch script: give a script, --wrap=COMMAND, or the script on stdin"


class Usage(Exception):
    """What sbatch refuses, in its words: printed as ``sbatch: error: …``, exit 1."""


class NeedScript(Exception):
    """The script is a file of the submitter's (``path``), or their stdin (None)."""

    def __init__(self, path: str | None) -> None:
        super().__init__(path)
        self.path = path


class NeedsLocalFiles(Exception):
    """The command line names a file of the submitter's other than the script (``--export-file``):
    read where it was submitted, not by the controller."""


@dataclass
class Batch:
    """What sbatch's command line asks for: the body of ``POST /jobs`` and sbatch's own options."""

    spec: dict[str, Any]
    array: str | None
    depends_on: list[tuple[str, str]]
    warnings: list[str] = field(default_factory=list)
    parsable: bool = False
    quiet: bool = False
    wait: bool = False  # --wait: sbatch waits for the job's end (shims/sbatch_wait.py)
    test_only: bool = False  # --test-only: when it would start, nothing submitted


def read(
    argv: list[str],
    *,
    script: Callable[[str | None], str],
    environ: Mapping[str, str],
    cwd: str,
    host: str,
    local_files: bool = True,
    replicas: tuple[int, ...] | None = None,
) -> Batch:
    """sbatch's command line (without ``sbatch``): Usage for what sbatch refuses; whatever
    ``script`` raises; ``NeedsLocalFiles`` when ``local_files`` is False and another file is
    named. ``replicas``: the nodes' replica counts (``--gres=shard:1``), when known."""
    given, problems, stop = getopt([Word(w, 0) for w in argv])
    if problems:
        raise Usage("; ".join(p.message for p in problems))
    env_set = env_options(environ)  # SBATCH_*: over the script's lines, under the command line
    own = {g.option.key: g.value for g in [*env_set, *given] if g.option.key in OWN}
    if not local_files and any(g.option.key == "export-file" for g in given):
        raise NeedsLocalFiles("--export-file")
    options = [
        f"--{g.option.name}" if g.value is None else f"--{g.option.name}={g.value}"
        for g in given
        if g.option.key not in OWN
    ]
    text, source, args = _script(own, argv[stop:], script)
    if not text.strip():
        raise Usage("Batch script is empty!")
    try:
        job = reader.parse_sbatch_text(
            text,
            source=source,
            args=args,
            options=options,
            replicas=replicas,
            env=[g for g in env_set if g.option.key not in OWN],
        )
    except SpecError as e:
        raise Usage(str(e)) from None
    batch = Batch(dict(job.spec), job.array, list(job.depends_on), list(job.warnings))
    batch.parsable, batch.quiet, batch.wait = "parsable" in own, "quiet" in own, "wait" in own
    batch.test_only = "test-only" in own
    if job.request is not None:  # the submit directory and environment, as gpufleet submit
        r = job.request
        try:
            where, env, more = submit_context(
                r.chdir, r.export, r.export_file, environ=environ, cwd=cwd, host=host
            )
        except SpecError as e:
            raise Usage(str(e)) from None
        batch.spec["workdir"], batch.spec["submit_env"] = where, {**env, **output_env(r)}
        batch.warnings += more
    return batch


def _script(
    own: dict[str, str | None], rest: list[str], script: Callable[[str | None], str]
) -> tuple[str, str, list[str]]:
    """(the script's text, where it came from, its arguments)."""
    if "wrap" in own:
        if rest:
            raise Usage("Script arguments not permitted with --wrap option")
        return (
            f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{own['wrap']}\n",
            WRAP_SOURCE,
            [],
        )
    if rest:
        return script(rest[0]), rest[0], rest[1:]
    return script(None), "(stdin)", []
