"""The README's "Idle GPUs" section, run as written against a live cluster: its queues file and
spec (saved as the names the text gives them), its controller line's options, and its commands;
the queues are read with the policies the text says."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.model.idle import IdlePolicy
from gpufleet.model.queue import QueueSpec
from gpufleet.ops.localcluster import LocalCluster

pytestmark = pytest.mark.e2e
README = Path(__file__).parents[2] / "README.md"


def section(title: str) -> str:
    return README.read_text().split(f"### {title}\n", 1)[1].split("\n### ", 1)[0]


def blocks(text: str, kind: str) -> list[str]:
    return [part.split("```", 1)[0] for part in text.split(f"```{kind}\n")[1:]]


def test_the_readmes_idle_gpu_commands_work_as_written(new_cluster: Any, tmp_path: Path) -> None:
    text = section("Idle GPUs")
    queues_yaml, notebook_yaml = blocks(text, "yaml")
    controller_sh, user_sh = blocks(text, "sh")
    names = re.findall(r"\(`([\w.-]+\.yaml)`\)", text)
    assert names == ["queues.yaml", "notebook.yaml"]
    (tmp_path / names[0]).write_text(queues_yaml)
    (tmp_path / names[1]).write_text(notebook_yaml)
    queues = {
        q.name: q.idle
        for q in (
            QueueSpec.from_dict(raw, source="README", path=f"queues[{i}]")
            for i, raw in enumerate(yaml.safe_load(queues_yaml)["queues"])
        )
    }
    assert queues["gpu"] == IdlePolicy()  # Princeton's: 60 and 105 min, cancel at 120
    assert queues["gpu"].warn_after_s == (3600.0, 6300.0) and queues["gpu"].act_after_s == 7200
    batch = queues["batch"]
    assert batch is not None and (batch.threshold_pct, batch.action) == (10.0, "requeue")
    assert queues["interactive"] is not None and queues["interactive"].exempt
    # the controller's line: its options, on this cluster's controller
    (line,) = [x for x in controller_sh.splitlines() if x.strip()]
    words = shlex.split(line)
    assert words[:2] == ["gpufleet", "controller"]
    opts = dict(zip(words[2::2], words[3::2], strict=True))
    assert opts["--queues"] == "queues.yaml"
    c: LocalCluster = new_cluster(
        agents=1,
        gpus="2xH100",
        queues_file=tmp_path / opts["--queues"],
        controller_args=["--idle-hook", opts["--idle-hook"]],
    )
    env = {**os.environ, "GPUFLEET_SERVER": c.url}
    with c.admin() as a:
        from gpufleet.api.schemas import TokenCreate

        env["GPUFLEET_TOKEN"] = str(
            a.create_token(TokenCreate(name="readme-ana", role="user", user="ana")).token
        )
    ids: list[str] = []
    outputs = []
    for line in [x for x in user_sh.splitlines() if x.strip()]:
        words = shlex.split(line.split("  #")[0])
        assert words[0] == "gpufleet", line
        if words[1] == "show":
            words[2] = ids[0]  # the README's job 1 is this cluster's first job
        done = subprocess.run(
            [sys.executable, "-m", "gpufleet.cli.main", *words[1:]],
            cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        ids += re.findall(r"Submitted job (\S+)", done.stdout)
        outputs.append(done.stdout)
    assert len(ids) == 1
    assert ids[0] in outputs[1]  # gpufleet show
    header = [x.split() for x in outputs[2].splitlines()]
    assert ["QUEUE", "JOBS", "GPU-HOURS", "USED", "USED%"] in header
    with c.admin() as a:
        job = a.job(ids[0])
        assert job.spec["idle_exempt_s"] == 7200 and job.queue == "gpu"
        shown = {q.name: q.idle for q in a.queues()}  # GET /queues says each queue's policy
    assert shown["gpu"] is not None and shown["gpu"].warn_after_s == [3600.0, 6300.0]
    assert shown["batch"] is not None and shown["batch"].action == "requeue"
    assert shown["interactive"] is not None and shown["interactive"].exempt
