"""Autoscaling on a real cluster through the real gateway: the request rate the proxy counts at
the service's endpoint (every ``--gateway-stats-s``) is the autoscaler's input. A service of
model stubs with ``min`` 0, ``max`` 3 and a target of 10 requests/s per replica scales up
under 35 requests/s to its max, back down to zero once the load stops (after its down delay),
and from zero again when requests arrive at the endpoint (they get 503 until a replica is
ready, and count as load all the same: that is how a service wakes)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from livehelp import wait_for

from gpufleet.ops.loadgen import LoadGen
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.ops.stubservice import ask, stub_spec

pytestmark = pytest.mark.e2e


def test_a_service_scales_on_its_measured_rate_to_its_max_to_zero_and_back(
    new_cluster: Callable[..., LocalCluster],
) -> None:
    c = new_cluster(agents=2, controller_args=["--gateway-stats-s", "1"])
    alice = c.user("alice")
    spec = stub_spec("auto", 1, probe_period_s=1.0)
    del spec["replicas"]
    spec |= {
        "min": 0,
        "max": 3,
        "target_qps_per_replica": 10,
        "upscale_delay_s": 2,
        "downscale_delay_s": 4,
    }
    made = alice.create_service(spec)
    ep = made.endpoint
    assert ep is not None and ep.token
    assert made.desired == 0  # min 0 and nothing measured yet: nothing runs
    assert alice.service("auto").replicas == []

    # requests wake it: answered 503 until a replica is ready, counted as load all the same
    with LoadGen(ep.url, 5.0, token=ep.token, path="/v1/predict"):
        wait_for("scaled from zero", lambda: alice.service("auto").desired >= 1, 60)
        wait_for("a replica answering", lambda: ask(ep.url, ep.token)[0] == 200, 90)

    # 35 requests/s at 10 per replica: 4 asked for, 3 the most
    with LoadGen(ep.url, 35.0, token=ep.token, path="/v1/predict") as load:
        up = wait_for(
            "3 ready under load", lambda: (s := alice.service("auto")).ready == 3 and s, 120
        )
        assert up.desired == 3 and up.request_rate is not None and up.request_rate > 20
    # replicas joined the routes as they became ready, none left them: nothing failed
    assert load.summary().failed == 0, load.summary()

    # no load: down to zero after the down delay; every replica stopped, none failed
    wait_for("scaled to zero", lambda: alice.service("auto").desired == 0, 120)
    wait_for("no replica left", lambda: alice.service("auto").replicas == [], 60)
    history = [e.what for e in alice.service("auto", events=200).events or []]
    assert "scaled" in history and "replica failed" not in history
    states = {j.state for j in alice.jobs(all_states=True) if j.id.startswith("auto.")}
    assert states == {"CANCELLED"}
