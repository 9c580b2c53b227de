"""``squeue`` over gpufleet: its options, its ``-o``/``-O`` formats and its default table."""

from __future__ import annotations

import sys

from gpufleet.cli import selection, slurm_style
from gpufleet.shims.common import Usage, connect, run, users
from gpufleet.shims.parser import Parser

LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"  # squeue -l
# squeue -O's names → its -o letters (the fields gpufleet has)
FORMAT_NAMES = {
    "jobid": "i", "jobarrayid": "i", "arrayjobid": "A", "name": "j", "username": "u",
    "userid": "u", "partition": "P", "statecompact": "t", "state": "T", "timeused": "M",
    "timelimit": "l", "numnodes": "D", "reasonlist": "R", "reason": "r", "nodelist": "N",
    "numcpus": "C", "tres-per-node": "b", "starttime": "S", "submittime": "V", "priority": "Q",
}  # fmt: skip


def parser() -> Parser:
    p = Parser("squeue", "View gpufleet's jobs as squeue shows them.")
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
    p.add_argument("-a", "--all", action="store_true", help="(every partition: always)")
    p.add_argument("-r", "--array", action="store_true", help="(one task a line: always)")
    return p


def fields_format(text: str) -> str:
    """``-O JobID:10,State:.8`` as an ``-o`` format (each field 20 wide unless given)."""
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
        if not width.isdigit():
            raise Usage(f"-O {item}: the size must be a number")
        out.append(f"%{'.' if right else ''}{width}{letter}")
    if bad:
        raise Usage(f"-O: invalid field {', '.join(bad)} (known: {', '.join(FORMAT_NAMES)})")
    return " ".join(out)


def main(argv: list[str] | None = None) -> None:
    a = parser().parse_args(argv)

    def body() -> int:
        try:
            wanted = slurm_style.states(a.states) if a.states is not None else None
        except ValueError as e:
            raise Usage(f"--states: {e}") from None
        fmt = a.format or (fields_format(a.Format) if a.Format else None)
        fmt = fmt or (LONG_FORMAT if a.long else slurm_style.DEFAULT_FORMAT)
        who = users(a.user, a.me)
        queues = {q.strip() for q in a.partition.split(",")} if a.partition else None
        problems: list[str] = []
        with connect("squeue") as c:
            rows, failed = selection.select(
                c,
                user=next(iter(who)) if who and len(who) == 1 else None,
                # no queue asked of the server: a pending job of several queues is listed
                # under each of them (squeue -p b shows a job of -p a,b)
                queue=None,
                wanted=wanted,
                job_ids=a.jobs,
                names=a.name,
                limit=10_000,
                all_states=a.states is not None and selection.lists_ended(wanted),
                report=problems.append,
                brief=True,  # the formats print a few of the spec's fields
            )
        rows = [j for j in rows if (who is None or j.user in who)]
        rows = [j for j in rows if (queues is None or slurm_style.in_partitions(j, queues))]
        for msg in problems:
            sys.stderr.write(f"squeue: error: {msg}\n")
        try:
            sys.stdout.write(slurm_style.render(fmt, rows, header=not a.noheader))
        except ValueError as e:
            raise Usage(str(e)) from None
        return 1 if failed else 0

    run("squeue", body)


if __name__ == "__main__":
    main()
