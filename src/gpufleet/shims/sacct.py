"""``sacct`` over gpufleet: the jobs of a period or of ``-j``, in sacct's fields, states and
layouts (fixed width, ``-p``, ``--parsable2``), as tools such as submitit read them.

A task of an array is ``ARRAY_N`` (the array's id is its first task's, as Slurm's ArrayJobId);
a batch job (``spec.batch``) that started has its ``ID.batch`` step row unless ``-X``."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from gpufleet.client.errors import ApiError
from gpufleet.client.lean import row
from gpufleet.io import slurm_style
from gpufleet.model.hostlist import ranged
from gpufleet.shims.common import Usage, connect, hms, iso, run, tres_mem, users
from gpufleet.shims.parser import Parser

DEFAULT_FIELDS = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"  # sacct's own
# gpufleet's states → sacct's (a FAILED job with a retry left is requeued; STARTING runs)
STATES = {
    "PENDING": "PENDING",
    "STARTING": "RUNNING",
    "RUNNING": "RUNNING",
    "SUCCEEDED": "COMPLETED",
    "FAILED": "FAILED",
    "CANCELLED": "CANCELLED",
    "TIMED_OUT": "TIMEOUT",
    "PREEMPTED": "PREEMPTED",
    "NODE_LOST": "NODE_FAIL",
}
_EXIT = re.compile(r"exited with code (-?[0-9]+)")


def _state(j: Any) -> str:
    if j.state == "FAILED" and j.retries_used < int(j.spec.get("max_retries", 0) or 0):
        return "REQUEUED"
    if j.state == "CANCELLED" and j.start_time is not None:
        # Slurm 22.05 names who cancelled a job that ran by uid (root: 0); gpufleet keeps no
        # one's, and its user's uid here stands for it (its name where it has no account)
        return f"CANCELLED by {_uid(j.user)}"
    state: str = j.state
    return STATES.get(state, state)


def _uid(user: str) -> str:
    import pwd

    try:
        return str(pwd.getpwnam(user).pw_uid)
    except KeyError:
        return user


# a batch step's state where its job's differs: Slurm cancels the script of a job that ran out
# of time or was cancelled (SIGTERM), and the job's own exit code then is 0:0 (Slurm 22.05)
_STEP_STATES = {"TIMED_OUT": "CANCELLED", "CANCELLED": "CANCELLED"}


def _exit_code(j: Any) -> str:
    """``code:signal``: the job's own (``ended``; 0:0 for one that ran out of time or was
    cancelled, whose batch step's has the signal), or for a job that ended before it was
    kept, the code from its events when they say it."""
    if j.state in _STEP_STATES and j.start_time is not None:
        return "0:0"
    return _step_exit_code(j)


def _step_exit_code(j: Any) -> str:
    """The batch step's ``code:signal``: its script's."""
    if j.get("ended") is not None:
        return str(j.ended.exit_code)
    for e in reversed(j.get("events") or []):
        m = _EXIT.search(e.get("why") or "")
        if m:
            code = int(m.group(1))
            return f"0:{-code}" if code < 0 else f"{code}:0"
    return {"SUCCEEDED": "0:0", "FAILED": "1:0", "CANCELLED": "0:15", "TIMED_OUT": "0:15"}.get(
        j.state, "0:0"
    )


def _nodes(j: Any) -> list[str]:
    return list(dict.fromkeys(p.node for p in j.placement))


def _elapsed(j: Any, now: float) -> float:
    if j.start_time is None:
        return 0.0
    end = j.end_time if j.end_time is not None and j.end_time >= j.start_time else now
    return float(end - j.start_time)


def _job_id(j: Any) -> str:
    return slurm_style.job_id(j)  # ARRAY_N, an array's pending tasks ARRAY_[2-5]


def _tres(j: Any, step: bool = False) -> str:
    """TRES as sacct prints them: by name (``billing=1,cpu=1,mem=1G,node=1``, gres/gpu where
    the job has GPUs), a batch step's without billing."""
    milli = j.spec.get("cpu_milli")
    cpus = j.workers * (milli / 1000 if milli is not None else float(j.spec.get("cpus", 1) or 1))
    mem = j.workers * int(j.spec.get("memory_mib", 0) or 0)
    parts = [f"cpu={cpus:g}", f"node={len(_nodes(j)) or j.workers}"]
    if not step:
        parts.append(f"billing={cpus:g}")
    if mem:
        parts.append(f"mem={tres_mem(mem)}")
    if j.gpus and not step:
        parts.append(f"gres/gpu={j.gpus:g}")
    return ",".join(sorted(parts))


def _limit(j: Any) -> str:
    t = j.spec.get("time_limit_s")
    return hms(t) if t else "UNLIMITED"


def fields(now: float) -> dict[str, tuple[Callable[[Any], str], int, bool]]:
    """sacct's field name (lower case) → (value, default width, right-justified)."""

    def cpus(j: Any) -> str:
        return str(j.workers * int(float(j.spec.get("cpus", 1) or 1) + 0.999))

    return {
        "jobid": (_job_id, 12, False),
        "jobidraw": (lambda j: str(j.id), 12, False),
        "jobname": (slurm_style.job_name, 10, True),
        "partition": (slurm_style.partitions, 10, True),
        "account": (lambda j: j.queue, 10, True),
        "user": (lambda j: j.user, 9, False),
        "state": (_state, 10, True),
        "exitcode": (_exit_code, 8, True),
        "derivedexitcode": (_exit_code, 11, True),
        "elapsed": (lambda j: hms(_elapsed(j, now)), 10, True),
        "elapsedraw": (lambda j: str(int(_elapsed(j, now))), 10, True),
        "start": (lambda j: iso(j.start_time), 19, True),
        "end": (lambda j: iso(j.end_time), 19, True),
        "submit": (lambda j: iso(j.submit_time), 19, True),
        "eligible": (lambda j: iso(j.submit_time), 19, True),
        "nodelist": (lambda j: ranged(_nodes(j)) or "None assigned", 15, True),
        "nnodes": (lambda j: str(len(_nodes(j)) or j.workers), 8, True),
        "allocnodes": (lambda j: str(len(_nodes(j))), 10, True),
        "alloccpus": (cpus, 10, True),
        "ncpus": (cpus, 10, True),
        "reqcpus": (cpus, 8, True),
        "alloctres": (lambda j: _tres(j) if j.placement else "", 10, True),
        "reqtres": (_tres, 10, True),
        "allocgres": (lambda j: f"gpu:{j.gpus:g}" if j.gpus and j.placement else "", 12, False),
        "reqgres": (lambda j: f"gpu:{j.gpus:g}" if j.gpus else "", 12, False),
        "timelimit": (_limit, 10, True),
        "priority": (lambda j: str(j.spec.get("priority", 0)), 10, True),
        "reason": (slurm_style.why, 20, True),
        "arrayjobid": (lambda j: str(j.get("array_id") or ""), 12, True),
        "arraytaskid": (lambda j: str(j.get("array_index") or ""), 12, True),
        "qos": (lambda j: "normal", 10, True),
        "cluster": (lambda j: "gpufleet", 10, True),
        "workdir": (lambda j: str(j.spec.get("workdir", "")), 15, False),
    }


def parse_format(text: str, known: dict[str, Any]) -> list[tuple[str, str, int | None]]:
    """``JobID,JobName%30`` → (key, title, width or None for the default)."""
    out: list[tuple[str, str, int | None]] = []
    bad = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        name, _, width = item.partition("%")
        if name.lower() not in known:
            bad.append(name)
            continue
        if width and not (width.lstrip("-").isascii() and width.lstrip("-").isdigit()):
            raise Usage(f"--format {item}: the width must be a number")
        out.append((name.lower(), TITLES.get(name.lower(), name), int(width) if width else None))
    if bad:
        raise Usage(f"Invalid field requested: {', '.join(repr(b) for b in bad)}")
    return out


TITLES = {
    "jobid": "JobID", "jobidraw": "JobIDRaw", "jobname": "JobName", "partition": "Partition",
    "account": "Account", "user": "User", "state": "State", "exitcode": "ExitCode",
    "derivedexitcode": "DerivedExitCode", "elapsed": "Elapsed", "elapsedraw": "ElapsedRaw",
    "start": "Start", "end": "End", "submit": "Submit", "eligible": "Eligible",
    "nodelist": "NodeList", "nnodes": "NNodes", "allocnodes": "AllocNodes",
    "alloccpus": "AllocCPUS", "ncpus": "NCPUS", "reqcpus": "ReqCPUS", "alloctres": "AllocTRES",
    "reqtres": "ReqTRES", "allocgres": "AllocGRES", "reqgres": "ReqGRES",
    "timelimit": "Timelimit", "priority": "Priority", "reason": "Reason",
    "arrayjobid": "ArrayJobID", "arraytaskid": "ArrayTaskID", "qos": "QOS",
    "cluster": "Cluster", "workdir": "WorkDir",
}  # fmt: skip


def render(
    rows: Iterable[tuple[Any, str | None]],
    columns: list[tuple[str, str, int | None]],
    known: dict[str, tuple[Callable[[Any], str], int, bool]],
    *,
    header: bool,
    sep: str | None,
    trailing: bool,
) -> str:
    """sacct's table: fixed width (too long: cut, ``+`` last), or ``sep``-separated."""

    def cell(key: str, width: int | None, v: str) -> str:
        if sep is not None:
            return v
        _, default, right = known[key]
        w = abs(width) if width is not None else default
        if len(v) > w:
            v = v[: w - 1] + "+"
        return v.rjust(w) if right and (width is None or width > 0) else v.ljust(w)

    def join(cells: list[str]) -> str:
        if sep is None:
            return " ".join(cells) + " "
        return sep.join(cells) + (sep if trailing else "")

    lines = []
    if header:
        lines.append(join([cell(k, w, t) for k, t, w in columns]))
        if sep is None:
            lines.append(
                join([cell(k, w, "-" * (abs(w) if w else known[k][1])) for k, _, w in columns])
            )
    for j, step in rows:
        cells = []
        for k, _, w in columns:
            v = known[k][0](j)
            if step is not None:
                v = _step_value(k, v, j, step)
            cells.append(cell(k, w, v))
        lines.append(join(cells))
    return "".join(line + "\n" for line in lines)


def _step_value(key: str, value: str, j: Any, step: str) -> str:
    """A step row's field where it is not its job's: its id and name, no partition or user,
    the batch script's state and exit code, its TRES (Slurm 22.05's ``ID.batch`` line)."""
    if key in ("jobid", "jobidraw"):
        return f"{value}.{step}"
    if key == "jobname":
        return step
    if key in ("partition", "user"):
        return ""
    if key == "state":
        return _STEP_STATES.get(j.state, value)
    if key in ("exitcode", "derivedexitcode"):
        return _step_exit_code(j)
    if key in ("alloctres", "reqtres"):
        return _tres(j, step=True) if value else ""
    return value


def parser() -> Parser:
    p = Parser("sacct", "gpufleet's job accounting as sacct shows it.")
    p.add_argument("-j", "--jobs", action="append", default=[], help="job ids (repeatable)")
    p.add_argument("-u", "--user", "--uid", dest="user", help="comma list of users")
    p.add_argument("--me", action="store_true", help="my jobs (this Unix user's)")
    p.add_argument("-a", "--allusers", action="store_true", help="every user's jobs")
    p.add_argument("-S", "--starttime", help="from (default: midnight; any time with -j)")
    p.add_argument("-E", "--endtime", help="until (default: now)")
    p.add_argument("-s", "--state", help="comma list of states")
    p.add_argument("-r", "--partition", help="comma list of partitions")
    p.add_argument("--name", help="comma list of job names")
    p.add_argument("-X", "--allocations", action="store_true", help="no step rows")
    p.add_argument("-p", "--parsable", action="store_true", help="'|' after every field")
    p.add_argument("-P", "--parsable2", action="store_true", help="'|' between fields")
    p.add_argument("--delimiter", help="the separator of -p/-P (default '|')")
    p.add_argument("-n", "--noheader", action="store_true", help="no header")
    p.add_argument("-o", "--format", help="comma list of fields (Name%%width)")
    p.add_argument("-b", "--brief", action="store_true", help="JobID,State,ExitCode")
    p.add_argument("-l", "--long", action="store_true", help="(accepted, as the default)")
    return p


def _when(text: str | None, now: float, default: float | None) -> float | None:
    if text is None:
        return default
    from gpufleet.cli.when import parse_when

    try:
        return parse_when(text, now)
    except ValueError as e:
        raise Usage(str(e)) from None


def _wanted_ids(values: list[str]) -> tuple[set[str], set[tuple[str, int]]]:
    """(plain ids, (array, task)) from ``-j 12,13_2,web.3`` (a step's ``12.batch`` is its
    job; ``web.3``: a service's replica)."""
    plain: set[str] = set()
    tasks: set[tuple[str, int]] = set()
    for x in (i.strip() for v in values for i in v.split(",") if i.strip()):
        head, sep, index = x.partition("_")
        if sep:
            if not (index.isascii() and index.isdigit()):
                raise Usage(f"Invalid job id: {x}")
            tasks.add((head, int(index)))
        else:
            # a step (12.batch) is its job's; a service replica's own id has a '.' (web.3)
            job, dot, _ = x.partition(".")
            plain.add(job if dot and (job.isascii() and job.isdigit()) else x)
    return plain, tasks


def main(argv: list[str] | None = None) -> None:
    a = parser().parse_args(argv)

    def body() -> int:
        now = time.time()
        known = fields(now)
        fmt = "JobID,State,ExitCode" if a.brief else (a.format or DEFAULT_FIELDS)
        columns = parse_format(fmt, known)
        wanted: set[str] | None = None
        if a.state:
            wanted = set()
            for part in a.state.split(","):
                sacct_name = part.strip().upper()
                ours = [k for k, v in STATES.items() if v == sacct_name]
                if not ours:
                    try:
                        ours = list(slurm_style.states(part) or [])
                    except ValueError as e:
                        raise Usage(f"--state: {e}") from None
                wanted.update(ours)
        who = None if a.allusers else users(a.user, a.me)
        queues = {q.strip() for q in a.partition.split(",")} if a.partition else None
        names = {n.strip() for n in a.name.split(",")} if a.name else None
        midnight = datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
        t0 = _when(a.starttime, now, None if a.jobs else midnight.timestamp())
        t1 = _when(a.endtime, now, None)
        jobs: list[Any] = []
        with connect("sacct") as c:
            if a.jobs:
                plain, tasks = _wanted_ids(a.jobs)
                listing: list[Any] | None = None
                for jid in sorted(plain | {t for t, _ in tasks}, key=_id_key):
                    try:
                        j = row(c.job(jid))
                    except ApiError as e:  # an unknown id lists nothing, as sacct
                        if e.status in (400, 404, 422):
                            continue
                        raise
                    if j.get("array_id") == j.id:  # an array: every task of it
                        if listing is None:
                            listing = list(c.all_jobs())
                        members = sorted(
                            (t for t in listing if t.get("array_id") == j.id),
                            key=lambda t: t.array_index,
                        )
                        jobs += [
                            t for t in members if jid in plain or (jid, t.array_index) in tasks
                        ]
                    elif jid in plain:
                        jobs.append(j)
            else:
                jobs = list(c.all_jobs(user=next(iter(who)) if who and len(who) == 1 else None))
                jobs.sort(key=lambda j: _id_key(j.id))
        jobs = [
            j
            for j in jobs
            if (who is None or j.user in who)
            and (queues is None or slurm_style.in_partitions(j, queues))
            and (names is None or j.name in names)
            and (wanted is None or j.state in wanted)
            and (t0 is None or j.end_time is None or j.end_time >= t0)
            and (t1 is None or j.submit_time <= t1)
        ]
        rows: list[tuple[Any, str | None]] = []
        for j in slurm_style.one_line_arrays(jobs):  # an array's pending tasks: ID_[2-5]
            rows.append((j, None))
            if not a.allocations and j.spec.get("batch") and j.start_time is not None:
                rows.append((j, "batch"))
        parsable = a.parsable or a.parsable2
        sep = (a.delimiter or "|") if parsable else None
        sys.stdout.write(
            render(rows, columns, known, header=not a.noheader, sep=sep, trailing=a.parsable)
        )
        return 0

    run("sacct", body)


def _id_key(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if (job_id.isascii() and job_id.isdigit()) else (1 << 62, job_id)


if __name__ == "__main__":
    main()
