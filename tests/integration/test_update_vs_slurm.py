"""A job's fields changed as Slurm 22.05 changes them (ADR 0076): gpufleet's ``scontrol
update JobId=…`` shim against what a real Slurm printed.

What a real Slurm 22.05 printed (``/work/shared/tools/slurm_local.sh``; the last test runs the
admin's part again where Slurm is installed). As root (an admin), ``a`` held (``sbatch -H -t
10``), ``r`` running (``-t 10 --wrap "sleep 300"``); each ``scontrol update …``::

    JobId=$a TimeLimit=5; JobId=$a TimeLimit=20; JobId=$a JobName=foo     exit 0 each
    JobId=$a Bogus=1                     exit 1: Update of this parameter is not supported:
                                         Bogus=1 / Request aborted
    JobId=$a TimeLimit=xyz               exit 1: scontrol: error: Invalid TimeLimit value
    JobId=$a TimeLimit=xyz Partition=nope   the same (nothing sent)
    JobId=$a Partition=nope              exit 1: Invalid partition name specified for job A
    JobId=$r Partition=debug             exit 1: Job is no longer pending execution for job R
    JobId=$r NumNodes=2                  exit 1: Requested operation not supported on this
                                         system for job R
    JobId=$r TimeLimit=30                exit 0 (an admin raises a running job's)
    JobId=99999 TimeLimit=5              exit 1: Invalid job id specified for job 99999
    JobId=$a,$r JobName=bar              exit 0 (both renamed)
    JobId=$r,99999 JobName=baz           exit 1: Invalid job id specified for job 99999 ($r
                                         renamed)

As a user (uid 1000; its own ``b`` held, ``c`` running, both ``-t 10``)::

    JobId=$b TimeLimit=5; …=20; …=UNLIMITED  exit 0 each: a pending job's, either way
    JobId=$b Priority=5                  exit 1: Access/permission denied for job B
    JobId=$c TimeLimit=30                exit 1: Access/permission denied for job C
    JobId=$c TimeLimit=5                 exit 0 (lowered)
    JobId=$b TimeLimit=20 JobName=y      exit 0
    JobId=$b Partition=nope TimeLimit=20 exit 1: Invalid partition name specified for job B
    JobId=$a JobName=x                   exit 1: Invalid user id for job A (root's)

And ``scontrol requeue`` (root; ``n`` running, submitted ``--no-requeue``)::

    requeue $r                           exit 0: PD, Reason BeginTime, Restarts=1
    requeue $a                           exit 1: Job is pending execution for job A
    requeue $n                           exit 1: Requested operation is presently disabled
                                         for job N
    requeue 99999; requeue abc           exit 1: Invalid job id specified for job 99999 (abc)
    requeue                              exit 1: too few arguments for keyword:requeue
    (uid 1000) requeue $r                exit 1: Access/permission denied for job R

(Also seen: a user's ``Nice=-5`` is refused with Access/permission denied and ``Nice=5``,
``Comment=hi``, ``ExcNodeList=n1``, ``StartTime=now+1hour`` answer 0; gpufleet keeps no nice
nor comment: its shim refuses those keys.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from shimrun import Run, shim_runner, slurm_admin

from support.slurm_local import live
from support.waiting import wait_for

U = "scontrol update JobId="
# (who, command, exit status, stderr, then the job's squeue "%j|%l" or None), as recorded above
ADMIN_PART = [
    ("admin", U + "{a} TimeLimit=5", 0, "", "wrap|5:00"),
    ("admin", U + "{a} TimeLimit=20", 0, "", "wrap|20:00"),
    ("admin", U + "{a} JobName=foo", 0, "", "foo|20:00"),
    ("admin", U + "{a} Bogus=1", 1,
     "Update of this parameter is not supported: Bogus=1\nRequest aborted\n", "foo|20:00"),
    ("admin", U + "{a} TimeLimit=xyz", 1, "scontrol: error: Invalid TimeLimit value\n", None),
    ("admin", U + "{a} TimeLimit=xyz Partition=nope", 1,
     "scontrol: error: Invalid TimeLimit value\n", None),
    ("admin", U + "{a} Partition=nope", 1,
     "Invalid partition name specified for job {a}\n", "foo|20:00"),
    ("admin", U + "{r} Partition=debug", 1,
     "Job is no longer pending execution for job {r}\n", None),
    ("admin", U + "{r} NumNodes=2", 1,
     "Requested operation not supported on this system for job {r}\n", None),
    ("admin", U + "{r} TimeLimit=30", 0, "", None),
    ("admin", U + "99999 TimeLimit=5", 1, "Invalid job id specified for job 99999\n", None),
    ("admin", U + "{a},{r} JobName=bar", 0, "", "bar|20:00"),
    ("admin", U + "{r},99999 JobName=baz", 1, "Invalid job id specified for job 99999\n", None),
]  # fmt: skip
USER_PART = [
    ("user", U + "{b} TimeLimit=5", 0, "", "wrap|5:00"),
    ("user", U + "{b} TimeLimit=20", 0, "", "wrap|20:00"),
    ("user", U + "{b} TimeLimit=UNLIMITED", 0, "", "wrap|UNLIMITED"),
    ("user", U + "{b} Priority=5", 1, "Access/permission denied for job {b}\n", None),
    ("user", U + "{c} TimeLimit=30", 1, "Access/permission denied for job {c}\n", None),
    ("user", U + "{c} TimeLimit=5", 0, "", None),
    ("user", U + "{b} TimeLimit=20 JobName=y", 0, "", "y|20:00"),
    ("user", U + "{b} Partition=nope TimeLimit=20", 1,
     "Invalid partition name specified for job {b}\n", "y|20:00"),
    ("user", U + "{a} JobName=x", 1, "Invalid user id for job {a}\n", None),
]  # fmt: skip
REQUEUE_PART = [
    ("admin", "scontrol requeue {a}", 1, "Job is pending execution for job {a}\n", None),
    ("admin", "scontrol requeue {n}", 1,
     "Requested operation is presently disabled for job {n}\n", None),
    ("admin", "scontrol requeue 99999", 1, "Invalid job id specified for job 99999\n", None),
    ("admin", "scontrol requeue abc", 1, "Invalid job id specified for job abc\n", None),
    ("admin", "scontrol requeue", 1, "too few arguments for keyword:requeue\n", None),
    ("admin", "scontrol requeue {r}", 0, "", None),
]  # fmt: skip
USER_REQUEUE = [
    ("user", "scontrol requeue {r}", 1, "Access/permission denied for job {r}\n", None),
]


def play(run: Run, steps: list[tuple], ids: dict[str, str]) -> None:
    """Each step's command as ``who``: its exit status and stderr, then its job's squeue line
    (the first job the command names)."""
    for who, command, rc, err, line in steps:
        r = run(who, *command.format(**ids).split())
        assert (r.returncode, r.stderr) == (rc, err.format(**ids)), (command, r)
        if line is not None:
            target = command.split("=")[1].split()[0].split(",")[0].format(**ids)
            shown = run(who, "squeue", "-h", "-j", target, "-o", "%j|%l").stdout.strip()
            assert shown == line, (command, shown)


def submit(run: Run, who: str, *how: str) -> str:
    r = run(who, "sbatch", "--parsable", "-t", "10", "-o", "/dev/null", *how)
    assert r.returncode == 0, r
    return r.stdout.strip()


def running(run: Run, who: str, *how: str) -> str:
    job = submit(run, who, *how, "--wrap", "sleep 300")
    state = lambda: run(who, "squeue", "-h", "-j", job, "-o", "%t").stdout.strip()  # noqa: E731
    wait_for(f"job {job} started", lambda: state() in ("R", "CF") or None)
    return job


@pytest.fixture
def gpufleet(tmp_path: Path) -> Iterator[Run]:
    with shim_runner(tmp_path) as run:
        yield run


def test_gpufleet_answers_as_slurm_did(gpufleet: Run) -> None:
    run = gpufleet
    ids = {"a": submit(run, "admin", "-H", "--wrap", "true"), "r": running(run, "admin")}
    play(run, ADMIN_PART, ids)
    ids |= {"b": submit(run, "user", "-H", "--wrap", "true"), "c": running(run, "user")}
    play(run, USER_PART, ids)
    play(run, USER_REQUEUE, ids)
    ids["n"] = running(run, "admin", "--no-requeue")
    play(run, REQUEUE_PART, ids)


@live
def test_slurm_answers_as_recorded(shared_slurm: dict[str, str], tmp_path: Path) -> None:
    run = slurm_admin(shared_slurm, tmp_path)

    ids = {"a": submit(run, "admin", "-H", "--wrap", "true"), "r": running(run, "admin")}
    play(run, ADMIN_PART, ids)
    ids["n"] = running(run, "admin", "--no-requeue")
    play(run, REQUEUE_PART, ids)
