"""``scancel --signal`` answers as Slurm 22.05's (ADR 0078): gpufleet's shim against what a real
Slurm printed (``/work/shared/tools/slurm_local.sh``; the last test replays the admin's part
where Slurm is installed). As root, ``a`` held (``sbatch -H``), ``x`` cancelled, ``r`` running
(``--wrap "sleep 300"``); each ``scancel …``::

    -s USR1 $r; -s CONT -b $r; -s CONT -f $r; -s CONT --full --batch $r; --signal=sigcont $r;
    -s 18 $r                           exit 0, silent; $r still RUNNING
    -s USR1 $a                         exit 228: scancel: error: Kill job error on job id A:
                                       Job can not be altered now, try again later
    -s USR1 $r,$a                      the same (exit 228; $r signalled)
    -s USR1 $x; -s USR1 99999          exit 1: scancel: error: Kill job error on job id X:
                                       Invalid job id specified
    -s BOGUS $r; -s 0 $r; -s WINCH $r  exit 1: Unknown job signal: BOGUS (no prefix)
    -s USR1 abc                        exit 1: scancel: error: Invalid job id abc
    -s KILL $r                         exit 0; $r CANCELLED (a cancel)

As a user (uid 1000), of root's running job: ``scancel -s USR1 $r``, exit 210: ``scancel:
error: Kill job error on job id R: Access/permission denied``; of its own held job: 228, as
root's. (Where the signal goes, steps or batch shell: tests/e2e/test_scancel_signal_live.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from shimrun import Run, shim_runner, slurm_admin
from test_update_vs_slurm import play, running, submit

from support.slurm_local import live
from support.waiting import wait_for

E = "scancel: error: Kill job error on job id "
PENDING = "Job can not be altered now, try again later\n"
# (who, command, exit status, stderr, then the job's squeue "%T" or None), as recorded above
ADMIN_PART = [
    ("admin", "scancel -s USR1 {r}", 0, "", None),
    ("admin", "scancel -s CONT -b {r}", 0, "", None),
    ("admin", "scancel -s CONT -f {r}", 0, "", None),
    ("admin", "scancel -s CONT --full --batch {r}", 0, "", None),
    ("admin", "scancel --signal=sigcont {r}", 0, "", None),
    ("admin", "scancel -s 18 {r}", 0, "", None),
    ("admin", "scancel -s USR1 {x}", 1, E + "{x}: Invalid job id specified\n", None),
    ("admin", "scancel -s USR1 99999", 1, E + "99999: Invalid job id specified\n", None),
    ("admin", "scancel -s BOGUS {r}", 1, "Unknown job signal: BOGUS\n", None),
    ("admin", "scancel -s 0 {r}", 1, "Unknown job signal: 0\n", None),
    ("admin", "scancel -s USR1 abc", 1, "scancel: error: Invalid job id abc\n", None),
]
# Slurm's scancel asks again for a job that has not started (10 times, 5 s, 6 s, … apart: about
# 95 s) before it gives up: recorded, not replayed (gpufleet's shim answers at once)
PENDING_PART = [
    ("admin", "scancel -s USR1 {a}", 228, E + "{a}: " + PENDING, None),
    ("admin", "scancel -s USR1 {r},{a}", 228, E + "{a}: " + PENDING, None),
]
USER_PART = [
    ("user", "scancel -s USR1 {r}", 210, E + "{r}: Access/permission denied\n", None),
    ("user", "scancel -s USR1 {b}", 228, E + "{b}: " + PENDING, None),
]


def states(run: Run, who: str, *jobs: str) -> list[str]:
    out = run(who, "squeue", "-h", "-t", "all", "-o", "%i %T").stdout.split("\n")
    got = dict(line.split() for line in out if line.strip())
    return [got.get(j, "") for j in jobs]


def scenario(run: Run, users: bool) -> None:
    """The recorded steps; the job running throughout, a cancel with -s KILL at the end;
    ``users``: gpufleet's, where the user's part and the pending part are played too."""
    ids = {"a": submit(run, "admin", "-H", "--wrap", "true"), "r": running(run, "admin")}
    ids["x"] = submit(run, "admin", "-H", "--wrap", "true")
    assert run("admin", "scancel", ids["x"]).returncode == 0
    play(run, ADMIN_PART, ids)
    if users:  # gpufleet: its user's part, and the pending jobs' answers without the retries
        play(run, PENDING_PART, ids)
        ids["b"] = submit(run, "user", "-H", "--wrap", "true")
        play(run, USER_PART, ids)
    # signalled, never ended by it (CONFIGURING: gpufleet's agent here is a client that never
    # reports the start, as a slurmd still setting the job up)
    assert states(run, "admin", ids["r"]) in (["RUNNING"], ["CONFIGURING"])
    r = run("admin", "scancel", "-s", "KILL", ids["r"])
    assert (r.returncode, r.stderr) == (0, "")
    if not users:  # gpufleet's: with real agents, in tests/e2e/test_scancel_signal_live.py
        cancelled = lambda: states(run, "admin", ids["r"]) == ["CANCELLED"]  # noqa: E731
        wait_for("-s KILL: a cancel, as Slurm's", cancelled)


@pytest.fixture
def gpufleet(tmp_path: Path) -> Iterator[Run]:
    with shim_runner(tmp_path) as run:
        yield run


def test_gpufleet_answers_as_slurm_did(gpufleet: Run) -> None:
    scenario(gpufleet, users=True)


@live
def test_slurm_answers_as_recorded(shared_slurm: dict[str, str], tmp_path: Path) -> None:
    run = slurm_admin(shared_slurm, tmp_path)

    scenario(run, users=False)
