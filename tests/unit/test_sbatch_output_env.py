"""The variables sbatch sets from its options (Slurm 22.05's, as its batch shell shows them,
``tests/e2e/slurm_env_22.05.json``) go with the job's submitted environment; the submitter's
umask (SLURM_UMASK) is the batch script's and srun's tasks'."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.agent import taskstart
from gpufleet.io import sbatch_command
from gpufleet.slurm.tasks import task_argv


def sent(*argv: str) -> dict[str, str]:
    b = sbatch_command.read(
        [*argv, "--wrap=true"], script=lambda p: "", environ={}, cwd="/s", host="h"
    )
    env: dict[str, str] = b.spec["submit_env"]
    return {k: v for k, v in env.items() if k not in ("SLURM_SUBMIT_DIR", "SLURM_SUBMIT_HOST")}


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["-N2", "--gpus=2", "--mem=2000"], {"SLURM_GPUS": "2"}),
        (["-N2", "--gpus-per-node=h100:2"], {"SLURM_GPUS_PER_NODE": "h100:2"}),
        (["-n3", "-c2", "--gres=gpu:1"], {}),  # --gres is not --gpus-per-node to sbatch
        (
            ["-n2", "--mem-per-cpu=1G", "--gpus-per-task=1"],
            {"SLURM_GPUS_PER_TASK": "1", "SLURM_MEM_PER_CPU": "1024"},
        ),
        (["--cpus-per-gpu=4", "--gpus=1", "--mem-per-gpu=500"],
         {"SLURM_GPUS": "1", "SLURM_CPUS_PER_GPU": "4", "SLURM_MEM_PER_GPU": "500"}),
    ],
    ids=str,
)  # fmt: skip
def test_what_sbatch_sets_from_its_options(argv: list[str], want: dict[str, str]) -> None:
    assert sent(*argv) == want


def test_the_batch_script_runs_with_the_submitters_umask(monkeypatch: pytest.MonkeyPatch) -> None:
    old = os.umask(0o077)
    try:
        monkeypatch.setenv("SLURM_UMASK", "0022")
        taskstart.apply_umask()
        assert os.umask(0o077) == 0o022 and "SLURM_UMASK" not in os.environ  # consumed
        for bad in ("", "99", "0o22", "12345"):
            monkeypatch.setenv("SLURM_UMASK", bad)
            taskstart.apply_umask()
            assert os.umask(0o077) == 0o077
    finally:
        os.umask(old)


def test_a_steps_task_runs_with_srun_s_umask() -> None:
    argv = task_argv(["sh", "-c", "umask"])
    got = subprocess.run(argv, env={"SLURM_UMASK": "0027", "PATH": os.defpath}, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    assert got.strip() == "0027"


@pytest.mark.parametrize("output", [True, False], ids=["output file", "no output file"])
def test_the_batch_script_has_its_own_pid_in_slurm_task_pid(tmp_path: Path, output: bool) -> None:
    """As Slurm's batch shell: SLURM_TASK_PID is the script's pid ($$)."""
    config = {"workdir": str(tmp_path), "output": str(tmp_path / "out") if output else ""}
    r = subprocess.run(
        [sys.executable, "-I", taskstart.__file__, json.dumps(config), "--",
         "sh", "-c", 'echo "$SLURM_TASK_PID $$"'],
        env={"SLURM_JOB_ID": "7", "PATH": os.defpath, "SLURM_TASK_PID": "1"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    theirs, own = r.stdout.split()
    assert theirs == own != "1"


def test_sbatch_sends_its_umask_and_nice_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufleet.shims.sbatch import own_env

    monkeypatch.delenv("SLURM_UMASK", raising=False)
    old = os.umask(0o027)
    try:
        assert own_env() == {
            "SLURM_UMASK": "0027",
            "SLURM_PRIO_PROCESS": str(os.getpriority(os.PRIO_PROCESS, 0)),
        }
        monkeypatch.setenv("SLURM_UMASK", "0002")  # the caller's own: kept, as sbatch
        assert own_env()["SLURM_UMASK"] == "0002"
    finally:
        os.umask(old)
