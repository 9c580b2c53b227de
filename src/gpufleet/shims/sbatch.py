"""``sbatch`` over gpufleet: ``sbatch [options] script [args]``, ``--wrap``, or the script on
stdin, read by the same reader as ``gpufleet submit`` (``io/sbatch/``: the script's
``#SBATCH`` lines, then the command line's options over them, as sbatch), answering
``Submitted batch job N`` (``--parsable``: ``N``)."""

from __future__ import annotations

import sys

from gpufleet.shims.common import Usage, connect, run

HELP = """\
Usage: sbatch [OPTIONS...] executable [args...]
       sbatch [OPTIONS...] --wrap="command"

Submits a batch script to gpufleet (its #SBATCH lines and these options, as Slurm's sbatch
reads them). gpufleet-specific: --parsable prints the job id alone; --wait and --test-only
are not supported. See gpufleet's README, "Coming from Slurm".
"""
# sbatch's own behaviour, not the job's: handled here, not passed to the reader
_OWN = {"parsable", "wrap", "quiet", "verbose"}
_REFUSED = {"wait": "--wait", "test-only": "--test-only"}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("--help", "-h", "--usage"):
        sys.stdout.write(HELP)
        raise SystemExit(0)
    run("sbatch", lambda: _submit(args))


def _submit(argv: list[str]) -> int:
    from gpufleet.io import sbatch as reader
    from gpufleet.io.slurm_opts import Word, getopt
    from gpufleet.model.errors import SpecError

    given, problems, stop = getopt([Word(w, 0) for w in argv])
    if problems:
        raise Usage("; ".join(p.message for p in problems))
    own = {g.option.key: g.value for g in given if g.option.key in _OWN}
    for key, flag in _REFUSED.items():
        if any(g.option.key == key for g in given):
            raise Usage(f"{flag} is not supported by gpufleet's sbatch")
    options = [
        f"--{g.option.name}" if g.value is None else f"--{g.option.name}={g.value}"
        for g in given
        if g.option.key not in _OWN
    ]
    rest = argv[stop:]
    if "wrap" in own:
        if rest:
            raise Usage("Script arguments not permitted with --wrap option")
        text = f"#!/bin/sh\n# This script was created by sbatch --wrap.\n\n{own['wrap']}\n"
        source, args = "--wrap", []
    elif rest:
        source, args = rest[0], rest[1:]
        try:
            with open(source, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            raise Usage(f"Unable to open file {source}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise Usage(f"Unable to open file {source}: {e}") from None
    else:
        if sys.stdin.isatty():
            raise Usage("no batch script: give a script, --wrap=COMMAND, or the script on stdin")
        text, source, args = sys.stdin.read(), "(stdin)", []
    if not text.strip():
        raise Usage("Batch script is empty!")
    try:
        job = reader.parse_sbatch_text(text, source=source, args=args, options=options)
    except SpecError as e:
        raise Usage(str(e)) from None
    spec = dict(job.spec)
    warnings = list(job.warnings)
    if job.request is not None:  # the submit directory and environment, as gpufleet submit
        import os
        import socket

        from gpufleet.io.export import submit_context

        r = job.request
        try:
            where, env, more = submit_context(
                r.chdir,
                r.export,
                r.export_file,
                environ=os.environ,
                cwd=os.getcwd(),
                host=socket.gethostname(),
            )
        except SpecError as e:
            raise Usage(str(e)) from None
        spec["workdir"], spec["submit_env"] = where, env
        warnings += more
    if "quiet" not in own:
        for w in warnings:
            sys.stderr.write(f"sbatch: warning: {w}\n")
    with connect("sbatch") as c:
        ids = c.submit(spec, array=job.array, depends_on=job.depends_on)
    if "parsable" in own:
        print(ids[0])
    else:
        print(f"Submitted batch job {ids[0]}")
    return 0


if __name__ == "__main__":
    main()
