"""``sbatch`` over gpufleet: ``sbatch [options] script [args]``, ``--wrap``, or the script on
stdin, answering ``Submitted batch job N`` (``--parsable``: ``N``).

The controller reads the command line (``POST /sbatch``: the same reader as ``gpufleet submit``,
``io/sbatch_command.py``), so that this command imports next to nothing and submits at Slurm's
pace (issue 27). It sends the words as typed, the submit directory, host and environment; the
controller asks for the script when it is a file (or stdin) of the submitter's. Read here
instead, as before, when the controller has no ``/sbatch`` (an older one), when it asks (the
command line names another file: ``--export-file``), or when it cannot be reached (sbatch's own
refusal of a bad command line comes first)."""

from __future__ import annotations

import os
import sys

from gpufleet.base.settings import SettingsError, resolve
from gpufleet.client.errors import ApiError
from gpufleet.shims.common import Usage, die, run

TYPE_CHECKING = False  # no typing at run time: a command starts on few imports (issue 27)
if TYPE_CHECKING:
    from typing import Any

    from gpufleet.client.lean import LeanClient

HELP = """\
Usage: sbatch [OPTIONS...] executable [args...]
       sbatch [OPTIONS...] --wrap="command"

Submits a batch script to gpufleet (its #SBATCH lines and these options, as Slurm's sbatch
reads them). --parsable prints the job id alone; --wait (-W) waits for the job's end and
exits with its exit code; --test-only says when and where the job would start (on stderr),
submitting nothing. See gpufleet's README, "Coming from Slurm".
"""
NO_SCRIPT = "no batch script: give a script, --wrap=COMMAND, or the script on stdin"
NEVER_SENT = "GPUFLEET_"  # gpufleet's own settings (a token among them) stay here
READ_HERE = (404, 405, 413)  # no /sbatch (an older controller), or an environment too large


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("--help", "-h", "--usage"):
        sys.stdout.write(HELP)
        raise SystemExit(0)
    run("sbatch", lambda: _refused_as_slurm(args))


def _refused_as_slurm(argv: list[str]) -> int:
    """``_submit``, a submission the controller refuses (422) said as Slurm's sbatch says it:
    ``Batch job submission failed: WHY``, exit 1; a partition it does not know named first on
    a line of its own (Slurm 22.05: "invalid partition specified: nosuch", then "Batch job
    submission failed: Invalid partition name specified")."""
    try:
        return _submit(argv)
    except ApiError as e:
        if e.status != 422:
            raise
        lines: list[str] = []
        problems = [(f.removeprefix("body.").removeprefix("spec"), m) for f, m in e.fields.items()]
        for field, why in problems or [("", str(e).removeprefix("422: "))]:
            if why.startswith("invalid partition specified"):
                lines += [why, "Batch job submission failed: Invalid partition name specified"]
                continue
            named = f"{field[1:]}: " if field.startswith(".") else ""  # a field of the job's
            lines.append(f"Batch job submission failed: {named}{why}")
        raise Usage("\n".join(dict.fromkeys(lines))) from None


def own_env() -> dict[str, str]:
    """What sbatch sets of itself in the environment it sends: its umask (unless the caller
    set SLURM_UMASK; the batch script runs with it) and its nice value (SLURM_PRIO_PROCESS)."""
    return {
        "SLURM_UMASK": os.environ.get("SLURM_UMASK") or umask(),
        "SLURM_PRIO_PROCESS": str(os.getpriority(os.PRIO_PROCESS, 0)),
    }


def umask() -> str:
    """This process's umask as sbatch exports it (SLURM_UMASK): the batch script runs with it."""
    mask = os.umask(0o022)
    os.umask(mask)
    return f"{mask:04o}"


def _submit(argv: list[str]) -> int:
    os.environ.update(own_env())
    try:
        settings = resolve()
    except SettingsError as e:
        _read_here(argv)  # sbatch's refusal of the command line first, as before
        die("sbatch", e.message, e.hint)
    from gpufleet.client.lean import LeanClient

    body: dict[str, Any] = {"argv": argv, "cwd": os.getcwd(), "host": _host()}
    body["environ"] = {k: v for k, v in os.environ.items() if not k.startswith(NEVER_SENT)}
    answer = None
    with LeanClient(settings) as c:
        try:
            if _utf8(argv, body["environ"]):  # else the reader here says which is not text
                answer = _send(c, body)
        except OSError:
            if "script" not in body:  # unread yet: sbatch's refusal of it first, as before
                _read_here(argv)
            raise
    if answer is None:  # the controller left it to us
        with LeanClient(settings) as c:
            answer = _submit_here(c, argv)
    if "job_id" in answer:  # --test-only: when it would start (nothing was submitted)
        return _trial(answer)
    if not answer["quiet"]:
        for w in answer["warnings"]:
            sys.stderr.write(f"sbatch: warning: {w}\n")
    ids = answer["ids"]
    if not answer["quiet"]:  # -Q: not even --parsable's id, as Slurm 22.05's sbatch
        print(ids[0] if answer["parsable"] else f"Submitted batch job {ids[0]}")
    if not answer.get("wait"):
        return 0
    sys.stdout.flush()  # the id is read before the job ends (a pipe buffers it)
    import signal

    from gpufleet.shims.sbatch_wait import wait

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # ^C ends sbatch, not the job, as Slurm's
    with LeanClient(settings) as c:
        return wait(c, ids)


def _send(c: LeanClient, body: dict[str, Any]) -> dict[str, Any] | None:
    """POST /sbatch (again with the script, when the controller asks for it; to
    /sbatch/test for --test-only, which it answers with a trial); None: the command line is
    to be read here."""
    path = "/sbatch"
    for _ in range(3):
        try:
            return dict(c.call("POST", path, json_body=body))
        except ApiError as e:
            if e.status in READ_HERE or (e.status == 428 and "body.argv" in e.fields):
                return None
            if e.status == 400 and "body.argv" in e.fields:
                raise refusal(e.fields["body.argv"]) from None
            if e.status == 428 and "body.test_only" in e.fields and path == "/sbatch":
                path = "/sbatch/test"
                continue
            if e.status != 428 or "body.script" not in e.fields or "script" in body:
                raise
            body["script"] = read_script(e.fields["body.script"] or None)
    raise AssertionError("unreachable: the third answer returns or raises")


def _trial(answer: dict[str, Any]) -> int:
    """sbatch --test-only's line, as Slurm 22.05's (its slurm_job_will_run): on stderr, exit 0."""
    from gpufleet.model.hostlist import ranged
    from gpufleet.shims.common import iso

    sys.stderr.write(
        f"sbatch: Job {answer['job_id']} to start at {iso(answer['start'])} using "
        f"{answer['cpus']} processors on nodes {ranged(answer['nodes'])} in partition "
        f"{answer['partition']}\n"
    )
    return 0


def read_script(path: str | None) -> str:
    """The script's text: the file ``path``, or stdin (None); Usage in sbatch's words."""
    if path is None:
        if sys.stdin.isatty():
            raise Usage(NO_SCRIPT)
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise Usage(f"Unable to open file {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise Usage(f"Unable to open file {path}: {e}") from None


def _read_here(argv: list[str]) -> Any:
    """The command line and script read here (``io/sbatch_command.py``), sbatch's refusal
    raised as ``Usage``."""
    from gpufleet.io import sbatch_command

    try:
        return sbatch_command.read(
            argv, script=read_script, environ=os.environ, cwd=os.getcwd(), host=_host()
        )
    except sbatch_command.Usage as e:
        raise refusal(str(e)) from None


# Slurm 22.05's sbatch exits 255 (its exit(-1)) where reading an option fails: an option it
# does not know, a value its option's setter refuses, a word in an #SBATCH line that is not an
# option; 1 for the rest (a count that is not a number, options refused together, what the
# controller refuses). Recorded from Slurm in tests/e2e/slurm_printed/sbatch_refusals.json.
_OPTION_FAILED = (
    "unrecognized option", "invalid option --", "is ambiguous", "requires an argument",
    "doesn't allow an argument", "Invalid directive found", "is not a valid node count",
    "Maximum node count", "invalid\n",
)  # fmt: skip


def refusal(message: str) -> Usage:
    """sbatch's refusal of its command line or script, with Slurm's exit status: that of the
    first problem, where Slurm's sbatch stops."""
    first = message.split("\n", 1)[0] + "\n"
    bad_value = ": Invalid --" in first and ": Invalid --array" not in first
    failed = bad_value or any(w in first for w in _OPTION_FAILED)
    return Usage(message, 255 if failed else 1)


def _submit_here(c: LeanClient, argv: list[str]) -> dict[str, Any]:
    batch = _read_here(argv)
    if batch.test_only:  # never submitted for a trial: an older controller has none
        raise Usage("--test-only needs a gpufleet controller that answers POST /sbatch/test")
    ids = c.submit(batch.spec, array=batch.array, depends_on=batch.depends_on)
    return {"ids": ids, "warnings": batch.warnings, "parsable": batch.parsable,
            "quiet": batch.quiet, "wait": batch.wait}  # fmt: skip


def _utf8(argv: list[str], environ: dict[str, str]) -> bool:
    """Whether every word and variable is text that JSON carries (a byte that is not UTF-8
    comes as a lone surrogate)."""
    try:
        for word in (*argv, *environ, *environ.values()):
            word.encode()
    except UnicodeEncodeError:
        return False
    return True


def _host() -> str:
    import _socket  # not socket: its enums are a few ms of a submission (issue 27)

    return _socket.gethostname()


if __name__ == "__main__":
    main()
