"""An image job through a real controller and two real agents (root, simulated GPUs): one agent
without a container runtime (--container-runtime none), one with podman. The job is placed on
the node with the runtime, runs in the container as its owner's uid with the launch's Slurm
variables, and its output comes back through ``gpufleet logs`` as a bare job's does."""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from containerimage import build_image
from gpufleet.client import Client
from gpufleet.ops.localcluster import LocalCluster

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a root agent runs podman"),
]
FAST = {"heartbeat_s": 0.5, "lease_s": 1.5, "node_grace_s": 4.0, "schedule_interval_s": 0.5}


def wait_for(what: str, check: object, timeout_s: float = 90.0) -> object:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        last = check()  # type: ignore[operator]
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"{what}: not within {timeout_s:g} s (last: {last!r})")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    build_image()
    c = LocalCluster(tmp_path_factory.mktemp("ctr"), agents=0, gpus="2xH100", **FAST)  # type: ignore[arg-type]
    try:
        c.start()
        c.start_agent(0, "--container-runtime", "none")
        c.start_agent(1)  # finds podman
        c.wait_nodes(2)
        yield c
    finally:
        c.stop()
        for log in sorted(Path(c.data_dir).glob("*.log")):
            print(f"----- {log.name}\n" + "\n".join(log.read_text().splitlines()[-30:]))


def test_an_image_job_runs_in_its_container_on_the_node_with_a_runtime(
    cluster: LocalCluster,
) -> None:
    nobody = pwd.getpwnam("nobody")  # an account on the node: the job runs as it
    c: Client = cluster.user("nobody")
    script = 'echo "uid=$(id -u) node=$SLURMD_NODENAME"; echo "in=$(pwd)"; ls /bin/busybox'
    (job,) = c.submit(
        {
            "name": "ctr",
            "gpus_per_worker": 1,
            "command": ["/bin/sh", "-c", script],
            "container": {"image": "localhost/gpufleet-test:1", "workdir": "/work"},
            "time_limit_s": 300,
        }
    )

    def done() -> str | None:
        s = c.job(job).state
        return s if s in ("SUCCEEDED", "FAILED", "CANCELLED", "TIMED_OUT") else None

    assert wait_for("the job ends", done) == "SUCCEEDED", c.job(job).events
    out = c.logs(job, stream="stdout").data
    assert f"uid={nobody.pw_uid} node=node-1" in out, out
    assert "in=/work" in out and "/bin/busybox" in out
