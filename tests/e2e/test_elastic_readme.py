"""The README's "Elastic capacity" commands run as written: its first block starts a controller
with an elastic pool (the ``local`` provider) and submits a two-node job that only the pool can
hold; the job then runs on nodes the pool started for it. Its second block replays a small
trace with ``--autoscale`` (the JSON's node-hours and cost; the cost-versus-wait report)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gpufleet.client import Client
from gpufleet.ops.localcluster import free_port, wait_until
from support.readme import blocks, running_script, script_env, section

pytestmark = pytest.mark.e2e


def test_the_readmes_elastic_pool_commands_work_as_written(tmp_path: Path) -> None:
    live, _ = blocks(section("Elastic capacity"))
    port = str(free_port())
    # on the way out, the controller's SIGTERM stops the agents its local provider started
    with running_script(live.replace("8600", port), tmp_path, script_env()) as sh:
        out, _ = sh.communicate(timeout=120)
        assert sh.returncode == 0, out
        assert "powered_down" in out and "Submitted job" in out, out
        jid = out.split("Submitted job ")[1].split()[0]
        token = (tmp_path / "lab" / "admin.token").read_text().strip()
        with Client(f"http://127.0.0.1:{port}", token) as c:
            try:
                wait_until("the job done", lambda: str(c.job(jid).state).endswith("SUCCEEDED"), 120)
            except TimeoutError:
                raise AssertionError((c.job(jid), out)) from None
            assert {n.name for n in c.nodes()} == {"burst-000", "burst-001", "burst-002"}


def test_the_readmes_autoscale_replay_works_as_written(tmp_path: Path) -> None:
    _, sim = blocks(section("Elastic capacity"))
    done = subprocess.run(
        ["bash", "-ec", sim],
        cwd=tmp_path,
        env=script_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    first = done.stdout.split("\n", 1)[0]
    out = json.loads(first)
    assert (
        out["jobs"] == 3
        and out["node_hours"] > 0
        and out["cost"] == pytest.approx(40 * out["node_hours"], rel=1e-5)
    )
    table = (tmp_path / "lab-cost" / "cost_wait.md").read_text()
    assert "| fixed 3 |" in table  # its peak: a (two nodes) and b (one) at once
