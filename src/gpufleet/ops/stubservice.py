"""The model stub (``gpufleet.examples.model_stub``) as a service on a ``LocalCluster``: its spec,
waiting for its replicas, and SIGKILLing one as a crash would. `make demo`, the end-to-end test
of a service's endpoint and the failover benchmark share these."""

from __future__ import annotations

import http.client
import json
import os
import signal
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from gpufleet.api.services import ServiceOut
from gpufleet.client import Client
from gpufleet.io.specs import example
from gpufleet.ops.localcluster import LocalCluster


def stub_spec(
    name: str,
    replicas: int,
    *,
    version: str = "1",
    delay_ms: float = 0.0,
    probe_period_s: float = 1.0,
    backoff_s: float = 0.5,
    max_surge: int | str = 1,
    max_unavailable: int | str = 0,
) -> dict[str, Any]:
    """A CPU-only service of ``replicas`` model stubs with HTTP readiness and liveness probes
    on ``/healthz`` every ``probe_period_s``; a replica that dies is replaced after
    ``backoff_s`` (not the kubelet's 10 s: a demo and a test wait for it). ``version`` is the
    replicas' ``$MODEL_VERSION``: changing it is a rolling update, ``max_surge`` new ones at a
    time, never more than ``max_unavailable`` ready ones short."""
    probe = {"http": {"path": "/healthz"}, "period_s": probe_period_s, "timeout_s": 1.0}
    # by its path: it needs only the standard library, whatever the agent's PYTHONPATH
    command = [sys.executable, str(example("model_stub.py"))]
    if delay_ms:
        command += ["--delay-ms", f"{delay_ms:g}"]
    return {
        "name": name,
        "replicas": replicas,
        "replica": {
            "gpus_per_worker": 0,
            "cpus": 1,
            "memory_gib": 1,
            "command": command,
            "env": {"MODEL_VERSION": version},
        },
        "readiness": {**probe, "failure_threshold": 1},
        "liveness": {**probe, "failure_threshold": 3},
        "rollout": {"max_surge": max_surge, "max_unavailable": max_unavailable},
        "restart_backoff": {"base_s": backoff_s, "max_s": max(backoff_s, 5.0)},
    }


def ready_service(
    c: Client,
    name: str,
    n: int,
    timeout_s: float = 60,
    generation: int | None = None,
    without: str = "",
    routed: bool = False,
) -> ServiceOut:
    """The service once ``n`` replicas are ready, no rollout runs, with ``generation`` every
    replica is of it (the old ones have ended), and replica ``without`` (one just killed) is
    not among them; with ``routed``, once the gateway's proxy also sends them requests (its
    reload done: until then a worker of its older config may still take a connection);
    TimeoutError naming what was last seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        s = c.service(name)
        live = [r for r in s.replicas if not r.stopping]
        if (
            s.ready == n
            and not s.rolling_out
            and len(live) == n
            # the old replicas gone too, not only out of the routes (drained, then stopped)
            and (generation is None or all(r.generation == generation for r in s.replicas))
            and all(r.job_id != without for r in s.replicas)
            and (not routed or all(r.routed is not False for r in live))
        ):
            return s
        if time.monotonic() > deadline:
            seen = [(r.job_id, r.generation, r.state, r.ready, r.routed) for r in s.replicas]
            raise TimeoutError(
                f"service {name}: not {n} ready replicas within {timeout_s:g} s: {seen}"
            )
        time.sleep(0.2)  # real replicas are starting: real time passes


def ask(url: str, token: str | None, path: str = "/v1/predict") -> tuple[int, bytes]:
    """One GET through the endpoint at ``url``: (status, body)."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=10)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def wait_serving(url: str, token: str, replicas: set[str], timeout_s: float = 30) -> None:
    """Until every one of ``replicas`` has answered through the endpoint. The API says a
    replica is ready when the controller decided so; the proxy gets the new routes a moment
    later, on its own thread (503 "no server" or only the other replica until then)."""
    seen: set[str] = set()
    last: object = None
    deadline = time.monotonic() + timeout_s
    while not replicas <= seen:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{url}: replicas {sorted(replicas - seen)} did not answer within "
                f"{timeout_s:g} s (last: {last!r})"
            )
        try:
            status, body = ask(url, token)
            last = (status, body[:80])
            if status == 200:
                seen.add(str(json.loads(body)["replica"]))
                continue
        except OSError as e:
            last = e
        time.sleep(0.05)  # the proxy is being reloaded: real time passes


def replica_pid(cluster: LocalCluster, c: Client, job_id: str) -> int:
    """The process of a replica (its process group's leader), from its agent's pid file."""
    j = c.job(job_id)
    nodes = {p.node for p in j.placement}
    if len(nodes) != 1:
        raise ValueError(f"replica {job_id} is not placed on one node: {sorted(nodes)}")
    (node,) = nodes
    pidfile = cluster.data_dir / node / job_id / str(j.attempt) / "rank0.pid"
    text = pidfile.read_text().strip()
    return int(json.loads(text)["pid"]) if text.startswith("{") else int(text)


def kill_replica(cluster: LocalCluster, c: Client, job_id: str) -> int:
    """SIGKILL a replica's processes (a crash: nothing is drained or told first); its pid."""
    pid = replica_pid(cluster, c, job_id)
    os.killpg(pid, signal.SIGKILL)  # the agent starts each task in a session of its own
    return pid
