"""Slurm's partition list against a live cluster (controller and agents as processes, the
shims as commands): with queue a at its quota, ``sbatch -p a,b`` starts in b, and squeue and
sacct show the partition it runs in (``b``, as Slurm 22.05 does); a list naming an unknown
queue is refused, naming it, as sbatch refuses an invalid partition."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from livehelp import shim_cluster, wait_for

from gpufleet.ops.localcluster import LocalCluster

pytestmark = pytest.mark.e2e

QUEUES = [
    {"name": "default", "weight": 1},
    {"name": "a", "weight": 1, "quota": {"gpus": 8}},
    {"name": "b", "weight": 1, "quota": {"gpus": 8}},
]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, dict[str, str]]]:
    base = tmp_path_factory.mktemp("partitions")
    queues = base / "queues.yaml"
    queues.write_text(json.dumps(QUEUES))  # JSON is YAML
    with shim_cluster(base, 2, queues_file=queues) as got:
        yield got


def sh(env: dict[str, str], *argv: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=env["PWD"])
    if ok:
        assert r.returncode == 0, f"{argv}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def squeue(env: dict[str, str], job: str) -> str:
    return sh(env, "squeue", "-h", "-j", job, "-o", "%i|%P|%T").stdout.strip()


def test_a_partition_list_starts_in_the_partition_that_has_room(
    live: tuple[LocalCluster, dict[str, str]],
) -> None:
    c, env = live
    full = sh(
        env, "sbatch", "--parsable", "-p", "a", "-N", "1", "--gres=gpu:8", "--wrap", "sleep 600"
    ).stdout.strip()
    wait_for("a's job running", lambda: squeue(env, full).endswith("|RUNNING") or None, 60)
    # a is at its quota: the job may use a or b, and starts in b at once
    both = sh(
        env, "sbatch", "--parsable", "-p", "a,b", "-N", "1", "--gres=gpu:8", "--wrap", "sleep 600"
    ).stdout.strip()
    wait_for("the job of a,b running", lambda: squeue(env, both).endswith("|RUNNING") or None, 60)
    assert squeue(env, both) == f"{both}|b|RUNNING"
    # both a and b at their quota now: a third waits, shown with its list as given
    third = sh(
        env, "sbatch", "--parsable", "-p", "a,b", "-N", "1", "--gres=gpu:1", "--wrap", "true"
    ).stdout.strip()
    wait_for("its Reason", lambda: squeue(env, third).endswith("|PENDING") or None, 30)
    reason = wait_for("its Reason", lambda: c.admin().job(third).reason, 30)
    assert reason.code == "Quota"
    assert reason.message.startswith("none of its queues (a, b) admits it: a: queue a uses 8")
    assert sh(env, "squeue", "-h", "-j", third, "-o", "%R").stdout.strip() == "(Quota)"
    assert squeue(env, third) == f"{third}|a,b|PENDING"
    # squeue -p b lists the running job of a,b and the pending one that may use b
    listed = sh(env, "squeue", "-h", "-p", "b", "-o", "%i").stdout.split()
    assert sorted(listed) == sorted([both, third])
    # and squeue -p a not the one that runs in b (as Slurm 22.05)
    listed = sh(env, "squeue", "-h", "-p", "a", "-o", "%i").stdout.split()
    assert sorted(listed) == sorted([full, third])
    acct = sh(env, "sacct", "-j", both, "-o", "JobID,Partition", "-P", "-n", "-X").stdout
    assert acct.strip() == f"{both}|b"
    sh(env, "scancel", full, both, third)


def test_a_partition_list_naming_an_unknown_queue_is_refused(
    live: tuple[LocalCluster, dict[str, str]],
) -> None:
    r = sh(live[1], "sbatch", "-p", "a,nope,other", "--wrap", "true", ok=False)
    assert r.returncode == 1
    assert "invalid partition specified: nope" in r.stderr, r.stderr
    assert "invalid partition specified: other" in r.stderr, r.stderr
    # Slurm 22.05 printed "sbatch: error: invalid partition specified: nope", then "sbatch:
    # error: Batch job submission failed: Invalid partition name specified"
    lines = r.stderr.splitlines()
    assert lines[0].startswith("sbatch: error: invalid partition specified: nope"), lines
    assert (
        lines[1] == "sbatch: error: Batch job submission failed: Invalid partition name specified"
    )
