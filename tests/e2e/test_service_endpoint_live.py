"""A service's endpoint on a real cluster, through each real proxy (HAProxy, nginx, the built-in
one): the model stub (``gpufleet.examples.model_stub``) as a service of 2 replicas, called
through the gateway with its token; one replica SIGKILLed under load and the service whole
again; a rolling update under load without a failed request; a new token replaces the old;
removal closes the endpoint.

The load is ``gpufleet.ops.loadgen`` (open loop, keep-alive, a timeout per request). Its
failures are counted, never timed: the only times compared are those of the requests
themselves against the moments this test saw things happen (the kill, the API showing the
replica out)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from collections.abc import Callable

import pytest
from livehelp import wait_for

from gpufleet.api.services import ReplicaOut
from gpufleet.ops.loadgen import LoadGen
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.ops.stubservice import ask, kill_replica, ready_service, stub_spec, wait_serving

pytestmark = pytest.mark.e2e
PROBE_S = 1.0  # the replicas' probe period
RATE = 50.0  # requests/s under which a replica is killed and the service rolled


def _proxy(kind: str) -> str:
    if kind != "builtin" and shutil.which(kind) is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{kind} is not installed, and CI must test it")
        pytest.skip(f"{kind} is not installed")
    return kind


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["haproxy", "nginx", "builtin"])
def test_a_service_endpoint_survives_a_killed_replica_and_a_rolling_update(
    kind: str, new_cluster: Callable[..., LocalCluster]
) -> None:
    c = new_cluster(agents=3, gateway=_proxy(kind))
    alice = c.user("alice")
    made = alice.create_service(stub_spec("model", 2, probe_period_s=PROBE_S))
    ep = made.endpoint
    assert ep is not None and ep.token and ep.url == f"http://{ep.host}:{ep.port}"
    shown = alice.service("model").endpoint
    assert shown is not None and shown.port == ep.port and shown.token is None  # once only
    token = ep.token

    def routes() -> list[ReplicaOut]:
        return alice.service("model").replicas

    ready = ready_service(alice, "model", 2, timeout_s=90, routed=True)
    replicas = {r.job_id for r in ready.replicas}
    # the token is checked before anything reaches a replica
    assert ask(ep.url, None)[0] == 401
    assert ask(ep.url, "not-" + token)[0] == 401
    # both replicas get traffic (ready_service's ``routed``: the proxy's reload is done; until
    # then an nginx worker of its older config may still accept a connection, and say 503)
    wait_serving(ep.url, token, replicas)
    answers = [ask(ep.url, token) for _ in range(20)]
    assert all(status == 200 for status, _ in answers), answers
    assert {json.loads(body)["replica"] for _, body in answers} == replicas

    # ----- one replica SIGKILLed under load -------------------------------------------------
    victim = ready.replicas[0].job_id
    with LoadGen(ep.url, RATE, token=token, path="/v1/predict") as load:
        wait_for("load flowing", lambda: len(load.snapshot()) >= RATE, 30)
        killed = time.monotonic()
        kill_replica(c, alice, victim)

        wait_for(
            "the killed replica out of the ready ones",
            lambda: all(r.job_id != victim or not r.ready for r in alice.service("model").replicas),
            60,
        )
        # the proxy has applied the routes without it (its reload done: the API's ``routed``),
        # a state to wait for, not a probe period assumed to be enough
        wait_for(
            "the killed replica out of the proxy's routes",
            lambda: all(r.job_id != victim or r.routed is False for r in routes()),
            60,
        )
        settled = time.monotonic()
        again = ready_service(alice, "model", 2, timeout_s=90, without=victim)
        # load on the whole service again for a while: every request must be answered
        whole = time.monotonic()
        wait_for("load on the whole service", lambda: load.snapshot()[-1].due > whole + 2, 30)
    during, after = load.summary(since=killed, until=settled), load.summary(since=settled)
    print(f"\n{kind}: killed {victim}: {during.line(killed)} | after: {after.line(killed)}")
    assert after.failed == 0, after
    assert after.ok > 0
    # before: only requests inside the killed replica may fail (a refused connection is sent
    # to the other one), and no more are in flight than the load has threads
    assert during.failed <= load.threads, during
    assert again.ready == 2 and victim not in {r.job_id for r in again.replicas}

    # ----- a rolling update under load: not one request may fail ----------------------------
    with LoadGen(ep.url, RATE, token=token, path="/v1/predict") as load:
        wait_for("load flowing", lambda: len(load.snapshot()) >= RATE / 2, 30)
        updated = alice.update_service("model", {"replica": {"env": {"MODEL_VERSION": "2"}}})
        assert updated.generation == 2
        rolled = ready_service(alice, "model", 2, timeout_s=120, generation=2)
        done = time.monotonic()
        wait_for("load after the rollout", lambda: load.snapshot()[-1].due > done + 1, 30)
    rollout = load.summary()
    print(f"{kind}: rolling update: {rollout.line(load.t0)}")
    assert rollout.failed == 0, rollout
    assert {json.loads(ask(ep.url, token)[1])["version"] for _ in range(10)} == {"2"}

    # ----- a new token: the old one is refused once the proxy has it ------------------------
    rotated = alice.rotate_service_token("model").endpoint
    assert rotated is not None and rotated.token and rotated.token != token
    wait_for("the old token refused", lambda: ask(ep.url, token)[0] == 401, 30)
    assert ask(ep.url, rotated.token)[0] == 200

    # ----- removed: the endpoint closes and the replicas are cancelled ----------------------
    last = {r.job_id for r in rolled.replicas}
    alice.delete_service("model")
    wait_for("the service gone", lambda: not alice.services(), 60)
    wait_for("the endpoint closed", lambda: _refused(ep.port), 30)
    states = {j.id: j.state for j in alice.jobs(all_states=True) if j.id in last}
    assert states == dict.fromkeys(last, "CANCELLED")
