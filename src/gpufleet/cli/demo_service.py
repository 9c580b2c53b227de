"""`gpufleet demo`'s service part: a small model server behind one stable endpoint.

On the demo's cluster: the model stub (``gpufleet.examples.model_stub``) as service
``demo-model`` with 2 replicas and an HTTP readiness probe; requests through its endpoint (the
gateway: HAProxy, nginx or the built-in proxy) with its token, each answered by one of the
replicas; then one replica is SIGKILLed under a steady load and the traffic goes on while the
service starts a replacement; last, the service is removed. ``run`` is True when every request
after the killed replica left the routes was answered."""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.request import Request, urlopen

from rich.console import Console

from gpufleet.api.services import EndpointOut
from gpufleet.base.secretfile import write_secret
from gpufleet.client import Client
from gpufleet.ops.loadgen import LoadGen
from gpufleet.ops.localcluster import LocalCluster
from gpufleet.ops.stubservice import kill_replica, ready_service, stub_spec, wait_serving

NAME = "demo-model"
RATE = 20.0  # requests/s while a replica is killed
PROBE_S = 1.0


def _ask(ep: EndpointOut, token: str, i: int) -> dict[str, object]:
    req = Request(
        f"{ep.url}/v1/predict",
        data=json.dumps({"input": f"request {i}"}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urlopen(req, timeout=10) as r:
        return dict(json.loads(r.read()))


def run(cluster: LocalCluster, user: Client, console: Console, requests: int = 20) -> bool:
    console.rule("a service: one endpoint over 2 replicas of a model server")
    made = user.create_service(stub_spec(NAME, 2, probe_period_s=PROBE_S))
    ep = made.endpoint
    if ep is None or not ep.token:
        console.print("[red]the controller runs without a gateway: the service has no endpoint")
        user.delete_service(NAME)
        return False
    token_file = write_secret(cluster.data_dir / f"{NAME}.token", ep.token, replace=True)
    try:
        with console.status(f"starting {NAME}: 2 replicas, ready once GET /healthz answers …"):
            ready = ready_service(user, NAME, 2, timeout_s=60, routed=True)
            wait_serving(ep.url, ep.token, {r.job_id for r in ready.replicas})
        console.print(
            f"{NAME} is ready at [bold]{ep.url}[/] (replicas "
            + ", ".join(f"{r.job_id} on {r.node}:{r.port}" for r in ready.replicas)
            + f'); try: curl -H "Authorization: Bearer $(cat {token_file})" {ep.url}/v1/predict'
        )
        for i in range(1, requests + 1):
            a = _ask(ep, ep.token, i)
            console.print(
                f"  request {i:2d} → {a['replica']} (port {a['port']}) score {a['score']}"
            )
        return _kill_one(cluster, user, console, ep, ep.token, ready.replicas[0].job_id)
    finally:
        user.delete_service(NAME)
        _wait_gone(user)
        Path(token_file).unlink(missing_ok=True)
        console.print(f"{NAME} removed: its endpoint is closed and its replicas stopped")


def _kill_one(
    cluster: LocalCluster,
    user: Client,
    console: Console,
    ep: EndpointOut,
    token: str,
    victim: str,
) -> bool:
    with LoadGen(ep.url, RATE, token=token, path="/v1/predict") as load:
        time.sleep(1.0)  # a second of traffic on both replicas first
        killed = time.monotonic()
        pid = kill_replica(cluster, user, victim)
        console.print(f"SIGKILLed {victim} (pid {pid}) under {RATE:g} requests/s:")
        # nothing is printed until the controller knows of the kill: until then it still
        # counts the killed replica ready, and a line would say 2/2 of a service with one
        out = _out_of_routes(user, victim, killed + 60)
        whole: float | None = None
        deadline = killed + 60
        note = f" ({victim} out of the routes)"  # on the first line
        while out is not None and time.monotonic() < deadline:
            s = user.service(NAME)
            now = time.monotonic()
            if whole is None and s.ready == 2 and all(r.job_id != victim for r in s.replicas):
                whole = now
            sm = load.summary(since=killed)
            console.print(
                f"  +{now - killed:4.1f} s: {sm.sent} sent, {sm.ok} answered, {sm.failed} failed;"
                f" ready replicas {s.ready}/2" + (" (a replacement ready)" if whole else note)
            )
            note = ""
            if whole is not None and now >= whole + PROBE_S + 2:  # 2 s past the settling
                break
            time.sleep(1.0)  # one line a second: a live cluster, real time passes
    if out is None or whole is None:
        console.print(f"[red]{NAME} did not get back to 2 ready replicas within 60 s")
        return False
    during = load.summary(since=killed, until=out + PROBE_S)
    after = load.summary(since=out + PROBE_S)
    console.print(
        f"traffic went on: {during.failed} of {during.sent} requests failed until {victim} left "
        f"the routes, {after.failed} of {after.sent} after; back to 2 ready replicas "
        f"{whole - killed:.1f} s after the kill"
    )
    return after.failed == 0 and after.sent > 0


def _out_of_routes(user: Client, victim: str, deadline: float) -> float | None:
    """When the controller first showed ``victim`` not ready (or gone): out of the routes."""
    while time.monotonic() < deadline:
        s = user.service(NAME)
        if all(r.job_id != victim or not r.ready for r in s.replicas):
            return time.monotonic()
        time.sleep(0.1)
    return None


def _wait_gone(user: Client, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while any(s.name == NAME for s in user.services()) and time.monotonic() < deadline:
        time.sleep(0.2)
