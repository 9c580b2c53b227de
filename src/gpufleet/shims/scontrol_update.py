"""``scontrol update JobId=LIST KEY=VALUE…`` (ADR 0076): ``PATCH /jobs/{id}`` for each job of
the list (ids apart by commas, ``ID_N`` for one task of an array, an array's id for each of its
tasks still to end). Keys as Slurm's, any case: JobName (Name), TimeLimit, Partition, Priority,
StartTime (BeginTime), NumNodes, ReqNodeList (NodeList), ExcNodeList, Nice, MinMemoryNode
(MB), Gres (gpu[:TYPE]:N; the count alone).

As a real Slurm 22.05 answered (tests/integration/test_update_vs_slurm.py): silent, exit 0, when
each job was changed; a key it has not: ``Update of this parameter is not supported: KEY=V``
and ``Request aborted`` (nothing sent); a time it cannot read: ``scontrol: error: Invalid
TimeLimit value``; else on stderr a line per job not changed, in Slurm's words (``Access/
permission denied for job 3``, ``Job is no longer pending execution for job 2``, ``Invalid
partition name specified for job 3``, ``Invalid user id for job 5``, ``Job has already finished
for job 1``, ``Invalid job id specified for job 9``), exit 1."""

from __future__ import annotations

import sys

from gpufleet.client.errors import ApiError
from gpufleet.io import slurm_style
from gpufleet.shims.common import connect, run

TYPE_CHECKING = False  # no typing at run time: a command starts on few imports (issue 27)
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

KEYS = {
    "jobname": "name",
    "name": "name",
    "timelimit": "time_limit_s",
    "partition": "queues",
    "priority": "priority",
    "starttime": "begin_time",
    "begintime": "begin_time",
    "numnodes": "workers",
    "reqnodelist": "nodelist",
    "nodelist": "nodelist",
    "excnodelist": "exclude",
    "nice": "nice",
    "minmemorynode": "memory_mib",
    "gres": "gpus_per_worker",
}
INVALID_ID = "Invalid job id specified"
# Slurm's words, the first of them the job's answer holds is what scontrol prints
SLURM_WORDS = (
    "Access/permission denied",
    "Job is no longer pending execution",
    "Requested operation not supported on this system",
)


class Refused(Exception):
    """scontrol's own refusal of the command line (nothing sent)."""


class RefusedEach(Exception):
    """A value Slurm's controller refuses for each job (``… for job N``); nothing sent."""


def main(words: Sequence[str]) -> None:
    try:
        ids, changes = parse(words)
    except Refused as e:
        sys.stderr.write(f"{e}\n")
        raise SystemExit(1) from None
    except RefusedEach as e:
        ids = [i for w in words if w.lower().startswith(("jobid=", "job=")) for i in
               w.partition("=")[2].split(",") if i]  # fmt: skip
        sys.stderr.write("".join(f"{e} for job {i}\n" for i in ids))
        raise SystemExit(1) from None
    run("scontrol", lambda: update_jobs(ids, changes))


def parse(words: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """The job ids and the API's changes of ``JobId=… KEY=VALUE…``."""
    ids: list[str] = []
    changes: dict[str, Any] = {}
    for word in words:
        key, eq, value = word.partition("=")
        k = key.lower()
        if k in ("jobid", "job") and eq:
            ids += [i.strip() for i in value.split(",") if i.strip()]
        elif k in KEYS and eq:
            changes[KEYS[k]] = _value(KEYS[k], key, value)
        else:
            raise Refused(f"Update of this parameter is not supported: {word}\nRequest aborted")
    if not ids:
        raise Refused("No valid entity in update command: JobId=… is needed")
    return ids, changes


def _value(field: str, key: str, text: str) -> Any:
    from gpufleet.io import slurm_values as v

    try:
        if field == "time_limit_s":
            secs = v.time_seconds(text)
            return None if secs == v.UNLIMITED else float(secs)
        if field in ("priority", "workers"):
            return int(text.split("-")[0]) if field == "workers" else int(text)
        if field == "begin_time":
            import time

            from gpufleet.io.slurm_begin import begin_time

            return begin_time(text, time.time())
        if field in ("nodelist", "exclude"):
            from gpufleet.model.hostlist import expand

            return expand(text) if text else []
        if field == "queues":
            return [q for q in text.split(",") if q]
        if field == "nice":  # as Slurm's strtol: what is not a number is 0
            import re

            return int(m[0]) if (m := re.match(r"[+-]?\d+", text.strip())) else 0
        if field == "memory_mib":  # megabytes, a bare number (2G is refused, as Slurm's)
            if not text.isdigit():
                raise Refused(f"scontrol: error: Invalid {key} value: {text}")
            return int(text)
        if field == "gpus_per_worker":
            return _gpus(text)
        return text
    except ValueError:
        raise Refused(f"scontrol: error: Invalid {key} value") from None


def _gpus(text: str) -> int:
    """Gres=gpu[:TYPE]:N (gpu alone: 1; empty: none), as the job's GPUs per node."""
    if not text:
        return 0
    name, _, rest = text.partition(":")
    if name.lower() != "gpu":
        raise RefusedEach("Invalid generic resource (gres) specification")
    count = rest.rpartition(":")[2] if rest else "1"
    if not count.isdigit():
        raise RefusedEach("Invalid GRES specification (with and without type identification)")
    return int(count)


def update_jobs(ids: Sequence[str], changes: dict[str, Any]) -> int:
    failed = False
    with connect("scontrol") as c:
        listed: Any = None  # the jobs still to end (Rows), listed once if an array asks
        for jid in ids:
            head, sep, index = jid.partition("_")
            targets = [jid]
            if sep:  # one task of an array
                listed = c.jobs(limit=10_000) if listed is None else listed
                targets = [t.id for t in listed if slurm_style.task_of(t, head, index)] or [jid]
            for target in targets:
                got, why = _one(c, target, changes)
                if why:
                    failed = True
                    sys.stderr.write(f"{why} for job {jid}\n")
                elif not sep and got.get("array_id") == jid:  # an array's id: each task
                    listed = c.jobs(limit=10_000) if listed is None else listed
                    rest = [t.id for t in listed if t.array_id == jid and t.id != jid]
                    targets += [t for t in rest if t not in targets]
    return 1 if failed else 0


def _one(c: Any, jid: str, changes: dict[str, Any]) -> tuple[Any, str]:
    """(the job as changed, ""), or (None, Slurm's words for why not)."""
    if not (jid.isascii() and jid.isdigit()):
        return None, INVALID_ID
    try:
        return c.call("PATCH", f"/jobs/{jid}", json_body=changes), ""
    except ApiError as e:
        return None, _words(e)


def _words(e: ApiError) -> str:
    text = str(e)
    if e.status == 404 or (e.status == 422 and "path" in " ".join(e.fields)):
        return INVALID_ID
    if e.status == 409 and "already ended" in text:
        return "Job has already finished"
    if e.status == 403 and "belongs to" in text:
        return "Invalid user id"
    for words in SLURM_WORDS:
        if words in text:
            return words
    if any("queue" in f for f in e.fields):
        return "Invalid partition name specified"
    if e.status in (403, 409, 422):
        return f"Invalid value ({text})"
    raise e


def requeue_main(words: Sequence[str]) -> None:
    """``scontrol requeue JOB_LIST``: a running job back to pending (its id kept), as Slurm
    22.05 answered: silent, exit 0; else a line per job, ``Job is pending execution for job
    7``, ``Requested operation is presently disabled for job 9`` (--no-requeue), ``Access/
    permission denied for job 8`` (another user's), ``Invalid job id specified for job 99``,
    exit 1."""
    ids = [i.strip() for w in words for i in w.split(",") if i.strip()]
    if not ids:
        sys.stderr.write("too few arguments for keyword:requeue\n")
        raise SystemExit(1)
    run("scontrol", lambda: requeue_jobs(ids))


def requeue_jobs(ids: Sequence[str]) -> int:
    failed = False
    with connect("scontrol") as c:
        for jid in ids:
            why = INVALID_ID if not (jid.isascii() and jid.isdigit()) else ""
            try:
                why or c.call("POST", f"/jobs/{jid}/requeue")
            except ApiError as e:
                why = _requeue_words(e)
            if why:
                failed = True
                sys.stderr.write(f"{why} for job {jid}\n")
    return 1 if failed else 0


def _requeue_words(e: ApiError) -> str:
    text = str(e)
    if e.status in (404, 422):
        return INVALID_ID
    if e.status == 403:
        return "Access/permission denied"
    if e.status == 409 and "is pending" in text:
        return "Job is pending execution"
    if e.status == 409 and "requeue disabled" in text:
        return "Requested operation is presently disabled"
    if e.status == 409:
        return "Job has already finished"
    raise e
