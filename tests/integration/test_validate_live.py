"""``gpufleet validate`` against real local clusters: every layer passes on a healthy one (where a
tool or GPU is absent the row is SKIP or WARN, never FAIL), and each injected fault — a GPU off
the bus, fewer GPUs than the spec, another driver, a skewed clock — FAILs with its reason."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import typer
from typer.testing import CliRunner

from gpufleet.cli.validate import validate as validate_cmd
from gpufleet.io.specs import load_cluster
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.ops.validate import LAYERS, Settings, Status, validate

if TYPE_CHECKING:
    from conftest import Faults

pytestmark = pytest.mark.e2e

# sized for a laptop-class CI machine; the probes' defaults are for real clusters
LIGHT = [
    "--python", sys.executable,
    "--storage-mb", "16", "--storage-seconds", "1",
    "--min-write-mbps", "5", "--min-read-mbps", "5", "--min-iops", "20",
    "--net-mb", "64", "--net-seconds", "0.5", "--min-net-gbps", "0.2", "--max-rtt-ms", "20",
    "--max-heartbeat-age-s", "5", "--start-timeout-s", "30",
]  # fmt: skip


def cli(*args: str) -> tuple[int, str, str]:
    app = typer.Typer()
    app.command()(validate_cmd)
    # wide: the report's table is then never folded (rich folds a cell when the table is wider
    # than the console, which splits a reason such as "GPU 3 missing" across lines)
    r = CliRunner().invoke(app, list(args), env={"COLUMNS": "1000"})
    return r.exit_code, r.stdout, r.stderr


def test_a_healthy_cluster_passes_every_layer(probe_cluster: LocalCluster, tmp_path: Path) -> None:
    c = probe_cluster
    shared = tmp_path / "shared"  # every local agent sees this directory: it is "shared"
    shared.mkdir()
    report = tmp_path / "report.md"
    code, stdout, stderr = cli(
        "--server", c.url, "--token-file", str(c.admin_token_file), "--json",
        "--report", str(report), "--shared", str(shared), *LIGHT,
    )  # fmt: skip
    doc = json.loads(stdout)
    fails = [ch for ch in doc["checks"] if ch["status"] == "FAIL"]
    assert code == 0 and doc["ok"], f"{fails}\n{stderr}"
    assert {ch["layer"] for ch in doc["checks"]} == set(LAYERS)
    passed = {(ch["layer"], ch["name"]) for ch in doc["checks"] if ch["status"] == "PASS"}
    for key in [
        ("device", "gpu count"),
        ("device", "driver version"),
        ("device", "nvlink"),
        ("network", "bandwidth"),
        ("network", "latency"),
        ("storage", "shared path"),
        ("storage", "write throughput"),
        ("clock", "skew"),
        ("scheduler", "gpus visible"),
        ("scheduler", "cpu job sees no gpu"),
        ("application", "sample job (ddp_train.py)"),
        ("monitoring", "heartbeat age"),
        ("monitoring", "/metrics"),
    ]:
        assert key in passed, key
    ring = [ch["target"].split(" → ") for ch in doc["checks"] if ch["name"] == "bandwidth"]
    nodes = ["node-0", "node-1", "node-2"]  # a ring in the gang's rank order: each node once
    assert sorted(a for a, _ in ring) == nodes and sorted(b for _, b in ring) == nodes, ring
    skipped = {ch["name"] for ch in doc["checks"] if ch["status"] == "SKIP"}
    assert {"dcgmi diag", "nccl all-reduce", "compute and memory bandwidth"} <= skipped
    text = report.read_text()
    assert text.startswith("# gpufleet validate") and "PASSED" in text
    with c.admin() as a:  # the probes left nothing behind
        assert all(n.state == "idle" for n in a.nodes())


def test_bad_input_exits_2() -> None:
    assert cli("--layers", "gpu", "--server", "http://127.0.0.1:9")[0] == 2
    assert cli("--net-mode", "star", "--server", "http://127.0.0.1:9")[0] == 2


def fails(report: object, name: str) -> dict[str, str]:
    rows = [c for c in report.checks if c.name == name and c.status is Status.FAIL]  # type: ignore[attr-defined]
    return {c.target: f"{c.measured} | {c.expected} | {c.detail}" for c in rows}


def test_each_fault_fails_with_its_reason(
    faulty_cluster: LocalCluster, faulty_spec: Path, faults: Faults
) -> None:
    s = Settings(python=sys.executable, cluster=load_cluster(faulty_spec), start_timeout_s=30)
    with faulty_cluster.admin() as a:
        r = validate(a, s, ["device", "clock"])
    assert not r.ok
    # a GPU fell off the bus: the agent's health checks say which
    health = fails(r, "node health")
    assert list(health) == ["node-1"] and "GPU 3 missing" in health["node-1"]
    # an agent with fewer GPUs than the cluster spec expects
    count = fails(r, "gpu count")
    assert "node-3" in count and "4 × H100-SXM | 8 × H100-SXM (cluster spec)" in count["node-3"]
    # a mismatched driver, named
    (driver,) = fails(r, "driver version").values()
    assert f"{faults.odd_driver} on node-2" in driver and "node-2 differ(s)" in driver
    # a skewed clock, by about the offset the probe was given
    skew = fails(r, "skew")
    assert list(skew) == ["node-2"], skew
    measured_ms = float(skew["node-2"].split(" ms")[0])
    assert abs(measured_ms - faults.clock_offset_s * 1000) < 500
    # the healthy node passes what the others fail
    ok = {(c.name, c.target) for c in r.checks if c.status is Status.PASS}
    assert ("gpu count", "node-0") in ok and ("skew", "node-0") in ok


def test_the_cli_exits_1_on_a_fail(faulty_cluster: LocalCluster, faulty_spec: Path) -> None:
    c = faulty_cluster
    code, stdout, _ = cli(
        "--server", c.url, "--token-file", str(c.admin_token_file), "--layers", "device",
        "--cluster", str(faulty_spec), "--python", sys.executable,
    )  # fmt: skip
    assert code == 1 and "FAILED:" in stdout and "GPU 3 missing" in stdout
