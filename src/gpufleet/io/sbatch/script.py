"""A batch script as a gpufleet job: sbatch's reading (``read``), the JobSpec mapping
(``build``), and the command that runs the script's text with its ``#!`` interpreter."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from gpufleet.io.sbatch.build import build_job
from gpufleet.io.sbatch.lex import component_words, read_script
from gpufleet.io.sbatch.read import read_request
from gpufleet.io.sbatch.request import Build, SbatchJob
from gpufleet.io.slurm_opts import Given, Word, getopt
from gpufleet.model.arrays import MAX_ARRAY_SIZE
from gpufleet.model.errors import SpecError
from gpufleet.model.validate import text_problem

# Interpreters that take the program text after ``-c``; the script runs as ``INTERP -c TEXT``.
C_INTERPRETERS = {"sh", "bash", "dash", "zsh", "ksh", "python", "python3"}
SHELLS = C_INTERPRETERS - {"python", "python3"}


def parse_sbatch(
    path: str | Path, args: Sequence[str] = (), *, options: Sequence[str] = ()
) -> SbatchJob:
    p = Path(path)
    try:
        text = read_script(p)
    except FileNotFoundError:
        raise SpecError("no such file", source=str(p)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"cannot read: {e}", source=str(p)) from None
    return parse_sbatch_text(text, source=str(p), args=args, options=options)


def parse_sbatch_text(
    text: str,
    *,
    source: str,
    args: Sequence[str] = (),
    options: Sequence[str] = (),
    max_array_size: int = MAX_ARRAY_SIZE,
    replicas: tuple[int, ...] | None = None,
    env: Sequence[Given] = (),
) -> SbatchJob:
    """The script as a gpufleet job: sbatch's reading, then the JobSpec mapping (``replicas``:
    the nodes' replica counts, for ``--gres=shard:1``; ``env``: the options sbatch's input
    variables set)."""
    req = read_request(text, source=source, options=options, max_array_size=max_array_size, env=env)
    for n, line in enumerate(text.splitlines(), start=1):
        # the script becomes an exec argument: refused here, with its line, not at the server
        problem = text_problem(line, max_len=len(line) + 1)
        if problem:
            raise SpecError(f"the script {problem}", source=source, field=f"line {n}")
    build = Build(req, source, _lines(text, options, env), max_array_size, replicas=replicas)
    job = build_job(build, _command(text, source, args))
    return replace(job, warnings=req.warnings + job.warnings)


def _lines(text: str, options: Sequence[str], env: Sequence[Given]) -> dict[str, Given]:
    """The last time each option was given (for messages that name the line)."""
    words, _, _, _ = component_words(text, "")
    given, _, _ = getopt(words)
    cli, _, _ = getopt([Word(o, 0) for o in options])
    return {g.option.key: g for g in [*given, *env, *cli]}


def _command(text: str, source: str, args: Sequence[str]) -> list[str]:
    """Run the script's text with its ``#!`` interpreter, as Slurm runs the script file."""
    first = text.split("\n", 1)[0]
    interp = shlex.split(first[2:]) if first.startswith("#!") else ["/bin/bash"]
    if not interp:
        raise SpecError("the #! line names no interpreter", source=source, field="line 1")
    prog = Path(interp[-1] if Path(interp[0]).name == "env" else interp[0]).name
    if prog not in C_INTERPRETERS:
        raise SpecError(
            f"gpufleet cannot run this yet: interpreter {prog!r} is not supported; gpufleet "
            f"runs the script's text with INTERPRETER -c, for one of "
            f"{', '.join(sorted(C_INTERPRETERS))}",
            source=source,
            field="line 1",
        )
    # shells take $0 after the text; Python would see it as sys.argv[1], so it gets none
    name = [Path(source).name] if prog in SHELLS else []
    return [*interp, "-c", text, *name, *args]
