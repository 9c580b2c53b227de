"""What the Slurm shims print against what Slurm 22.05 prints (``test_shims_print_vs_slurm``):
the same jobs submitted to either by the same ``sbatch`` command lines, the same commands run,
and their output normalized the same way.

The jobs (one node of 8 CPUs and 4 GPUs; each job ``--mem=1G``, so that they share it):
``C`` completed (``true``), ``F`` failed (``exit 3``), ``T`` timed out (``-t 1``), ``X``
cancelled while it ran (both ``exec sleep``: with a shell between, Slurm's exit code is 0:15 or
143:0, as the signal ends one or the other first), ``R`` running (2 GPUs), ``A`` an array
``1-5`` of 2 GPUs each (task 1 runs, 2-5 wait: Resources), ``P`` pending behind them (1 GPU),
``D`` pending on ``afterok:R`` (Dependency), ``H`` held (``-H``, JobHeldUser).

Normalized (what can never be the same between two clusters, and only that): the job ids, by
the job's letter (``A.N`` for the array's task N in scontrol: Slurm gives a task its own id
when it starts, gpufleet gives each one at submit; ``#`` an id of no letter); the user
(``USER``), the node (``HOST``), the default partition (``PART``: ``gpu`` in slurm_local.sh,
``default`` in gpufleet) and the submit directory (``WORKDIR``); times of day (``DATE``) and
times run (``TIME``: squeue's ``%M``, scontrol's ``RunTime``, sacct's ``Elapsed``); who
cancelled (sacct's ``CANCELLED by UID``); and the
values of scontrol's keys that are Slurm's own bookkeeping (``OWN``: Priority, Account,
AllocNode:Sid, LastSchedEval, Scheduler (Main or Backfill, whichever looked last), UserId and
GroupId; gpufleet's jobs here run as a user with no
account, as gpufleet never runs a job as root). A value put in the place of another keeps the
column where it was: the blanks before a right-justified value, or after a left-justified one,
make up for the length (so that widths and justification are still compared)."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from support.waiting import wait_for

Run = Callable[[list[str]], subprocess.CompletedProcess[str]]

# (letter, sbatch options): submitted in this order
JOBS = [
    ("C", ["-J", "done", "--wrap", "true"]),
    ("F", ["-J", "fail", "--wrap", "exit 3"]),
    ("T", ["-J", "slow", "-t", "1", "--wrap", "exec sleep 300"]),
    ("X", ["-J", "cancel", "--wrap", "touch X.started; exec sleep 300"]),
    ("R", ["-J", "run", "--gres=gpu:2", "--wrap", "sleep 3000"]),
    ("A", ["-J", "arr", "--array=1-5", "--gres=gpu:2", "--wrap", "sleep 3000"]),
    ("P", ["-J", "prio", "--gres=gpu:1", "--wrap", "sleep 3000"]),
    ("D", ["-J", "dep", "--dependency=afterok:{R}", "--wrap", "true"]),
    ("H", ["-J", "held", "-H", "--wrap", "true"]),
]
# what is run once every job is where it should be ({R}: job R's id; {user}: the user)
COMMANDS = [
    "squeue",
    "squeue -h -o '%i %T %r'",
    "squeue -o '%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R'",
    "squeue -O JobID,State,Reason,NumNodes",
    "squeue --Format=JobArrayID,State,Reason,NumNodes",
    "squeue -t PD",
    "squeue --states=RUNNING",
    "squeue -t all",
    "squeue -h -t all -o '%i|%t|%T|%r|%R'",
    "squeue -j {R}",
    "squeue -j 99999",
    "squeue -j 99999,{R}",
    "squeue -j 99999,99998",
    "squeue -j {A}",
    "squeue -j {A}_2",
    "squeue -h -j {A}_1,{P} -o '%i %T'",
    "squeue --me",
    "squeue -u {user}",
    "squeue --noheader",
    "squeue --array",
    "squeue -r -t PD",
    "squeue --start",
    "sinfo",
    "sinfo -N -h -o '%N %t %G'",
    "sinfo -s",
    "sinfo -N",
    *(f"scontrol show job {{{k}}}" for k in "CFTXRPDH"),
    "scontrol show job {A}_2",
    "scontrol show job {A}",
    "scontrol show job -o {R}",
    "scontrol -o show job {P}",
    "scontrol show job 99999",
    "scancel 99999",
]
# sacct's (a Slurm with accounting: slurmdbd, which slurm_local.sh does not start)
SACCT = [
    "sacct -j {C},{F},{T},{X} --format=JobID,JobName,State,ExitCode,Elapsed -P -n",
    "sacct -j {C},{F},{T},{X} --format=JobID,JobName,State,ExitCode,Elapsed -P -n -X",
    "sacct -j {T} --parsable2 --format=JobID,State,ExitCode",
    "sacct -j {F} --format=JobID,State,ExitCode --parsable",
    "sacct -j {F}",
    "sacct -j {R},{P},{D} --format=JobID,JobName,State,ExitCode,Elapsed -P -n",
    "sacct -j {A} --format=JobID,JobName,State,ExitCode -P -n",
    "sacct -j {X} -X -P -n --format=JobID,State,ExitCode,Reason",
    "sacct -j {X} --format=JobID,JobName,State,ExitCode,Elapsed,NodeList,AllocTRES%40",
    "sacct -j 99999 -P -n",
    "sacct -j 99999",
]


# squeue.txt (with sinfo's and scancel's), scontrol.txt, sacct.txt
RECORDED = Path(__file__).parent / "slurm_printed"


def read_record() -> dict[str, str]:
    """What Slurm printed: each command's ``### COMMAND`` line, then its text as ``capture``
    has it (trailing blanks and all)."""
    out: dict[str, str] = {}
    for part in ("squeue", "scontrol", "sacct"):
        text = (RECORDED / f"{part}.txt").read_text()
        for block in text.split("### ")[1:]:
            cmd, _, body = block.partition("\n")
            out[cmd] = body
    return out


def write_record(got: dict[str, str], where: Path) -> None:
    """``got`` as ``read_record`` reads it, under ``where``."""
    for part in ("squeue", "scontrol", "sacct"):
        mine = [c for c in got if _part(c) == part]
        if mine:
            (where / f"{part}.txt").write_text("".join(f"### {c}\n{got[c]}" for c in mine))


def _part(cmd: str) -> str:
    """The record's file of ``cmd``: scontrol's, sacct's, or squeue's (with sinfo and scancel)."""
    return cmd.split()[0] if cmd.split()[0] in ("scontrol", "sacct") else "squeue"


@dataclass
class Site:
    """One cluster's names: its user, node, default partition and submit directory."""

    user: str
    host: str
    partition: str
    workdir: str


def submit(run: Run, workdir: Path) -> dict[str, str]:
    """Each of JOBS submitted in ``workdir`` (``X`` cancelled once its script runs): letter →
    job id."""
    ids: dict[str, str] = {}
    for letter, opts in JOBS:
        argv = ["sbatch", "--parsable", "-o", "/dev/null", "--mem=1G"]
        r = run(argv + [o.format(**ids) for o in opts])
        assert r.returncode == 0, r
        ids[letter] = r.stdout.strip().split(";")[0]
        if letter == "X":  # cancelled once it runs
            wait_for("X's script to run", (workdir / "X.started").exists, 60)
            assert run(["scancel", ids["X"]]).returncode == 0
            wait_for("X to end", lambda: state(run, ids["X"]) == "CANCELLED", 60)
    return ids


def state(run: Run, job: str) -> str:
    return run(["squeue", "-h", "-t", "all", "-j", job, "-o", "%T"]).stdout.strip()


def settle(run: Run, ids: dict[str, str], estimates: bool) -> None:
    """Until each job is where the record has it: T timed out (Slurm looks at time limits
    every 30 s), R and the array's task 1 running, P pending with its reason (and where
    ``estimates``, Slurm's, its expected start: its backfill's, every 30 s, and the array's
    waiting tasks their AccrueTime: under load A_1 can start after that pass)."""
    wait_for("T's time limit", lambda: state(run, ids["T"]) == "TIMEOUT", 180)
    wait_for("R to run", lambda: state(run, ids["R"]) == "RUNNING", 60)
    why = ["squeue", "-h", "-j", ids["P"], "-o", "%T %r %S"]
    wait_for("P to wait", lambda: run(why).stdout.split()[:2] not in ([], ["PENDING", "None"]))
    if estimates:
        wait_for("P's start", lambda: run(why).stdout.split()[2] != "N/A", 90)
    running = ["squeue", "-h", "-r", "-t", "R", "-o", "%i"]
    wait_for("A_1 to run", lambda: f"{ids['A']}_1" in run(running).stdout.split(), 60)
    if estimates:  # the array's waiting tasks accrue from a scheduling pass after A_1 started
        show = ["scontrol", "show", "job", ids["A"]]
        wait_for("A to accrue", lambda: "AccrueTime=Unknown" not in run(show).stdout, 90)


def capture(
    run: Run, ids: dict[str, str], user: str, commands: list[str] = COMMANDS
) -> dict[str, str]:
    """Each of ``commands``: its exit status, stdout and stderr, as one text."""
    out = {}
    for cmd in commands:
        r = run(shlex.split(cmd.format(**ids, user=user)))
        text = f"rc={r.returncode}\n{r.stdout}"
        out[cmd] = text + (f"--stderr--\n{r.stderr}" if r.stderr else "")
    return out


def _swap(
    line: str, rx: re.Pattern[str], new: Callable[[re.Match[str]], str | None], first: bool
) -> str:
    """Each match of ``rx`` in ``line`` (``first``: the line's first value only) with
    ``new(m)`` for it, the column kept: the blanks before a right-justified value (more than
    one), or else after a left-justified one, make up for the length."""
    out: list[str] = []
    at = 0
    for m in rx.finditer(line):
        if first and line[: m.start()].strip(" "):
            break
        value = new(m)
        if value is None:
            continue
        lead_at = len(line[at : m.start()].rstrip(" ")) + at
        trail_to = len(line) - len(line[m.end() :].lstrip(" "))
        lead, trail = m.start() - lead_at, trail_to - m.end()
        out.append(line[at:lead_at])
        grow = len(m.group(0)) - len(value)
        if lead > 1:
            out.append(" " * max(1, lead + grow) + value)
            at = m.end()
        elif trail > 1:
            out.append(" " * lead + value + " " * max(1, trail + grow))
            at = trail_to
        else:
            out.append(" " * lead + value)
            at = m.end()
    return "".join(out) + line[at:]


def _sub(
    pattern: str, text: str, new: Callable[[re.Match[str]], str | None], first: bool = False
) -> str:
    """Each match of ``pattern`` in each line (``first``: at its start, after blanks, only),
    swapped for ``new(m)`` (``_swap``)."""
    rx = re.compile(pattern)
    return "\n".join(_swap(line, rx, new, first) for line in text.split("\n"))


OWN = ("Priority", "Account", "AllocNode:Sid", "LastSchedEval", "Scheduler", "UserId", "GroupId")


def normalize(text: str, ids: dict[str, str], site: Site, sacct: bool = False) -> str:
    letter = {v: k for k, v in ids.items()}
    text = text.replace(site.workdir, "WORKDIR")
    text = _sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", text, lambda m: "DATE")
    text = re.sub(rf"\b({'|'.join(map(re.escape, OWN))})=\S*", r"\1=OWN", text)
    text = re.sub(r"\bRunTime=\S+", "RunTime=TIME", text)
    # an array's task: its own id is not the same (Slurm gives one to a task when it starts,
    # gpufleet to each at submit): A.N, N its index (A.2-5, the pending ones)
    text = re.sub(r"\bJobId=\d+ ArrayJobId=\d+ ArrayTaskId=(\S+)",
                  lambda m: f"JobId=A.{m.group(1)} ArrayJobId=A ArrayTaskId={m.group(1)}",
                  text)  # fmt: skip
    text = re.sub(r"\b(JobId|afterok:)=?(\d+)",
                  lambda m: m.group(0).replace(m.group(2), letter.get(m.group(2), m.group(2))),
                  text)  # fmt: skip
    # a squeue line's first value is its job's id (6, 6_1, 6_[2-5])
    # (# for an id of none of them: a running task's own, in -O JobID)
    text = _sub(r"\d+(?=[_|.]|[ ]|$)", text, lambda m: letter.get(m.group(0), "#"), first=True)
    # sacct: who cancelled it (root's 0 here; gpufleet's user has no account, no uid)
    text = _sub(r"CANCELLED by [^\s|]+", text, lambda m: "CANCELLED by UID")
    text = re.sub(r"Partition=\S+", "Partition=PART", text)
    text = _sub(rf"(?<![\w:/-]){re.escape(site.partition)}\*", text, lambda m: "PART*")
    for name, new in ((site.user, "USER"), (site.host, "HOST"), (site.partition, "PART")):
        text = _sub(rf"(?<![\w:/-]){re.escape(name)}(?![\w:/=-])", text, lambda m, n=new: n)
    if sacct:  # its Elapsed: 00:01:24 (its ExitCode, 0:15, is compared)
        return _sub(r"(?<![\w:=])(?:\d+-)?\d\d:\d\d:\d\d(?![\w:])", text, lambda m: "TIME")
    # squeue's %M: a time run (0:15, 1:02:03, 1-00:00:00), where no key= says what it is
    return _sub(r"(?<![\w:=])(?:\d+-)?(?:\d+:)?\d+:\d\d(?![\w:])", text, lambda m: "TIME")
