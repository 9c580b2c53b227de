"""The services' proxy through a controller failover (issue 26, ADR 0044), with real processes:
two ``gpufleet controller --ha --gateway remote`` on one PostgreSQL database, one agent, and
``gpufleet gateway`` (HAProxy where installed, else the built-in proxy) following the leader.
A service's endpoint is loaded at 100 requests/s while the leader is SIGKILLed and the
standby takes over: the load generator counts every request, and none may fail; then the
service is scaled under the new leader and its new replica answers through the same
endpoint and token."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from gpufleet.ops.hacluster import HaCluster
from gpufleet.ops.loadgen import LoadGen
from gpufleet.ops.localcluster import wait_until
from gpufleet.ops.stubservice import ready_service, stub_spec, wait_serving

pytestmark = [pytest.mark.chaos, pytest.mark.requires("postgres")]

RATE = 100.0


def answered_by(load: LoadGen) -> set[str]:
    """The replicas that answered a request of ``load`` so far."""
    out = set()
    for r in load.snapshot():
        if r.ok and r.body:
            out.add(str(json.loads(r.body)["replica"]))
    return out


def test_the_gateway_serves_through_a_failover_and_follows_the_new_leader(
    ha_cluster: Any,
) -> None:
    proxy = "haproxy" if shutil.which("haproxy") else "builtin"
    c: HaCluster = ha_cluster(agents=1, gateway_kind=proxy)
    c.start_gateway()
    old = c.wait_leader()
    with c.user("alice") as u:
        spec = stub_spec("web", 1)  # out of the routes after 3 failed probes (Kubernetes'
        spec["readiness"]["failure_threshold"] = 3  # default): not for one probe late on a
        ep = u.create_service(spec).endpoint  # loaded machine (a flap is no failover)
        assert ep is not None and ep.token
        first = {r.job_id for r in ready_service(u, "web", 1, routed=True).replicas}
        wait_serving(ep.url, ep.token, first)
        with LoadGen(ep.url, RATE, token=ep.token, path="/v1/predict", keep_body=True) as load:
            wait_until("the load answered", lambda: answered_by(load) == first, 30)
            c.kill_one(old)  # SIGKILL
            new = c.wait_leader(other_than=old)
            sent_at_takeover = len(load.snapshot())
            # a route change made by the new leader: a second replica, served once ready
            u.scale_service("web", 2)
            both = {
                r.job_id for r in ready_service(u, "web", 2, routed=True, timeout_s=120).replicas
            }
            assert first < both
            wait_until("the new replica answering the load", lambda: answered_by(load) == both, 60)
        s = load.summary()
        shown = u.service("web").endpoint  # the new leader's: the same address (and token:
        assert shown is not None and shown.url == ep.url  # the load's requests carry it)
    assert s.failed == 0, s.line()
    assert s.sent > sent_at_takeover > 0, s.line()
    assert new != old and c.leader() == new
    assert c.gateway_proc is not None and c.gateway_proc.poll() is None  # it never restarted
