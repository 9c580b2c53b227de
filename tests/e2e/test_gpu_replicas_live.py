"""A node whose simulated GPU is time-sliced as 4 replicas (``--gpu-replicas 4``, ADR 0052),
live: its labels say so, four one-replica jobs run on the one GPU at once, a fifth waits with a
Reason, a job asking more than one replica is refused at submit, and a 1-GPU job (spec or
``sbatch --gres=gpu:1``) takes the GPU whole once none of its replicas is held (ADR 0054)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet.client.errors import ApiError
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.shims.install import install
from support.waiting import wait_for

pytestmark = pytest.mark.e2e


def test_four_replicas_of_one_gpu_run_at_once_and_a_fifth_waits(
    new_cluster: Any, tmp_path: Path
) -> None:
    c: LocalCluster = new_cluster(agents=0, gpus="1xL40S")
    c.start_agent(0, "--gpu-replicas", "4")
    c.wait_nodes(1)
    gate = tmp_path / "go"
    # each job says it runs, then holds its replica until the test opens the gate
    hold = f'touch "{tmp_path}/$SLURM_JOB_NAME.up"; while [ ! -e "{gate}" ]; do sleep 0.1; done'
    with c.admin() as a:
        (node,) = a.nodes()
        assert node.labels["gpufleet.io/gpu-replicas"] == "4"
        assert node.labels["gpufleet.io/gpu-sharing"] == "timeslice"
        jobs = []
        for i in range(5):
            spec = {"name": f"rep{i}", "gpus_per_worker": 1, "gpu_milli": 250,
                    "command": ["sh", "-c", hold]}  # fmt: skip
            jobs += a.submit(spec)
        four, fifth = jobs[:4], jobs[4]
        wait_for(
            "four replicas running", lambda: all(a.job(j).state == "RUNNING" for j in four), 60
        )
        wait_for("each of the four started", lambda: len(list(tmp_path.glob("*.up"))) == 4, 30)
        assert {p.gpus[0] for j in four for p in a.job(j).placement} == {0}  # one GPU, shared
        wait_for("the fifth's Reason", lambda: a.job(fifth).reason is not None, 30)
        waiting = a.job(fifth)
        assert waiting.state == "PENDING" and waiting.reason is not None
        assert waiting.reason.code == "Resources", waiting.reason
        assert (
            "all 4 replicas of the 1 GPU time-sliced as 4 each are held" in waiting.reason.message
        )
        (whole,) = a.submit({"name": "whole", "gpus_per_worker": 1, "command": "true"})
        wait_for("the whole GPU's Reason", lambda: a.job(whole).reason is not None, 30)
        behind = a.job(whole).reason
        assert behind is not None and "given whole only when none of its replicas is held" in (
            behind.message
        ), behind
        with pytest.raises(ApiError) as refused:  # two replicas' worth: failRequestsGreaterThanOne
            a.submit({"name": "half", "gpus_per_worker": 1, "gpu_milli": 500, "command": "true"})
        assert refused.value.status == 422, refused.value
        assert "time-sliced as 4 replicas" in str(refused.value)
        shown = _as_operator(c, tmp_path)
        assert shown["sinfo"] == "gpu:l40s:1,shard:4"  # Slurm's shards: 4 replicas of 1 GPU
        assert "L40S ×4 replicas" in shown["nodes"], shown["nodes"]
        gate.touch()
        wait_for("all five end", lambda: all(a.job(j).state == "SUCCEEDED" for j in jobs), 90)
        wait_for("the whole GPU job ends", lambda: a.job(whole).state == "SUCCEEDED", 90)
        assert [p.gpus for p in a.job(whole).placement] == [[0]]
        # Slurm's --gres=gpu:1 on a node with shards: the GPU whole
        gpu1 = _shim(c, tmp_path, "sbatch", "--parsable", "--gres=gpu:1", "--wrap=true")
        assert gpu1.returncode == 0, gpu1.stderr
        g = a.job(gpu1.stdout.strip())
        assert (g.spec["gpus_per_worker"], g.spec["gpu_milli"]) == (1, 1000)
        wait_for("the gpu:1 job ends", lambda: a.job(g.id).state == "SUCCEEDED", 90)
        # Slurm's way to ask a replica: sbatch --gres=shard:1 (the shim, its own process)
        sent = _shim(c, tmp_path, "sbatch", "--parsable", "--gres=shard:1", "--wrap=true")
        assert sent.returncode == 0, sent.stderr
        job = a.job(sent.stdout.strip())
        assert (job.spec["gpus_per_worker"], job.spec["gpu_milli"]) == (1, 250)
        wait_for("the shard job ends", lambda: a.job(job.id).state == "SUCCEEDED", 90)
        two = _shim(c, tmp_path, "sbatch", "--gres=shard:2", "--wrap=true")
        assert two.returncode != 0 and "failRequestsGreaterThanOne" in two.stderr, two.stderr
        both = _shim(c, tmp_path, "sbatch", "--gres=gpu:1,shard:1", "--wrap=true")
        assert both.returncode != 0 and "GPUs and shards at once" in both.stderr, both.stderr


def _as_operator(c: LocalCluster, tmp: Path) -> dict[str, str]:
    """What ``sinfo -h -o %G`` (the shim, its own process) and ``gpufleet nodes`` print."""

    def run(*argv: str) -> str:
        r = _shim(c, tmp, *argv)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    return {
        "sinfo": run("sinfo", "-h", "-o", "%G"),
        "nodes": run(sys.executable, "-m", "gpufleet.cli", "nodes"),
    }


def _shim(c: LocalCluster, tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` run with the Slurm shims on PATH, as the cluster's admin, in ``tmp``."""
    install(tmp / "bin")
    env = {**os.environ, "PATH": f"{tmp / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.update(GPUFLEET_SERVER=c.url, GPUFLEET_TOKEN_FILE=str(c.admin_token_file),
               GPUFLEET_CONFIG=str(tmp / "none.yaml"), COLUMNS="200")  # fmt: skip
    env.pop("GPUFLEET_TOKEN", None)
    return subprocess.run(argv, env=env, cwd=tmp, capture_output=True, text=True, timeout=60)
