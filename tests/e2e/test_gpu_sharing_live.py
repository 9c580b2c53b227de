"""A node in MPS mode, live: its label says so, and a job holding a quarter of a GPU is told
its share of the SMs, its memory limit and where the node's MPS daemon listens; a node that
time-slices tells it nothing (its share is not enforced)."""

from __future__ import annotations

import os
from typing import Any

import pytest

import realparts
from containerimage import build_image
from gpufleet.agent.simgpu import SimulatedGpus
from gpufleet.ops.localcluster import LocalCluster
from support.waiting import wait_for

pytestmark = pytest.mark.e2e
SHOW = "env | grep ^CUDA_MPS_ | sort"


def test_an_mps_node_tells_a_fraction_its_limits(new_cluster: Any) -> None:
    c: LocalCluster = new_cluster(agents=1, gpus="2xH100")
    c.start_agent(1, "--gpu-sharing", "mps")
    c.wait_nodes(2)
    with c.admin() as a:
        labels = {n.name: n.labels for n in a.nodes()}
        assert labels["node-1"]["gpufleet.io/gpu-sharing"] == "mps"
        assert labels["node-0"]["gpufleet.io/gpu-sharing"] == "timeslice"
        out = {}
        for node in ("node-0", "node-1"):
            spec = {"name": f"quarter-{node}", "gpus_per_worker": 1, "gpu_milli": 250,
                    "nodelist": node, "command": ["sh", "-c", SHOW]}  # fmt: skip
            (job,) = a.submit(spec)
            wait_for(f"{job} ends", lambda j=job: a.job(j).state == "SUCCEEDED", 60)
            wait_for(f"{job}'s log", lambda j=job: a.logs(j).complete, 30)
            out[node] = a.logs(job).data
    pipe = c.data_dir / "node-1" / "mps" / "pipe"
    assert out["node-1"].splitlines() == [
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
        f"CUDA_MPS_LOG_DIRECTORY={pipe.parent / 'log'}",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M",  # a quarter of the 80 GiB
        f"CUDA_MPS_PIPE_DIRECTORY={pipe}",
    ]
    assert out["node-0"] == ""  # time-slicing: nothing bounds the share


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a root agent runs podman")
def test_a_fraction_in_a_container_on_an_mps_node_reaches_the_daemons_pipes(
    new_cluster: Any,
) -> None:
    realparts.require("podman", "runc")
    build_image()
    c: LocalCluster = new_cluster(agents=0, gpus="2xH100")
    c.start_agent(0, "--gpu-sharing", "mps")  # finds podman
    c.wait_nodes(1)
    look = SHOW + '; test -d "$CUDA_MPS_PIPE_DIRECTORY" && echo "pipes: $CUDA_MPS_PIPE_DIRECTORY"'
    with c.user("nobody") as u:  # an account on the node: the container runs as it
        (job,) = u.submit(
            {"name": "quarter-in-image", "gpus_per_worker": 1, "gpu_milli": 250,
             "command": ["/bin/sh", "-c", look],
             "container": {"image": "localhost/gpufleet-test:2"}, "time_limit_s": 300}
        )  # fmt: skip
        wait_for(f"{job} ends", lambda: u.job(job).state in ("SUCCEEDED", "FAILED"), 120)
        assert u.job(job).state == "SUCCEEDED", u.job(job).events
        wait_for(f"{job}'s log", lambda: u.logs(job).complete, 30)
        out = u.logs(job).data
    pipe = c.data_dir / "node-0" / "mps" / "pipe"
    # the same share as a bare task's; the daemon's pipes mounted at the same path; its log
    # directory is the daemon's alone
    assert out.splitlines() == [
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M",
        f"CUDA_MPS_PIPE_DIRECTORY={pipe}",
        f"pipes: {pipe}",
    ]


def test_mps_on_simulated_mig_devices_tells_a_fraction_its_devices_daemon(
    new_cluster: Any,
) -> None:
    """MPS on MIG (ADR 0058): the agent on four simulated H200 1g.18gb MIG devices starts with
    --gpu-sharing mps (refused before), and a quarter's task is told the pipe directory of its
    own device's daemon, a quarter of that device's memory, and the device by its MIG UUID."""
    c: LocalCluster = new_cluster(agents=0, gpus="4xH200-1g.18gb")
    c.start_agent(0, "--gpu-sharing", "mps")
    c.wait_nodes(1)
    show = "env | grep -E '^CUDA_(MPS_|VISIBLE_DEVICES)' | sort"
    with c.admin() as a:
        # the simulated devices' UUIDs, as the agent's backend makes them for its node
        uuids = [g.uuid for g in SimulatedGpus.from_spec("4xH200-1g.18gb", "node-0").discover()]
        jobs = []
        for i in range(2):
            spec = {"name": f"q{i}", "gpus_per_worker": 1, "gpu_milli": 250,
                    "command": ["sh", "-c", show]}  # fmt: skip
            jobs += a.submit(spec)
        for job in jobs:
            wait_for(f"{job} ends", lambda j=job: a.job(j).state == "SUCCEEDED", 60)
            wait_for(f"{job}'s log", lambda j=job: a.logs(j).complete, 30)
            (p,) = a.job(job).placement
            (d,) = p.gpus
            pipe = c.data_dir / "node-0" / "mps" / str(d) / "pipe"
            assert a.logs(job).data.splitlines() == [
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
                f"CUDA_MPS_LOG_DIRECTORY={pipe.parent / 'log'}",
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4608M",  # a quarter of the 18 GiB device
                f"CUDA_MPS_PIPE_DIRECTORY={pipe}",
                f"CUDA_VISIBLE_DEVICES={uuids[d]}",
            ]
            assert uuids[d].startswith("MIG-")
