"""How a job ended, as Slurm's users read it, on a live cluster of real processes: a batch job
that exited 3, one killed by its time limit, one cancelled running, and one cancelled pending,
through ``squeue -t all`` (its default format and ``%r``), ``scontrol show job``, ``sacct``,
``gpufleet jobs --all`` and ``gpufleet show``, before and after a controller restart (the end
is stored with the job).

What a real Slurm 22.05 printed for the same jobs (``/work/shared/tools/slurm_local.sh``):

    JOBID ST STATE     REASON          NODELIST(REASON)     scontrol show job
    1     F  FAILED    NonZeroExitCode (NonZeroExitCode)    Reason=NonZeroExitCode ExitCode=3:0
    2     TO TIMEOUT   TimeLimit       (TimeLimit)          Reason=TimeLimit ExitCode=0:15
    3     CA CANCELLED None            n1                   Reason=None ExitCode=0:15
    9     CA CANCELLED Resources                            Reason=Resources ExitCode=0:0
"""

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
GPUFLEET = str(Path(sys.executable).with_name("gpufleet"))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, dict[str, str]]]:
    with shim_cluster(tmp_path_factory.mktemp("ends"), 1, gpus="1xH100") as (c, env):
        env["COLUMNS"] = "200"
        yield c, env


def sh(env: dict[str, str], *argv: str) -> str:
    r = subprocess.run(argv, env=env, cwd=env["PWD"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{argv}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def squeue(env: dict[str, str], *jobs: str) -> dict[str, list[str]]:
    out = sh(env, "squeue", "-h", "-t", "all", "-j", ",".join(jobs), "-o", "%i|%t|%T|%r|%R")
    return {line.split("|")[0]: line.split("|")[1:] for line in out.splitlines()}


def state(env: dict[str, str], job: str) -> str:
    return json.loads(sh(env, GPUFLEET, "show", "--json", job))["state"]


def test_the_end_of_a_job_as_slurm_prints_it(live: tuple[LocalCluster, dict[str, str]]) -> None:
    c, env = live
    (node,) = c.agent_procs
    three = sh(env, "sbatch", "--parsable", "--gpus=1", "--wrap", "exit 3").strip()
    wait_for("exit 3", lambda: state(env, three) == "FAILED" or None, 60)
    late = sh(env, GPUFLEET, "submit", "--json", "--gpus", "1", "--time", "0:02", "--",
              "sleep", "600")  # fmt: skip
    (late,) = json.loads(late)["ids"]
    wait_for("its time limit", lambda: state(env, late) == "TIMED_OUT" or None, 60)
    run = sh(env, "sbatch", "--parsable", "--gpus=1", "--wrap", "sleep 600").strip()
    wait_for("running", lambda: state(env, run) == "RUNNING" or None, 60)
    waits = sh(env, "sbatch", "--parsable", "--gpus=1", "--wrap", "true").strip()
    wait_for("a reason", lambda: squeue(env, waits)[waits][2] == "Resources" or None, 60)
    sh(env, "scancel", waits, run)
    wait_for("cancelled", lambda: state(env, run) == "CANCELLED" or None, 60)

    def check() -> None:
        assert squeue(env, three, late, run, waits) == {
            three: ["F", "FAILED", "NonZeroExitCode", "(NonZeroExitCode)"],
            late: ["TO", "TIMEOUT", "TimeLimit", "(TimeLimit)"],
            run: ["CA", "CANCELLED", "None", node],
            waits: ["CA", "CANCELLED", "Resources", ""],
        }
        rows = sh(env, "squeue", "-t", "all").splitlines()
        assert rows[0].split()[-1] == "NODELIST(REASON)"
        last = {r.split()[0]: r.split()[7:] for r in rows[1:]}
        assert last[three] == ["(NonZeroExitCode)"] and last[run] == [node], rows
        acct = sh(env, "sacct", "-X", "-n", "-P", "-j", ",".join([three, late, run, waits]),
                  "-o", "JobID,State,ExitCode,Reason")  # fmt: skip
        assert acct.splitlines() == [
            f"{three}|FAILED|3:0|NonZeroExitCode",
            f"{late}|TIMEOUT|0:0|TimeLimit",  # as Slurm's job line (its .batch: 0:15)
            f"{run}|CANCELLED by admin|0:0|None",  # Slurm's "by UID"; admin has no uid here
            f"{waits}|CANCELLED|0:0|Resources",
        ]
        for job, line in {
            three: ("FAILED", "NonZeroExitCode", "3:0"),
            late: ("TIMEOUT", "TimeLimit", "0:15"),
            run: ("CANCELLED", "None", "0:15"),
            waits: ("CANCELLED", "Resources", "0:0"),
        }.items():
            shown = sh(env, "scontrol", "show", "job", job).splitlines()
            assert shown[0].startswith(f"JobId={job} JobName="), shown
            assert shown[3] == f"   JobState={line[0]} Reason={line[1]} Dependency=(null)"
            assert shown[4].startswith("   Requeue=1 Restarts=0 BatchFlag=")
            assert shown[4].endswith(f" Reboot=0 ExitCode={line[2]}"), shown
        table = sh(env, GPUFLEET, "jobs", "--all").splitlines()
        cells = {r.split()[0]: r.rstrip() for r in table[2:]}
        assert cells[three].endswith(f"{node} (NonZeroExitCode) ExitCode=3:0"), table
        assert cells[late].endswith(f"{node} (TimeLimit) ExitCode=0:15"), table
        assert cells[run].endswith(f"{node} (None) ExitCode=0:15"), table
        shown = sh(env, GPUFLEET, "show", three)
        assert "NonZeroExitCode" in shown and "3:0" in shown, shown
        out = json.loads(sh(env, GPUFLEET, "show", "--json", late))
        assert out["ended"] == {
            "reason": "TimeLimit",
            "exit_code": "0:15",
            "code": 0,
            "signal": 15,
            "dependency": "",  # it ran: no dependency left unmet (scontrol: Dependency=(null))
        }

    check()
    c.kill_controller()
    c.start_controller()
    check()  # stored with the job: the same after a restart
