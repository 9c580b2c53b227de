"""The README's rolling-maintenance commands (the second ``sh`` block of "Maintenance"), run as
written against a live local cluster of 4 simulated nodes (``node-0`` … ``node-3``)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from gpufleet.ops.localcluster import LocalCluster
from support.readme import blocks, lines, run_line, section

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("maintain")]


def test_the_readmes_rolling_maintenance_commands_work_as_written(new_cluster: Any) -> None:
    c: LocalCluster = new_cluster(agents=4)
    env = {**os.environ, "GPUFLEET_SERVER": c.url, "GPUFLEET_TOKEN_FILE": str(c.admin_token_file)}
    env.pop("GPUFLEET_TOKEN", None)
    commands = lines(blocks(section("Maintenance"))[1])  # the second: the rolling maintenance
    assert all(line.startswith("gpufleet ") for line in commands), commands
    outputs = [run_line(line, env=env, timeout_s=240) for line in commands]
    assert outputs[0].splitlines()[-1].endswith("done: every batch done (0 failed of at most 0)")
    assert "awaiting confirmation" in outputs[1] and "confirm the canary" in outputs[1]
    assert "batch 1/3 canary [####################] 1/1" in outputs[2]
    assert "canary confirmed" in outputs[3] and "done: every batch done" in outputs[3]
    assert "agent upgrade on 4 nodes in 2 batches" in outputs[4]
    assert outputs[4].splitlines()[-1].endswith("done: every batch done (0 failed of at most 0)")
    assert outputs[5].count(" done ") == 3, outputs[5]
    with c.admin() as a:
        assert all(n.state == "idle" for n in a.nodes())
