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
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_health import Server, serve, wait_for

from gpufleet.api.schemas import TokenCreate
from gpufleet.base.secretfile import write_secret
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
    assert "SUCCESS: 12 rules found" in r.stdout


@needs_promtool
def test_promtool_unit_tests_of_the_rules() -> None:
    assert PROMTOOL is not None
    files = rule_tests()
    assert {f.name for f in files} >= {
        "gpus.test.yml",
        "nodes.test.yml",
        "scheduler.test.yml",
        "services.test.yml",
    }
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
    # --no-heal: the drained node returns when it reports healthy, and its alert resolves
    srv = serve(tmp_path / "ctl", config={"heal": False})
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

    # Prometheus with a token of role metrics, read from its file (credentials_file)
    scrape_token = srv.token("metrics")
    prom = LocalPrometheus(tmp_path / "prom", srv.url.removeprefix("http://"), token=scrape_token)
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
            q = re.sub(r"\$(Hostname|gpu|queue|service)\b", ".*", q).replace(
                "$__rate_interval", "1m"
            )
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
    token_file = tmp_path / "gpufleet-metrics.token"
    cfg.write_text(prometheus_config("gpufleet.example:8600", token_file=token_file))
    assert "credentials_file" in cfg.read_text()
    r = subprocess.run(
        [PROMTOOL, "check", "config", str(cfg)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode != 0 and "gpufleet-metrics.token" in r.stdout + r.stderr  # no token
    write_secret(token_file, "gf_s3cret")
    r = subprocess.run(
        [PROMTOOL, "check", "config", str(cfg)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout and "12 rules found" in r.stdout


# ----- dashboards against a live cluster ----------------------------------------------------

# NVIDIA's "NVIDIA DCGM Exporter Dashboard" (dcgm-exporter's grafana/dcgm-exporter-dashboard.json,
# Grafana id 12239): its panels' PromQL, written here from what the dashboard queries (title →
# expression), with its template variables: $Hostname and $gpu in the versions that pick by
# host, $instance in those that pick by scrape target.
NVIDIA_PANELS: dict[str, str] = {
    "GPU Temperature": 'max(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname", gpu=~"$gpu"}) '
    "by (Hostname, gpu, uuid)",
    "GPU Avg. Temp": 'avg(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname", gpu=~"$gpu"})',
    "GPU Power Usage": 'max(DCGM_FI_DEV_POWER_USAGE{Hostname=~"$Hostname", gpu=~"$gpu"}) '
    "by (Hostname, gpu, uuid)",
    "GPU Power Total": 'sum(max(DCGM_FI_DEV_POWER_USAGE{Hostname=~"$Hostname", gpu=~"$gpu"}) '
    "by (gpu))",
    "GPU SM Clocks": 'max(DCGM_FI_DEV_SM_CLOCK{Hostname=~"$Hostname", gpu=~"$gpu"} * 1000000) '
    "by (Hostname, UUID, gpu)",
    "GPU Utilization": 'max(DCGM_FI_PROF_GR_ENGINE_ACTIVE{Hostname=~"$Hostname", gpu=~"$gpu"}) '
    "by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)",
    "Tensor Core Utilization": "max(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
    '{Hostname=~"$Hostname", gpu=~"$gpu"}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)',
    "GPU Framebuffer Mem Used": 'max(DCGM_FI_DEV_FB_USED{Hostname=~"$Hostname", gpu=~"$gpu"}) '
    "by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)",
    # the versions with an instance picker
    "GPU Temperature (by instance)": 'DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"}',
    "GPU Power Usage (by instance)": 'DCGM_FI_DEV_POWER_USAGE{instance=~"$instance", gpu=~"$gpu"}',
    "GPU Utilization (by instance)": 'DCGM_FI_DEV_GPU_UTIL{instance=~"$instance", gpu=~"$gpu"}',
    "GPU Framebuffer Mem Used (by instance)": 'DCGM_FI_DEV_FB_USED{instance=~"$instance", '
    'gpu=~"$gpu"}',
}
NVIDIA_VARIABLES = {  # name → (metric, label) of label_values(metric, label)
    "Hostname": ("DCGM_FI_DEV_FB_FREE", "Hostname"),
    "instance": ("DCGM_FI_DEV_GPU_TEMP", "instance"),
    "gpu": ("DCGM_FI_DEV_FB_FREE", "gpu"),
}
LIVE_NODES = ["node-0", "node-1"]


def _fill(q: str, values: dict[str, str]) -> str:
    q = q.replace("$__rate_interval", "1m")
    return re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), ".*"), q)


@needs_prometheus
def test_nvidias_dashboard_and_gpufleets_own_show_data_from_a_live_cluster(
    tmp_path: Path,
) -> None:
    """A LocalCluster (real controller and agents, simulated GPUs) scraped per node by a real
    Prometheus: every panel of NVIDIA's DCGM dashboard and of gpufleet's own returns data, and
    NVIDIA's instance picker lists the nodes."""
    from gpufleet.ops.localcluster import LocalCluster, wait_until

    c = LocalCluster(
        tmp_path / "cluster",
        agents=2,
        gpus="4xH100",
        leaves=1,
        heartbeat_s=0.5,
        schedule_interval_s=0.5,
    )
    c.start_controller()
    c.start_agent(0, "--inject", "xid79@gpu3:0s")  # the GPU errors panel has a row
    c.start_agent(1, "--simulate", "4xL40S")  # an encoding GPU: the video engines' panels
    prom: LocalPrometheus | None = None
    try:
        c.wait_nodes(2)
        sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
        with c.user("alice") as u:
            (busy,) = u.submit({"name": "busy", "gpus_per_worker": 3, "command": sleep})
            (idle,) = u.submit(  # a sliver of a GPU: allocated, under 5 % busy
                {"name": "idle", "gpus_per_worker": 1, "gpu_milli": 20, "command": sleep}
            )
            wait_until(
                "both running",
                lambda: {u.job(busy).state, u.job(idle).state} == {"RUNNING"},
                60,
            )
            # the Services row's panels: a service (its request rate: the gateway's second
            # sample of its counters, 0 req/s)
            u.create_service({"name": "web", "replica": {"gpus_per_worker": 0, "command": sleep}})
            wait_until("web ready", lambda: u.service("web").ready == 1, 60)
            # the whole cluster: waits behind the two (pending, with a Reason)
            u.submit({"name": "big", "workers": 2, "gpus_per_worker": 4, "command": sleep})
        with c.admin() as a:
            scrape = a.create_token(TokenCreate(name="prometheus", role="metrics")).token
        prom = LocalPrometheus(
            tmp_path / "prom",
            c.url.removeprefix("http://"),
            token=scrape,
            nodes=LIVE_NODES,
            interval_s=1,
        )
        wait_for("prometheus ready", prom.ready, 60)
        up = wait_for("3 targets up", lambda: len(t := prom.targets_up()) == 3 and t, 60)
        assert {t["labels"]["instance"] for t in up if t["labels"]["job"] == "gpufleet-gpus"} == {
            *LIVE_NODES
        }
        # enough samples for rate() and increase() over the panels' 1 m windows
        wait_for(
            "rates",
            lambda: prom.api("query", query="rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[1m])")[
                "result"
            ],
            60,
        )

        # NVIDIA's variables: the instance picker lists the nodes, not the controller
        values: dict[str, list[str]] = {}
        for var, (metric, label) in NVIDIA_VARIABLES.items():
            values[var] = prom.api(f"label/{label}/values", **{"match[]": metric})
        assert sorted(values["Hostname"]) == sorted(values["instance"]) == LIVE_NODES
        assert sorted(values["gpu"]) == ["0", "1", "2", "3"]
        # labels as dcgm-exporter writes them
        (s,) = prom.api("query", query='DCGM_FI_DEV_GPU_TEMP{instance="node-0", gpu="0"}')["result"]
        m = s["metric"]
        assert m["modelName"] == "NVIDIA H100 80GB HBM3" and m["Hostname"] == m["hostname"]
        assert m["DCGM_FI_DRIVER_VERSION"] and m["device"] == "nvidia0"
        # every panel, for every value of each picker and for "All"
        for title, q in NVIDIA_PANELS.items():
            for pick in [{}, *({"instance": n, "Hostname": n} for n in LIVE_NODES)]:
                res = prom.api("query", query=_fill(q, pick))["result"]
                assert res, f"NVIDIA panel {title!r} ({pick or 'All'}) has no data"
        # each series once: the per-node scrapes and the cluster's do not overlap
        (n,) = prom.api("query", query="count(DCGM_FI_DEV_GPU_TEMP)")["result"]
        assert n["value"][1] == "8"

        # gpufleet's own dashboard: every panel with queries shows data
        def panel_has_data(p: dict[str, object]) -> bool:
            targets = p.get("targets") or []
            assert isinstance(targets, list)
            return any(prom.api("query", query=_fill(t["expr"], {}))["result"] for t in targets)

        dash = json.loads(DASHBOARD.read_text())
        panels = [p for p in dash["panels"] if p.get("targets")]
        assert len(panels) >= 25
        empty = lambda: [p["title"] for p in panels if not panel_has_data(p)]  # noqa: E731
        wait_for("every gpufleet panel has data", lambda: not empty(), 30)
        # the fair-share share sums to 1 over the queues; the events panel is 0, not empty
        share = prom.api("query", query=_fill(_expr(dash, "Fair share", 1), {}))["result"]
        assert share and abs(sum(float(r["value"][1]) for r in share) - 1) < 1e-6
        ev = prom.api("query", query=_fill(_expr(dash, "Node health events", 0), {}))["result"]
        assert ev
        # the Services row: web's one replica, ready as desired, and its measured rate
        for i, want in ((0, "1"), (1, "1")):
            (r,) = prom.api("query", query=_fill(_expr(dash, SERVICE_REPLICAS, i), {}))["result"]
            assert (r["metric"]["service"], r["value"][1]) == ("web", want)
        (r,) = prom.api("query", query=_fill(_expr(dash, "Service request rate", 0), {}))["result"]
        assert r["metric"]["service"] == "web" and float(r["value"][1]) >= 0
    finally:
        if prom is not None:
            prom.stop()
        c.stop()


SERVICE_REPLICAS = "Service replicas: ready vs desired"


def _expr(dash: dict[str, Any], title: str, i: int) -> str:
    (p,) = [p for p in dash["panels"] if p.get("title") == title]
    return str(p["targets"][i]["expr"])


@needs_promtool
def test_promtool_accepts_the_per_node_configs(tmp_path: Path) -> None:
    """The package's example (static targets and file_sd) and a per-node config it writes."""
    from gpufleet.monitoring import EXAMPLE_CONFIG, file_sd_targets, prometheus_config

    assert PROMTOOL is not None
    sd = tmp_path / "gpufleet-nodes.json"
    sd.write_text(file_sd_targets("ctl:8600", ["gpu-a", "gpu-b"]))
    assert json.loads(sd.read_text())[1] == {
        "targets": ["ctl:8600"],
        "labels": {"__param_node": "gpu-b"},
    }
    cfg = tmp_path / "prometheus.yml"
    token_file = write_secret(tmp_path / "gpufleet-metrics.token", "gf_s3cret")
    cfg.write_text(
        prometheus_config("ctl:8600", token_file=token_file, nodes=["gpu-a"], node_targets_file=sd)
    )
    # the example as an operator installs it: the rules beside it, the metrics token made
    example = tmp_path / "etc" / "prometheus.yml"
    shutil.copytree(EXAMPLE_CONFIG.parent / "rules", example.parent / "rules")
    shutil.copy(EXAMPLE_CONFIG, example)
    write_secret(example.parent / "gpufleet-metrics.token", "gf_s3cret")
    assert example.read_text().count("credentials_file: gpufleet-metrics.token") == 2
    for f in (cfg, example):
        r = subprocess.run(
            [PROMTOOL, "check", "config", str(f)], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert "12 rules found" in r.stdout
