"""The README's time-sliced replicas commands ("Graphics, video and desktops", its last block),
run as written on a live node whose one simulated L40S is offered as 4 replicas: the job gets
one replica (a quarter of GPU 0) and ``gpufleet nodes`` says the replicas."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from gpufleet.ops.localcluster import LocalCluster
from support.readme import blocks, lines, run_line, section
from support.waiting import wait_for

pytestmark = pytest.mark.e2e


def test_the_readmes_replica_commands_run_as_written(new_cluster: Any, tmp_path: Path) -> None:
    text = section("Graphics, video and desktops")
    submit, nodes = lines(blocks(text)[-1])
    assert "--gpu-replicas 4" in text and "`L40S ×4 replicas`" in text
    c: LocalCluster = new_cluster(agents=0, gpus="1xL40S")
    c.start_agent(0, "--gpu-replicas", "4")
    c.wait_nodes(1)
    env = {**os.environ, "GPUFLEET_SERVER": c.url, "GPUFLEET_TOKEN": c.admin_token,
           "COLUMNS": "200"}  # fmt: skip
    (job,) = re.findall(r"Submitted job (\S+)", run_line(submit, tmp_path, env))
    assert "L40S ×4 replicas" in run_line(nodes, tmp_path, env)
    with c.admin() as a:
        wait_for(f"job {job} ends", lambda: a.job(job).state == "SUCCEEDED", 60)
        (p,) = a.job(job).placement
        assert (p.node, p.gpus, p.gpu_milli) == ("node-0", [0], 250), p
        wait_for(f"job {job}'s log", lambda: a.logs(job).complete, 30)
        assert a.logs(job).data == "one replica\n"
