"""The idle-GPU policy on a live cluster: a job whose simulated GPUs stay at 0 % (its workload
holds them and computes nothing: GPUFLEET_SIM_GPU_LOAD=0) under a short policy is warned twice,
then cancelled, with those events in its history, the site's hook run for each, and its idle
time on /metrics; a busy job of the same queue runs on untouched."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from support.waiting import wait_for

pytestmark = pytest.mark.e2e

QUEUES = """\
queues:
  - name: default
    idle: {threshold_pct: 1, warn_after: [2s, 4s], act_after: 7s, action: cancel, window_s: 1}
"""


def _submit(c: Any, name: str, env: dict[str, str]) -> str:
    with c.user("ana") as u:
        (jid,) = u.submit({"name": name, "command": "sleep 600", "env": env})
    return str(jid)


def _show(c: Any, job: str) -> str:
    """``gpufleet show JOB`` as the user runs it, its output."""
    from typer.testing import CliRunner

    from gpufleet.cli.main import app

    env = {
        "GPUFLEET_SERVER": c.url,
        "GPUFLEET_TOKEN": c.admin_token,
        "GPUFLEET_CONFIG": "/nonexistent/gpufleet.yaml",
        "COLUMNS": "200",
    }
    done = CliRunner(env=env).invoke(app, ["show", job], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    return str(done.output)


def test_an_idle_job_is_warned_then_cancelled(new_cluster: Any, tmp_path: Path) -> None:
    queues = tmp_path / "queues.yaml"
    queues.write_text(QUEUES)
    hook_log = tmp_path / "hook.log"
    hook = (
        f"{sys.executable} -c \"import json,os,sys; open(sys.argv[1],'a').write(json.dumps("
        "{k: os.environ[k] for k in ('GPUFLEET_JOB_ID','GPUFLEET_JOB_USER','GPUFLEET_JOB_QUEUE',"
        f"'GPUFLEET_IDLE_STAGE')}})+chr(10))\" {hook_log}"
    )
    c = new_cluster(
        agents=1, gpus="2xH100", queues_file=queues, controller_args=["--idle-hook", hook]
    )
    idle = _submit(c, "idle", {"GPUFLEET_SIM_GPU_LOAD": "0"})
    busy = _submit(c, "busy", {})
    with c.admin() as a:
        # warned and still running: its Reason (what gpufleet show prints) says the warning
        warned = wait_for(
            "the idle job's warning as its Reason",
            lambda: ((j := a.job(idle)).reason is not None and j.state == "RUNNING" and j) or None,
            timeout_s=60,
        )
        assert warned.reason is not None and warned.reason.code == "IdleGpus"
        assert re.fullmatch(
            r"idle: its GPU at 0 % for \d+ s; warned at 2 s(, 4 s)?, cancelled at 7 s "
            r"\(queue default's idle policy\)",
            warned.reason.message,
        ), warned.reason
        assert warned.reason.data["gpus"] == 1 and warned.reason.data["action"] == "cancel"
        shown = _show(c, idle)  # in-process: the warning stands for 5 s only
        assert re.search(r"Reason: +IdleGpus: idle: its GPU at 0 % for \d+ s; warned", shown), shown
        job = wait_for(
            "the idle job cancelled",
            lambda: ((j := a.job(idle)).state == "CANCELLED" and j) or None,
            timeout_s=60,
        )
        whys = [e.why for e in job.events]
        warnings = [w for w in whys if w.startswith("warning")]
        assert len(warnings) == 2, whys
        assert "warning 1" in warnings[0] and "cancelled at 7 s idle" in warnings[0]
        assert job.events[-1].state == "CANCELLED"
        assert job.events[-1].why.startswith("cancelled: idle GPUs: under 1 % for"), whys
        b = a.job(busy)
        assert b.state == "RUNNING" and not [e for e in b.events if "idle" in e.why]
        # allocated versus used: the busy job's GPU is used, the idle one's was only held
        (row,) = wait_for(
            "GPU time used stored",
            lambda: [r for r in a.accounting(by="user") if r.used_gpu_hours > 0] or None,
            timeout_s=30,
        )
        assert row.key == "ana" and 0 < row.used_gpu_hours < row.gpu_hours
        metrics = a.http.get("/metrics").text
        assert f'gpufleet_job_idle_seconds{{hpc_job="{busy}",queue="default"' in metrics
    lines = wait_for(
        "the hook run three times",
        lambda: (
            ((t := hook_log.read_text() if hook_log.exists() else "").count("\n") >= 3 and t)
            or None
        ),
        timeout_s=30,
    )
    heard = [json.loads(x) for x in lines.splitlines()]
    assert [h["GPUFLEET_IDLE_STAGE"] for h in heard] == ["warn", "warn", "cancel"]
    assert {
        (h["GPUFLEET_JOB_ID"], h["GPUFLEET_JOB_USER"], h["GPUFLEET_JOB_QUEUE"]) for h in heard
    } == {(idle, "ana", "default")}
