"""Slurm's habits for listing jobs: squeue's state codes (``-t PD,R``) and its ``-o`` format
(``%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R``), as squeue reads and prints them.

A format field is ``%[[.]size]type``: ``size`` is the field's width (values longer are cut to
it, as squeue cuts them), ``.`` justifies right; any other text is printed as it is."""

from __future__ import annotations

import re
import time

from gpufleet.model.arrays import array_name
from gpufleet.model.hostlist import ranged

TYPE_CHECKING = False  # no typing at run time: squeue starts on few imports (issue 27)
if TYPE_CHECKING:  # the shims render plain rows with these names, without pydantic (issue 12)
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from typing import Any, Protocol, TypeVar

    T = TypeVar("T")

    class _Spec(Protocol):
        def get(self, key: str, default: Any = ..., /) -> Any: ...

    class _Placed(Protocol):
        @property
        def node(self) -> str: ...

    class _Why(Protocol):
        @property
        def code(self) -> Any: ...

    class Listed(Protocol):
        """What the table reads of a job: the API's ``JobOut``, a lean client's row, or the
        controller's own view of a record (``server/squeue.py``)."""

        @property
        def id(self) -> str: ...
        @property
        def name(self) -> str: ...
        @property
        def user(self) -> str: ...
        @property
        def queue(self) -> str: ...
        @property
        def state(self) -> str: ...
        @property
        def submit_time(self) -> float: ...
        @property
        def start_time(self) -> float | None: ...
        @property
        def end_time(self) -> float | None: ...
        @property
        def gpus(self) -> float: ...
        @property
        def workers(self) -> int: ...
        @property
        def spec(self) -> _Spec: ...
        @property
        def placement(self) -> Sequence[_Placed]: ...
        @property
        def reason(self) -> _Why | None: ...


# gpufleet's states → squeue's compact and long names
CODES = {
    "PENDING": ("PD", "PENDING"),
    "STARTING": ("CF", "CONFIGURING"),
    "RUNNING": ("R", "RUNNING"),
    "SUCCEEDED": ("CD", "COMPLETED"),
    "FAILED": ("F", "FAILED"),
    "CANCELLED": ("CA", "CANCELLED"),
    "TIMED_OUT": ("TO", "TIMEOUT"),
    "PREEMPTED": ("PR", "PREEMPTED"),
    "NODE_LOST": ("NF", "NODE_FAIL"),
}
_BY_NAME: dict[str, str] = {}
for ours, (code, long) in CODES.items():
    for name in (ours, code, long):
        _BY_NAME[name] = ours
DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"  # squeue's own default
_FIELD = re.compile(r"%(\.)?([0-9]*)([a-zA-Z%])")


def states(text: str) -> set[str] | None:
    """``-t`` as squeue takes it: a comma list of codes or names, any case, or ``all``
    (None). ValueError names what is not a state."""
    wanted: set[str] = set()
    bad = []
    for part in (p.strip().upper() for p in text.split(",")):
        if part == "ALL":
            return None
        if part in _BY_NAME:
            wanted.add(_BY_NAME[part])
        elif part:
            bad.append(part)
    if bad or not wanted:
        known = ", ".join(f"{c}/{n}" for c, n in CODES.values())
        raise ValueError(f"invalid job state {', '.join(bad) or text!r}: one of {known}, or all")
    return wanted


def _elapsed(j: Listed, now: float) -> float | None:
    if j.start_time is None:
        return None
    end = j.end_time if j.end_time is not None and j.end_time >= j.start_time else now
    return end - j.start_time


def slurm_time(seconds: float | None) -> str:
    """Slurm's [days-]hours:minutes:seconds, minutes:seconds under an hour; UNLIMITED."""
    if seconds is None:
        return "UNLIMITED"
    t = int(seconds)
    d, rest = divmod(t, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    if d:
        return f"{d}-{h:02d}:{m:02d}:{sec:02d}"
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def start_iso(t: float | None) -> str:
    """A time as squeue prints it (START_TIME, SUBMIT_TIME), local; N/A for none."""
    return _iso(t)


def _iso(t: float | None) -> str:
    return "N/A" if t is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def start_of(j: Listed) -> float | None:
    """When the job started, or for a pending one when it is expected to (the plan's estimate:
    Slurm's start time of a pending job is its backfill's)."""
    if j.start_time is not None or j.state != "PENDING" or j.reason is None:
        return j.start_time
    return getattr(j.reason, "estimated_start", None)


def job_id(j: Any) -> str:
    """squeue's ``%i``: ``ARRAY_N`` for a task of an array, ``ARRAY_[2-5]`` for an array's
    pending tasks in one line (``Tasks``), the job's id otherwise."""
    array, index = getattr(j, "array_id", None), getattr(j, "array_index", None)
    if array is None or index is None:
        return str(j.id)
    tasks = getattr(j, "tasks", None)
    return f"{array}_[{_spans(tasks)}]" if tasks else f"{array}_{index}"


def _spans(indexes: Sequence[int]) -> str:
    """``2-5,7``: sorted indexes, runs as ranges (as Slurm writes an array's tasks)."""
    out: list[str] = []
    for i in sorted(indexes):
        if out and out[-1].rpartition("-")[2] == str(i - 1):
            out[-1] = f"{out[-1].partition('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def job_name(j: Any) -> str:
    """The job's name as Slurm has it: an array's tasks all have the array's (gpufleet names
    each ``NAME_N``, server/submitting.py)."""
    return array_name(str(j.name), getattr(j, "array_index", None))


class Tasks:
    """An array's pending tasks as the one line squeue prints of them without ``-r``
    (``6_[2-5]``): the first one's fields; its id (``%A``, ``-O JobID``) is the array's, as
    Slurm's pending array record has."""

    def __init__(self, tasks: Sequence[Any]) -> None:
        self._first = tasks[0]
        self.tasks = [t.array_index for t in tasks]

    @property
    def id(self) -> str:
        return str(self._first.array_id)

    def __getattr__(self, key: str) -> Any:
        return getattr(self._first, key)


def one_line_arrays(rows: Sequence[Any]) -> list[Any]:
    """squeue without ``-r``: an array's pending tasks (two or more) as one line, where the
    first of them is."""
    out: list[Any] = []
    pending: dict[str, list[Any]] = {}
    for j in rows:
        array = getattr(j, "array_id", None)
        if array is None or getattr(j, "array_index", None) is None or j.state != "PENDING":
            out.append(j)
        elif array in pending:
            pending[array].append(j)
        else:
            pending[array] = [j]
            out.append(pending[array])
    return [Tasks(x) if isinstance(x, list) and len(x) > 1 else
            x[0] if isinstance(x, list) else x for x in out]  # fmt: skip


def slurm_order(rows: Sequence[T]) -> list[T]:
    """squeue's default order (``-S P,t,-p``): by partition, by state's name (CANCELLED,
        COMPLETED, FAILED, PENDING, RUNNING, TIMEOUT), by priority highest first; Slurm's
        priority/basic ranks the earlier submitted first, and so do jobs of equal priority here (a
    held job's is 0)."""

    def key(j: Any) -> tuple[str, str, float, int, str]:
        number = str(j.id)
        return (partitions(j), CODES.get(j.state, ("", j.state))[1],
                -float(priority(j) or 0),
                int(number) if number.isdigit() else 1 << 62, number)  # fmt: skip

    return sorted(rows, key=key)


def _nodes(j: Listed) -> list[str]:
    return list(dict.fromkeys(p.node for p in j.placement))


# gpufleet's Reason codes that Slurm words otherwise (squeue's %r and %R): the rest are the same
SLURM_REASONS = {
    "ReservedForMaintenance": "ReqNodeNotAvail, Reserved for maintenance",
    "ReservedNodes": "ReqNodeNotAvail",
    "Reservation": "Reservation",
    # Slurm holds a job whose user the node lacks once its launch failed; gpufleet holds it
    # before (scheduler/identity.py), for the same cause
    "UserNotFoundOnHost": "launch failed requeued held",
}


def slurm_reason(code: str) -> str:
    return SLURM_REASONS.get(code, code)


def pending_reason(reason: Any) -> str:
    """A waiting job's Reason in Slurm's words: the word its place in the queue gives it
    (``Priority`` behind a job of its partition that waits: scheduler/slurm_words.py), else
    its code's."""
    return getattr(reason, "slurm", "") or slurm_reason(reason.code)


def priority(j: Any) -> str:
    """squeue's ``%Q`` and scontrol's ``Priority=``: 0 while the job waits on a hold, as Slurm
    (a held job's priority is 0 until released; ADR 0074), else its spec's."""
    reason = getattr(j, "reason", None)
    if reason and reason.code in ("JobHeldUser", "JobHeldAdmin"):
        return "0"
    return str(j.spec.get("priority", 0))


# what a job that ended without a stored ``ended`` (one that ended before gpufleet kept it)
# shows; the rest show their own (model/job_end.py)
_ENDED_AS = {"SUCCEEDED": "None", "CANCELLED": "None", "FAILED": "NonZeroExitCode",
             "TIMED_OUT": "TimeLimit"}  # fmt: skip
# the ended states whose NODELIST(REASON) is their reason, as squeue prints them (the others
# print their nodes)
_REASON_SHOWN = frozenset({"FAILED", "TIMED_OUT"})


def end_reason(j: Any) -> str | None:
    """How the job ended in Slurm's words (``Reason=``), None while it has not."""
    if j.state not in _ENDED_AS:
        return None
    ended = getattr(j, "ended", None)
    if ended is None:
        return _ENDED_AS[j.state]
    return slurm_reason(ended.reason)


def exit_code(j: Any) -> str:
    """Slurm's ``ExitCode=CODE:SIGNAL``: an ended job's, ``0:0`` before it has."""
    ended = getattr(j, "ended", None)
    if ended is not None:
        return str(ended.exit_code)
    return {"FAILED": "1:0", "CANCELLED": "0:15", "TIMED_OUT": "0:15"}.get(j.state, "0:0")


def _reason(j: Listed) -> str:
    if j.state == "PENDING":
        return f"({pending_reason(j.reason)})" if j.reason is not None else "(None)"
    if j.state in _REASON_SHOWN:
        return f"({end_reason(j)})"
    return ranged(_nodes(j))


def why(j: Any) -> str:
    """squeue's ``%r``, sacct's ``Reason`` and scontrol's ``Reason=``: why the job waits (a
    running job's idle warning), or how it ended."""
    reason = getattr(j, "reason", None)
    if reason:
        return pending_reason(reason)
    return end_reason(j) or "None"


def partitions(j: Any) -> str:
    """Slurm's job partition string: while the job waits, its queues (``a,b`` for ``-p a,b``),
    the one it last ran in first; once it is no longer pending, the one queue it runs or ran
    in (``b``), as Slurm 22.05's squeue and scontrol print it (sbatch's man page says ``b,a``;
    tests/integration/test_partitions_vs_slurm.py)."""
    queues = j.spec.get("queues") or ()
    if j.state != "PENDING":
        return str(j.queue)
    return ",".join([j.queue, *(q for q in queues if q != j.queue)])


def in_partitions(j: Any, wanted: set[str]) -> bool:
    """squeue's and sacct's ``-p``: a job of any of ``wanted`` (of its list, for a job of
    several queues that is pending; once started, of the one it runs or ran in, as Slurm)."""
    if j.queue in wanted:
        return True
    return j.state == "PENDING" and any(q in wanted for q in (j.spec.get("queues") or ()))


def task_of(j: Any, array: str, index: str = "") -> bool:
    """Whether ``j`` is task ``index`` of array ``array`` (any of its tasks for ""): what
    Slurm's commands take ``ARRAY`` and ``ARRAY_INDEX`` for."""
    return getattr(j, "array_id", None) == array and index in ("", str(j.array_index))


def array_index(j: Any) -> str:
    """``%K``: the array task's index (``2-5`` for the pending ones on one line), else N/A."""
    if getattr(j, "array_index", None) is None:
        return "N/A"
    tasks = getattr(j, "tasks", None)
    return _spans(tasks) if tasks else str(j.array_index)


def _fields(now: float) -> dict[str, Callable[[Listed], str]]:
    def spec(j: Listed, k: str, d: object = "") -> str:
        return str(j.spec.get(k, d))

    return {
        "i": job_id,
        "A": lambda j: j.id,
        "F": lambda j: str(getattr(j, "array_id", None) or j.id),
        "K": array_index,
        "j": job_name,
        "u": lambda j: j.user,
        "P": partitions,
        "t": lambda j: CODES.get(j.state, (j.state, ""))[0],
        "T": lambda j: CODES.get(j.state, ("", j.state))[1],
        "M": lambda j: slurm_time(_elapsed(j, now) or 0.0),
        "l": lambda j: slurm_time(j.spec.get("time_limit_s")),
        "D": lambda j: str(len(_nodes(j)) or 1),
        "R": _reason,
        "r": why,
        "N": lambda j: ranged(_nodes(j)),
        "C": lambda j: str(j.workers * int(float(spec(j, "cpus", 1)) + 0.999)),
        "b": lambda j: f"gres/gpu:{j.gpus:g}" if j.gpus else "N/A",
        "S": lambda j: _iso(start_of(j)),
        "Y": lambda j: "(null)",
        "V": lambda j: _iso(j.submit_time),
        "Q": priority,
        "%": lambda j: "%",
    }


TITLES = {
    "i": "JOBID", "A": "JOBID", "F": "ARRAY_JOB_ID", "K": "ARRAY_TASK_ID", "j": "NAME",
    "u": "USER", "P": "PARTITION", "t": "ST",
    "T": "STATE", "M": "TIME", "l": "TIME_LIMIT", "D": "NODES", "R": "NODELIST(REASON)",
    "r": "REASON", "N": "NODELIST", "C": "CPUS", "b": "TRES_PER_NODE", "S": "START_TIME",
    "Y": "SCHEDNODES",
    "V": "SUBMIT_TIME", "Q": "PRIORITY", "%": "%",
}  # fmt: skip


def fields(fmt: str) -> Iterator[re.Match[str]]:
    """The ``%[.][size]letter`` fields of ``fmt``."""
    return _FIELD.finditer(fmt)


# A format is read by the controller (POST /squeue) and printed there for up to 10,000 jobs: a
# field's size is bounded, and so is the table (``format_rows``). %999999999j once made the
# controller build a gigabyte a line (6.8 GB of RSS, /healthz unanswered for a minute).
MAX_FIELD_SIZE = 4096
MAX_TABLE = 32 << 20  # characters: 10,000 jobs of 3,000 characters each


def check(fmt: str) -> None:
    """ValueError, as ``render`` raises it, for a field letter squeue's table does not know or
    a field's size over MAX_FIELD_SIZE."""
    for m in fields(fmt):
        if m.group(3) not in TITLES:
            known = " ".join(sorted(TITLES))
            raise ValueError(f"-o: unknown field %{m.group(3)} (known: {known})")
        if int(m.group(2) or 0) > MAX_FIELD_SIZE:
            raise ValueError(f"-o: {m.group(0)}: a field's size is at most {MAX_FIELD_SIZE}")


def render(fmt: str, jobs: Sequence[Listed], *, header: bool, now: float | None = None) -> str:
    """squeue's table for ``jobs`` in ``fmt``; ValueError names an unknown field letter."""
    fields = _fields(time.time() if now is None else now)
    return format_rows(fmt, jobs, fields, TITLES, header=header)


def _too_large(lines: int) -> str:
    return (
        f"-o: the table of {lines} lines would be over {MAX_TABLE} characters: "
        "fewer or narrower fields, or fewer jobs"
    )


def format_rows(
    fmt: str,
    rows: Sequence[T],
    fields: Mapping[str, Callable[[T], str]],
    titles: Mapping[str, str],
    *,
    header: bool,
) -> str:
    """``rows`` in a ``%[.][size]letter`` format, as squeue and sinfo print; ValueError names
    an unknown field letter. Made a column at a time (one call of a field's function per row,
    no per-cell bookkeeping: squeue over 2,000 jobs, issue 27), then joined a line at a time."""
    count = len(rows) + (1 if header else 0)
    columns: list[list[str]] = []
    pos = 0
    size = 0  # the table's characters so far: refused past MAX_TABLE, a column at a time
    for m in _FIELD.finditer(fmt):
        size += (m.start() - pos) * count
        if size > MAX_TABLE:
            raise ValueError(_too_large(count))
        if m.start() > pos:
            columns.append([fmt[pos : m.start()]] * count)
        letter = m.group(3)
        if letter not in fields:
            raise ValueError(f"-o: unknown field %{letter} (known: {' '.join(sorted(fields))})")
        get = fields[letter]
        width = int(m.group(2) or 0)
        size += width * count  # a sized column's exact size, counted before it is made
        if size > MAX_TABLE:
            raise ValueError(_too_large(count))
        cells = [titles[letter]] if header else []
        cells += [get(r) for r in rows]
        if width and m.group(1) == ".":
            cells = [v[:width].rjust(width) for v in cells]
        elif width:
            cells = [v[:width].ljust(width) for v in cells]
        else:
            size += sum(map(len, cells))
            if size > MAX_TABLE:
                raise ValueError(_too_large(count))
        columns.append(cells)
        pos = m.end()
    if size + (len(fmt) - pos) * count > MAX_TABLE:
        raise ValueError(_too_large(count))
    if pos < len(fmt):
        columns.append([fmt[pos:]] * count)
    if not columns:  # an empty format: an empty line a row
        columns.append([""] * count)
    # trailing blanks kept, as Slurm prints them (a last column of a width is padded to it)
    lines = ["".join(cells) for cells in zip(*columns, strict=True)]
    return "\n".join(lines) + ("\n" if lines else "")
