"""ServiceSpec (model/service.py): defaults from the anchors, every problem at once with its
path, bounds and refusals, and a to_dict round trip."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.model.errors import SpecError
from gpufleet.model.service import Amount, Autoscale, Backoff, Probe, Rollout, ServiceSpec


def spec(**kw: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": "llm",
        "replica": {"user": "alice", "command": ["python", "-m", "serve"], "gpus_per_worker": 1},
    }
    d.update(kw)
    return d


def refused(d: Any) -> str:
    with pytest.raises(SpecError) as e:
        ServiceSpec.from_dict(d)
    return str(e.value)


def test_the_defaults_are_the_anchors() -> None:
    s = ServiceSpec.from_dict(spec(readiness={"http": {"path": "/health"}}, liveness={"tcp": {}}))
    assert s.replicas == 1 and s.autoscale is None and s.port == 0
    assert s.replica.name == "llm" and s.replica.workers == 1
    assert s.readiness == Probe("http", "/health")
    r = s.readiness
    assert (r.initial_delay_s, r.period_s, r.timeout_s) == (0.0, 10.0, 1.0)
    assert (r.failure_threshold, r.success_threshold) == (3, 1)  # Kubernetes'
    assert s.liveness == Probe("tcp")
    assert s.rollout == Rollout(Amount(25, True), Amount(0, False), 600.0, 3)
    assert s.rollout.limits(4) == (1, 0) and s.rollout.limits(1) == (1, 0)  # new ready first
    assert s.restart == Backoff(10.0, 300.0, 600.0, 3)  # CrashLoopBackOff's


def test_rollout_limits_round_the_surge_up_and_the_unavailable_down() -> None:
    r = Rollout(Amount(25, True), Amount(25, True))  # a Kubernetes Deployment's
    assert r.limits(4) == (1, 1)
    assert r.limits(3) == (1, 0)
    assert r.limits(10) == (3, 2)
    assert Rollout().limits(10) == (3, 0)  # gpufleet's: none stops before its replacement
    assert Rollout(Amount(0, True), Amount(10, True)).limits(3) == (1, 0)  # never both 0
    assert Rollout(Amount(2), Amount(0)).limits(100) == (2, 0)


def test_backoff_doubles_and_caps() -> None:
    b = Backoff()
    assert [b.delay(n) for n in (1, 2, 3, 5, 6, 100)] == [10, 20, 40, 160, 300, 300]


def test_autoscaling_keys() -> None:
    s = ServiceSpec.from_dict(
        spec(min=0, max=8, target_qps_per_replica=2.5, upscale_delay_s=60, port=8000)
    )
    assert s.autoscale == Autoscale(0, 8, 2.5, 60.0, 600.0)
    assert s.replicas == 0 and s.initial_replicas == 0  # scale to zero: starts with none
    assert s.port == 8000


def test_a_round_trip_gives_the_same_spec() -> None:
    d = spec(
        port=9000,
        replicas=3,
        min=1,
        max=6,
        target_qps_per_replica=4,
        readiness={"http": {"path": "/ready", "port": 9001}, "initial_delay_s": 30},
        liveness={"command": ["curl", "-f", "localhost"], "failure_threshold": 5},
        rollout={"max_surge": "50%", "max_unavailable": 0, "progress_deadline_s": 120},
        restart_backoff={"base_s": 5, "max_s": 60, "avoid_node_after": 2},
    )
    d["replica"] |= {
        "env": {"A": "1"},
        "secrets": [{"name": "hf-token", "env": "HF_TOKEN"}],
        "container": {"image": "vllm/vllm-openai:latest"},
        "exclude": ["n07"],
        "cpus": 8,
        "memory_gib": 64,
    }
    s = ServiceSpec.from_dict(d)
    assert ServiceSpec.from_dict(s.to_dict()) == s
    assert s.rollout.max_surge == Amount(50, True)
    assert s.liveness is not None and s.liveness.command == ("curl", "-f", "localhost")


def test_every_problem_at_once_with_its_path() -> None:
    said = refused(
        spec(
            name="Bad_Name",
            port=70000,
            replica={"user": "alice", "command": ["x"], "workers": 2, "time_limit_s": 60},
            readiness={"http": {"path": "health"}, "period_s": -1},
            liveness={"tcp": {}, "http": {}, "success_threshold": 2},
            min=3,
            max=2,
            target_qps_per_replica=1,
            rollout={"max_surge": 0, "max_unavailable": "0%"},
            restart_backoff={"base_s": 100, "max_s": 10},
            typo=1,
        )
    )
    for where in (
        "name:",
        "port:",
        "replica.workers:",
        "replica.time_limit_s:",
        "readiness.http.path:",
        "readiness.period_s:",
        "liveness: needs exactly one of http, tcp or command",
        "liveness.success_threshold:",
        "min: must be at most max",
        "rollout.max_unavailable:",
        "restart_backoff.max_s:",
        "typo: unknown key",
    ):
        assert where in said, where


@pytest.mark.parametrize(
    ("patch", "where"),
    [
        ({"target_qps_per_replica": float("nan"), "max": 2}, "target_qps_per_replica"),
        ({"target_qps_per_replica": 0, "max": 2}, "target_qps_per_replica"),
        ({"max": 10**30, "target_qps_per_replica": 1}, "max"),
        ({"replicas": 10**6}, "replicas"),
        ({"readiness": {"command": ["ok\x00"]}}, "readiness.command[0]"),
        ({"readiness": {"command": "true"}}, "readiness.command"),
        ({"readiness": {"http": {"path": "/" + "a" * 10_000}}}, "readiness.http.path"),
        ({"readiness": {"tcp": {}, "timeout_s": float("inf")}}, "readiness.timeout_s"),
        ({"readiness": {"tcp": {}, "failure_threshold": 0}}, "readiness.failure_threshold"),
        ({"rollout": {"max_surge": "150%"}}, "rollout.max_surge"),
        ({"rollout": {"max_surge": True}}, "rollout.max_surge"),
        ({"replica": {"user": "a"}}, "replica.command"),
        ({"replica": None}, "replica"),
        ({"name": "a" * 64}, "name"),
        ({"min": 1, "max": 3, "replicas": 5, "target_qps_per_replica": 1}, "replicas"),
    ],
)
def test_refusals_name_the_field(patch: dict[str, Any], where: str) -> None:
    assert f"{where}:" in refused(spec(**patch))


def test_not_a_mapping() -> None:
    assert "expected a mapping" in refused([1, 2])
