"""``squeue`` over gpufleet: its options, its ``-o``/``-O`` formats and its default table.

The controller runs the command line (``POST /squeue``: ``io/squeue_command.py`` reads it,
``server/squeue.py`` lists and prints), so that this command imports next to nothing and squeue
over thousands of jobs costs no JSON (issue 27). Run here instead, over ``GET /jobs``, as before:
for ``--help``, when the controller has no ``/squeue`` (an older one), or when it asks (428: a
format that prints times of day, which are this reader's local time)."""

from __future__ import annotations

import os
import sys

from gpufleet.shims.common import Usage, connect, run

TYPE_CHECKING = False  # no typing at run time: a command starts on few imports (issue 27)
if TYPE_CHECKING:
    from typing import Any

    from gpufleet.client.lean import LeanClient

RUN_HERE = (404, 405, 428)  # no /squeue (an older controller), or a format of local times


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if any(_asks_help(w) for w in args):
        _here(args)
    run("squeue", lambda: _run(args))


def _asks_help(word: str) -> bool:
    """``--help`` or ``--usage``, or a prefix argparse takes for one (``--he``; ``--us`` is
    ``--user``'s too: argparse's refusal of it is printed here)."""
    return (len(word) >= 3 and "--help".startswith(word)) or (
        len(word) >= 4 and "--usage".startswith(word)
    )


def _run(args: list[str]) -> int:
    from gpufleet.client.errors import ApiError

    with connect("squeue") as c:
        try:
            answer = c.call("POST", "/squeue", json_body={"argv": args, "me": _me()})
        except ApiError as e:
            if e.status == 400 and "body.argv" in e.fields:
                raise Usage(e.fields["body.argv"]) from None
            if e.status not in RUN_HERE:
                raise
            return _listed_here(c, args)
    for msg in answer["errors"]:
        _error(msg)
    sys.stdout.write(answer["out"])
    return int(answer["code"])


def _error(msg: str) -> None:
    """An error line as squeue writes it: Slurm's API's own words as they are (``-j`` of an
    unknown id), the rest after ``squeue: error:``."""
    sys.stderr.write(f"{msg}\n" if msg.startswith("slurm_load_jobs error:") else
                     f"squeue: error: {msg}\n")  # fmt: skip


def _me() -> str | None:
    """This Unix user, as ``getpass.getuser`` finds it (without importing it)."""
    for key in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        if os.environ.get(key):
            return os.environ[key]
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return None


def _here(args: list[str]) -> None:
    """The whole command run here: ``--help`` printed by argparse, the rest over GET /jobs."""
    from gpufleet.io import squeue_command
    from gpufleet.shims.parser import Parser

    squeue_command.parser(Parser).parse_args(args)  # --help prints and exits
    run("squeue", lambda: _listed_here(connect("squeue"), args))


def _listed_here(c: LeanClient, args: list[str]) -> int:
    """squeue over ``GET /jobs``: the same selection and table as the controller's."""
    from gpufleet.cli import selection
    from gpufleet.client.errors import ApiError
    from gpufleet.io import slurm_style, squeue_command
    from gpufleet.shims.parser import Parser

    try:
        q = squeue_command.read(args, _me(), squeue_command.parser(Parser))
    except squeue_command.Usage as e:
        raise Usage(str(e)) from None
    q, unresolved = squeue_command.named_users(q)
    problems: list[str] = []
    with c:
        rows: list[Any]
        try:
            rows, failed = selection.select(
                c,
                user=q.one_user,
                # no queue asked of the server: a pending job of several queues is listed
                # under each of them (squeue -p b shows a job of -p a,b)
                queue=None,
                wanted=q.wanted,
                job_ids=None,  # -j: of every job (an array's id, ARRAY_N), squeue_command.asked
                names=q.names,
                limit=10_000,
                all_states=q.job_ids is not None
                or (q.states_given and selection.lists_ended(q.wanted)),
                report=problems.append,
                brief=True,  # the formats print a few of the spec's fields
            )
        except ApiError as e:  # another user's, to a user's token: none it may see
            if e.status != 403:
                raise
            rows, failed = [], False
        listed_users = {j.user for j in rows}
        for name in unresolved:
            if name not in listed_users and not _seen(c, name):
                _error(squeue_command.invalid_user(name))
    rows = [j for j in rows if (q.users is None or j.user in q.users)]
    rows = [j for j in rows if (q.partitions is None or slurm_style.in_partitions(j, q.partitions))]
    ids = [x.strip() for x in (q.job_ids or "").split(",") if x.strip()]
    if ids:  # of several ids, those not known are left out (server/squeue.py)
        rows, unknown = squeue_command.asked(rows, ids)
        if unknown and len(ids) == 1:
            _error(squeue_command.INVALID)
            return 1
    rows = squeue_command.arranged(rows, q)
    for msg in problems:
        _error(msg)
    sys.stdout.write(slurm_style.render(q.fmt, rows, header=q.header))
    return 1 if failed else 0


def _seen(c: LeanClient, name: str) -> bool:
    """Whether a job of ``name``, in any state, is one this token may see."""
    from gpufleet.client.errors import ApiError

    try:
        return bool(c.jobs(user=name, all_states=True, limit=1, brief=True))
    except ApiError as e:
        if e.status != 403:
            raise
        return False


if __name__ == "__main__":
    main()
