"""The Grafana dashboard in the package: valid JSON of the shape Grafana imports, its three
parts (cluster; nodes and GPUs; queues and jobs), and every PromQL expression in it naming only
metrics that the controller's /metrics really emits (a real Prometheus evaluates each of them
in tests/integration/test_prometheus.py)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from builders import spec
from test_metrics import T0, Fleet

from gpufleet.agent.host import host_metrics
from gpufleet.agent.simgpu import SimulatedGpus
from gpufleet.api.jobmetrics import JobMetricsIn
from gpufleet.core.commands import NodeEvent, Transition
from gpufleet.core.events import GpuUtilization, NodeHealth, ServiceCreated, ServiceLoad
from gpufleet.model.catalog import lookup
from gpufleet.model.idle import IdlePolicy
from gpufleet.model.service import ServiceSpec
from gpufleet.monitoring import DASHBOARD
from gpufleet.server.metrics import metric_names

PROMQL_WORDS = {
    *("sum", "min", "max", "avg", "count", "stddev", "topk", "bottomk", "quantile"),
    *("rate", "irate", "increase", "delta", "histogram_quantile", "abs", "clamp_min"),
    *("by", "without", "on", "ignoring", "group_left", "group_right"),
    *("and", "or", "unless", "bool", "offset", "label_values", "vector"),
}


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def exprs(d: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in d["panels"] for t in p.get("targets", [])]


def variable_metrics(d: dict[str, Any]) -> set[str]:
    out = set()
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            m = re.match(r"label_values\(\s*([A-Za-z_:][\w:]*)", v["query"]["query"])
            assert m is not None, v
            out.add(m.group(1))
    return out


def metrics_in(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (strings, matchers, ranges and grouping
    label lists taken out first)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    return {w for w in re.findall(r"[A-Za-z_:][\w:]*", e) if w not in PROMQL_WORDS}


def emitted(tmp: Path) -> set[str]:
    """Every series name of a fleet in which each family has samples."""
    f = Fleet(tmp)
    f.sims["n01"] = SimulatedGpus(lookup("L40S"), 8, "n01", start=T0)  # H100s have no NVENC
    out = f.submit("j1", spec("train", gpus=4, queue="vision"), T0 + 1)
    out += f.submit("j2", spec("more", gpus=4, queue="vision"), T0 + 1)  # pending: quota
    f.heartbeat(T0 + 2, xids={1: 79})
    for link in f.svc.links.values():
        link.metrics["host"] = host_metrics(tmp)  # what a real agent's psutil finds
    evs = f.ctrl.handle(T0 + 3, NodeHealth("n01", False, "GPU 1: XID 79", (1,)))
    web = {"name": "web", "replica": {"user": "alice", "gpus_per_worker": 0, "command": ["x"]}}
    f.ctrl.handle(T0 + 3, ServiceCreated(ServiceSpec.from_dict(web)), ServiceLoad("web", 1, T0))
    # j1's queue under an idle policy, its GPUs sampled at 0 %: the idle gauge has a series
    idle = IdlePolicy.from_dict({}, source="test", path="idle")
    f.ctrl.queues["vision"] = replace(f.ctrl.queues["vision"], idle=idle)
    attempt = f.ctrl.jobs["j1"].job.attempt
    f.ctrl.handle(T0 + 3, GpuUtilization((("j1", attempt, (0.0, 0.0, 0.0, 0.0)),)))
    # j1 wrote its metrics file (model/jobmetrics.py), as the transcode example does
    f.svc.job_metrics.record("j1", attempt, JobMetricsIn(values={"transcode_fps": 30.0}), T0 + 3)
    f.coll.on_commit(
        T0 + 3,
        [c for c in out if isinstance(c, Transition)],
        [c for c in evs if isinstance(c, NodeEvent)],
    )
    fams = f.coll.families()
    assert all(fam.samples for fam in fams if fam.name.startswith("gpufleet_")), [
        fam.name for fam in fams if fam.name.startswith("gpufleet_") and not fam.samples
    ]
    return metric_names(fams)


def test_the_dashboard_is_grafana_json_with_the_five_parts() -> None:
    d = dashboard()
    assert d["title"] and d["uid"] and d["schemaVersion"] >= 30
    rows = [p["title"] for p in d["panels"] if p["type"] == "row"]
    assert rows == [
        "Cluster",
        "Nodes and GPUs",
        "Queues and jobs",
        "Services",
        "Video engines (GPUs that have them)",
    ]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    names = [v["name"] for v in d["templating"]["list"]]
    assert names == [
        "datasource",
        "Hostname",
        "gpu",
        "queue",
        "service",
    ]  # NVIDIA's dashboard's names too
    for p in d["panels"]:
        assert (
            set(p["gridPos"]) == {"h", "w", "x", "y"}
            and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        )
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
    assert len(exprs(d)) >= 40


def test_every_expression_names_only_metrics_the_exporter_emits(tmp_path: Path) -> None:
    have = emitted(tmp_path)
    d = dashboard()
    used: set[str] = set(variable_metrics(d))
    for e in exprs(d):
        names = metrics_in(e)
        assert names, e
        used |= names
    missing = sorted(used - have)
    assert not missing, f"the dashboard queries metrics /metrics does not emit: {missing}"
    # and it shows each kind: GPUs (dcgm names), hosts, nodes, queues, jobs, services
    for want in (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_GPU_TEMP",
        "gpufleet_host_cpu_utilization_percent",
        "gpufleet_node_state",
        "gpufleet_jobs_pending",
        "gpufleet_job_wait_seconds_bucket",
        "gpufleet_gpu_allocated_idle",
        "gpufleet_service_ready_replicas",
        "gpufleet_service_desired_replicas",
        "gpufleet_service_request_rate",
    ):
        assert want in used, want


def test_the_metric_name_extraction() -> None:
    e = (
        'histogram_quantile(0.95, sum by (queue, le) (rate(x_bucket{queue=~"$q", a="b{c}"}'
        "[$__rate_interval]))) / ignoring(queue) group_left sum(y) * 1000000"
    )
    assert metrics_in(e) == {"x_bucket", "y"}
