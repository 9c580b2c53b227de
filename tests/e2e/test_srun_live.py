"""srun inside a real batch job: a controller and two agents on 127.0.0.1. The batch script
runs once, on the first node; the job's other rank runs the agent's step daemon; srun starts a
step across both nodes through it. What this checks end to end: the controller's step
environment (hosts, slot, key), the agent's srun and scontrol first on PATH, a step on each
node, the job's outcome being the script's, and PyTorch DDP and Lightning trained by
``srun --ntasks-per-node=1`` across the two nodes as on a Slurm cluster."""

from __future__ import annotations

import importlib.util
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from livehelp import read_log, wait_state

from gpufleet.ops.localcluster import LocalCluster

pytestmark = pytest.mark.e2e

PY = shlex.quote(sys.executable)
SHOW = (
    'echo "step $SLURM_STEP_ID task $SLURM_PROCID on $SLURMD_NODENAME gpus $CUDA_VISIBLE_DEVICES"'
)
SCRIPT = f"""
command -v srun
srun -l --ntasks-per-node=1 sh -c '{SHOW}'
rc=$?
scontrol show hostnames
exit $rc
"""


def batch(name: str, script: str, workdir: Path) -> dict[str, Any]:
    """A 2-node batch job, as ``#SBATCH -N 2 --ntasks-per-node=1 --gres=gpu:8`` makes it."""
    return {
        "name": name,
        "workers": 2,
        "gpus_per_worker": 8,
        "distinct_nodes": True,
        "batch": True,
        "workdir": str(workdir),
        "command": ["sh", "-c", script],
        "time_limit_s": 300,
    }


def test_srun_runs_a_step_across_a_real_jobs_two_nodes(
    new_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    cluster = new_cluster(agents=2)
    alice = cluster.user("alice")
    (job,) = alice.submit(batch("steps", SCRIPT, tmp_path))
    done = wait_state(alice, job, {"SUCCEEDED", "FAILED"}, 90)
    log = read_log(alice, job, 0)
    assert done.state == "SUCCEEDED", log
    lines = log.splitlines()
    assert lines[0].endswith("/slurm-bin/srun")  # the agent's, first on PATH
    nodes = [p.node for p in done.placement]
    assert len(set(nodes)) == 2  # a whole node each
    gpus = [",".join(str(g) for g in p.gpus) for p in done.placement]
    assert sorted(lines[1:3]) == [
        f"0: step 0 task 0 on {nodes[0]} gpus {gpus[0]}",
        f"1: step 0 task 1 on {nodes[1]} gpus {gpus[1]}",
    ]
    assert lines[3:5] == nodes  # scontrol show hostnames $SLURM_JOB_NODELIST
    assert (tmp_path / f"slurm-{job}.out").read_text() == log  # sbatch's default output file


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_srun_trains_the_ddp_example_across_two_nodes(
    new_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    cluster = new_cluster(agents=2)
    alice = cluster.user("alice")
    script = f"srun --ntasks-per-node=1 {PY} -m gpufleet.examples.ddp_train\n"
    (job,) = alice.submit(batch("ddp", script, tmp_path))
    done = wait_state(alice, job, {"SUCCEEDED", "FAILED"}, 240)
    log = read_log(alice, job, 0)
    assert done.state == "SUCCEEDED", log
    assert "WORLD_SIZE=2 RANK=0" in log and "final_loss=" in log


LIGHTNING = """
import os
import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Fit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(1, 1)

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.lin(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


x = torch.linspace(-1, 1, 64).unsqueeze(1)
data = DataLoader(TensorDataset(x, 3 * x + 1), batch_size=8)
trainer = L.Trainer(accelerator="cpu", devices=1, num_nodes=2, strategy="ddp", max_epochs=3,
                    enable_progress_bar=False, enable_model_summary=False, logger=False,
                    enable_checkpointing=False)
trainer.fit(Fit(), data)
env = trainer.strategy.cluster_environment
print(f"rank {trainer.global_rank} of {trainer.world_size} on node {trainer.node_rank} "
      f"{type(env).__name__} SLURM_NTASKS={os.environ['SLURM_NTASKS']}", flush=True)
"""


@pytest.mark.skipif(
    importlib.util.find_spec("lightning") is None, reason="PyTorch Lightning is not installed"
)
def test_lightning_detects_slurm_and_trains_on_two_nodes_started_by_srun(
    new_cluster: Callable[..., LocalCluster], tmp_path: Path
) -> None:
    """Lightning reads Slurm's environment (SLURMEnvironment): it checks SLURM_NTASKS against
    num_nodes × devices and takes its ranks from SLURM_PROCID/LOCALID/NODEID."""
    (tmp_path / "fit.py").write_text(LIGHTNING)
    cluster = new_cluster(agents=2)
    alice = cluster.user("alice")
    script = f"srun -l --ntasks-per-node=1 {PY} fit.py\n"
    (job,) = alice.submit(batch("lightning", script, tmp_path))
    done = wait_state(alice, job, {"SUCCEEDED", "FAILED"}, 280)
    log = read_log(alice, job, 0)
    assert done.state == "SUCCEEDED", log
    ranks = sorted(line for line in log.splitlines() if " rank " in line)
    assert ranks == [
        "0: rank 0 of 2 on node 0 SLURMEnvironment SLURM_NTASKS=2",
        "1: rank 1 of 2 on node 1 SLURMEnvironment SLURM_NTASKS=2",
    ], log
