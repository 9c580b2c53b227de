"""/metrics for services (server/metrics/services.py) on test_metrics.py's in-process fleet:
replicas by state, desired, ready, generation and the gateway's last request rate."""

from __future__ import annotations

from pathlib import Path

from test_metrics import T0, Fleet, series

from gpufleet.core.commands import Launch
from gpufleet.core.events import ServiceCreated, ServiceLoad, ServiceScaled, TaskStarted
from gpufleet.model.service import ServiceSpec


def test_service_families_follow_the_replicas(tmp_path: Path) -> None:
    f = Fleet(tmp_path)
    spec = ServiceSpec.from_dict(
        {
            "name": "web",
            "replicas": 2,
            "replica": {"user": "alice", "gpus_per_worker": 1, "command": ["serve"]},
            "min": 1,
            "max": 4,
            "target_qps_per_replica": 10,
        }
    )
    out = f.ctrl.handle(T0 + 1, ServiceCreated(spec))
    (first, *_) = [c for c in out if isinstance(c, Launch)]
    f.ctrl.handle(T0 + 2, TaskStarted(first.job_id, first.attempt, 0))
    f.ctrl.handle(T0 + 3, ServiceLoad("web", 12.5, T0 + 3))
    text = f.text()
    states = {lb["state"]: v for lb, v in series(text, "gpufleet_service_replicas")}
    assert states["running"] == 1 and states["starting"] == 1 and states["pending"] == 0
    assert series(text, "gpufleet_service_desired_replicas") == [({"service": "web"}, 2.0)]
    assert series(text, "gpufleet_service_ready_replicas") == [({"service": "web"}, 1.0)]
    assert series(text, "gpufleet_service_generation") == [({"service": "web"}, 1.0)]
    assert series(text, "gpufleet_service_request_rate") == [({"service": "web"}, 12.5)]
    f.ctrl.handle(T0 + 4, ServiceScaled("web", 1))
    states = {lb["state"]: v for lb, v in series(f.text(), "gpufleet_service_replicas")}
    assert states["stopping"] == 1  # the one not yet running goes first
    assert series(f.text(), "gpufleet_service_desired_replicas") == [({"service": "web"}, 1.0)]


def test_no_service_no_series(tmp_path: Path) -> None:
    assert "gpufleet_service" not in Fleet(tmp_path).text()  # an empty family is left out
