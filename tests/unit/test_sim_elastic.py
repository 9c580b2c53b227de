"""The simulator with an elastic pool: nodes asked for join ``start_s`` later, are paid for from
the ask until released, and the replay's JSON reports node-hours and cost; the fixed run too.

The scripted scenario: two jobs of 8 GPUs each, 1,000 s of work, submitted at 0 and 5,000 s;
the pool starts empty (min 0, max 2), a node joins 100 s after it is asked for and is released
after 300 s idle."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import Result as CliResult
from typer.testing import CliRunner

from gpufleet.cli.simulate import app


def _trace(tmp_path: Path) -> Path:
    rows = [
        {"id": "a", "submit_time": 0, "duration_s": 1000, "gpus_per_worker": 8},
        {"id": "b", "submit_time": 5000, "duration_s": 1000, "gpus_per_worker": 8},
    ]
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _replay(tmp_path: Path, *extra: str) -> CliResult:
    args = ["replay", "--trace", str(_trace(tmp_path)), "--format", "jobs", "--time-limit", "none"]
    return CliRunner().invoke(app, [*args, *extra])


ELASTIC = ("--autoscale", "--autoscale-max", "2", "--autoscale-start-s", "100")


def test_an_elastic_pool_pays_for_its_nodes_from_the_ask_to_the_release(tmp_path: Path) -> None:
    res = _replay(tmp_path, *ELASTIC, "--autoscale-idle-s", "300", "--node-hour-price", "3.6")
    assert res.exit_code == 0, res.output
    out = json.loads(_replay(tmp_path, *ELASTIC, "--autoscale-idle-s", "300",
                             "--node-hour-price", "3.6", "--json").stdout)  # fmt: skip
    # each job waits the node's 100 s start; a's node is asked for at 0, runs a until 1,100,
    # is released idle at 1,400 and powers down until 1,430 (SuspendTimeout); b's node from
    # 5,000 to b's end at 6,100 (the replay ends with the last job)
    assert out["avg_wait_s"] == 100
    assert out["node_hours"] == round((1430 + 1100) / 3600, 6)
    assert out["cost"] == round((1430 + 1100) / 3600 * 3.6, 6)


def test_the_fixed_run_reports_node_hours_and_its_cost(tmp_path: Path) -> None:
    out = json.loads(_replay(tmp_path, "--nodes", "2", "--node-hour-price", "1", "--json").stdout)
    assert out["avg_wait_s"] == 0
    assert out["node_hours"] == round(2 * 6000 / 3600, 6) == out["cost"]
    assert json.loads(_replay(tmp_path, "--nodes", "2", "--json").stdout)["cost"] is None


def test_the_cost_versus_wait_report_against_a_fixed_cluster_of_the_peak(tmp_path: Path) -> None:
    res = _replay(tmp_path, *ELASTIC, "--out", str(tmp_path / "out"))
    assert res.exit_code == 0, res.output
    table = (tmp_path / "out" / "cost_wait.md").read_text()
    assert "| elastic ≤ 1 |" in table and "| elastic ≤ 2 |" in table
    assert "| fixed 1 | 1 fixed |" in table  # the pool never had more than one node up
    assert (tmp_path / "out" / "cost_wait.png").stat().st_size > 0


def test_autoscale_flags_are_checked(tmp_path: Path) -> None:
    res = _replay(tmp_path, "--autoscale")
    assert res.exit_code != 0 and "--autoscale needs --autoscale-max" in res.output
    res = _replay(tmp_path, "--autoscale-max", "3")
    assert res.exit_code != 0 and "need --autoscale" in res.output
    res = _replay(tmp_path, "--autoscale", "--autoscale-min", "4", "--autoscale-max", "3")
    assert res.exit_code != 0 and "min (4) <= max (3)" in res.output
