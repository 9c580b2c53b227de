"""Held jobs as Slurm 22.05 keeps them (ADR 0074): gpufleet's ``sbatch -H``, ``scontrol
hold|uhold|release`` and ``squeue`` shims against what a real Slurm printed.

What a real Slurm 22.05 printed (``/work/shared/tools/slurm_local.sh``; the last test runs the
admin's part again where Slurm is installed), as root (an admin)::

    a=$(sbatch --parsable -H --wrap true)
    squeue -h -j $a -o "%t|%r|%Q"          PD|JobHeldUser|0
    scontrol hold $a                         (nothing, exit 0)      PD|JobHeldAdmin|0
    scontrol uhold $a                        (nothing, exit 0)      PD|JobHeldUser|0
    scontrol hold 999                        exit 1, on stderr:
      Invalid job id specified for job 999
      slurm_suspend error: Invalid job id specified
    scontrol hold abc                        exit 1: the same for job abc
    scontrol hold                            exit 1: too few arguments for keyword:hold
    c=$(sbatch --parsable -H --wrap true); scancel $c
    scontrol hold $c                         exit 1:
      Job has already finished for job C
      slurm_suspend error: Job has already finished
    scontrol release $c,$a                   exit 1 ($a released: the last error is none):
      Job has already finished for job C
      slurm_suspend error: No error

and as a user (uid 1000, its own job b submitted with -H; root's job a)::

    scontrol release $b; scontrol hold $b    exit 0, 0: PD|JobHeldUser (a user's hold)
    (root) scontrol hold $b                  PD|JobHeldAdmin
    scontrol release $b                      exit 1:
      Access/permission denied for job B
      slurm_suspend error: Access/permission denied
    scontrol uhold $b; scontrol hold $b      exit 0, 0: still PD|JobHeldAdmin
    scontrol release $a                      exit 1:
      Invalid user id for job A
      slurm_suspend error: Invalid user id

(Also seen: ``scontrol hold`` of a running job answers 0 and shows Reason=JobHeldAdmin beside
RUNNING; gpufleet keeps the hold for when it is pending again and shows it then.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from shimrun import Run, shim_runner, slurm_admin

from support.slurm_local import live
from support.waiting import wait_for

# (who, command, exit status, stderr, then the job's "%t|%r|%Q" or None), as recorded above
ADMIN_PART = [
    ("admin", "scontrol hold {a}", 0, "", "PD|JobHeldAdmin|0"),
    ("admin", "scontrol uhold {a}", 0, "", "PD|JobHeldUser|0"),
    ("admin", "scontrol hold 999", 1,
     "Invalid job id specified for job 999\nslurm_suspend error: Invalid job id specified\n", None),
    ("admin", "scontrol hold abc", 1,
     "Invalid job id specified for job abc\nslurm_suspend error: Invalid job id specified\n", None),
    ("admin", "scontrol hold", 1, "too few arguments for keyword:hold\n", None),
    ("admin", "scontrol hold {c}", 1,
     "Job has already finished for job {c}\nslurm_suspend error: Job has already finished\n", None),
]  # fmt: skip
RELEASE_BOTH = (
    "admin", "scontrol release {c},{a}", 1,
    "Job has already finished for job {c}\nslurm_suspend error: No error\n", None,
)  # fmt: skip
# (the recorded release then hold of b is left out: gpufleet may start b between the two)
USER_PART = [
    ("user", "scontrol hold {b}", 0, "", "PD|JobHeldUser|0"),
    ("admin", "scontrol hold {b}", 0, "", "PD|JobHeldAdmin|0"),
    ("user", "scontrol release {b}", 1,
     "Access/permission denied for job {b}\nslurm_suspend error: Access/permission denied\n",
     "PD|JobHeldAdmin|0"),
    ("user", "scontrol uhold {b}", 0, "", "PD|JobHeldAdmin|0"),
    ("user", "scontrol hold {b}", 0, "", "PD|JobHeldAdmin|0"),
    ("user", "scontrol release {a}", 1,
     "Invalid user id for job {a}\nslurm_suspend error: Invalid user id\n", None),
]  # fmt: skip


def play(run: Run, steps: list[tuple], ids: dict[str, str], job: str) -> None:
    """Each step's command as ``who``: its exit status and stderr, then ``job``'s squeue line."""
    for who, command, rc, err, line in steps:
        argv = command.format(**ids).split()
        r = run(who, *argv)
        assert (r.returncode, r.stderr) == (rc, err.format(**ids)), (command, r)
        if line is not None:
            target = ids["b"] if "{b}" in command else ids[job]
            shown = run(who, "squeue", "-h", "-j", target, "-o", "%t|%r|%Q").stdout.strip()
            assert shown == line, (command, shown)


def submit_held(run: Run, who: str) -> str:
    r = run(who, "sbatch", "--parsable", "-H", "-o", "/dev/null", "--wrap", "true")
    assert r.returncode == 0, r
    return r.stdout.strip()


def script(run: Run) -> dict[str, str]:
    """The recorded script's first part, up to the release of both: its job ids."""
    a = submit_held(run, "admin")
    assert run("admin", "squeue", "-h", "-j", a, "-o", "%t|%r|%Q").stdout == "PD|JobHeldUser|0\n"
    c = submit_held(run, "admin")
    assert run("admin", "scancel", c).returncode == 0
    ids = {"a": a, "c": c}
    play(run, ADMIN_PART, ids, "a")
    return ids


@pytest.fixture
def gpufleet(tmp_path: Path) -> Iterator[Run]:
    with shim_runner(tmp_path) as run:
        yield run


def test_gpufleet_answers_as_slurm_did(gpufleet: Run) -> None:
    run = gpufleet
    ids = script(run)
    ids["b"] = submit_held(run, "user")
    play(run, USER_PART, ids, "b")
    play(run, [RELEASE_BOTH], ids, "a")
    wait_for(
        "a released",
        lambda: "JobHeld" not in run("admin", "squeue", "-h", "-j", ids["a"], "-o", "%r").stdout,
    )


@live
def test_slurm_answers_as_recorded(shared_slurm: dict[str, str], tmp_path: Path) -> None:
    run = slurm_admin(shared_slurm, tmp_path)

    ids = script(run)
    play(run, [RELEASE_BOTH], ids, "a")
