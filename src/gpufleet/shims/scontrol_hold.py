"""``scontrol hold|uhold|release JOB_LIST`` (ADR 0074): job ids apart or as a comma list, an
array's id for every task of it still to end, ``ID_N`` for one task. As a real Slurm 22.05
answered (tests/integration/test_hold_vs_slurm.py): silent, exit 0, when each job was done
(holding a held job, releasing one not held, included); else, on stderr, a line per job not
done (``Job has already finished for job 1``, ``Invalid job id specified for job 9``,
``Invalid user id for job 2``: another user's, ``Access/permission denied for job 3``: an
admin's hold a user may not release), then ``slurm_suspend error: …`` with the last job's
error (``No error`` when the last was done), exit 1."""

from __future__ import annotations

import sys

from gpufleet.client.errors import ApiError
from gpufleet.io import slurm_style
from gpufleet.shims.common import connect, run

TYPE_CHECKING = False  # no typing at run time: a command starts on few imports (issue 27)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

ACTIONS = ("hold", "uhold", "release")
INVALID_ID = "Invalid job id specified"
FINISHED = "Job has already finished"
NOT_YOURS = "Invalid user id"
DENIED = "Access/permission denied"


def main(action: str, words: Sequence[str]) -> None:
    ids = [i.strip() for w in words for i in w.split(",") if i.strip()]
    if not ids:
        sys.stderr.write(f"too few arguments for keyword:{action}\n")
        raise SystemExit(1)
    run("scontrol", lambda: hold_jobs(action, ids))


def hold_jobs(action: str, ids: Sequence[str]) -> int:
    last, failed = "", False
    with connect("scontrol") as c:
        listed: Any = None  # the jobs still to end (Rows), listed once if an array asks
        for jid in ids:
            head, sep, index = jid.partition("_")
            targets = [jid]
            if sep:  # one task of an array
                listed = c.jobs(limit=10_000) if listed is None else listed
                targets = [t.id for t in listed if slurm_style.task_of(t, head, index)] or [jid]
            last = ""
            for target in targets:
                got, why = _one(c, action, target)
                last = why or last
                if why:
                    failed = True
                    sys.stderr.write(f"{why} for job {jid}\n")
                elif not sep and got is not None and got.array_id == jid:
                    listed = c.jobs(limit=10_000) if listed is None else listed
                    rest = [t.id for t in listed if t.array_id == jid and t.id != jid]
                    targets += [t for t in rest if t not in targets]
    if failed:
        sys.stderr.write(f"slurm_suspend error: {last or 'No error'}\n")
    return 1 if failed else 0


def _one(c: Any, action: str, jid: str) -> tuple[Any, str]:
    """(the job as held or released, ""), or (None, Slurm's words for why not)."""
    if not (jid.isascii() and jid.isdigit()):
        return None, INVALID_ID
    try:
        return c.hold(jid, action), ""
    except ApiError as e:
        if e.status in (404, 422):
            return None, INVALID_ID
        if e.status == 409:
            return None, FINISHED
        if e.status == 403 and "only an admin" in str(e):
            return None, DENIED
        if e.status == 403 and "belongs to" in str(e):
            return None, NOT_YOURS
        raise
