"""``scancel --signal=SIG [--batch|--full]``: a signal to jobs that run, which they live through
(``POST /jobs/{id}/signal``, ADR 0078), with Slurm 22.05's words and exit status (a real one's,
recorded in tests/integration/test_scancel_signal_vs_slurm.py): silent and 0 when every job got it;
else a line per job, ``scancel: error: Kill job error on job id N: …``, and scancel's status,
the low byte of Slurm's error number (a job not started: "Job can not be altered now, try again
later", 228; another user's: "Access/permission denied", 210; one that ended or that no one
knows: "Invalid job id specified", 1). With ``-u``/``-n``/``-t`` every job they select that has
not ended is asked, a pending one refused as above (as Slurm's)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from gpufleet.client.errors import ApiError
from gpufleet.io import slurm_style

PENDING = "Job can not be altered now, try again later"
DENIED = "Access/permission denied"
INVALID = "Invalid job id specified"
EXIT = {PENDING: 228, DENIED: 210, INVALID: 1}  # ESLURM_* & 0xff, as scancel exits


def scope_of(batch: bool, full: bool) -> str:
    """The API's scope: ``--batch`` (with or without ``--full``: Slurm's -b wins), ``--full``,
    or neither (the steps)."""
    return "batch" if batch else "full" if full else "steps"


def unknown(text: str) -> int:
    """Slurm's refusal of a signal it cannot name, printed bare as scancel prints it."""
    sys.stderr.write(f"Unknown job signal: {text}\n")
    return 1


def chosen(
    c: Any, ids: list[str], user: str | None, names: str | None, wanted: set[str] | None
) -> list[str]:
    """The jobs to signal: ``ids`` (``ID_N``: that task of an array), narrowed or made by the
    filters among the jobs that have not ended."""
    listed: list[Any] | None = None
    if user is not None or names is not None or wanted is not None:
        keep = {n.strip() for n in names.split(",")} if names is not None else None
        listed = [
            j
            for j in c.jobs(user=user, limit=10_000)
            if (keep is None or j.name in keep) and (wanted is None or j.state in wanted)
        ]
        mine = [j.id for j in listed]
        return [i for i in ids if i in set(mine)] if ids else mine
    out = []
    for jid in ids:
        head, sep, index = jid.partition("_")
        if not sep:
            out.append(jid)
            continue
        listed = c.jobs(limit=10_000) if listed is None else listed
        found = [t.id for t in listed if slurm_style.task_of(t, head, index)]
        out += found or [jid]
    return out


def signal_jobs(c: Any, jobs: list[str], sig: int, scope: str, say: Callable[[str], None]) -> int:
    """Each job asked in turn; scancel's exit status (the last refusal's)."""
    status = 0
    for jid in jobs:
        try:
            c.call("POST", f"/jobs/{jid}/signal", json_body={"signal": sig, "scope": scope})
        except ApiError as e:
            if e.status == 401 or e.status >= 500:
                raise
            why = _words(e)
            say(f"Kill job error on job id {jid}: {why}")
            status = EXIT[why]
    return status


def _words(e: ApiError) -> str:
    if e.status == 403:
        return DENIED
    if e.status == 409 and "no processes to signal" in str(e):
        return PENDING
    return INVALID  # 404, 409 (ended), 422 (an array task's id that no one knows)
