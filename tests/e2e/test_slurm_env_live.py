"""The environment a batch job and its srun steps see, gpufleet against Slurm 22.05: a job of
each shape of ``support.slurm_env.SHAPES`` runs a script that dumps ``env`` in the batch shell
and in every task of ``srun``, on a live gpufleet cluster (a controller and four agents as real
processes, each node as Slurm's ``shared/tools/slurm_local.sh`` configures its nodes: 8 CPUs,
16000 MB, 4 GPUs), submitted through the ``sbatch`` shim; the dumps are compared with the ones
Slurm made of the same jobs, recorded in ``slurm_env_22.05.json`` (normalized: ids, pids, ports,
node names, paths; ``support/slurm_env.py`` says what and why). Where Slurm is installed the
recording is checked against a live Slurm too, so that it stays Slurm's.

A variable Slurm sets that gpufleet drops, or one whose value differs, fails the test, save
these, which cannot be the same (``support.slurm_env``'s SLURM_ONLY, GPUFLEET_ONLY and VALUES,
each with its reason):
  * Slurm's own plumbing: SLURM_CONF, SLURM_WORKING_CLUSTER, SLURM_NODE_ALIASES,
    srun's port (SLURM_SRUN_COMM_PORT, SLURM_STEP_LAUNCHER_PORT),
    SLURMD_TRES_BIND, heterogeneous jobs' SLURM_JOB_CPUS_PER_NODE_PACK_GROUP_0;
  * AMD's and Intel's GPU masks (GPU_DEVICE_ORDINAL, ROCR_VISIBLE_DEVICES, ZE_AFFINITY_MASK):
    gpufleet's GPUs are NVIDIA's;
  * counts gpufleet sets from the allocation where Slurm sets them only from their options
    (SLURM_CPUS_PER_TASK, SLURM_MEM_PER_NODE, SLURM_NTASKS[_PER_NODE], SLURM_NPROCS), and the
    empty GPU variables of a job without GPUs;
  * SLURM_DISTRIBUTION (gpufleet's srun lays out blocks only), the SLURM_TASKS_PER_NODE of a
    job without -n (Slurm's counts its CPUs: --exclusive, --cpus-per-gpu), an --exclusive
    step's GPUs, and SLURM_STEP_GPUS where two of the job's workers share a node.
The allocations are the same for these shapes (``test_sbatch_vs_slurm_live`` compares them);
``-N2 --gpus=4`` is not among them: Slurm gives its nodes 3 and 1 GPUs, gpufleet 2 and 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from livehelp import dump_logs, make_cluster, shim_env

from support.slurm_env import SHAPES, capture, differences
from support.slurm_local import live

pytestmark = pytest.mark.e2e
RECORDED: dict[str, Any] = json.loads(Path(__file__).with_name("slurm_env_22.05.json").read_text())


@pytest.fixture(scope="module")
def gpufleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The sbatch shim's environment against four nodes shaped as slurm_local.sh's."""
    base = tmp_path_factory.mktemp("env")
    c = make_cluster(base / "cluster", 4, gpus="4xH100")
    try:
        c.start_controller()
        for i in range(4):
            c.start_agent(i, "--cpus", "8", "--memory-gib", f"{16000 / 1024:g}")
        c.wait_nodes(4)
        yield shim_env(c, base)
    except BaseException:
        dump_logs(c)
        raise
    finally:
        c.stop()


def test_the_recording_has_every_shape() -> None:
    assert set(RECORDED) == set(SHAPES)
    assert all(RECORDED[s]["options"] == SHAPES[s] for s in SHAPES)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_jobs_environment_is_slurms(gpufleet: dict[str, str], tmp_path: Path, shape: str) -> None:
    ours = capture(["sbatch"], SHAPES[shape], gpufleet, tmp_path)
    theirs = RECORDED[shape]["jobs"]
    assert len(ours) == len(theirs)  # an array's tasks
    found = {i: differences(shape, t, o) for i, (t, o) in enumerate(zip(theirs, ours, strict=True))}
    assert found == {i: [] for i in found}


@live
def test_the_recording_is_what_slurm_sets_now(shared_slurm: dict[str, str], tmp_path: Path) -> None:
    """Every shape run on a live Slurm again: its dumps are the recorded ones."""
    for shape, options in SHAPES.items():
        got = capture(["sbatch"], options, shared_slurm, tmp_path / shape)
        assert got == RECORDED[shape]["jobs"]
