"""Held jobs on a live cluster (ADR 0074): ``sbatch -H`` through the shims, the hold kept
through a controller killed and started again, then ``scontrol release`` and the job runs to
its end (the rules: tests/integration/test_holds_api.py; Slurm's words:
tests/integration/test_hold_vs_slurm.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from livehelp import shim_cluster, wait_for

from gpufleet.ops.localcluster import LocalCluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, dict[str, str]]]:
    with shim_cluster(tmp_path_factory.mktemp("hold"), 1) as got:
        yield got


def sh(env: dict[str, str], *argv: str) -> str:
    r = subprocess.run(
        argv, env=env, cwd=env.get("PWD"), capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, (argv, r)
    return r.stdout


def test_a_held_job_waits_through_a_restart_and_runs_once_released(
    live: tuple[LocalCluster, dict[str, str]],
) -> None:
    c, env = live
    job = sh(env, "sbatch", "--parsable", "-H", "--wrap", "true").strip()
    after = sh(env, "sbatch", "--parsable", "--wrap", "true").strip()

    def line(j: str) -> str:
        return sh(env, "squeue", "-h", "-t", "all", "-j", j, "-o", "%T|%r|%Q").strip()

    wait_for("the job behind it done", lambda: line(after).startswith("COMPLETED") or None, 60)
    assert line(job) == "PENDING|JobHeldUser|0"
    c.kill_controller()
    c.start_controller()
    wait_for("its Reason again", lambda: line(job) == "PENDING|JobHeldUser|0" or None, 60)
    assert sh(env, "scontrol", "release", job) == ""
    wait_for("the released job done", lambda: line(job).startswith("COMPLETED") or None, 60)


def test_an_arrays_id_releases_every_task_and_id_n_one(
    live: tuple[LocalCluster, dict[str, str]],
) -> None:
    _, env = live
    array = sh(env, "sbatch", "--parsable", "-H", "--array=1-3", "--wrap", "true").strip()

    def states() -> dict[str, str]:
        out = sh(env, "squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|%r")
        rows = (line.split("|") for line in out.splitlines())
        return {i: f"{t}|{r}" for i, t, r in rows if i.startswith(f"{array}_")}

    held = "PENDING|JobHeldUser"
    wait_for("the tasks' Reasons", lambda: set(states().values()) == {held} or None, 30)
    assert len(states()) == 3, states()
    assert sh(env, "scontrol", "release", f"{array}_2") == ""
    wait_for("task 2 done", lambda: states()[f"{array}_2"].startswith("COMPLETED") or None, 60)
    assert states()[f"{array}_1"] == held and states()[f"{array}_3"] == held
    assert sh(env, "scontrol", "release", array) == ""
    done = {f"{array}_{i}" for i in (1, 2, 3)}
    wait_for(
        "every task done",
        lambda: {i for i, s in states().items() if s.startswith("COMPLETED")} == done or None,
        60,
    )


def test_gpufleets_own_commands_hold_and_release(
    live: tuple[LocalCluster, dict[str, str]],
) -> None:
    _, env = live
    cli = str(Path(sys.executable).parent / "gpufleet")
    (job,) = json.loads(sh(env, cli, "submit", "--json", "-H", "--", "true"))["ids"]

    def line() -> str:
        return sh(env, "squeue", "-h", "-t", "all", "-j", job, "-o", "%T|%r").strip()

    wait_for("its hold", lambda: line() == "PENDING|JobHeldUser" or None, 30)
    assert sh(env, cli, "hold", job) == f"job {job}: held\n"  # the admin's token: an admin hold
    wait_for("an admin's hold", lambda: line() == "PENDING|JobHeldAdmin" or None, 30)
    assert sh(env, cli, "release", job) == f"job {job}: released\n"
    wait_for("the released job done", lambda: line().startswith("COMPLETED") or None, 60)
