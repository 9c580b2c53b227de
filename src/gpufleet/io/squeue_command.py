"""``squeue [options]`` as squeue reads its command line: which jobs (``-u``, ``--me``, ``-j``,
``-t``, ``-p``, ``-n``) and how they are printed (``-o``, ``-O``, ``-l``, ``-h``).

One reader for the two places that run squeue (issue 27): the controller (``POST /squeue``: it
lists and prints, so that the ``squeue`` shim imports next to nothing and squeue over thousands
of jobs costs no JSON) and the shim itself, against a controller without that endpoint."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gpufleet.io import slurm_style
from gpufleet.io.slurm_argv import ArgvError, ArgvParser

LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"  # squeue -l
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"  # squeue --start
# squeue -O's names → its -o letters (the fields gpufleet has)
FORMAT_NAMES = {
    "jobid": "A", "jobarrayid": "i", "arrayjobid": "F", "arraytaskid": "K", "name": "j",
    "username": "u",
    "userid": "u", "partition": "P", "statecompact": "t", "state": "T", "timeused": "M",
    "timelimit": "l", "numnodes": "D", "reasonlist": "R", "reason": "r", "nodelist": "N",
    "numcpus": "C", "tres-per-node": "b", "starttime": "S", "submittime": "V", "priority": "Q",
}  # fmt: skip
LOCAL_TIME = frozenset("SV")  # fields printed in the reader's time zone
INVALID = "slurm_load_jobs error: Invalid job id specified"  # squeue -j of one unknown id


class Usage(Exception):
    """What squeue refuses, in its words: printed as ``squeue: error: …``, exit 1."""


@dataclass(frozen=True)
class Squeue:
    fmt: str
    header: bool
    wanted: set[str] | None  # -t's states (None: any)
    states_given: bool
    users: set[str] | None
    job_ids: str | None
    names: str | None
    partitions: set[str] | None
    # --start: pending jobs only (unless -t says), by expected start (the plan's estimate)
    by_start: bool = False
    array: bool = False  # -r: an array's pending tasks a line each (else one line of them)
    users_given: tuple[str, ...] = ()  # -u's names as typed, in their order (``named_users``)

    @property
    def one_user(self) -> str | None:
        """The user a listing may be narrowed to by the server: -u with one name."""
        return next(iter(self.users)) if self.users and len(self.users) == 1 else None

    @property
    def local_time(self) -> bool:
        """Whether the format prints times of day (in the time zone of whoever reads them)."""
        return any(m.group(3) in LOCAL_TIME for m in slurm_style.fields(self.fmt))


def parser(cls: type[ArgvParser] = ArgvParser) -> ArgvParser:
    p = cls("squeue", "View gpufleet's jobs as squeue shows them.")
    p.add_argument("-u", "--user", help="comma list of users")
    p.add_argument("--me", action="store_true", help="my jobs (this Unix user's)")
    p.add_argument("-j", "--jobs", help="comma list of job ids")
    p.add_argument("-t", "--states", help="comma list of states: PD,R,CD,… or all")
    p.add_argument("-p", "--partition", help="comma list of partitions (gpufleet queues)")
    p.add_argument("-n", "--name", help="comma list of job names")
    p.add_argument("-o", "--format", help="squeue's %%-format")
    p.add_argument("-O", "--Format", dest="Format", help="squeue's field names: JobID,State,…")
    p.add_argument("-h", "--noheader", action="store_true", help="no header line")
    p.add_argument("-l", "--long", action="store_true", help="squeue's long format")
    p.add_argument(
        "--start", action="store_true", help="pending jobs' expected start times, soonest first"
    )
    p.add_argument("-a", "--all", action="store_true", help="(every partition: always)")
    p.add_argument("-r", "--array", action="store_true", help="an array's tasks a line each")
    return p


def fields_format(text: str) -> str:
    """``-O JobID:10,State:.8`` as an ``-o`` format: each field 20 wide unless given, left
    justified unless ``.``, with nothing between them (Slurm 22.05's ``-O``)."""
    out = []
    bad = []
    for item in (x.strip() for x in text.split(",") if x.strip()):
        name, _, size = item.partition(":")
        letter = FORMAT_NAMES.get(name.lower())
        if letter is None:
            bad.append(name)
            continue
        right = size.startswith(".")
        width = size.lstrip(".") or "20"
        if not (width.isascii() and width.isdigit()):
            raise Usage(f"-O {item}: the size must be a number")
        out.append(f"%{'.' if right else ''}{width}{letter}")
    if bad:
        raise Usage(f"-O: invalid field {', '.join(bad)} (known: {', '.join(FORMAT_NAMES)})")
    return "".join(out)


def read(argv: list[str], me: str | None, p: ArgvParser | None = None) -> Squeue:
    """The command line; ``me``: the Unix user who typed it (``--me``). Usage for a refusal."""
    try:
        a = (p or parser()).parse_args(argv)
    except ArgvError as e:
        raise Usage(str(e)) from None
    try:
        wanted = slurm_style.states(a.states) if a.states is not None else None
    except ValueError as e:
        raise Usage(f"--states: {e}") from None
    fmt = a.format or (fields_format(a.Format) if a.Format else None)
    fmt = fmt or (
        START_FORMAT if a.start else LONG_FORMAT if a.long else slurm_style.DEFAULT_FORMAT
    )
    if a.start and a.states is None:
        wanted = {"PENDING"}
    try:
        slurm_style.check(fmt)
    except ValueError as e:
        raise Usage(str(e)) from None
    given = tuple(u.strip() for u in a.user.split(",") if u.strip()) if a.user else ()
    users = set(given)
    if a.me:
        if not me:
            raise Usage("--me: the user who asks is not known")
        users.add(me)
    partitions = {q.strip() for q in a.partition.split(",")} if a.partition else None
    return Squeue(fmt, not a.noheader, wanted, a.states is not None, users or None, a.jobs,
                  a.name, partitions, a.start, a.array, given)  # fmt: skip


def account(name: str) -> str | None:
    """The account that ``-u``'s ``name`` is on this host, by name or else as a uid, as Slurm's
    squeue finds it (``uid_from_string``): its name; None when there is none."""
    import pwd  # only for -u: squeue imports next to nothing (issue 27)

    try:
        return pwd.getpwnam(name).pw_name
    except KeyError:
        pass
    if name.isascii() and name.isdigit():
        try:
            return pwd.getpwuid(int(name)).pw_name
        except (KeyError, OverflowError):
            pass
    return None


def named_users(
    q: Squeue, account: Callable[[str], str | None] = account
) -> tuple[Squeue, list[str]]:
    """``q`` with ``-u``'s users as squeue takes them (a uid: its account's name), and the names
    no account here has, in the order typed: each is a user only if a job of it is one the
    asker may see (gpufleet's users need no Unix account), else Slurm's ``invalid_user``."""
    if q.users is None:
        return q, []
    found = {n: account(n) for n in q.users_given}
    users = {found.get(n) or n for n in q.users}  # --me's name is the asker's own
    return replace(q, users=users), [n for n, a in found.items() if a is None]


def invalid_user(name: str) -> str:
    """Slurm 22.05's words for a ``-u`` name of no user (on stderr; squeue then goes on and
    exits 0): its message ends with a newline of its own, so a blank line follows."""
    return f"Invalid user: {name}\n"


def arranged(rows: list[Any], q: Squeue) -> list[Any]:
    """The lines squeue prints of ``rows``, in its order: an array's pending tasks on one line
    (unless ``-r``), by partition, state and priority (``--start``: by expected start)."""
    lines = slurm_style.slurm_order(rows if q.array else slurm_style.one_line_arrays(rows))
    return by_start(lines) if q.by_start else lines


def by_start(rows: list[Any]) -> list[Any]:
    """squeue --start's order: by expected start (those without one last), then by id."""
    return sorted(rows, key=lambda j: (slurm_style.start_of(j) or float("inf"),))


def asked(rows: list[Any], ids: list[str]) -> tuple[list[Any], list[str]]:
    """Of ``rows`` (every job), those of ``-j``'s ``ids``: a job, an array's id (every task
    of it), ``ARRAY_N`` (that task), as Slurm's squeue; and the ids of none."""
    out: dict[str, Any] = {}
    unknown = []
    for jid in ids:
        head, _, index = jid.partition("_")
        got = [
            j for j in rows if (j.id == jid and not index) or slurm_style.task_of(j, head, index)
        ]
        out.update((j.id, j) for j in got)
        if not got:
            unknown.append(jid)
    return list(out.values()), unknown
