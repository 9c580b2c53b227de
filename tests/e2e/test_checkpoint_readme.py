"""The README's "Checkpoints" section, run as written against a live cluster: its spec file
(the yaml block, saved as the name the text gives it) and its commands; each job is submitted
with the notice and the minimum runtime the section says."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from gpufleet.ops.localcluster import LocalCluster
from support.readme import blocks, lines, run_line, section

pytestmark = pytest.mark.e2e


def test_the_readmes_checkpoint_commands_work_as_written(new_cluster: Any, tmp_path: Path) -> None:
    text = section("Checkpoints")
    (spec,) = blocks(text, "yaml")
    sh, drain = blocks(text, "sh")
    name = re.search(r"In a spec \(`([\w.-]+)`\)", text)
    assert name is not None
    (tmp_path / name.group(1)).write_text(spec)
    c: LocalCluster = new_cluster(agents=1, gpus="2xH100")
    env = {**os.environ, "GPUFLEET_SERVER": c.url}
    with c.admin() as a:
        from gpufleet.api.schemas import TokenCreate

        env["GPUFLEET_TOKEN"] = str(
            a.create_token(TokenCreate(name="readme-ana", role="user", user="ana")).token
        )
    ids = []
    for line in lines(sh):
        assert line.startswith("gpufleet "), line
        ids += re.findall(r"Submitted job (\S+)", run_line(line, tmp_path, env))
    assert len(ids) == 2
    # the admin's drain, on this cluster's node (the README's gpu-03)
    env["GPUFLEET_TOKEN"] = c.admin_token_file.read_text().strip()
    (line,) = lines(drain)
    run_line(line.replace("gpu-03", "node-0"), tmp_path, env)
    with c.admin() as a:
        (entry,) = [e for e in a.audit(limit=100) if e.action == "node.drain"]
        assert entry.detail == {"reason": "kernel update", "deadline_s": 1800.0}
    with c.admin() as a:  # (the node's python3 may lack gpufleet: only the specs matter here)
        yaml_job, flags_job = (a.job(i) for i in ids)
    assert yaml_job.spec["checkpoint"] == {"signal": 10, "grace_s": 120, "batch_only": False}
    assert yaml_job.spec["min_runtime_s"] == 600
    assert flags_job.spec["signal"] == {"signal": 10, "before_s": 120, "batch_only": False}
    assert flags_job.spec["min_runtime_s"] == 600 and flags_job.workers == 2
