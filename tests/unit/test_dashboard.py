"""The dashboard's server side without a server: the per-node GPU metrics ring (bounded, oldest
first, never raising on a malformed heartbeat) and the nodes × GPUs view that the cluster page
draws (allocation from the core, values from the last heartbeat, a user's token seeing only the
ids of its own jobs). The pages themselves run in a real browser in tests/e2e."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from builders import cluster_spec, profile, spec

from gpufleet.base.clock import ManualClock
from gpufleet.core.controller import Controller
from gpufleet.core.events import JobSubmitted, NodeHealth, NodeLost
from gpufleet.server.auth import Principal
from gpufleet.server.dashboard.history import METRICS, MetricsHistory
from gpufleet.server.reads import ClusterReads
from gpufleet.server.routers.dashboard import ASSETS, STATIC, cluster_view
from gpufleet.server.service import NodeLink

UTIL, TEMP, POWER, FB = METRICS


def body(*gpus: dict[str, Any]) -> dict[str, Any]:
    """A heartbeat's metrics body with GPUs given as {"gpu": i, METRIC: value, ...}."""
    return {
        "schema": 1,
        "gpus": [
            {
                "labels": {"gpu": str(g["gpu"]), "UUID": f"GPU-{g['gpu']}"},
                "values": {k: v for k, v in g.items() if k != "gpu"},
            }
            for g in gpus
        ],
        "host": {},
    }


# ----- the history ring ----------------------------------------------------------------------


def test_history_keeps_the_newest_samples_oldest_first_within_its_capacity() -> None:
    h = MetricsHistory(capacity=3)
    for t in range(5):
        h.record("n0", float(t), body({"gpu": 0, UTIL: 10 * t, TEMP: 40 + t}))
    out = h.series("n0")
    assert out["times"] == [2.0, 3.0, 4.0]
    assert out["series"][UTIL] == {"0": [20.0, 30.0, 40.0]}
    assert out["series"][TEMP] == {"0": [42.0, 43.0, 44.0]}
    assert out["series"][POWER] == {}  # never reported: no line at all
    assert h.series("n0", since=3.0)["times"] == [4.0]
    json.dumps(out, allow_nan=False)  # valid JSON: no NaN


def test_history_a_gpu_missing_from_one_sample_is_a_gap() -> None:
    h = MetricsHistory(capacity=10)
    h.record("n0", 1.0, body({"gpu": 0, UTIL: 5}, {"gpu": 1, UTIL: 7}))
    h.record("n0", 2.0, body({"gpu": 0, UTIL: 6}))  # GPU 1 fell off the bus
    h.record("n0", 3.0, body({"gpu": 0, UTIL: 8}, {"gpu": 1, UTIL: 9, FB: 1024}))
    s = h.series("n0")["series"]
    assert s[UTIL] == {"0": [5.0, 6.0, 8.0], "1": [7.0, None, 9.0]}
    assert s[FB] == {"1": [None, None, 1024.0]}


def test_history_more_gpus_than_before_starts_a_wider_ring() -> None:
    h = MetricsHistory(capacity=4)
    h.record("n0", 1.0, body({"gpu": 0, UTIL: 1}))
    h.record("n0", 2.0, body({"gpu": 0, UTIL: 2}, {"gpu": 3, UTIL: 3}))
    s = h.series("n0")
    assert s["times"] == [2.0] and s["series"][UTIL] == {"0": [2.0], "3": [3.0]}


def test_history_skips_heartbeats_closer_than_its_interval() -> None:
    h = MetricsHistory(capacity=10, min_interval_s=1.0)
    for t in (0.0, 0.4, 0.9, 1.0, 1.5, 2.2):
        h.record("n0", t, body({"gpu": 0, UTIL: t}))
    assert h.series("n0")["times"] == [0.0, 1.0, 2.2]


@pytest.mark.parametrize(
    "bad",
    [
        None,
        [],
        {"gpus": "x"},
        {"gpus": [1, {"labels": "x"}, {"labels": {"gpu": "a"}, "values": {}}]},
        {"gpus": [{"labels": {"gpu": "999"}, "values": {UTIL: 1}}]},
        {"gpus": [{"labels": {"gpu": "0"}, "values": {UTIL: "hot", TEMP: math.inf}}]},
    ],
)
def test_history_a_malformed_body_never_raises(bad: Any) -> None:
    h = MetricsHistory(capacity=2)
    h.record("n0", 1.0, bad)
    out = h.series("n0")
    assert out["times"] == [1.0]
    assert all(v is None for s in out["series"].values() for vs in s.values() for v in vs)
    assert h.series("unknown") == {"times": [], "series": {m: {} for m in METRICS}}


def test_history_memory_is_preallocated_per_node() -> None:
    h = MetricsHistory(capacity=360)
    h.record("n0", 1.0, body(*({"gpu": i, UTIL: 1} for i in range(8))))
    ring = h.rings["n0"]
    assert len(ring.values) == 360 * 8 * len(METRICS) and ring.values.itemsize == 4
    for t in range(2, 1000):
        h.record("n0", float(t), body({"gpu": 0, UTIL: 1}))
    assert len(ring.values) == 360 * 8 * len(METRICS) and ring.count == 360


# ----- the cluster view ----------------------------------------------------------------------


class Svc(ClusterReads):
    """What cluster_view needs of the service: its read methods, links and clock."""

    def __init__(self, ctrl: Controller, links: dict[str, NodeLink], clock: ManualClock) -> None:
        self.ctrl, self.links, self.clock = ctrl, links, clock


def service() -> Svc:
    ctrl = Controller(profile(), cluster_spec(3, 8))
    ctrl.handle(
        10.0,
        JobSubmitted("a1", spec("a1", gpus=8, workers=1, user="alice"), 10.0),
        JobSubmitted("b1", spec("b1", gpus=2, user="bob"), 10.0),
    )
    links = {
        name: NodeLink(
            "127.0.0.1",
            20.0,
            metrics=body(*({"gpu": i, UTIL: 10 * i, TEMP: 40 + i, FB: 2048} for i in range(8))),
        )
        for name in ctrl.nodes
    }
    return Svc(ctrl, links, ManualClock(30.0))


def test_cluster_view_holds_each_node_and_gpu_with_values_and_allocation() -> None:
    svc = service()
    v = cluster_view(svc, Principal("admin", "admin"))  # type: ignore[arg-type]
    json.dumps(v, allow_nan=False)
    assert [n["name"] for n in v["nodes"]] == sorted(svc.ctrl.nodes)
    assert v["gpus_total"] == 24 and v["gpus_allocated"] == 10
    assert v["running_jobs"] == 2 and v["time"] == 30.0
    by_job: dict[str, int] = {}
    for n in v["nodes"]:
        assert len(n["gpus"]) == 8 and n["last_heartbeat"] == 20.0
        for g in n["gpus"]:
            assert g["util"] == 10 * g["index"] and g["temp"] == 40 + g["index"]
            assert g["reporting"] and g["healthy"]
            assert g["alloc"] == (1.0 if g["jobs"] else 0.0)
            for j in g["jobs"]:
                by_job[j] = by_job.get(j, 0) + 1
    assert by_job == {"a1": 8, "b1": 2}
    assert sum(v["states"].values()) == 3


def test_cluster_view_shows_a_user_only_the_ids_of_its_own_jobs() -> None:
    svc = service()
    v = cluster_view(svc, Principal("t", "user", user="bob"))  # type: ignore[arg-type]
    jobs = {j for n in v["nodes"] for g in n["gpus"] for j in g["jobs"]}
    assert jobs == {"b1"}
    assert v["gpus_allocated"] == 10  # alice's GPUs are still shown as taken
    assert sum(g["alloc"] for n in v["nodes"] for g in n["gpus"] if not g["jobs"]) == 8


def test_cluster_view_marks_bad_gpus_and_shows_no_values_for_a_lost_node() -> None:
    svc = service()
    n0, n1 = sorted(svc.ctrl.nodes)[:2]
    svc.ctrl.handle(40.0, NodeHealth(n0, False, "XID 79 on GPU 3", (3,)), NodeLost(n1))
    v = cluster_view(svc, Principal("admin", "admin"))  # type: ignore[arg-type]
    nodes = {n["name"]: n for n in v["nodes"]}
    assert [g["index"] for g in nodes[n0]["gpus"] if not g["healthy"]] == [3]
    assert nodes[n0]["state"] == "unhealthy" and "XID 79" in nodes[n0]["why"]
    assert nodes[n1]["state"] == "lost"
    assert not any(g["reporting"] or "util" in g for g in nodes[n1]["gpus"])


def test_the_static_files_are_in_the_package() -> None:
    for name in ASSETS:
        assert (STATIC / name).is_file(), name
    html = (STATIC / "index.html").read_text()
    assert "/dashboard/app.js" in html and "/dashboard/style.css" in html
    js = (STATIC / "app.js").read_text()
    assert "innerHTML" not in js and "insertAdjacentHTML" not in js and "eval(" not in js
