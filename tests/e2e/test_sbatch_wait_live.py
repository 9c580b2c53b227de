"""``sbatch --wait`` against a live cluster: the shim waits for the job's end and exits with its
exit code, through a controller killed and started again while it waits (its parts:
tests/unit/test_sbatch_wait.py; Slurm's own: tests/integration/test_sbatch_wait_vs_slurm.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from livehelp import shim_cluster, wait_for

from gpufleet.ops.localcluster import LocalCluster

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, dict[str, str]]]:
    with shim_cluster(tmp_path_factory.mktemp("wait"), 1) as got:
        yield got


def sbatch(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sbatch", *argv], env=env, cwd=env.get("PWD"), capture_output=True, text=True, timeout=120
    )


def test_the_exit_status_is_the_jobs(live: tuple[LocalCluster, dict[str, str]]) -> None:
    _, env = live
    ok = sbatch(env, "--wait", "--wrap", "true")
    assert (ok.returncode, ok.stderr) == (0, ""), ok
    assert ok.stdout.startswith("Submitted batch job ") and ok.stdout.count("\n") == 1, ok.stdout
    failed = sbatch(env, "-W", "--parsable", "--wrap", "exit 3")
    assert (failed.returncode, failed.stderr) == (3, ""), failed
    assert failed.stdout.strip().isdigit(), failed.stdout
    killed = sbatch(env, "--wait", "--wrap", "kill -9 $$")
    assert (killed.returncode, killed.stderr) == (1, ""), killed
    array = sbatch(env, "--wait", "--array=1-3", "--wrap", "exit $SLURM_ARRAY_TASK_ID")
    assert (array.returncode, array.stdout.split()[:3]) == (3, ["Submitted", "batch", "job"]), array


def test_it_waits_through_a_controller_restart(
    live: tuple[LocalCluster, dict[str, str]], tmp_path: Path
) -> None:
    c, env = live
    err = tmp_path / "stderr"
    with err.open("w") as f:
        p = subprocess.Popen(
            ["sbatch", "--wait", "--parsable", "--wrap", "sleep 3; exit 4"],
            env=env, cwd=env.get("PWD"), stdout=subprocess.PIPE, stderr=f, text=True,
        )  # fmt: skip
        try:
            assert p.stdout is not None
            job = p.stdout.readline().strip()  # printed (and flushed) before the wait
            assert job.isdigit(), job
            c.kill_controller()
            wait_for(
                "sbatch finding the controller gone", lambda: "retrying" in err.read_text(), 30
            )
            c.start_controller()
            assert p.wait(timeout=90) == 4
        finally:
            if p.poll() is None:
                p.kill()
    lines = err.read_text().splitlines()
    assert lines and all(
        line.startswith("sbatch: error: Currently unable to load job state information, retrying: ")
        for line in lines
    ), lines
