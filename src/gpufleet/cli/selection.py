"""Which jobs a listing or a cancel means, as squeue and scancel select them: shared by
``gpufleet jobs``/``gpufleet cancel`` and the Slurm shims (``squeue``, ``scancel``).

Light on purpose (issue 12): no typer, httpx or pydantic, and not ``gpufleet.model`` either.
``c`` is a ``client.http.Client`` or a ``client.lean.LeanClient`` (same methods, same field
names); problems with one job go to ``report`` and the others still go on.
"""

from __future__ import annotations

from gpufleet.client.errors import ApiError
from gpufleet.io import slurm_style

TYPE_CHECKING = False  # no typing at run time: a command starts on few imports (issue 27)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# model.job's TERMINAL, by name (tests/unit/test_shims.py keeps them equal)
ENDED = frozenset({"SUCCEEDED", "CANCELLED", "TIMED_OUT"})
if TYPE_CHECKING:
    Report = Callable[[str], None]


def lists_ended(wanted: set[str] | None) -> bool:
    """Whether ``-t`` asks for states a job is in once it ended (then those are listed too)."""
    return wanted is None or any(w in ENDED or w == "FAILED" for w in wanted)


def select(
    c: Any,
    *,
    user: str | None,
    queue: str | None,
    wanted: set[str] | None,
    job_ids: str | None,
    names: str | None,
    limit: int,
    all_states: bool,
    report: Report,
    brief: bool = False,
) -> tuple[list[Any], bool]:
    """(the jobs squeue would list, whether a named job was not found); ``brief``: a listing's
    specs hold only what it prints (GET /jobs?brief)."""
    one = next(iter(wanted)) if wanted is not None and len(wanted) == 1 else None
    failed = False
    if job_ids is not None:
        rows = []
        for jid in (x.strip() for x in job_ids.split(",") if x.strip()):
            try:
                rows.append(c.job(jid))
            except ApiError as e:
                if e.status == 401 or e.status >= 500:
                    raise
                failed = True
                report(f"job {jid}: Invalid job id specified ({e.status})")
    else:
        rows = c.jobs(
            user=user, queue=queue, state=one, limit=limit, all_states=all_states, brief=brief
        )
    if wanted is not None:
        rows = [j for j in rows if j.state in wanted]
    if names is not None:
        keep = {n.strip() for n in names.split(",")}
        rows = [j for j in rows if j.name in keep]
    if user is not None and job_ids is not None:  # a listing is filtered by the server
        rows = [j for j in rows if j.user == user]
    return rows, failed


def cancel(
    c: Any,
    ids: list[str],
    *,
    user: str | None,
    names: str | None,
    wanted: set[str] | None,
    any_state: bool = False,
    report: Report,
    gone: Report | None = None,
) -> tuple[list[Any], int]:
    """Cancel as scancel does: ids (an array's id cancels its tasks still to end, ``ID_N`` one
    task), or every job still to end that ``-u``/``-n``/``-t`` select (with ids: only those that
    match); ``any_state``: ``-t all`` was given (``wanted`` is None then). (the jobs as cancelled,
    how many could not be). ``gone``, where given, hears of a job that has ended or that no one
    knows, which then is no failure: Slurm 22.05's scancel exits 0 on those and names them only
    with ``-v``."""
    if user is not None or names is not None or wanted is not None or any_state:
        # scancel's filters select among the jobs that have not ended
        keep = {n.strip() for n in names.split(",")} if names is not None else None
        chosen = [
            j.id
            for j in c.jobs(user=user, limit=10_000)
            if (keep is None or j.name in keep) and (wanted is None or j.state in wanted)
        ]
        ids = [i for i in ids if i in set(chosen)] if ids else chosen
    run = _Cancel(c, report, gone)
    for jid in ids:
        run.cancel(jid)
    return run.done, run.failed


class _Cancel:
    """One scancel's cancels: what was cancelled, how many could not be, and the jobs still to
    end (listed once, when an array's tasks are first asked for)."""

    def __init__(self, c: Any, report: Report, gone: Report | None = None) -> None:
        self.c = c
        self.report = report
        self.gone = gone
        self.done: list[Any] = []
        self.failed = 0
        self.listed: list[Any] | None = None

    def cancel(self, jid: str) -> None:
        """``jid``: a job, an array's id (every task still to end) or ``ARRAY_INDEX``."""
        head, sep, index = jid.partition("_")
        if sep and head.isdigit() and index.isdigit():  # scancel's ARRAY_INDEX
            found = self.tasks_of(head, int(index))
            if not found:
                self.refused(jid, "no such array task still to end", 409)
            self.each(found)
            return
        got = self.one(jid, quiet_409=True)
        array: str | None = None
        if isinstance(got, ApiError):  # it ended; an array's first task, perhaps
            try:
                array = self.c.job(jid).array_id
            except ApiError:
                array = None
            if array != jid or not self.tasks_of(jid):
                self.refused(jid, str(got).removeprefix(f"{got.status}: "), got.status)
                return
        elif got is not None:
            self.done.append(got)
            array = got.array_id
        if array == jid:  # an array's id cancels every task of it still to end (scancel)
            seen = {x.id for x in self.done}
            self.each([t for t in self.tasks_of(jid) if t not in seen])

    def tasks_of(self, array: str, index: int | None = None) -> list[str]:
        if self.listed is None:  # the jobs still to end, once
            self.listed = self.c.jobs(limit=10_000)
        return [
            t.id
            for t in self.listed
            if slurm_style.task_of(t, array, "" if index is None else str(index))
        ]

    def one(self, jid: str, *, quiet_409: bool = False) -> Any:
        """The job as cancelled; the 409 of a job that ended, when asked to keep it quiet;
        None for a refusal (reported)."""
        try:
            return self.c.cancel(jid)
        except ApiError as e:
            if e.status == 401 or e.status >= 500:
                raise  # not about this job: the caller says what to do
            if quiet_409 and e.status == 409:
                return e
            self.refused(jid, str(e).removeprefix(f"{e.status}: "), e.status)
            return None

    def refused(self, jid: str, why: str, status: int) -> None:
        """A job not cancelled: a failure, but for one gone already (ended, or unknown) where
        ``gone`` is given."""
        if self.gone is not None and status in (404, 409):
            self.gone(f"job {jid}: {why} ({status})")
            return
        self.failed += 1
        self.report(f"job {jid}: {why} ({status})")

    def each(self, jids: list[str]) -> None:
        for x in jids:
            got = self.one(x)
            if got is not None and not isinstance(got, ApiError):
                self.done.append(got)
