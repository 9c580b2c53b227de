"""Slurm's allocation terms on a live cluster: a controller process and two agent processes
(simulated 8-GPU nodes) that declare their node features and GPU type names at registration.
An ``#SBATCH --nodes=2 --ntasks-per-node=1 --gres=gpu:2`` script lands on two different nodes
(both workers would fit on one), -C and a site's GPU type name choose the node that declares
them, and a job no node can take waits with the filter's Reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from livehelp import dump_logs, make_cluster, read_log, wait_state

from gpufleet.client import ApiError
from gpufleet.io.sbatch import parse_sbatch_text
from gpufleet.ops.localcluster import LocalCluster

pytestmark = pytest.mark.e2e

SCRIPT = """#!/bin/bash
#SBATCH --job-name=two-nodes
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:2
#SBATCH --time=2:00
echo "ON $SLURMD_NODENAME ntasks=$SLURM_NTASKS gpus=$SLURM_GPUS_ON_NODE nnodes=$SLURM_NNODES"
"""


@pytest.fixture
def two_nodes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalCluster]:
    c = make_cluster(tmp_path / "cluster", 2)
    failed = request.session.testsfailed
    try:
        c.start_controller()
        c.start_agent(0, "--feature", "ib,nvme")
        c.start_agent(1, "--feature", "eth", "--gres-type", "gmem80")
        c.wait_nodes(2)
        yield c
    finally:
        if request.session.testsfailed != failed:
            dump_logs(c)
        c.stop()


def test_nodes_features_and_gpu_types_on_a_live_cluster(two_nodes: LocalCluster) -> None:
    with two_nodes.admin() as admin:
        shown = {n.name: (n.features, n.gres_type) for n in admin.nodes()}
    assert shown == {"node-0": (["ib", "nvme"], "h100"), "node-1": (["eth"], "gmem80")}
    alice = two_nodes.user("alice")
    spec = parse_sbatch_text(SCRIPT, source="two.sbatch").spec
    (job,) = alice.submit(spec)
    done = wait_state(alice, job, "SUCCEEDED", 60)
    nodes = [p.node for p in done.placement]
    assert sorted(nodes) == ["node-0", "node-1"]  # one worker per node, not both on one
    assert all(len(p.gpus) == 2 for p in done.placement)
    (line,) = [x for x in read_log(alice, job, 0).splitlines() if x.startswith("ON ")]
    assert line == f"ON {nodes[0]} ntasks=2 gpus=2 nnodes=2"

    # -C matches the features an agent declared; a GPU type the site names its own way
    (on_ib,) = alice.submit({"name": "ib", "constraint": "ib&nvme", "command": "true"})
    (typed,) = alice.submit({"name": "t", "gres_type": "gmem80", "command": "true"})
    assert [p.node for p in wait_state(alice, on_ib, "SUCCEEDED", 60).placement] == ["node-0"]
    assert [p.node for p in wait_state(alice, typed, "SUCCEEDED", 60).placement] == ["node-1"]

    # the default type name is the model's (8xH100: h100); no node has gmem48: refused at
    # submit, in sbatch's words for a feature no node has
    with pytest.raises(ApiError) as refused:
        alice.submit({"name": "n", "constraint": "gmem48", "command": "true"})
    assert refused.value.status == 422, refused.value
    assert "Invalid feature specification" in str(refused.value)
    assert "no node has feature gmem48" in str(refused.value)
