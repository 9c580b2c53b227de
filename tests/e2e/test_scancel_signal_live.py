"""``scancel --signal`` against a live cluster (ADR 0078): real agents deliver the signal to a
running batch job's real processes, which go on running, as Slurm 22.05's do (recorded in
tests/integration/test_scancel_signal_vs_slurm.py): without ``--batch`` to the job's steps on every
node (the script's ``srun`` forwards it to its tasks), not the batch shell; with ``--batch`` to
the shell alone; with ``--full`` to both. A job that waits is refused as Slurm refuses it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from livehelp import shim_cluster, wait_for
from test_slurm_shims_live import sacct_state, sh

from gpufleet.ops.localcluster import LocalCluster
from support.slurm_local import live as slurm_live

pytestmark = pytest.mark.e2e

STEP = (
    "trap 'echo step-got-USR1 \\$SLURM_PROCID' USR1; "
    "trap 'echo step-got-USR2 \\$SLURM_PROCID' USR2; "
    "echo ready \\$SLURM_PROCID; while :; do sleep 0.1; done"
)
SCRIPT = f"""#!/bin/bash
#SBATCH -N 2 -t 5 -o sig.out
trap 'echo shell-got-USR1' USR1
trap 'echo shell-got-USR2' USR2
srun -N 2 -n 2 bash -c "{STEP}" &
while kill -0 $! 2>/dev/null; do wait $!; done
"""


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, dict[str, str]]]:
    with shim_cluster(tmp_path_factory.mktemp("sig"), 2) as got:
        yield got


def signalled(env: dict[str, str], workdir: Path) -> str:
    """The script's job run, then signalled by each scancel in turn, and what its traps said
    checked: the same of gpufleet's shims and of a real Slurm. Its id (it runs on)."""
    out = workdir / "sig.out"
    script = workdir / "sig.sh"
    script.write_text(SCRIPT)
    job = sh(env, "sbatch", "--parsable", str(script), cwd=workdir).stdout.strip()

    def lines() -> list[str]:
        return out.read_text().splitlines() if out.exists() else []

    def seen(*want: str) -> bool:
        return all(w in lines() for w in want)

    wait_for("both tasks ready", lambda: seen("ready 0", "ready 1") or None, 60)
    sh(env, "scancel", "--signal=USR1", job)  # the steps: both tasks, not the shell
    wait_for("the steps' USR1", lambda: seen("step-got-USR1 0", "step-got-USR1 1") or None, 30)
    sh(env, "scancel", "-s", "SIGUSR2", "--batch", job)  # the shell alone
    wait_for("the shell's USR2", lambda: seen("shell-got-USR2") or None, 30)
    sh(env, "scancel", "-s", "usr2", "-f", job)  # the shell, its children and the steps
    wait_for("USR2 everywhere", lambda: seen("step-got-USR2 0", "step-got-USR2 1") or None, 30)
    got = [x for x in lines() if "-got-" in x]
    assert "shell-got-USR1" not in got, got  # scancel's default spares the batch shell
    assert got.count("shell-got-USR2") == 2, got  # --batch, then --full
    assert got.count("step-got-USR2 0") == 1, got  # --full: once to each task, not twice
    state = sh(env, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip()
    assert state == "RUNNING", state  # no signal ended it: each was trapped
    return job


def test_scancel_signal_reaches_steps_batch_shell_or_both_and_the_job_runs_on(
    live: tuple[LocalCluster, dict[str, str]],
) -> None:
    _, env = live
    job = signalled(env, Path(env["PWD"]))
    # a job that waits (held) is refused in Slurm 22.05's words and status
    held = sh(env, "sbatch", "--parsable", "-H", "--wrap", "sleep 1").stdout.strip()
    r = sh(env, "scancel", "-s", "USR1", held, ok=False)
    assert r.returncode == 228, r
    assert r.stderr == (
        f"scancel: error: Kill job error on job id {held}: Job can not be altered now, "
        "try again later\n"
    )
    r = sh(env, "scancel", "-s", "BOGUS", job, ok=False)
    assert (r.returncode, r.stderr) == (1, "Unknown job signal: BOGUS\n"), r
    sh(env, "scancel", "-s", "KILL", job)  # SIGKILL without --batch: a cancel, as Slurm's
    cancelled = lambda: sacct_state(env, job).startswith("CANCELLED") or None  # noqa: E731
    wait_for("cancelled", cancelled, 30)  # "CANCELLED by UID", as sacct says
    sh(env, "scancel", held)


@slurm_live
def test_slurm_signals_the_same_processes(shared_slurm: dict[str, str], tmp_path: Path) -> None:
    """The same script and scancels under a real Slurm 22.05: the same traps fire."""
    job = signalled({**shared_slurm, "PWD": str(tmp_path)}, tmp_path)
    sh(shared_slurm, "scancel", job)
