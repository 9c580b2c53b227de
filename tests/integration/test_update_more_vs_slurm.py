"""``scontrol update JobId=… Nice=, MinMemoryNode=, Gres=`` as Slurm 22.05 answers them (ADR
0076): gpufleet's shim against what a real Slurm printed (``/work/shared/tools/slurm_local.sh``,
2026-12-07; the last test replays the admin's part where Slurm is installed).

As a user (uid 1000; its own ``b`` held, ``c`` running, ``--mem=4G``), each ``scontrol update
JobId=…``::

    $b Nice=5; $c Nice=5; $b Nice=3; $b Nice=0; $b Nice=abc      exit 0 (abc is 0)
    $b Nice=-5; $c Nice=-5        exit 1: Access/permission denied for job B (C)
    $b MinMemoryNode=2048; …=8192 exit 0 (MinMemoryNode=8G after)
    $c MinMemoryNode=2048         exit 1: Job is no longer pending execution for job C
    $b MinMemoryNode=2G           exit 1: scontrol: error: Invalid MinMemoryNode value: 2G
    $b Gres=gpu:1; $b Gres=gpu:2; $b Gres=; $b Gres=gpu:0   exit 0
    $c Gres=gpu:1                 exit 1: Job is no longer pending execution for job C
    $b Gres=gpu:abc               exit 1: Invalid GRES specification (with and without type
                                  identification) for job B
    $b Gres=bogus:1               exit 1: Invalid generic resource (gres) specification for job B
    $b mem=2048; $b TRES=gres/gpu=1   exit 1: Update of this parameter is not supported:
                                  mem=2048 / Request aborted

As root: ``Nice=-5`` of a held job answers 0 (Nice=-5, its priority raised); a user's
``Nice=2`` after it answers 0; after an admin's ``Priority=100`` a user's ``Nice=4`` answers 0
and changes nothing (Priority=100, Nice=0: Slurm ignores a nice beside an explicit priority)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from shimrun import Run, shim_runner, slurm_admin
from test_update_vs_slurm import play, running, submit

from support.slurm_local import live

U = "scontrol update JobId="
NOT_PENDING = "Job is no longer pending execution for job {c}\n"
ABORTED = "Update of this parameter is not supported: {}\nRequest aborted\n"
USER_PART = [
    ("user", U + "{b} Nice=5", 0, "", None),
    ("user", U + "{c} Nice=5", 0, "", None),
    ("user", U + "{b} Nice=3", 0, "", None),
    ("user", U + "{b} Nice=abc", 0, "", None),
    ("user", U + "{b} Nice=-5", 1, "Access/permission denied for job {b}\n", None),
    ("user", U + "{c} Nice=-5", 1, "Access/permission denied for job {c}\n", None),
    ("user", U + "{b} MinMemoryNode=2048", 0, "", None),
    ("user", U + "{b} MinMemoryNode=8192", 0, "", None),
    ("user", U + "{c} MinMemoryNode=2048", 1, NOT_PENDING, None),
    ("user", U + "{b} MinMemoryNode=2G", 1,
     "scontrol: error: Invalid MinMemoryNode value: 2G\n", None),
    ("user", U + "{b} Gres=gpu:1", 0, "", None),
    ("user", U + "{b} Gres=gpu:2", 0, "", None),
    ("user", U + "{b} Gres=", 0, "", None),
    ("user", U + "{c} Gres=gpu:1", 1, NOT_PENDING, None),
    ("user", U + "{b} Gres=gpu:abc", 1,
     "Invalid GRES specification (with and without type identification) for job {b}\n", None),
    ("user", U + "{b} Gres=bogus:1", 1,
     "Invalid generic resource (gres) specification for job {b}\n", None),
    ("user", U + "{b} mem=2048", 1, ABORTED.format("mem=2048"), None),
    ("user", U + "{b} TRES=gres/gpu=1", 1, ABORTED.format("TRES=gres/gpu=1"), None),
]  # fmt: skip
# the same of root's own jobs (a held, r running): what an admin may as well
ADMIN_PART = [
    ("admin", U + "{a} Nice=-5", 0, "", None),
    ("admin", U + "{a} MinMemoryNode=2048", 0, "", None),
    ("admin", U + "{a} Gres=gpu:1", 0, "", None),
    ("admin", U + "{r} Nice=3", 0, "", None),
    ("admin", U + "{r} MinMemoryNode=2048", 1, NOT_PENDING.replace("{c}", "{r}"), None),
    ("admin", U + "{r} Gres=gpu:1", 1, NOT_PENDING.replace("{c}", "{r}"), None),
    ("admin", U + "{a} mem=2048", 1, ABORTED.format("mem=2048"), None),
]  # fmt: skip


def shown(run: Run, job: str, *keys: str) -> list[str]:
    """``scontrol show job``'s ``KEY=VALUE`` of ``keys``, in that order."""
    words = run("admin", "scontrol", "show", "job", job).stdout.split()
    got = dict(w.split("=", 1) for w in words if "=" in w)
    return [f"{k}={got.get(k)}" for k in keys]


@pytest.fixture
def gpufleet(tmp_path: Path) -> Iterator[Run]:
    with shim_runner(tmp_path) as run:
        yield run


def test_gpufleet_answers_as_slurm_did(gpufleet: Run) -> None:
    run = gpufleet
    ids = {"a": submit(run, "admin", "-H", "--wrap", "true"), "r": running(run, "admin")}
    play(run, ADMIN_PART, ids)
    assert shown(run, ids["a"], "MinMemoryNode") == ["MinMemoryNode=2G"]
    ids |= {"b": submit(run, "user", "-H", "--mem=4G", "--wrap", "true"),
            "c": running(run, "user", "--mem=4G")}  # fmt: skip
    play(run, USER_PART, ids)
    assert shown(run, ids["b"], "MinMemoryNode") == ["MinMemoryNode=8G"]
    assert shown(run, ids["c"], "MinMemoryNode") == ["MinMemoryNode=4G"]  # running: as it was


@live
def test_slurm_answers_as_recorded(shared_slurm: dict[str, str], tmp_path: Path) -> None:
    run = slurm_admin(shared_slurm, tmp_path)

    ids = {"a": submit(run, "admin", "-H", "--wrap", "true"), "r": running(run, "admin")}
    play(run, ADMIN_PART, ids)
    assert shown(run, ids["a"], "MinMemoryNode") == ["MinMemoryNode=2G"]
