"""The alert rules under the real Prometheus tools (Debian's ``prometheus`` package; .ci/run
installs it): ``promtool check rules`` and ``promtool test rules`` on the package's rule tests,
and a real Prometheus server that scrapes a running controller (uvicorn in-process on a free
port, the metrics token configured) every second, evaluates the package's rules every second,
and fires the alerts a scripted agent's heartbeat calls for. Skipped, saying so, only where the
binaries are absent."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_health import Server, serve, wait_for

from gpufleet.monitoring import DASHBOARD, RULE_TESTS, RULES, rule_tests
from gpufleet.monitoring.local import LocalPrometheus
from gpufleet.server.metrics import CRITICAL_XIDS

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
# skipped without them, saying so; under CI=true they fail instead (tests/realparts.py)
needs_promtool = pytest.mark.requires("promtool")
needs_prometheus = pytest.mark.requires("prometheus")


@needs_promtool
def test_promtool_checks_the_rules() -> None:
    assert PROMTOOL is not None
    r = subprocess.run(
        [PROMTOOL, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS: 8 rules found" in r.stdout


@needs_promtool
def test_promtool_unit_tests_of_the_rules() -> None:
    assert PROMTOOL is not None
    files = rule_tests()
    assert {f.name for f in files} >= {"gpus.test.yml", "nodes.test.yml", "scheduler.test.yml"}
    r = subprocess.run(
        [PROMTOOL, "test", "rules", *(f.name for f in files)],
        cwd=RULE_TESTS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("SUCCESS") == len(files), r.stdout


@needs_promtool
def test_every_alert_has_a_promtool_test() -> None:
    import yaml

    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    tested = {
        t["alertname"]
        for f in rule_tests()
        for case in yaml.safe_load(f.read_text())["tests"]
        for t in case.get("alert_rule_test", [])
        if t.get("exp_alerts")
    }
    assert alerts == tested


# ----- a real Prometheus server -------------------------------------------------------------


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Server]:
    srv = serve(tmp_path / "ctl", metrics_token="scrape-token")
    try:
        yield srv
    finally:
        srv.close()


@needs_prometheus
def test_a_real_prometheus_scrapes_the_controller_and_fires_the_alerts(
    controller: Server, tmp_path: Path
) -> None:
    srv = controller
    sick, well = srv.agent("gpu-a"), srv.agent("gpu-b")
    well.heartbeat()
    sick.heartbeat(
        False,
        "GPU 3: XID 79 (GPU has fallen off the bus); GPU 5: 1 double-bit ECC errors",
        [3, 5],
        g3={"DCGM_FI_DEV_XID_ERRORS": 79},
        g5={"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 1, "DCGM_FI_DEV_XID_ERRORS": 48},
        g6={"DCGM_FI_DEV_XID_ERRORS": 13},  # an application's fault: no alert
    )
    wait_for("the controller drained gpu-a", lambda: srv.node("gpu-a").state == "unhealthy")

    prom = LocalPrometheus(tmp_path / "prom", srv.url.removeprefix("http://"), token="scrape-token")
    try:
        wait_for("prometheus ready", prom.ready, 60)
        targets = wait_for(
            "the controller scraped",
            lambda: [t for t in prom.api("targets")["activeTargets"] if t["health"] == "up"],
            60,
        )
        assert targets[0]["labels"]["job"] == "gpufleet"
        want = {"GpuCriticalXid", "GpuDoubleBitEccError", "NodeDrainedByHealthCheck"}
        firing = wait_for("the alerts firing", lambda: want <= set(f := prom.firing()) and f, 60)
        xids = {(a["Hostname"], a["gpu"], a["xid"]) for a in firing["GpuCriticalXid"]}
        assert xids == {("gpu-a", "3", "79"), ("gpu-a", "5", "48")}
        assert 13 not in CRITICAL_XIDS
        (dbe,) = firing["GpuDoubleBitEccError"]
        assert (dbe["Hostname"], dbe["gpu"], dbe["UUID"]) == ("gpu-a", "5", "GPU-gpu-a-5")
        assert [a["node"] for a in firing["NodeDrainedByHealthCheck"]] == ["gpu-a"]
        assert "GpuTooHot" not in firing and "NodeDown" not in firing
        # the GPU series arrive under dcgm-exporter's names and labels, as NVIDIA's dashboard
        # queries them (its variables: label_values(DCGM_FI_DEV_FB_FREE, Hostname) and gpu)
        res = prom.api("query", query='DCGM_FI_DEV_GPU_TEMP{Hostname="gpu-b", gpu="0"}')
        (s,) = res["result"]
        assert s["metric"]["UUID"] == "GPU-gpu-b-0" and s["metric"]["modelName"] == "H100-SXM"
        assert float(s["value"][1]) == 60.0
        hosts = prom.api("label/Hostname/values", **{"match[]": "DCGM_FI_DEV_FB_FREE"})
        assert sorted(hosts) == ["gpu-a", "gpu-b"]
        # the controller's counters are counters to Prometheus too
        meta = prom.api("metadata", metric="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
        assert meta["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0]["type"] == "counter"
        # every query of the package's Grafana dashboard is PromQL this Prometheus accepts
        dash = json.loads(DASHBOARD.read_text())
        queries = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
        for q in queries:
            q = re.sub(r"\$(Hostname|gpu|queue)\b", ".*", q).replace("$__rate_interval", "1m")
            assert prom.api("query", query=q) is not None, q  # a 400 raises
        # the agent passes its checks again: the health alert resolves
        sick.heartbeat()
        wait_for(
            "NodeDrainedByHealthCheck resolved",
            lambda: "NodeDrainedByHealthCheck" not in prom.firing(),
            60,
        )
    finally:
        prom.stop()


@needs_promtool
def test_promtool_accepts_the_scrape_config_the_package_writes(tmp_path: Path) -> None:
    from gpufleet.monitoring import prometheus_config

    assert PROMTOOL is not None
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(prometheus_config("gpufleet.example:8600", token="s3cret"))
    r = subprocess.run(
        [PROMTOOL, "check", "config", str(cfg)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout and "8 rules found" in r.stdout
